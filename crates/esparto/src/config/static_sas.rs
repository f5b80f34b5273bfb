//! `[[connections.NAME.children.CHILD.static_sas]]`: statically keyed SA
//! pairs, like `ip xfrm state add`.
//!
//! Each pair is an inbound and an outbound SA: SPIs and KEYMAT. SPIs 0–255
//! are refused (RFC 4303 §2.1); keys must be exactly the suite's KEYMAT
//! length in RFC 7296 §2.17 order (encryption key, salt for AEADs,
//! integrity key), given inline as hex or in a file relative to the
//! configuration. Messages about keys give lengths and positions, never
//! the key.

use std::path::Path;

use esparto_crypto::{EspSuite, SecretBytes};

use super::check::{ChildSeen, Located};
use super::error::KeyPath;
use super::hygiene;
use super::model::StaticPair;
use super::tree::{Cx, Field, Kind, Node};
use super::value::{keymat_layout, parse_hex_secret};

const PAIR_KEYS: &[&str] = &[
    "in_spi",
    "out_spi",
    "in_key",
    "out_key",
    "in_key_file",
    "out_key_file",
];

/// Parse `static_sas`: an array of tables, one per SA pair.
pub(crate) fn parse(
    cx: &mut Cx<'_>,
    f: &Field<'_>,
    suite: EspSuite,
    seen: &mut ChildSeen,
) -> Vec<StaticPair> {
    let Kind::Array(items) = &f.node.kind else {
        cx.err_at(
            f,
            format!(
                "expected an array of tables ([[...static_sas]]), found {}",
                f.node.type_name()
            ),
        );
        return vec![];
    };
    if items.is_empty() {
        cx.err_at(f, "no SA pairs");
    }
    let mut pairs = Vec::with_capacity(items.len());
    for (i, n) in items.iter().enumerate() {
        let p = f.path.index(i);
        let Some(t) = cx.table(&Field {
            node: n,
            path: p.clone(),
        }) else {
            continue;
        };
        cx.check_keys(t, &p, PAIR_KEYS, &[]);
        let in_spi = spi(cx, t, &p, "in_spi", &mut seen.in_spis);
        let out_spi = spi(cx, t, &p, "out_spi", &mut seen.out_spis);
        let in_key = key(cx, t, &p, "in", suite);
        let out_key = key(cx, t, &p, "out", suite);
        // A key used twice in the file is refused once all are read
        // (`check::static_keys`).
        for (k, f) in in_key.iter().chain(&out_key) {
            seen.keys.push(Located {
                value: crate::daemon::key_id(k.as_slice()),
                span: f.node.span.clone(),
                path: f.path.clone(),
            });
        }
        if let (Some(in_spi), Some(out_spi), Some((in_key, _)), Some((out_key, _))) =
            (in_spi, out_spi, in_key, out_key)
        {
            pairs.push(StaticPair {
                in_spi,
                out_spi,
                in_key,
                out_key,
            });
        }
    }
    pairs
}

/// An SPI: an integer (TOML allows `0xc0000101`) or a `"0x…"` string.
fn spi(
    cx: &mut Cx<'_>,
    t: &Node,
    path: &KeyPath,
    key: &str,
    out: &mut Vec<Located<u32>>,
) -> Option<u32> {
    let Some(f) = t.field(path, key) else {
        cx.err(&t.span, &path.key(key), "missing");
        return None;
    };
    let v: i64 = match &f.node.kind {
        Kind::Int(i) => *i,
        Kind::Str(s) => {
            let h = s.trim();
            let parsed = match h.strip_prefix("0x").or_else(|| h.strip_prefix("0X")) {
                Some(hex) => i64::from_str_radix(hex, 16).ok(),
                None => h.parse().ok(),
            };
            match parsed {
                Some(v) => v,
                None => {
                    cx.err_at(
                        &f,
                        format!("'{s}' is not an SPI (a 32-bit number such as 0xc0000101)"),
                    );
                    return None;
                }
            }
        }
        _ => {
            cx.err_at(
                &f,
                format!("expected an SPI (0xc0000101), found {}", f.node.type_name()),
            );
            return None;
        }
    };
    if (0..=255).contains(&v) {
        // RFC 4303 §2.1: "The set of SPI values in the range 1 through 255
        // are reserved by the Internet Assigned Numbers Authority (IANA)
        // for future use"; zero is for local use and MUST NOT be sent.
        cx.err_at(&f, format!("SPI {v} is reserved (RFC 4303 §2.1: 0 is local-only, 1–255 are reserved by IANA); use 256 or more"));
        return None;
    }
    let Ok(v) = u32::try_from(v) else {
        cx.err_at(&f, format!("{v} does not fit in a 32-bit SPI"));
        return None;
    };
    out.push(Located {
        value: v,
        span: f.node.span.clone(),
        path: f.path.clone(),
    });
    Some(v)
}

/// `in_key`/`in_key_file` (or `out_…`): hex KEYMAT of exactly the suite's
/// length, with the field it came from.
fn key<'a>(
    cx: &mut Cx<'_>,
    t: &'a Node,
    path: &KeyPath,
    dir: &str,
    suite: EspSuite,
) -> Option<(SecretBytes, Field<'a>)> {
    let (k, kf) = (format!("{dir}_key"), format!("{dir}_key_file"));
    let (inline, file) = (t.field(path, &k), t.field(path, &kf));
    let (f, secret) = match (inline, file) {
        (Some(a), Some(_)) => {
            cx.err_at(&a, format!("give {k} or {kf}, not both"));
            return None;
        }
        (None, None) => {
            cx.err(&t.span, &path.key(&k), format!("missing (or {kf})"));
            return None;
        }
        (Some(f), None) => {
            cx.note_inline_secret(&f);
            let s = cx.str(&f)?;
            (f.clone(), parse_hex_secret(s))
        }
        (None, Some(f)) => {
            let name = cx.str(&f)?;
            let secret = read_secret_file(&cx.dir, name).and_then(|text| {
                let s = std::str::from_utf8(text.as_slice())
                    .map_err(|_| format!("'{name}' is not text"))?;
                parse_hex_secret(s).map_err(|e| format!("'{name}': {e}"))
            });
            if secret.is_ok() {
                if let Some(w) = hygiene::exposed(&cx.dir.join(name)) {
                    cx.warn(&f.node.span, &f.path, w);
                }
            }
            (f.clone(), secret)
        }
    };
    match secret {
        Err(e) => {
            cx.err_at(&f, e);
            None
        }
        Ok(key) if key.len() != suite.keymat_len() => {
            cx.err_at(
                &f,
                format!(
                    "{} bytes, {} needs {} ({})",
                    key.len(),
                    suite.name(),
                    suite.keymat_len(),
                    keymat_layout(&suite)
                ),
            );
            None
        }
        Ok(key) => {
            if hygiene::published_key(key.as_slice()) {
                cx.warn(
                    &f.node.span,
                    &f.path,
                    "this key is published in Esparto's examples: anyone can read and forge this SA's traffic; make new ones (`openssl rand -hex` with the suite's KEYMAT length)",
                );
            }
            Some((key, f))
        }
    }
}

/// Read a file holding a secret, relative to the configuration's directory.
/// The bytes are returned in a buffer that is wiped when dropped.
pub(crate) fn read_secret_file(dir: &Path, name: &str) -> Result<SecretBytes, String> {
    let p = dir.join(name);
    std::fs::read(&p)
        .map(SecretBytes::from)
        .map_err(|e| format!("cannot read '{}': {e}", p.display()))
}
