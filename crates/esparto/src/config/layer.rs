//! Connections and secrets loaded over VICI (`swanctl --load-all`): a
//! second source beside the file, as charon keeps what swanctl loads.
//!
//! The daemon holds a [`Layer`]: each connection and secret as the VICI
//! client gave it, as a tree of strings. Loading the configuration grafts
//! the layer's trees into the file's tree ([`graft`]: under `connections`
//! and `secrets`, after the file's own) and walks the whole as one file,
//! so a connection loaded over VICI meets exactly the checks of one in
//! the file, with the same messages, and the checks across connections
//! (overlapping selectors, SPIs, PSKs) see both. Errors in a grafted tree
//! name it (`load-conn 'site'`) instead of a file and line.
//!
//! A name belongs to one source: a connection or secret loaded over VICI
//! may not have the name of one in the file (the file's would silently
//! win or lose at the next reload).

use serde::{Deserialize, Serialize};

use super::error::KeyPath;
use super::tree::{Cx, Entry, Kind, Node, Span};

/// A value given over VICI, where every scalar is a string.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Value {
    /// A key's value.
    Str(String),
    /// A list of strings.
    List(Vec<String>),
    /// A section: its keys and values in the order they came.
    Section(Vec<(String, Value)>),
}

/// What was loaded over VICI, in the order it came.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Layer {
    /// Connections by name (`load-conn`).
    pub conns: Vec<(String, Value)>,
    /// PSKs by their VICI id (`load-shared`).
    pub secrets: Vec<(String, Value)>,
}

impl Layer {
    /// Adds the connection `name`, or replaces the one of that name
    /// (in its place). True if it replaced one.
    pub fn set_conn(&mut self, name: &str, value: Value) -> bool {
        set(&mut self.conns, name, value)
    }

    /// Removes the connection `name`; false if there is none.
    pub fn remove_conn(&mut self, name: &str) -> bool {
        remove(&mut self.conns, name)
    }

    /// Adds the secret `id`, or replaces the one of that id.
    pub fn set_secret(&mut self, id: &str, value: Value) -> bool {
        set(&mut self.secrets, id, value)
    }

    /// Removes the secret `id`; false if there is none.
    pub fn remove_secret(&mut self, id: &str) -> bool {
        remove(&mut self.secrets, id)
    }

    /// Names of the connections, in the order they were loaded.
    pub fn conn_names(&self) -> impl Iterator<Item = &str> {
        self.conns.iter().map(|(n, _)| n.as_str())
    }

    /// Ids of the secrets, in the order they were loaded.
    pub fn secret_ids(&self) -> impl Iterator<Item = &str> {
        self.secrets.iter().map(|(n, _)| n.as_str())
    }
}

// By hand: the secrets' values stay out of logs.
impl std::fmt::Debug for Layer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Layer")
            .field("conns", &self.conns)
            .field("secrets", &self.secret_ids().collect::<Vec<_>>())
            .finish()
    }
}

fn set(list: &mut Vec<(String, Value)>, name: &str, value: Value) -> bool {
    match list.iter_mut().find(|(n, _)| n == name) {
        Some(slot) => {
            slot.1 = value;
            true
        }
        None => {
            list.push((name.to_string(), value));
            false
        }
    }
}

fn remove(list: &mut Vec<(String, Value)>, name: &str) -> bool {
    let before = list.len();
    list.retain(|(n, _)| n != name);
    list.len() != before
}

/// Adds `layer`'s connections and secrets to the file's tree `root`
/// (see the module docs). A name the file already uses is an error at
/// the grafted tree, pointing at the file's.
pub(crate) fn graft(cx: &mut Cx<'_>, root: &mut Node, layer: &Layer) {
    for (table, what, items) in [("connections", "load-conn", &layer.conns), ("secrets", "load-shared", &layer.secrets)] {
        for (name, value) in items {
            let span = cx.segment(format!("{what} '{name}' (VICI)"));
            let Some(entries) = table_entries(root, table, &span) else {
                // The file's `connections` is not a table: the walk says so.
                continue;
            };
            if let Some(theirs) = entries.iter().find(|e| e.key == *name) {
                let at = cx.position(&theirs.key_span);
                cx.err(
                    &span,
                    &KeyPath::root().key(table).key(name),
                    format!("{at} has one of this name; what is loaded over VICI needs a name of its own"),
                );
                continue;
            }
            entries.push(Entry { key: name.clone(), key_span: span.clone(), value: node(value, &span) });
        }
    }
}

/// The entries of the top-level table `key`, created (at `span`) if the
/// file has none; `None` if the file's is not a table.
fn table_entries<'n>(root: &'n mut Node, key: &str, span: &Span) -> Option<&'n mut Vec<Entry>> {
    let Kind::Table(top) = &mut root.kind else {
        return None;
    };
    let i = match top.iter().position(|e| e.key == key) {
        Some(i) => i,
        None => {
            top.push(Entry {
                key: key.to_string(),
                key_span: span.clone(),
                value: Node { span: span.clone(), kind: Kind::Table(Vec::new()) },
            });
            top.len() - 1
        }
    };
    match &mut top[i].value.kind {
        Kind::Table(entries) => Some(entries),
        _ => None,
    }
}

/// `value` as a tree node, every node at `span`.
fn node(value: &Value, span: &Span) -> Node {
    let kind = match value {
        Value::Str(s) => Kind::Str(s.clone()),
        Value::List(items) => {
            Kind::Array(items.iter().map(|s| Node { span: span.clone(), kind: Kind::Str(s.clone()) }).collect())
        }
        Value::Section(entries) => Kind::Table(
            entries
                .iter()
                .map(|(k, v)| Entry { key: k.clone(), key_span: span.clone(), value: node(v, span) })
                .collect(),
        ),
    };
    Node { span: span.clone(), kind }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn set_replaces_in_place_and_remove_says_whether_it_found() {
        let mut l = Layer::default();
        assert!(!l.set_conn("a", Value::Str("1".into())));
        assert!(!l.set_conn("b", Value::Str("2".into())));
        assert!(l.set_conn("a", Value::Str("3".into())));
        assert_eq!(l.conn_names().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(l.conns[0].1, Value::Str("3".into()));
        assert!(l.remove_conn("a"));
        assert!(!l.remove_conn("a"));
        assert_eq!(l.conn_names().collect::<Vec<_>>(), ["b"]);
    }

    #[test]
    fn the_wire_form_is_tagged_json() {
        let v = Value::Section(vec![("a".into(), Value::List(vec!["x".into()]))]);
        let j = serde_json::to_string(&v).unwrap();
        assert_eq!(j, r#"{"section":[["a",{"list":["x"]}]]}"#);
        assert_eq!(serde_json::from_str::<Value>(&j).unwrap(), v);
    }
}
