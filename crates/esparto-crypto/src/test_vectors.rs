//! A tiny reader for the known-answer files under `tests/vectors/`.
//!
//! Format: cases separated by blank lines; each line `name = value`; a line
//! that starts with whitespace continues the previous value (so long hex
//! strings can wrap); `#` starts a comment line. Hex values may contain
//! spaces. A `case = ...` line names the case in assertion messages.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

pub(crate) struct Vectors {
    cases: Vec<Case>,
}

pub(crate) struct Case {
    fields: BTreeMap<String, String>,
}

impl Vectors {
    pub(crate) fn load(text: &str) -> Self {
        let mut cases = Vec::new();
        let mut cur: BTreeMap<String, String> = BTreeMap::new();
        let mut last_key: Option<String> = None;
        for line in text.lines() {
            if line.trim_start().starts_with('#') {
                continue;
            }
            if line.trim().is_empty() {
                if !cur.is_empty() {
                    cases.push(Case {
                        fields: std::mem::take(&mut cur),
                    });
                }
                last_key = None;
                continue;
            }
            if line.starts_with(char::is_whitespace) {
                let k = last_key.as_ref().expect("continuation without a key");
                cur.get_mut(k).unwrap().push_str(line.trim());
                continue;
            }
            let (k, v) = line.split_once('=').expect("line without '='");
            let k = k.trim().to_string();
            cur.insert(k.clone(), v.trim().to_string());
            last_key = Some(k);
        }
        if !cur.is_empty() {
            cases.push(Case { fields: cur });
        }
        Vectors { cases }
    }

    pub(crate) fn cases(&self) -> impl Iterator<Item = &Case> {
        self.cases.iter()
    }

    pub(crate) fn case(&self, name: &str) -> &Case {
        self.cases
            .iter()
            .find(|c| c.name() == name)
            .unwrap_or_else(|| panic!("no case {name}"))
    }
}

impl Case {
    pub(crate) fn name(&self) -> &str {
        self.fields.get("case").map(String::as_str).unwrap_or("?")
    }

    pub(crate) fn has(&self, k: &str) -> bool {
        self.fields.contains_key(k)
    }

    pub(crate) fn get(&self, k: &str) -> &str {
        self.fields
            .get(k)
            .unwrap_or_else(|| panic!("case {} has no field {k}", self.name()))
    }
}

/// Decodes hex, ignoring spaces; an empty string is an empty vector.
pub(crate) fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    assert!(digits.len() % 2 == 0, "odd hex length: {s}");
    digits
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
        .collect()
}
