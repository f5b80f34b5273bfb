//! The TOML file as a tree of spanned nodes, and the context that collects
//! errors while the loader walks it.
//!
//! `toml_edit` parses the file and keeps the byte span of every key and
//! value. We copy that into a small tree of our own ([`Node`]) whose tables
//! and inline tables look the same (`local = { id = "west" }`, `local.id =
//! "west"` and a `[connections.site.local]` header all become one table),
//! so the section parsers deal with one shape. [`Cx`] turns spans into
//! `file:line:column` and collects every error instead of stopping at the
//! first: the walk goes on with the next key, and only an error-free walk
//! yields a `Config`.
//!
//! Unknown keys are refused ([`Cx::check_keys`]): a typo must not silently
//! fall back to a default. When the unknown key is close to a known one
//! (edit distance), the message suggests it; keys that strongSwan's
//! `swanctl.conf` has but Esparto does not implement get a message saying
//! so instead of "unknown".

use std::collections::HashMap;
use std::ops::{Range, RangeInclusive};
use std::path::PathBuf;

use toml_edit::{Item, Value};

use super::error::{ConfigError, ConfigWarning, KeyPath, LineIndex};

/// Byte range in the file.
pub(crate) type Span = Range<usize>;

/// A value of the file with its position.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Node {
    /// Where the value is (for tables: the header or the key).
    pub(crate) span: Span,
    /// The value.
    pub(crate) kind: Kind,
}

/// The kinds of TOML value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Kind {
    /// A string.
    Str(String),
    /// An integer.
    Int(i64),
    /// A float (never valid in our schema, kept for the message).
    Float,
    /// A boolean.
    Bool(bool),
    /// A date/time (never valid in our schema).
    Datetime,
    /// An array, or an array of tables.
    Array(Vec<Node>),
    /// A table or inline table, keys in file order.
    Table(Vec<Entry>),
}

/// One `key = value` of a table.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Entry {
    /// The key.
    pub(crate) key: String,
    /// Where the key is.
    pub(crate) key_span: Span,
    /// The value.
    pub(crate) value: Node,
}

impl Node {
    /// "a string", "an integer", … for messages.
    pub(crate) fn type_name(&self) -> &'static str {
        match self.kind {
            Kind::Str(_) => "a string",
            Kind::Int(_) => "an integer",
            Kind::Float => "a float",
            Kind::Bool(_) => "a boolean",
            Kind::Datetime => "a date/time",
            Kind::Array(_) => "an array",
            Kind::Table(_) => "a table",
        }
    }

    /// The entries, if this is a table.
    pub(crate) fn entries(&self) -> &[Entry] {
        match &self.kind {
            Kind::Table(e) => e,
            _ => &[],
        }
    }

    /// The entry `key`, if this is a table that has it.
    pub(crate) fn get(&self, key: &str) -> Option<&Entry> {
        self.entries().iter().find(|e| e.key == key)
    }

    /// `key` as a [`Field`] under `path`.
    pub(crate) fn field<'a>(&'a self, path: &KeyPath, key: &str) -> Option<Field<'a>> {
        self.get(key).map(|e| Field {
            node: &e.value,
            path: path.key(key),
        })
    }
}

/// A node and the key path that leads to it.
#[derive(Debug, Clone)]
pub(crate) struct Field<'a> {
    /// The value.
    pub(crate) node: &'a Node,
    /// Its key path.
    pub(crate) path: KeyPath,
}

/// A TOML syntax error: where, and toml_edit's message.
#[derive(Debug)]
pub(crate) struct SyntaxError {
    pub(crate) span: Span,
    pub(crate) message: String,
}

/// Parse `text` into a tree. A syntax error stops everything (TOML has no
/// recovery), so there is at most one.
pub(crate) fn parse(text: &str) -> Result<Node, SyntaxError> {
    let doc = toml_edit::Document::parse(text).map_err(|e| {
        let span = e.span().unwrap_or(0..0);
        let mut message = e.message().trim().to_string();
        // toml_edit names neither the key nor that it was given before.
        if message == "duplicate key" {
            if let Some(key) = text.get(span.clone()).map(str::trim).filter(|k| !k.is_empty()) {
                message = format!("duplicate key '{key}': it is set earlier in the same table");
            }
        }
        if looks_like_swanctl(text) {
            message.push_str(
                "; this looks like swanctl.conf syntax (`name {`): Esparto's file is TOML (docs/CONFIG.md); \
                 load a swanctl.conf with `swanctl --load-all --uri unix:///run/esparto/charon.vici`",
            );
        }
        SyntaxError { span, message }
    })?;
    Ok(table_node(doc.as_table(), 0..0))
}

/// A line that opens a section as swanctl.conf does (`connections {`).
fn looks_like_swanctl(text: &str) -> bool {
    text.lines().map(str::trim).any(|l| {
        l.strip_suffix('{').map(str::trim_end).is_some_and(|name| {
            !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        })
    })
}

fn table_node(t: &toml_edit::Table, fallback: Span) -> Node {
    let span = t.span().unwrap_or(fallback);
    let mut entries = Vec::with_capacity(t.len());
    for (k, item) in t.iter() {
        let key_span = t
            .key(k)
            .and_then(|k| k.span())
            .unwrap_or_else(|| span.clone());
        if let Some(value) = item_node(item, key_span.clone()) {
            entries.push(Entry {
                key: k.to_string(),
                key_span,
                value,
            });
        }
    }
    Node {
        span,
        kind: Kind::Table(entries),
    }
}

fn item_node(item: &Item, fallback: Span) -> Option<Node> {
    Some(match item {
        Item::None => return None,
        Item::Value(v) => value_node(v, fallback),
        Item::Table(t) => table_node(t, fallback),
        Item::ArrayOfTables(a) => Node {
            span: a.span().unwrap_or_else(|| fallback.clone()),
            kind: Kind::Array(a.iter().map(|t| table_node(t, fallback.clone())).collect()),
        },
    })
}

fn value_node(v: &Value, fallback: Span) -> Node {
    let span = v.span().unwrap_or(fallback);
    let kind = match v {
        Value::String(s) => Kind::Str(s.value().clone()),
        Value::Integer(i) => Kind::Int(*i.value()),
        Value::Float(_) => Kind::Float,
        Value::Boolean(b) => Kind::Bool(*b.value()),
        Value::Datetime(_) => Kind::Datetime,
        Value::Array(a) => Kind::Array(a.iter().map(|v| value_node(v, span.clone())).collect()),
        Value::InlineTable(t) => {
            let mut entries = Vec::with_capacity(t.len());
            for (k, v) in t.iter() {
                let key_span = t
                    .key(k)
                    .and_then(|k| k.span())
                    .unwrap_or_else(|| span.clone());
                let value = value_node(v, key_span.clone());
                entries.push(Entry {
                    key: k.to_string(),
                    key_span,
                    value,
                });
            }
            Kind::Table(entries)
        }
    };
    Node { span, kind }
}

/// The walking context: the file's name and text (for positions), its
/// directory (for `*_file` keys), and the errors found so far.
pub(crate) struct Cx<'t> {
    file: String,
    text: &'t str,
    lines: LineIndex,
    /// Directory that relative paths in the file are relative to.
    pub(crate) dir: PathBuf,
    errors: Vec<(usize, ConfigError)>,
    warnings: Vec<(usize, ConfigError)>,
    /// The first secret written in the file itself (a PSK or static key),
    /// for the warning about who may read the file.
    pub(crate) inline_secret: Option<(Span, KeyPath)>,
    /// Names of the trees grafted beside the file's (loaded over VICI,
    /// [`super::layer`]) by their number, in messages instead of the
    /// file's name. The nodes of number k have the span `text.len() + k`,
    /// past the file's end, so a span says where its node came from. The
    /// name is `{what} '{name}' (VICI)`, formatted only for a message.
    segments: HashMap<usize, (&'static str, &'t str)>,
    /// Private keys loaded over VICI (PKCS#8, by key id): a grafted
    /// connection signs with the one that is its certificate's.
    pub(crate) vici_keys: &'t [(std::sync::Arc<str>, super::layer::PrivateKey)],
}

impl<'t> Cx<'t> {
    /// A context for `text`, named `file` in messages.
    pub(crate) fn new(file: String, text: &'t str, dir: PathBuf) -> Self {
        Cx {
            file,
            text,
            lines: LineIndex::new(text),
            dir,
            errors: Vec::new(),
            warnings: Vec::new(),
            inline_secret: None,
            segments: HashMap::new(),
            vici_keys: &[],
        }
    }

    /// The span of every node of the tree number `k` (> 0) grafted beside
    /// the file's, from the VICI command `what` for `name` (messages name
    /// it so; they have no line or column).
    pub(crate) fn segment(&mut self, k: usize, what: &'static str, name: &'t str) -> Span {
        let at = self.text.len() + k.max(1);
        self.segments.insert(k.max(1), (what, name));
        at..at
    }

    /// Room for `n` more grafted trees.
    pub(crate) fn reserve_segments(&mut self, n: usize) {
        self.segments.reserve(n);
    }

    /// Did the node at `span` come from a grafted tree (over VICI, where
    /// every value is a string)?
    pub(crate) fn grafted(&self, span: &Span) -> bool {
        span.start > self.text.len()
    }

    /// The file (or grafted tree), line and column of `span`.
    fn locate(&self, span: &Span) -> (String, usize, usize) {
        if self.grafted(span) {
            let k = span.start - self.text.len();
            let name = match self.segments.get(&k) {
                Some((what, name)) => format!("{what} '{name}' (VICI)"),
                None => self.file.clone(),
            };
            return (name, 0, 0);
        }
        let (line, column) = self.lines.line_col(self.text, span.start);
        (self.file.clone(), line, column)
    }

    /// Record an error at `span`.
    pub(crate) fn err(&mut self, span: &Span, path: &KeyPath, message: impl Into<String>) {
        let (file, line, column) = self.locate(span);
        self.errors.push((
            span.start,
            ConfigError {
                file,
                line,
                column,
                key: path.as_str().to_string(),
                message: message.into(),
            },
        ));
    }

    /// Record a warning at `span`: the file runs, but maybe not as meant.
    pub(crate) fn warn(&mut self, span: &Span, path: &KeyPath, message: impl Into<String>) {
        let (file, line, column) = self.locate(span);
        let w = ConfigError { file, line, column, key: path.as_str().to_string(), message: message.into() };
        self.warnings.push((span.start, w));
    }

    /// Record a warning about a key the file does not write (its default):
    /// no line and column.
    pub(crate) fn warn_default(&mut self, key: &str, message: impl Into<String>) {
        let w = ConfigError { file: self.file.clone(), line: 0, column: 0, key: key.to_string(), message: message.into() };
        self.warnings.push((0, w));
    }

    /// Number of warnings so far (to collect what a sub-walk added).
    pub(crate) fn warning_count(&self) -> usize {
        self.warnings.len()
    }

    /// The warnings recorded since there were `n`.
    pub(crate) fn warnings_since(&self, n: usize) -> Vec<ConfigError> {
        self.warnings[n.min(self.warnings.len())..].iter().map(|(_, w)| w.clone()).collect()
    }

    /// Records `warnings` again (a kept walk's), at `span`.
    pub(crate) fn replay_warnings(&mut self, span: &Span, warnings: &[ConfigError]) {
        self.warnings.extend(warnings.iter().map(|w| (span.start, w.clone())));
    }

    /// The warnings so far, in file order (stable for warnings at the same
    /// place).
    pub(crate) fn take_warnings(&mut self) -> Vec<ConfigWarning> {
        let mut w = std::mem::take(&mut self.warnings);
        w.sort_by_key(|(at, _)| *at);
        w.into_iter().map(|(_, e)| ConfigWarning(e)).collect()
    }

    /// Remember that `f` holds a secret written in the file itself.
    pub(crate) fn note_inline_secret(&mut self, f: &Field<'_>) {
        if self.inline_secret.is_none() && !self.grafted(&f.node.span) {
            self.inline_secret = Some((f.node.span.clone(), f.path.clone()));
        }
    }

    /// Record an error about a field.
    pub(crate) fn err_at(&mut self, f: &Field<'_>, message: impl Into<String>) {
        self.err(&f.node.span, &f.path, message);
    }

    /// `file:line:column` of `span`, to point from one error at another place.
    pub(crate) fn position(&self, span: &Span) -> String {
        match self.locate(span) {
            (file, 0, _) => file,
            (file, line, column) => format!("{file}:{line}:{column}"),
        }
    }

    /// Have errors been recorded?
    pub(crate) fn has_errors(&self) -> bool {
        !self.errors.is_empty()
    }

    /// Number of errors so far (to tell whether a sub-walk added any).
    pub(crate) fn error_count(&self) -> usize {
        self.errors.len()
    }

    /// The errors, in file order (stable for errors at the same place).
    pub(crate) fn into_errors(mut self) -> Vec<ConfigError> {
        self.errors.sort_by_key(|(at, _)| *at);
        self.errors.into_iter().map(|(_, e)| e).collect()
    }

    /// Refuse every key of table `node` that is not in `known`. Keys in
    /// `unsupported` (swanctl keys Esparto does not implement) get their
    /// explanation; others get a "did you mean" when one is close.
    pub(crate) fn check_keys(
        &mut self,
        node: &Node,
        path: &KeyPath,
        known: &[&str],
        unsupported: &[(&str, &str)],
    ) {
        for e in node.entries() {
            if known.contains(&e.key.as_str()) {
                continue;
            }
            let p = path.key(&e.key);
            if let Some((_, why)) = unsupported.iter().find(|(k, _)| *k == e.key) {
                self.err(&e.key_span, &p, format!("not supported: {why}"));
                continue;
            }
            let msg = match suggest(&e.key, known) {
                Some(s) => format!("unknown key (did you mean '{s}'?)"),
                None => format!("unknown key (known here: {})", known.join(", ")),
            };
            self.err(&e.key_span, &p, msg);
        }
    }

    /// The table at `f`, or an error.
    pub(crate) fn table<'a>(&mut self, f: &Field<'a>) -> Option<&'a Node> {
        match f.node.kind {
            Kind::Table(_) => Some(f.node),
            _ => {
                self.err_at(f, format!("expected a table, found {}", f.node.type_name()));
                None
            }
        }
    }

    /// The string at `f`, or an error.
    pub(crate) fn str<'a>(&mut self, f: &Field<'a>) -> Option<&'a str> {
        match &f.node.kind {
            Kind::Str(s) => Some(s),
            _ => {
                self.err_at(
                    f,
                    format!("expected a string, found {}", f.node.type_name()),
                );
                None
            }
        }
    }

    /// The boolean at `f`, or an error. Over VICI, where every value is a
    /// string, `yes`/`no` as strongSwan's settings have them (also
    /// `true`/`false`, `on`/`off`, `1`/`0`).
    pub(crate) fn bool(&mut self, f: &Field<'_>) -> Option<bool> {
        match &f.node.kind {
            Kind::Bool(b) => Some(*b),
            Kind::Str(s) if self.grafted(&f.node.span) => match s.trim() {
                "yes" | "true" | "on" | "1" => Some(true),
                "no" | "false" | "off" | "0" => Some(false),
                other => {
                    self.err_at(f, format!("expected yes or no, found '{other}'"));
                    None
                }
            },
            _ => {
                self.err_at(
                    f,
                    format!("expected true or false, found {}", f.node.type_name()),
                );
                None
            }
        }
    }

    /// The integer at `f` within `range`, converted to `T`, or an error.
    pub(crate) fn int<T: TryFrom<i64>>(
        &mut self,
        f: &Field<'_>,
        range: RangeInclusive<i64>,
    ) -> Option<T> {
        let i = match &f.node.kind {
            Kind::Int(i) => *i,
            // Over VICI every value is a string: a decimal number here.
            Kind::Str(s) if self.grafted(&f.node.span) => match s.trim().parse::<i64>() {
                Ok(i) => i,
                Err(_) => {
                    self.err_at(f, format!("expected a number, found '{s}'"));
                    return None;
                }
            },
            _ => {
                self.err_at(
                    f,
                    format!("expected an integer, found {}", f.node.type_name()),
                );
                return None;
            }
        };
        if !range.contains(&i) {
            self.err_at(
                f,
                format!("{i} is out of range ({}..={})", range.start(), range.end()),
            );
            return None;
        }
        match T::try_from(i) {
            Ok(v) => Some(v),
            Err(_) => {
                self.err_at(f, format!("{i} is out of range"));
                None
            }
        }
    }

    /// A string or an array of strings, swanctl-style: each string may
    /// also hold a comma-separated list (`"10.1.0.0/16, fd00::/64"`).
    /// Returns each item with the field it came from (array elements get
    /// their own index and position).
    pub(crate) fn str_list<'a>(&mut self, f: &Field<'a>) -> Vec<(Field<'a>, &'a str)> {
        let mut out = Vec::new();
        let mut push = |fld: Field<'a>, s: &'a str| {
            for item in s.split(',').map(str::trim).filter(|w| !w.is_empty()) {
                out.push((fld.clone(), item));
            }
        };
        match &f.node.kind {
            Kind::Str(s) => push(f.clone(), s),
            Kind::Array(items) => {
                for (i, n) in items.iter().enumerate() {
                    let fld = Field {
                        node: n,
                        path: f.path.index(i),
                    };
                    match &n.kind {
                        Kind::Str(s) => push(fld, s),
                        _ => {
                            self.err_at(&fld, format!("expected a string, found {}", n.type_name()))
                        }
                    }
                }
            }
            _ => self.err_at(
                f,
                format!(
                    "expected a string or an array of strings, found {}",
                    f.node.type_name()
                ),
            ),
        }
        out
    }
}

/// The known key closest to `key`, if it is close enough to be a typo:
/// edit distance at most 2, and at most a third of the key's length.
pub(crate) fn suggest<'k>(key: &str, known: &[&'k str]) -> Option<&'k str> {
    let limit = (key.chars().count() / 3).clamp(1, 2);
    known
        .iter()
        .map(|k| (edit_distance(key, k), *k))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// Edit distance, a swap of neighbours counting as one edit.
fn edit_distance(a: &str, b: &str) -> usize {
    esparto_ike::diag::edit_distance(a, b)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn tables_of_every_spelling_look_the_same() {
        let a = parse("[c]\nlocal = { id = \"w\" }\n").unwrap();
        let b = parse("[c]\nlocal.id = \"w\"\n").unwrap();
        let c = parse("[c.local]\nid = \"w\"\n").unwrap();
        for t in [&a, &b, &c] {
            let c = &t.get("c").unwrap().value;
            let local = &c.get("local").unwrap().value;
            assert_eq!(local.get("id").unwrap().value.kind, Kind::Str("w".into()));
        }
    }

    #[test]
    fn spans_point_at_values_and_keys() {
        let text = "[d]\nport = 99\n";
        let t = parse(text).unwrap();
        let d = &t.get("d").unwrap().value;
        let e = d.get("port").unwrap();
        assert_eq!(&text[e.key_span.clone()], "port");
        assert_eq!(&text[e.value.span.clone()], "99");
    }

    #[test]
    fn syntax_error_has_a_position() {
        let e = parse("a = [1,\n").err().unwrap();
        assert!(!e.message.is_empty());
        assert!(e.span.start <= 8);
    }

    #[test]
    fn suggestions_catch_typos_only() {
        let known = ["local_addrs", "remote_addrs", "children", "remote_port"];
        assert_eq!(suggest("remote_adrs", &known), Some("remote_addrs"));
        assert_eq!(suggest("local_addr", &known), Some("local_addrs"));
        assert_eq!(suggest("chilren", &known), Some("children"));
        assert_eq!(suggest("mobike", &known), None);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("debgu", "debug"), 1, "a swap of neighbours is one edit");
        assert_eq!(edit_distance("ab", "ba"), 1);
        assert_eq!(edit_distance("abc", "ca"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
    }

    #[test]
    fn unknown_keys_are_reported_with_a_suggestion() {
        let text = "[d]\nworkrs = 2\nmobike = true\nfoo = 1\n";
        let t = parse(text).unwrap();
        let d = &t.get("d").unwrap().value;
        let mut cx = Cx::new("f.toml".into(), text, PathBuf::new());
        cx.check_keys(
            d,
            &KeyPath::root().key("d"),
            &["workers", "port"],
            &[("mobike", "no MOBIKE")],
        );
        let errs = cx.into_errors();
        assert_eq!(errs.len(), 3);
        assert_eq!(
            errs[0].to_string(),
            "f.toml:2:1: d.workrs: unknown key (did you mean 'workers'?)"
        );
        assert_eq!(
            errs[1].to_string(),
            "f.toml:3:1: d.mobike: not supported: no MOBIKE"
        );
        assert_eq!(
            errs[2].to_string(),
            "f.toml:4:1: d.foo: unknown key (known here: workers, port)"
        );
    }
}
