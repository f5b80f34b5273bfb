//! Configuration errors: every one names the file, the line and column, and
//! the key path, in the form compilers use so editors can jump to it:
//!
//! ```text
//! west.toml:14:15: connections.site.children.lan.remote_ts[0]: '10.2.0.0/33': prefix length /33 too long for 10.2.0.0
//! ```
//!
//! These are local faults: the operator wrote something
//! Esparto cannot run. The loader collects all of them before giving up, so
//! one `check-config` run shows every mistake in the file. Messages never
//! contain key material: a bad key is described by its length or by the
//! position of the offending character, never by its value.

use std::fmt;

/// One problem in a configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file, as the user named it.
    pub file: String,
    /// 1-based line (0 when the file could not be read at all).
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
    /// Dotted key path, e.g. `connections.site.children.lan.remote_ts[0]`;
    /// empty for file-level problems (unreadable file, TOML syntax).
    pub key: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if self.line > 0 {
            write!(f, ":{}:{}", self.line, self.column)?;
        }
        if !self.key.is_empty() {
            write!(f, ": {}", self.key)?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for ConfigError {}

/// Something in a configuration file that runs, but maybe not as meant
/// (`check-config` prints it and, with `--strict`, fails on it; `run` logs
/// it): the same position and key as an error, and `warning:` before the
/// message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigWarning(pub ConfigError);

impl fmt::Display for ConfigWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let e = &self.0;
        let mut at = ConfigError { message: String::new(), ..e.clone() }.to_string();
        at.truncate(at.len().saturating_sub(2)); // the ": " before the empty message
        write!(f, "{at}: warning: {}", e.message)
    }
}

/// All problems found in a configuration file, in file order. Never empty
/// when returned as an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl ConfigErrors {
    /// The errors.
    pub fn iter(&self) -> std::slice::Iter<'_, ConfigError> {
        self.0.iter()
    }

    /// How many errors.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True if there are none (never the case for a returned error).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for ConfigErrors {
    /// One error per line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

impl<'a> IntoIterator for &'a ConfigErrors {
    type Item = &'a ConfigError;
    type IntoIter = std::slice::Iter<'a, ConfigError>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

/// [`LineIndex::line_col`] without an index kept.
#[cfg(test)]
pub(crate) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    LineIndex::new(text).line_col(text, offset)
}

/// Where each line of a text starts, so that a position costs a binary
/// search and its own line, not a scan from the start of the file (a hub's
/// file may carry thousands of warnings).
#[derive(Debug, Clone)]
pub(crate) struct LineIndex(Vec<usize>);

impl LineIndex {
    /// The index of `text`.
    pub(crate) fn new(text: &str) -> Self {
        let starts = std::iter::once(0).chain(text.match_indices('\n').map(|(i, _)| i + 1)).collect();
        LineIndex(starts)
    }

    /// 1-based (line, column) of byte `offset` in `text` (the text the
    /// index was made of); the column counts characters, not bytes. An
    /// offset past the end or inside a character is clamped to the nearest
    /// preceding boundary.
    pub(crate) fn line_col(&self, text: &str, offset: usize) -> (usize, usize) {
        let mut at = offset.min(text.len());
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        // Line starts at or before `at`: the first (0) always is.
        let line = self.0.partition_point(|&s| s <= at).max(1);
        let start = self.0[line - 1];
        (line, text[start..at].chars().count() + 1)
    }
}

/// A key path being built while walking the file: `a.b[0].c`. Keys that are
/// not TOML bare keys are quoted, so the path can be pasted back.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct KeyPath(String);

impl KeyPath {
    /// The root (empty path).
    pub(crate) fn root() -> Self {
        KeyPath(String::new())
    }

    /// `self.key`.
    pub(crate) fn key(&self, key: &str) -> Self {
        let bare = !key.is_empty()
            && key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        let mut s = self.0.clone();
        if !s.is_empty() {
            s.push('.');
        }
        if bare {
            s.push_str(key);
        } else {
            s.push_str(&format!("{key:?}"));
        }
        KeyPath(s)
    }

    /// `self[i]`.
    pub(crate) fn index(&self, i: usize) -> Self {
        KeyPath(format!("{}[{i}]", self.0))
    }

    /// The path as text.
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for KeyPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_and_column_count_characters() {
        let t = "a = 1\nbé = \"x\"\n";
        assert_eq!(line_col(t, 0), (1, 1));
        assert_eq!(line_col(t, 4), (1, 5));
        assert_eq!(line_col(t, 6), (2, 1));
        // 'é' is two bytes: the '=' after "bé " is at byte 10, column 4.
        assert_eq!(line_col(t, 10), (2, 4));
        // Inside the 'é' clamps back to it; past the end clamps to the end.
        assert_eq!(line_col(t, 8), (2, 2));
        assert_eq!(line_col(t, 999), (3, 1));
    }

    #[test]
    fn paths_quote_non_bare_keys() {
        let p = KeyPath::root()
            .key("connections")
            .key("a.b")
            .key("children")
            .key("lan");
        assert_eq!(p.as_str(), "connections.\"a.b\".children.lan");
        assert_eq!(
            p.key("static_sas").index(1).key("in_key").as_str(),
            "connections.\"a.b\".children.lan.static_sas[1].in_key"
        );
    }

    #[test]
    fn warnings_say_so_after_the_position() {
        let w = |line, key: &str| {
            ConfigWarning(ConfigError { file: "w.toml".into(), line, column: 3, key: key.into(), message: "m".into() })
        };
        assert_eq!(w(4, "a.b").to_string(), "w.toml:4:3: a.b: warning: m");
        assert_eq!(w(0, "daemon.routing_table").to_string(), "w.toml: daemon.routing_table: warning: m");
        assert_eq!(w(0, "").to_string(), "w.toml: warning: m");
    }

    #[test]
    fn display_is_one_error_per_line() {
        let e = |line, key: &str, m: &str| ConfigError {
            file: "west.toml".into(),
            line,
            column: 1,
            key: key.into(),
            message: m.into(),
        };
        let errs = ConfigErrors(vec![e(3, "daemon.port", "bad"), e(0, "", "cannot read")]);
        assert_eq!(
            errs.to_string(),
            "west.toml:3:1: daemon.port: bad\nwest.toml: cannot read"
        );
    }
}
