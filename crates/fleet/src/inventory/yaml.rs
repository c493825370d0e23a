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
            Event::MappingStart(..) | Event::SequenceStart(..) if self.stack.len() >= MAX_DEPTH => {
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
                return Err(builder.error(
                    *key_line,
                    format!(
                        "group '{name}': unknown key '{other}'; expected hosts, vars or children"
                    ),
                ));
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
