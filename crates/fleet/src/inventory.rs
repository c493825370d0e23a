//! Ansible inventories, INI and YAML, read into the hosts a fleet run
//! reaches: each host's inventory name, its variables (group variables
//! applied, host variables winning) and every group it belongs to.
//!
//! What is read is what Ansible documents for static inventories: `[group]`
//! sections of `host key=value ...` lines (numeric and letter ranges such as
//! `web[01:20]` expand), `[group:vars]`, `[group:children]`, `#`/`;`
//! comments, and the YAML form `all: {hosts:, vars:, children:}`. Anything
//! else is refused with the file, the line and the reason, so a typo never
//! silently drops a host.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

/// One host of the inventory, its variables resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// The inventory name: what the user calls it and the `host` label.
    pub name: String,
    /// Every group it is in, parents of its groups included, `all` left out.
    pub groups: BTreeSet<String>,
    /// Variables after group and host precedence (host wins).
    pub vars: BTreeMap<String, String>,
    /// Where a variable was set, for errors about its value.
    pub var_lines: BTreeMap<String, usize>,
    /// The line the host was first named on.
    pub line: usize,
}

impl Host {
    /// The name or address ssh connects to: `ansible_host`, else the name.
    pub fn address(&self) -> &str {
        self.var("ansible_host").unwrap_or(&self.name)
    }

    pub fn var(&self, key: &str) -> Option<&str> {
        self.vars.get(key).map(String::as_str)
    }
}

/// The hosts of an inventory in the order they first appear, and its groups.
#[derive(Debug, Clone, Default)]
pub struct Inventory {
    pub path: PathBuf,
    pub hosts: Vec<Host>,
    /// Every group named, with its hosts (transitively), `all` included.
    pub groups: BTreeMap<String, BTreeSet<String>>,
}

/// A malformed inventory: the file, the line (when one is to blame) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InventoryError {
    pub file: PathBuf,
    pub line: Option<usize>,
    pub reason: String,
}

impl fmt::Display for InventoryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(
                f,
                "inventory {}:{line}: {}",
                self.file.display(),
                self.reason
            ),
            None => write!(f, "inventory {}: {}", self.file.display(), self.reason),
        }
    }
}

impl std::error::Error for InventoryError {}

/// An inventory larger than this is not an inventory (a wrong path, say).
const MAX_INVENTORY_BYTES: u64 = 16 << 20;
/// Hosts one range pattern may expand to.
const MAX_RANGE_HOSTS: usize = 100_000;
/// Nesting of YAML mappings, and of groups in groups.
const MAX_DEPTH: usize = 64;

impl Inventory {
    /// Read and parse an inventory file, INI or YAML (by its extension,
    /// else by its first meaningful line).
    pub fn load(path: &Path) -> Result<Inventory, InventoryError> {
        let fail = |reason: String| InventoryError {
            file: path.to_path_buf(),
            line: None,
            reason,
        };
        let meta = std::fs::metadata(path).map_err(|e| fail(format!("cannot read it: {e}")))?;
        if meta.len() > MAX_INVENTORY_BYTES {
            return Err(fail(format!(
                "larger than {} MiB; expected an Ansible inventory (INI or YAML)",
                MAX_INVENTORY_BYTES >> 20
            )));
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| fail(format!("cannot read it as UTF-8 text: {e}")))?;
        Inventory::parse(path, &text)
    }

    pub fn parse(path: &Path, text: &str) -> Result<Inventory, InventoryError> {
        let mut builder = Builder::new(path);
        if looks_like_yaml(path, text) {
            yaml::read(&mut builder, text)?;
        } else {
            ini::read(&mut builder, text)?;
        }
        builder.finish()
    }

    #[cfg(test)]
    pub fn host(&self, name: &str) -> Option<&Host> {
        self.hosts.iter().find(|h| h.name == name)
    }
}

fn looks_like_yaml(path: &Path, text: &str) -> bool {
    match path.extension().and_then(|e| e.to_str()) {
        Some("yml" | "yaml") => return true,
        Some("ini" | "cfg") => return false,
        _ => {}
    }
    let first = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with(';'));
    matches!(first, Some(l) if l == "---" || (l.ends_with(':') && !l.starts_with('[')))
}

/// A variable's value and the line that set it.
#[derive(Debug, Clone)]
struct Var {
    value: String,
    line: usize,
}

#[derive(Debug, Default)]
struct Group {
    hosts: Vec<String>,
    children: Vec<(String, usize)>,
    vars: BTreeMap<String, Var>,
}

/// What both readers fill in; resolves groups and variables at the end.
struct Builder {
    file: PathBuf,
    /// Hosts in order of first mention, with their own variables.
    hosts: Vec<(String, usize, BTreeMap<String, Var>)>,
    groups: BTreeMap<String, Group>,
}

impl Builder {
    fn new(file: &Path) -> Builder {
        Builder {
            file: file.to_path_buf(),
            hosts: Vec::new(),
            groups: BTreeMap::new(),
        }
    }

    fn error(&self, line: usize, reason: impl Into<String>) -> InventoryError {
        InventoryError {
            file: self.file.clone(),
            line: Some(line),
            reason: reason.into(),
        }
    }

    fn group(&mut self, name: &str, line: usize) -> Result<&mut Group, InventoryError> {
        check_name("group", name).map_err(|r| self.error(line, r))?;
        Ok(self.groups.entry(name.to_string()).or_default())
    }

    fn add_host(
        &mut self,
        group: &str,
        name: &str,
        line: usize,
        vars: Vec<(String, Var)>,
    ) -> Result<(), InventoryError> {
        check_name("host", name).map_err(|r| self.error(line, r))?;
        let index = match self.hosts.iter().position(|(n, _, _)| n == name) {
            Some(i) => i,
            None => {
                self.hosts.push((name.to_string(), line, BTreeMap::new()));
                self.hosts.len() - 1
            }
        };
        self.hosts[index].2.extend(vars);
        let group = self.group(group, line)?;
        if !group.hosts.iter().any(|h| h == name) {
            group.hosts.push(name.to_string());
        }
        Ok(())
    }

    fn finish(mut self) -> Result<Inventory, InventoryError> {
        self.groups.entry("all".into()).or_default();
        // Depth of each group below `all` (longest chain of parents), found
        // by walking children from every group; a cycle is an error.
        let mut parents: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (name, group) in &self.groups {
            for (child, line) in &group.children {
                if child == "all" {
                    return Err(self.error(*line, "group 'all' cannot be a child of another group"));
                }
                parents.entry(child.clone()).or_default().push(name.clone());
            }
        }
        // Children named only under [x:children] exist as empty groups.
        for child in parents.keys() {
            self.groups.entry(child.clone()).or_default();
        }
        let mut depth: BTreeMap<String, usize> = BTreeMap::new();
        for name in self.groups.keys() {
            let d = self.depth_of(name, &parents, &mut Vec::new())?;
            depth.insert(name.clone(), d);
        }
        // Every group a host is in: the groups naming it and their ancestors.
        let mut hosts = Vec::new();
        let mut members: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (host, line, own) in &self.hosts {
            let mut groups: BTreeSet<String> = BTreeSet::new();
            let mut todo: Vec<String> = self
                .groups
                .iter()
                .filter(|(_, g)| g.hosts.contains(host))
                .map(|(n, _)| n.clone())
                .collect();
            while let Some(g) = todo.pop() {
                if groups.insert(g.clone()) {
                    todo.extend(parents.get(&g).into_iter().flatten().cloned());
                }
            }
            groups.insert("all".into());
            // Precedence as Ansible: `all`, then parents before children
            // (by depth), then by name; the host's own variables last.
            let mut ordered: Vec<&String> = groups.iter().collect();
            ordered.sort_by_key(|g| (depth[*g], (*g).clone()));
            let mut vars: BTreeMap<String, Var> = BTreeMap::new();
            for g in ordered {
                for (k, v) in &self.groups[g].vars {
                    vars.insert(k.clone(), v.clone());
                }
            }
            for (k, v) in own {
                vars.insert(k.clone(), v.clone());
            }
            for g in &groups {
                members.entry(g.clone()).or_default().insert(host.clone());
            }
            groups.remove("all");
            let resolved = Host {
                name: host.clone(),
                groups,
                var_lines: vars.iter().map(|(k, v)| (k.clone(), v.line)).collect(),
                vars: vars.into_iter().map(|(k, v)| (k, v.value)).collect(),
                line: *line,
            };
            self.check_host(&resolved)?;
            hosts.push(resolved);
        }
        for name in self.groups.keys() {
            members.entry(name.clone()).or_default();
        }
        if hosts.is_empty() {
            return Err(InventoryError {
                file: self.file.clone(),
                line: None,
                reason: "no hosts in it; expected `[group]` sections of host lines (INI) or `all: hosts:` (YAML)".into(),
            });
        }
        Ok(Inventory {
            path: self.file,
            hosts,
            groups: members,
        })
    }

    fn depth_of(
        &self,
        name: &str,
        parents: &BTreeMap<String, Vec<String>>,
        path: &mut Vec<String>,
    ) -> Result<usize, InventoryError> {
        if path.iter().any(|p| p == name) || path.len() > MAX_DEPTH {
            let line = self
                .groups
                .values()
                .flat_map(|g| g.children.iter())
                .find(|(c, _)| c == name)
                .map(|(_, l)| *l)
                .unwrap_or(0);
            path.push(name.to_string());
            return Err(self.error(
                line,
                format!("groups contain each other: {}", path.join(" -> ")),
            ));
        }
        path.push(name.to_string());
        let mut d = 0;
        for p in parents.get(name).into_iter().flatten() {
            d = d.max(1 + self.depth_of(p, parents, path)?);
        }
        path.pop();
        Ok(d)
    }

    /// The variables osprobe reads must make sense; say which line is wrong.
    fn check_host(&self, host: &Host) -> Result<(), InventoryError> {
        if let Some(port) = host.var("ansible_port") {
            if !matches!(port.parse::<u32>(), Ok(1..=65535)) {
                return Err(self.error(
                    host.var_lines["ansible_port"],
                    format!(
                        "host {}: ansible_port '{port}' is not a port; expected 1 to 65535",
                        host.name
                    ),
                ));
            }
        }
        for key in ["ansible_host", "ansible_user"] {
            if let Some(value) = host.var(key) {
                if value.is_empty() || value.starts_with('-') || value.contains(char::is_whitespace)
                {
                    return Err(self.error(
                        host.var_lines[key],
                        format!(
                            "host {}: {key} '{value}' is not usable; expected a name or address without spaces, not starting with '-'",
                            host.name
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Names become ssh destinations and labels: no spaces, no leading '-'
/// (it would read as an ssh option), no control characters.
fn check_name(what: &str, name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err(format!("empty {what} name"));
    }
    if name.starts_with('-') {
        return Err(format!("{what} name '{name}' starts with '-'"));
    }
    if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "{what} name {name:?} contains a space or control character"
        ));
    }
    if what == "group" && name.contains(',') {
        return Err(format!("group name '{name}' contains ','"));
    }
    Ok(())
}

mod ini {
    use super::{Builder, InventoryError, Var, MAX_RANGE_HOSTS};

    enum Section {
        Hosts(String),
        Vars(String),
        Children(String),
    }

    pub(super) fn read(builder: &mut Builder, text: &str) -> Result<(), InventoryError> {
        // Hosts before any section are in `ungrouped`, as Ansible has it.
        let mut section = Section::Hosts("ungrouped".into());
        for (index, raw) in text.lines().enumerate() {
            let line = index + 1;
            let trimmed = raw.trim();
            if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with(';') {
                continue;
            }
            if let Some(rest) = trimmed.strip_prefix('[') {
                let Some(header) = rest.strip_suffix(']') else {
                    return Err(builder.error(
                        line,
                        format!("section header '{trimmed}' lacks its closing ']'"),
                    ));
                };
                section = match header.split_once(':') {
                    None => Section::Hosts(header.to_string()),
                    Some((g, "vars")) => Section::Vars(g.to_string()),
                    Some((g, "children")) => Section::Children(g.to_string()),
                    Some((_, other)) => {
                        return Err(builder.error(
                            line,
                            format!("unknown section kind ':{other}' in '{trimmed}'; expected [group], [group:vars] or [group:children]"),
                        ))
                    }
                };
                let (Section::Hosts(g) | Section::Vars(g) | Section::Children(g)) = &section;
                let g = g.clone();
                builder.group(&g, line)?;
                continue;
            }
            let words = split_words(trimmed).map_err(|r| builder.error(line, r))?;
            if words.is_empty() {
                continue;
            }
            match &section {
                Section::Hosts(group) => {
                    let group = group.clone();
                    let mut vars = Vec::new();
                    for word in &words[1..] {
                        vars.push(key_value(word).map_err(|r| builder.error(line, r))?);
                    }
                    let vars: Vec<(String, Var)> = vars
                        .into_iter()
                        .map(|(k, v)| (k, Var { value: v, line }))
                        .collect();
                    let pattern = &words[0];
                    let (name, port) = split_host_port(pattern);
                    let mut vars = vars;
                    if let Some(port) = port {
                        vars.insert(0, ("ansible_port".into(), Var { value: port, line }));
                    }
                    for host in expand(name).map_err(|r| builder.error(line, r))? {
                        builder.add_host(&group, &host, line, vars.clone())?;
                    }
                }
                Section::Vars(group) => {
                    // `key=value`; spaces around '=' are allowed here.
                    let Some((k, v)) = trimmed.split_once('=') else {
                        return Err(builder.error(
                            line,
                            format!("expected key=value in [{group}:vars], got '{trimmed}'"),
                        ));
                    };
                    let key = k.trim().to_string();
                    if key.is_empty() || key.contains(char::is_whitespace) {
                        return Err(
                            builder.error(line, format!("bad variable name '{}'", k.trim()))
                        );
                    }
                    let value = unquote(v.trim()).map_err(|r| builder.error(line, r))?;
                    let group = group.clone();
                    builder
                        .group(&group, line)?
                        .vars
                        .insert(key, Var { value, line });
                }
                Section::Children(group) => {
                    if words.len() != 1 {
                        return Err(builder.error(line, format!("expected one group name per line in [{group}:children], got '{trimmed}'")));
                    }
                    let child = words[0].clone();
                    builder.group(&child, line)?;
                    let group = group.clone();
                    builder.group(&group, line)?.children.push((child, line));
                }
            }
        }
        Ok(())
    }

    /// Shell-like words: whitespace separates, '…' and "…" quote, a word
    /// starting with '#' starts a comment.
    fn split_words(text: &str) -> Result<Vec<String>, String> {
        let mut words = Vec::new();
        let mut word = String::new();
        let mut in_word = false;
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                c if c.is_whitespace() => {
                    if in_word {
                        words.push(std::mem::take(&mut word));
                        in_word = false;
                    }
                }
                '#' if !in_word => break,
                '\'' | '"' => {
                    in_word = true;
                    let mut closed = false;
                    for q in chars.by_ref() {
                        if q == c {
                            closed = true;
                            break;
                        }
                        word.push(q);
                    }
                    if !closed {
                        return Err(format!("unclosed {c} quote"));
                    }
                }
                c => {
                    in_word = true;
                    word.push(c);
                }
            }
        }
        if in_word {
            words.push(word);
        }
        Ok(words)
    }

    fn key_value(word: &str) -> Result<(String, String), String> {
        match word.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
            _ => Err(format!(
                "expected key=value after the host name, got '{word}'"
            )),
        }
    }

    fn unquote(value: &str) -> Result<String, String> {
        for q in ['"', '\''] {
            if let Some(rest) = value.strip_prefix(q) {
                return rest
                    .strip_suffix(q)
                    .map(str::to_string)
                    .ok_or_else(|| format!("unclosed {q} quote in '{value}'"));
            }
        }
        Ok(value.to_string())
    }

    /// `host:2222` names a port as Ansible allows; an IPv6 address (more
    /// than one ':') or a range (`[1:3]`) does not.
    fn split_host_port(pattern: &str) -> (&str, Option<String>) {
        if pattern.matches(':').count() == 1 && !pattern.contains('[') {
            if let Some((h, p)) = pattern.split_once(':') {
                if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) {
                    return (h, Some(p.to_string()));
                }
            }
        }
        (pattern, None)
    }

    /// Expand `web[01:03].example` and `db-[a:c]` ranges (each may appear
    /// several times; zero padding kept).
    pub(super) fn expand(pattern: &str) -> Result<Vec<String>, String> {
        let Some(open) = pattern.find('[') else {
            return Ok(vec![pattern.to_string()]);
        };
        let Some(close) = pattern[open..].find(']').map(|c| open + c) else {
            return Err(format!("host range in '{pattern}' lacks its closing ']'"));
        };
        let (prefix, range, suffix) = (
            &pattern[..open],
            &pattern[open + 1..close],
            &pattern[close + 1..],
        );
        let bad = || {
            format!("host range '[{range}]' in '{pattern}': expected [START:END] with numbers (01:20) or letters (a:f)")
        };
        let (start, end) = range.split_once(':').ok_or_else(bad)?;
        if end.contains(':') {
            return Err(format!("host range '[{range}]' in '{pattern}': steps are not supported; expected [START:END]"));
        }
        let items: Vec<String> = if let (Ok(a), Ok(b)) = (start.parse::<u64>(), end.parse::<u64>())
        {
            if a > b || b - a >= MAX_RANGE_HOSTS as u64 {
                return Err(bad());
            }
            let width = if start.starts_with('0') && start.len() > 1 {
                start.len()
            } else {
                0
            };
            (a..=b).map(|n| format!("{n:0width$}")).collect()
        } else if start.len() == 1
            && end.len() == 1
            && start.chars().all(|c| c.is_ascii_alphabetic())
            && end.chars().all(|c| c.is_ascii_alphabetic())
            && start <= end
        {
            (start.as_bytes()[0]..=end.as_bytes()[0])
                .map(|b| (b as char).to_string())
                .collect()
        } else {
            return Err(bad());
        };
        let rest = expand(suffix)?;
        let mut out = Vec::new();
        for item in &items {
            for tail in &rest {
                out.push(format!("{prefix}{item}{tail}"));
                if out.len() > MAX_RANGE_HOSTS {
                    return Err(format!(
                        "host pattern '{pattern}' expands to more than {MAX_RANGE_HOSTS} hosts"
                    ));
                }
            }
        }
        Ok(out)
    }
}

mod yaml {
    //! YAML read with yaml-rust2's event parser into a small tree that
    //! keeps every node's line, then walked as Ansible's YAML inventory.
    use super::{Builder, InventoryError, Var, MAX_DEPTH};
    use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
    use yaml_rust2::scanner::Marker;

    #[derive(Debug)]
    pub(super) enum Node {
        Scalar(String, usize),
        Map(Vec<(String, usize, Node)>, usize),
        Seq(usize),
    }

    impl Node {
        fn line(&self) -> usize {
            match self {
                Node::Scalar(_, l) | Node::Map(_, l) | Node::Seq(l) => *l,
            }
        }
        fn is_null(&self) -> bool {
            matches!(self, Node::Scalar(s, _) if s.is_empty() || s == "~" || s == "null")
        }
    }

    enum Frame {
        Map(Vec<(String, usize, Node)>, usize, Option<(String, usize)>),
        Seq(usize),
    }

    /// Builds the tree from events; the first problem is kept.
    #[derive(Default)]
    struct Loader {
        stack: Vec<Frame>,
        root: Option<Node>,
        error: Option<(usize, String)>,
    }

    impl Loader {
        fn fail(&mut self, line: usize, reason: impl Into<String>) {
            if self.error.is_none() {
                self.error = Some((line, reason.into()));
            }
        }

        fn push_value(&mut self, node: Node) {
            let line = node.line();
            match self.stack.last_mut() {
                None => {
                    if self.root.is_some() {
                        self.fail(line, "more than one YAML document; expected one");
                    } else {
                        self.root = Some(node);
                    }
                }
                Some(Frame::Seq(..)) => {}
                Some(Frame::Map(entries, _, pending)) => match pending.take() {
                    None => match node {
                        Node::Scalar(key, l) => *pending = Some((key, l)),
                        _ => self.fail(line, "a mapping key must be a plain value"),
                    },
                    Some((key, l)) => {
                        if entries.iter().any(|(k, _, _)| *k == key) {
                            self.fail(l, format!("'{key}' appears twice in one mapping"));
                        } else {
                            entries.push((key, l, node));
                        }
                    }
                },
            }
        }
    }

    impl MarkedEventReceiver for Loader {
        fn on_event(&mut self, ev: Event, mark: Marker) {
            if self.error.is_some() {
                return;
            }
            let line = mark.line();
            match ev {
                Event::Alias(_) => self.fail(
                    line,
                    "YAML aliases (*name) are not supported in inventories",
                ),
                Event::Scalar(value, _, _, _) => self.push_value(Node::Scalar(value, line)),
                Event::MappingStart(..) | Event::SequenceStart(..)
                    if self.stack.len() >= MAX_DEPTH =>
                {
                    self.fail(line, format!("nested deeper than {MAX_DEPTH} levels"))
                }
                Event::MappingStart(..) => self.stack.push(Frame::Map(Vec::new(), line, None)),
                Event::SequenceStart(..) => self.stack.push(Frame::Seq(line)),
                Event::MappingEnd => {
                    if let Some(Frame::Map(entries, l, _)) = self.stack.pop() {
                        self.push_value(Node::Map(entries, l));
                    }
                }
                Event::SequenceEnd => {
                    if let Some(Frame::Seq(l)) = self.stack.pop() {
                        self.push_value(Node::Seq(l));
                    }
                }
                _ => {}
            }
        }
    }

    pub(super) fn read(builder: &mut Builder, text: &str) -> Result<(), InventoryError> {
        let mut loader = Loader::default();
        let mut parser = Parser::new_from_str(text);
        if let Err(e) = parser.load(&mut loader, true) {
            return Err(builder.error(e.marker().line(), format!("not valid YAML: {}", e.info())));
        }
        if let Some((line, reason)) = loader.error {
            return Err(builder.error(line, reason));
        }
        let root = match loader.root {
            None => return Ok(()),
            Some(n) if n.is_null() => return Ok(()),
            Some(n) => n,
        };
        let Node::Map(groups, _) = root else {
            return Err(builder.error(
                root.line(),
                "expected a mapping of groups at the top (e.g. `all:`)",
            ));
        };
        for (name, line, body) in &groups {
            group(builder, name, *line, body)?;
        }
        Ok(())
    }

    fn group(
        builder: &mut Builder,
        name: &str,
        line: usize,
        body: &Node,
    ) -> Result<(), InventoryError> {
        builder.group(name, line)?;
        if body.is_null() {
            return Ok(());
        }
        let Node::Map(entries, _) = body else {
            return Err(builder.error(
                body.line(),
                format!("group '{name}': expected a mapping with hosts, vars or children"),
            ));
        };
        for (key, key_line, value) in entries {
            match key.as_str() {
                "hosts" => {
                    if value.is_null() {
                        continue;
                    }
                    let Node::Map(hosts, _) = value else {
                        return Err(builder.error(value.line(), format!("group '{name}': hosts must be a mapping of host names (`host:` or `host: {{vars}}`)")));
                    };
                    for (host, host_line, vars) in hosts {
                        let vars = variables(builder, &format!("host '{host}'"), vars)?;
                        for expanded in
                            super::ini::expand(host).map_err(|r| builder.error(*host_line, r))?
                        {
                            builder.add_host(name, &expanded, *host_line, vars.clone())?;
                        }
                    }
                }
                "vars" => {
                    let vars = variables(builder, &format!("group '{name}'"), value)?;
                    builder.group(name, line)?.vars.extend(vars);
                }
                "children" => {
                    if value.is_null() {
                        continue;
                    }
                    let Node::Map(children, _) = value else {
                        return Err(builder.error(
                            value.line(),
                            format!("group '{name}': children must be a mapping of group names"),
                        ));
                    };
                    for (child, child_line, child_body) in children {
                        group(builder, child, *child_line, child_body)?;
                        builder
                            .group(name, line)?
                            .children
                            .push((child.clone(), *child_line));
                    }
                }
                other => {
                    return Err(builder.error(*key_line, format!("group '{name}': unknown key '{other}'; expected hosts, vars or children")));
                }
            }
        }
        Ok(())
    }

    /// A mapping of variables; values that are lists or mappings are kept
    /// out (osprobe reads none of them) rather than refused.
    fn variables(
        builder: &Builder,
        owner: &str,
        node: &Node,
    ) -> Result<Vec<(String, Var)>, InventoryError> {
        if node.is_null() {
            return Ok(Vec::new());
        }
        let Node::Map(entries, _) = node else {
            return Err(builder.error(
                node.line(),
                format!("{owner}: expected a mapping of variables"),
            ));
        };
        Ok(entries
            .iter()
            .filter_map(|(k, _, v)| match v {
                Node::Scalar(value, line) => Some((
                    k.clone(),
                    Var {
                        value: value.clone(),
                        line: *line,
                    },
                )),
                _ => None,
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ini(text: &str) -> Result<Inventory, InventoryError> {
        Inventory::parse(Path::new("hosts.ini"), text)
    }
    fn yaml(text: &str) -> Result<Inventory, InventoryError> {
        Inventory::parse(Path::new("hosts.yml"), text)
    }

    #[test]
    fn ini_hosts_groups_children_and_vars() {
        let inv = ini("# a comment\n\
             lonely.example\n\
             [web]\n\
             web1 ansible_host=10.0.0.1 ansible_user=ops\n\
             web2 ansible_host=10.0.0.2 ansible_port=2222 # trailing comment\n\
             ; another comment\n\
             [db]\n\
             db1 ansible_host=\"10.0.0.3\"\n\
             [prod:children]\n\
             web\n\
             db\n\
             [prod:vars]\n\
             ansible_user = deploy\n\
             [web:vars]\n\
             ansible_port=22\n")
        .unwrap();
        let names: Vec<&str> = inv.hosts.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(names, ["lonely.example", "web1", "web2", "db1"]);
        let web1 = inv.host("web1").unwrap();
        assert_eq!(web1.address(), "10.0.0.1");
        // Host variables win over group variables; the child group (web)
        // wins over its parent (prod).
        assert_eq!(web1.var("ansible_user"), Some("ops"));
        assert_eq!(web1.var("ansible_port"), Some("22"));
        assert_eq!(inv.host("web2").unwrap().var("ansible_port"), Some("2222"));
        let db1 = inv.host("db1").unwrap();
        assert_eq!(db1.address(), "10.0.0.3");
        assert_eq!(db1.var("ansible_user"), Some("deploy"));
        assert_eq!(db1.groups.iter().collect::<Vec<_>>(), ["db", "prod"]);
        assert!(inv
            .host("lonely.example")
            .unwrap()
            .groups
            .contains("ungrouped"));
        assert_eq!(inv.groups["prod"].len(), 3);
        assert_eq!(inv.groups["all"].len(), 4);
        assert_eq!(
            inv.host("lonely.example").unwrap().address(),
            "lonely.example"
        );
    }

    #[test]
    fn ini_ranges_and_host_ports_expand() {
        let inv = ini("[web]\nweb[01:03].example\ndb-[a:b] ansible_user=x\nbox:2200\n").unwrap();
        let names: Vec<&str> = inv.hosts.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "web01.example",
                "web02.example",
                "web03.example",
                "db-a",
                "db-b",
                "box"
            ]
        );
        assert_eq!(inv.host("box").unwrap().var("ansible_port"), Some("2200"));
        assert_eq!(inv.host("db-b").unwrap().var("ansible_user"), Some("x"));
    }

    #[test]
    fn ini_errors_name_the_line_and_reason() {
        let cases = [
            ("[web\nh1\n", 1, "closing ']'"),
            ("[web]\nh1 ansible_port=http\n", 2, "not a port"),
            ("[web]\nh1 ansible_port=70000\n", 2, "1 to 65535"),
            ("[web]\nh1\n[web:foo]\n", 3, "unknown section kind"),
            ("[web]\nh1 novalue\n", 2, "key=value"),
            ("[web]\nh1 x='unclosed\n", 2, "unclosed"),
            ("[web:vars]\njustaword\n[web]\nh1\n", 2, "key=value"),
            ("[web]\nh[3:1]\n", 2, "host range"),
            (
                "[a:children]\nb\n[b:children]\na\n[a]\nh\n",
                4,
                "contain each other",
            ),
            ("[web]\n-oProxyCommand=x\n", 2, "starts with '-'"),
            ("[web]\nh1 ansible_host=-oProxyCommand=x\n", 2, "not usable"),
        ];
        for (text, line, reason) in cases {
            let err = ini(text).unwrap_err();
            assert_eq!(err.line, Some(line), "{text:?}: {err}");
            assert!(err.to_string().contains(reason), "{text:?}: {err}");
            assert!(err.to_string().starts_with("inventory hosts.ini:"), "{err}");
        }
        let err = ini("# nothing\n[web]\n").unwrap_err();
        assert!(err.to_string().contains("no hosts"), "{err}");
    }

    #[test]
    fn yaml_hosts_vars_and_children() {
        let inv = yaml(
            "all:\n\
             \x20 hosts:\n\
             \x20   bastion:\n\
             \x20 vars:\n\
             \x20   ansible_user: root\n\
             \x20 children:\n\
             \x20   web:\n\
             \x20     hosts:\n\
             \x20       web1:\n\
             \x20         ansible_host: 10.0.0.1\n\
             \x20         ansible_port: 2222\n\
             \x20       web[2:3]:\n\
             \x20     vars:\n\
             \x20       ansible_user: deploy\n\
             \x20       tags: [a, b]\n\
             \x20   db:\n\
             \x20     hosts:\n\
             \x20       db1: {ansible_host: 10.0.0.9}\n",
        )
        .unwrap();
        let names: Vec<&str> = inv.hosts.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(names, ["bastion", "web1", "web2", "web3", "db1"]);
        let web1 = inv.host("web1").unwrap();
        assert_eq!(web1.address(), "10.0.0.1");
        assert_eq!(web1.var("ansible_port"), Some("2222"));
        assert_eq!(web1.var("ansible_user"), Some("deploy"));
        assert_eq!(web1.var("tags"), None);
        assert_eq!(inv.host("db1").unwrap().var("ansible_user"), Some("root"));
        assert_eq!(inv.host("bastion").unwrap().groups.len(), 0);
        assert_eq!(inv.groups["web"].len(), 3);
    }

    #[test]
    fn yaml_errors_name_the_line_and_reason() {
        let cases = [
            (
                "all:\n  hosts:\n    h1:\n  bogus: 1\n",
                4,
                "unknown key 'bogus'",
            ),
            (
                "all:\n  hosts:\n    h1:\n      ansible_port: many\n",
                4,
                "not a port",
            ),
            ("all:\n  hosts: [h1, h2]\n", 2, "mapping of host names"),
            (
                "all:\n  hosts:\n    h1: &x {a: 1}\n    h2: *x\n",
                4,
                "aliases",
            ),
            ("all:\n  hosts:\n   h1:\n  - x\n", 4, "not valid YAML"),
            ("- a\n- b\n", 1, "mapping of groups"),
        ];
        for (text, line, reason) in cases {
            let err = yaml(text).unwrap_err();
            assert_eq!(err.line, Some(line), "{text:?}: {err}");
            assert!(err.to_string().contains(reason), "{text:?}: {err}");
        }
    }

    #[test]
    fn the_format_is_sniffed_without_an_extension() {
        let p = Path::new("hosts");
        assert_eq!(
            Inventory::parse(p, "all:\n  hosts:\n    a:\n")
                .unwrap()
                .hosts[0]
                .name,
            "a"
        );
        assert_eq!(Inventory::parse(p, "[g]\nb\n").unwrap().hosts[0].name, "b");
    }
}
