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

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
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
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("inventory {}{}: {reason}", .file.display(), .line.map(|l| format!(":{l}")).unwrap_or_default())]
pub struct InventoryError {
    pub file: PathBuf,
    pub line: Option<usize>,
    pub reason: String,
}

/// Why a name, word or pattern is malformed; the reader adds the file and
/// the line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Malformed(String);

/// An inventory larger than this is not an inventory (a wrong path, say).
const MAX_INVENTORY_BYTES: u64 = 16 << 20;
/// Hosts one inventory may hold: far beyond a fleet one machine drives
/// over ssh, and a typo such as `h[00000:99999]` is refused at once.
const MAX_HOSTS: usize = 10_000;
/// Hosts one range pattern may expand to.
const MAX_RANGE_HOSTS: usize = MAX_HOSTS;
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
    /// `hosts` as a set: a host named again is found in constant time, so
    /// reading stays linear in the number of hosts.
    members: HashSet<String>,
    children: Vec<(String, usize)>,
    vars: BTreeMap<String, Var>,
}

/// How groups nest: each group's parents and its depth below `all`.
struct GroupTree {
    parents: BTreeMap<String, Vec<String>>,
    depth: BTreeMap<String, usize>,
}

/// What both readers fill in; resolves groups and variables at the end.
struct Builder {
    file: PathBuf,
    /// Hosts in order of first mention, with their own variables.
    hosts: Vec<(String, usize, BTreeMap<String, Var>)>,
    /// Where each host is in `hosts`.
    host_index: HashMap<String, usize>,
    groups: BTreeMap<String, Group>,
}

impl Builder {
    fn new(file: &Path) -> Builder {
        Builder {
            file: file.to_path_buf(),
            hosts: Vec::new(),
            host_index: HashMap::new(),
            groups: BTreeMap::new(),
        }
    }

    fn error(&self, line: usize, reason: impl fmt::Display) -> InventoryError {
        InventoryError {
            file: self.file.clone(),
            line: Some(line),
            reason: reason.to_string(),
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
        let index = match self.host_index.get(name) {
            Some(&i) => i,
            None if self.hosts.len() >= MAX_HOSTS => {
                return Err(self.error(
                    line,
                    format!(
                        "host {name}: more than {MAX_HOSTS} hosts, the most one inventory may hold"
                    ),
                ))
            }
            None => {
                self.hosts.push((name.to_string(), line, BTreeMap::new()));
                self.host_index
                    .insert(name.to_string(), self.hosts.len() - 1);
                self.hosts.len() - 1
            }
        };
        self.hosts[index].2.extend(vars);
        let group = self.group(group, line)?;
        if group.members.insert(name.to_string()) {
            group.hosts.push(name.to_string());
        }
        Ok(())
    }

    fn finish(mut self) -> Result<Inventory, InventoryError> {
        self.groups.entry("all".into()).or_default();
        let parents = self.parents()?;
        // Children named only under [x:children] exist as empty groups.
        for child in parents.keys() {
            self.groups.entry(child.clone()).or_default();
        }
        let tree = GroupTree {
            depth: self.depths(&parents)?,
            parents,
        };
        let mut hosts = Vec::new();
        let mut members: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let named_in = self.groups_naming_hosts();
        for (host, line, own) in &self.hosts {
            let mut groups = groups_of(named_in.get(host.as_str()), &tree);
            let vars = self.variables(&groups, &tree, own);
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

    /// Each group's parents (the groups naming it under children);
    /// `all` is nobody's child.
    fn parents(&self) -> Result<BTreeMap<String, Vec<String>>, InventoryError> {
        let mut parents: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (name, group) in &self.groups {
            for (child, line) in &group.children {
                if child == "all" {
                    return Err(self.error(*line, "group 'all' cannot be a child of another group"));
                }
                parents.entry(child.clone()).or_default().push(name.clone());
            }
        }
        Ok(parents)
    }

    /// Depth of each group below `all` (longest chain of parents), found
    /// by walking parents from every group; a cycle is an error.
    fn depths(
        &self,
        parents: &BTreeMap<String, Vec<String>>,
    ) -> Result<BTreeMap<String, usize>, InventoryError> {
        let mut depth = BTreeMap::new();
        for name in self.groups.keys() {
            let d = self.depth_of(name, parents, &mut Vec::new())?;
            depth.insert(name.clone(), d);
        }
        Ok(depth)
    }

    /// The groups naming each host directly, found in one pass over the
    /// groups (not one pass per host).
    fn groups_naming_hosts(&self) -> HashMap<&str, Vec<&str>> {
        let mut named_in: HashMap<&str, Vec<&str>> = HashMap::new();
        for (name, group) in &self.groups {
            for host in &group.hosts {
                named_in
                    .entry(host.as_str())
                    .or_default()
                    .push(name.as_str());
            }
        }
        named_in
    }

    /// A host's variables. Precedence as Ansible: `all`, then parents
    /// before children (by depth), then by name; the host's own last.
    fn variables(
        &self,
        groups: &BTreeSet<String>,
        tree: &GroupTree,
        own: &BTreeMap<String, Var>,
    ) -> BTreeMap<String, Var> {
        let mut ordered: Vec<&String> = groups.iter().collect();
        ordered.sort_by_key(|g| (tree.depth[*g], (*g).clone()));
        let mut vars: BTreeMap<String, Var> = BTreeMap::new();
        for g in ordered {
            for (k, v) in &self.groups[g].vars {
                vars.insert(k.clone(), v.clone());
            }
        }
        for (k, v) in own {
            vars.insert(k.clone(), v.clone());
        }
        vars
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
        // What reaches ssh is checked here, by osprobe's own rules, so a
        // name such as `h$(cmd)` or `a;b` never depends on ssh refusing it.
        let (line, what) = match host.var("ansible_host") {
            Some(_) => (host.var_lines["ansible_host"], "ansible_host"),
            None => (host.line, "name"),
        };
        check_destination(host.address())
            .map_err(|why| self.error(line, format!("host {}: {what} {why}", host.name)))?;
        if let Some(user) = host.var("ansible_user") {
            check_user(user).map_err(|why| {
                self.error(
                    host.var_lines["ansible_user"],
                    format!("host {}: ansible_user {why}", host.name),
                )
            })?;
        }
        Ok(())
    }
}

/// A host name or address as ssh gets it: letters, digits and `-._:%`
/// (`:` and `%` for IPv6 and its zone), `[ ]` around an IPv6 address; not
/// starting with '-' (ssh would read an option). Nothing a shell or ssh's
/// own `%` tokens in a ProxyCommand could give a meaning to beyond a name.
fn check_destination(value: &str) -> Result<(), String> {
    let fine = |c: char| c.is_ascii_alphanumeric() || "-._:%[]".contains(c);
    if !value.is_empty() && value.len() <= 255 && !value.starts_with('-') && value.chars().all(fine)
    {
        return Ok(());
    }
    Err(format!(
        "{value:?} is not a host name or address; expected letters, digits, '-', '.', '_', \
         ':', '%' and [ ] around an IPv6 address, at most 255 characters, not starting with '-'"
    ))
}

/// A user name as POSIX calls portable: letters, digits, '.', '_', '-',
/// not starting with '-'.
fn check_user(value: &str) -> Result<(), String> {
    let fine = |c: char| c.is_ascii_alphanumeric() || "._-".contains(c);
    if !value.is_empty() && value.len() <= 64 && !value.starts_with('-') && value.chars().all(fine)
    {
        return Ok(());
    }
    Err(format!(
        "{value:?} is not a portable user name; expected letters, digits, '.', '_' and '-', \
         at most 64 characters, not starting with '-'"
    ))
}

/// Every group a host is in: the groups naming it (`direct`), their
/// ancestors and `all`.
fn groups_of(direct: Option<&Vec<&str>>, tree: &GroupTree) -> BTreeSet<String> {
    let mut groups: BTreeSet<String> = BTreeSet::new();
    let mut todo: Vec<String> = direct
        .into_iter()
        .flatten()
        .map(|g| g.to_string())
        .collect();
    while let Some(g) = todo.pop() {
        if groups.insert(g.clone()) {
            todo.extend(tree.parents.get(&g).into_iter().flatten().cloned());
        }
    }
    groups.insert("all".into());
    groups
}

/// Names become ssh destinations and labels: no spaces, no leading '-'
/// (it would read as an ssh option), no control characters.
fn check_name(what: &str, name: &str) -> Result<(), Malformed> {
    let why = if name.is_empty() {
        format!("empty {what} name")
    } else if name.starts_with('-') {
        format!("{what} name '{name}' starts with '-'")
    } else if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        format!("{what} name {name:?} contains a space or control character")
    } else if what == "group" && name.contains(',') {
        format!("group name '{name}' contains ','")
    } else {
        return Ok(());
    };
    Err(Malformed(why))
}

mod ini;

mod yaml;

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
            (
                "[web]\nh1 ansible_host=-oProxyCommand=x\n",
                2,
                "not a host name",
            ),
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
    fn names_a_shell_or_ssh_would_read_are_refused_with_their_line() {
        let cases = [
            (
                "[web]\nh$(touch${IFS}x)\n",
                2,
                "name \"h$(touch${IFS}x)\" is not a host name",
            ),
            ("[web]\na;b\n", 2, "is not a host name"),
            ("[web]\nh1\nh2 ansible_host='x`id`'\n", 3, "ansible_host"),
            (
                "[web]\nh1 ansible_user='u$(id)'\n",
                2,
                "not a portable user name",
            ),
            (
                "[web:vars]\nansible_user=a;b\n[web]\nh1\n",
                2,
                "ansible_user",
            ),
            ("[web]\nh1 ansible_user=-l\n", 2, "not a portable user name"),
            ("[web]\nh1 ansible_host=h%r|x\n", 2, "not a host name"),
        ];
        for (text, line, reason) in cases {
            let err = ini(text).unwrap_err();
            assert_eq!(err.line, Some(line), "{text:?}: {err}");
            assert!(err.to_string().contains(reason), "{text:?}: {err}");
        }
        let inv = ini(
            "[web]\nv6 ansible_host=[fe80::1%eth0] ansible_user=svc.ops_1\n\
                       db_1.example ansible_host=198.18.0.1\n",
        )
        .unwrap();
        assert_eq!(inv.host("v6").unwrap().address(), "[fe80::1%eth0]");
        assert_eq!(inv.hosts.len(), 2);
    }

    /// The error for an inventory that must be refused (not the whole
    /// inventory when it is read after all: it may hold 10,000 hosts).
    fn refused(text: &str) -> InventoryError {
        match ini(text) {
            Err(e) => e,
            Ok(inv) => panic!("{text:?} was read: {} hosts", inv.hosts.len()),
        }
    }

    #[test]
    fn ranges_are_bounded_and_read_in_linear_time() {
        // 100,000 names: refused at once, naming the pattern and the limit.
        let err = refused("[web]\nh[00000:99999]\n");
        assert_eq!(err.line, Some(2), "{err}");
        assert!(
            err.to_string().contains("'h[00000:99999]'")
                && err.to_string().contains(&MAX_HOSTS.to_string()),
            "{err}"
        );
        let err = refused("[web]\nh[0:100]x[0:99]\n");
        assert!(err.to_string().contains("more than"), "{err}");
        // Ranges that together pass the limit are refused on the line
        // that passes it.
        let err = refused("[a]\na[0:9999]\n[b]\nb[0:1]\n");
        assert_eq!(err.line, Some(4), "{err}");
        // The limit itself is read, each host in its groups once.
        let inv = ini("[a]\nh[0000:9999]\n[b]\nh[0000:9999]\n[c:children]\na\nb\n").unwrap();
        assert_eq!(inv.hosts.len(), MAX_HOSTS);
        assert_eq!(inv.groups["c"].len(), MAX_HOSTS);
        assert_eq!(inv.host("h0042").unwrap().groups.len(), 3);
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
