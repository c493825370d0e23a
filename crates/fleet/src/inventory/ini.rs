//! The INI form: `[group]` sections of `host key=value ...` lines,
//! `[group:vars]`, `[group:children]`; host ranges expand.

use super::{Builder, InventoryError, Malformed, Var, MAX_RANGE_HOSTS};

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
            section = header(builder, line, trimmed, rest)?;
            continue;
        }
        let words = split_words(trimmed).map_err(|r| builder.error(line, r))?;
        if words.is_empty() {
            continue;
        }
        match &section {
            Section::Hosts(group) => host_line(builder, group, line, &words)?,
            Section::Vars(group) => var_line(builder, group, line, trimmed)?,
            Section::Children(group) => child_line(builder, group, line, &words, trimmed)?,
        }
    }
    Ok(())
}

/// A `[group]`, `[group:vars]` or `[group:children]` header (`rest` is
/// what follows the '['); the group exists from here on.
fn header(
    builder: &mut Builder,
    line: usize,
    trimmed: &str,
    rest: &str,
) -> Result<Section, InventoryError> {
    let Some(header) = rest.strip_suffix(']') else {
        return Err(builder.error(
            line,
            format!("section header '{trimmed}' lacks its closing ']'"),
        ));
    };
    let section = match header.split_once(':') {
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
    builder.group(g, line)?;
    Ok(section)
}

/// `host[:port] [key=value ...]` in a `[group]` section; ranges expand.
fn host_line(
    builder: &mut Builder,
    group: &str,
    line: usize,
    words: &[String],
) -> Result<(), InventoryError> {
    let mut vars = Vec::new();
    for word in &words[1..] {
        let (key, value) = key_value(word).map_err(|r| builder.error(line, r))?;
        vars.push((key, Var { value, line }));
    }
    let (name, port) = split_host_port(&words[0]);
    if let Some(port) = port {
        vars.insert(0, ("ansible_port".into(), Var { value: port, line }));
    }
    for host in expand(name).map_err(|r| builder.error(line, r))? {
        builder.add_host(group, &host, line, vars.clone())?;
    }
    Ok(())
}

/// `key=value` in a `[group:vars]` section; spaces around '=' are allowed.
fn var_line(
    builder: &mut Builder,
    group: &str,
    line: usize,
    trimmed: &str,
) -> Result<(), InventoryError> {
    let Some((k, v)) = trimmed.split_once('=') else {
        return Err(builder.error(
            line,
            format!("expected key=value in [{group}:vars], got '{trimmed}'"),
        ));
    };
    let key = k.trim().to_string();
    if key.is_empty() || key.contains(char::is_whitespace) {
        return Err(builder.error(line, format!("bad variable name '{}'", k.trim())));
    }
    let value = unquote(v.trim()).map_err(|r| builder.error(line, r))?;
    builder
        .group(group, line)?
        .vars
        .insert(key, Var { value, line });
    Ok(())
}

/// One group name in a `[group:children]` section.
fn child_line(
    builder: &mut Builder,
    group: &str,
    line: usize,
    words: &[String],
    trimmed: &str,
) -> Result<(), InventoryError> {
    if words.len() != 1 {
        return Err(builder.error(
            line,
            format!("expected one group name per line in [{group}:children], got '{trimmed}'"),
        ));
    }
    let child = words[0].clone();
    builder.group(&child, line)?;
    builder.group(group, line)?.children.push((child, line));
    Ok(())
}

/// Shell-like words: whitespace separates, '…' and "…" quote, a word
/// starting with '#' starts a comment.
fn split_words(text: &str) -> Result<Vec<String>, Malformed> {
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
                    return Err(Malformed(format!("unclosed {c} quote")));
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

fn key_value(word: &str) -> Result<(String, String), Malformed> {
    match word.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(Malformed(format!(
            "expected key=value after the host name, got '{word}'"
        ))),
    }
}

fn unquote(value: &str) -> Result<String, Malformed> {
    for q in ['"', '\''] {
        if let Some(rest) = value.strip_prefix(q) {
            return rest
                .strip_suffix(q)
                .map(str::to_string)
                .ok_or_else(|| Malformed(format!("unclosed {q} quote in '{value}'")));
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
pub(super) fn expand(pattern: &str) -> Result<Vec<String>, Malformed> {
    let Some(open) = pattern.find('[') else {
        return Ok(vec![pattern.to_string()]);
    };
    let Some(close) = pattern[open..].find(']').map(|c| open + c) else {
        return Err(Malformed(format!(
            "host range in '{pattern}' lacks its closing ']'"
        )));
    };
    let (prefix, range, suffix) = (
        &pattern[..open],
        &pattern[open + 1..close],
        &pattern[close + 1..],
    );
    let bad = || {
        Malformed(format!("host range '[{range}]' in '{pattern}': expected [START:END] with numbers (01:20) or letters (a:f)"))
    };
    let (start, end) = range.split_once(':').ok_or_else(bad)?;
    if end.contains(':') {
        return Err(Malformed(format!(
            "host range '[{range}]' in '{pattern}': steps are not supported; expected [START:END]"
        )));
    }
    let items: Vec<String> = if let (Ok(a), Ok(b)) = (start.parse::<u64>(), end.parse::<u64>()) {
        if a > b {
            return Err(bad());
        }
        if b - a >= MAX_RANGE_HOSTS as u64 {
            return Err(too_many(pattern));
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
                return Err(too_many(pattern));
            }
        }
    }
    Ok(out)
}

fn too_many(pattern: &str) -> Malformed {
    Malformed(format!(
        "host pattern '{pattern}' expands to more than {MAX_RANGE_HOSTS} hosts, the most one inventory may hold"
    ))
}
