//! Warnings about how the file's secrets are chosen and kept: they run,
//! but an attacker may not need to break anything to read the traffic.
//!
//! - a **PSK shorter than [`MIN_PSK_LEN`] bytes**: IKEv2 with a PSK is
//!   open to an offline dictionary attack by anyone who sees one
//!   IKE_AUTH (RFC 7296 §2.15: "the pre-shared key [...] MUST NOT be
//!   [...] guessable"), so its strength is its length and randomness;
//! - a **PSK or static key equal to one published** in this repository's
//!   examples, docs or demo ([`PUBLISHED_PSKS`], [`PUBLISHED_KEYS`]): a
//!   file copied and never edited. A unit test keeps the lists complete;
//! - a **file the configuration reads secrets from that group or others
//!   may read** (`secret_file`, `in_key_file`, `out_key_file`, and the
//!   configuration itself when it holds a secret inline);
//! - a **static key used twice** in one child's pairs, above all the
//!   same key in both directions: both ends then encrypt under one key
//!   with sequence numbers from 1, so AES-GCM's nonces repeat (RFC 4106
//!   §8.1: "the same IV and key combination MUST NOT be used more than
//!   once"), which gives away the plaintexts' XOR and the integrity key.
//!
//! Messages describe a secret (its length, which key it equals), never
//! quote it.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Shortest PSK (in bytes, after `0x` hex is decoded) not warned about.
pub const MIN_PSK_LEN: usize = 20;

/// PSKs published with Esparto: the example configuration, the demo, the
/// interoperability script.
pub(crate) const PUBLISHED_PSKS: &[&str] = &[
    "EXAMPLE ONLY: replace with 32+ random characters",
    "esparto demo: a pre-shared key for namespaces only",
    "interop shared secret",
];

/// Static keys published with Esparto (`examples/static-*.toml`), hex.
pub(crate) const PUBLISHED_KEYS: &[&str] = &[
    "1b24b8eaeca43a2fb039351545c35b31e02d7aa660145e8a05669890be8a24af6d3e526f",
    "bf47fdfae7359c8dfecac4eefcb0e479f1b0e61b550f23f4aebc7a16f27d2110553ca6fb",
    "3c2034206b0aa1828b5511d9668309c11357af2454de9e75211c56bca5f9763a8237897c",
    "47f0909a63ad3b97e96b036ae3b736c60413c89c9c245e3ab6b2bf4bf7cb92fc2e62b04a",
    "87555731f2b71cadd5e6058d104b90b70bfb4cb168a80b3d5468374f338b3f88773fa565",
    "0367079ae60d4fb7f010ba1da9ec174409597d92925b7ec8cdc09c14cfd8b2251ce34d5f",
];

/// What is wrong with a PSK's strength, if anything.
pub(crate) fn weak_psk(secret: &[u8]) -> Option<String> {
    if PUBLISHED_PSKS.iter().any(|p| p.as_bytes() == secret) {
        return Some(
            "this PSK is published in Esparto's examples or demo: anyone can authenticate as either end; use 32+ random characters (e.g. `openssl rand -base64 32`)"
                .into(),
        );
    }
    if secret.len() < MIN_PSK_LEN {
        return Some(format!(
            "PSK of {} bytes: shorter than {MIN_PSK_LEN}, it may be guessed offline from one captured IKE_AUTH; use 32+ random characters",
            secret.len()
        ));
    }
    None
}

/// Whether `key` is one of [`PUBLISHED_KEYS`].
pub(crate) fn published_key(key: &[u8]) -> bool {
    PUBLISHED_KEYS
        .iter()
        .any(|h| h.len() == 2 * key.len() && hex_eq(h, key))
}

fn hex_eq(hex: &str, bytes: &[u8]) -> bool {
    hex.as_bytes()
        .chunks(2)
        .zip(bytes)
        .all(|(pair, b)| std::str::from_utf8(pair).ok().and_then(|s| u8::from_str_radix(s, 16).ok()) == Some(*b))
}

/// If `path` (holding a secret) may be read by its group or by others,
/// why that matters; `None` when it is private or cannot be examined
/// (reading it reports that).
pub(crate) fn exposed(path: &Path) -> Option<String> {
    let mode = std::fs::metadata(path).ok()?.permissions().mode() & 0o777;
    let who = match (mode & 0o040 != 0, mode & 0o004 != 0) {
        (true, true) => "its group and by others",
        (true, false) => "its group",
        (false, true) => "others",
        (false, false) => return None,
    };
    Some(format!(
        "'{}' holds a secret and may be read by {who} (mode {mode:04o}); `chmod 600` it",
        path.display()
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn short_and_published_psks_are_named_without_quoting_them() {
        let w = weak_psk(b"short secret").unwrap();
        assert!(w.contains("12 bytes"), "{w}");
        assert!(!w.contains("short secret"), "{w}");
        assert!(weak_psk(&[7u8; MIN_PSK_LEN - 1]).is_some());
        assert_eq!(weak_psk(&[7u8; MIN_PSK_LEN]), None);
        for p in PUBLISHED_PSKS {
            let w = weak_psk(p.as_bytes()).unwrap();
            assert!(w.contains("published"), "{w}");
        }
    }

    #[test]
    fn published_keys_match_by_bytes() {
        let k: Vec<u8> = (0..PUBLISHED_KEYS[0].len() / 2)
            .map(|i| u8::from_str_radix(&PUBLISHED_KEYS[0][2 * i..2 * i + 2], 16).unwrap())
            .collect();
        assert!(published_key(&k));
        let mut other = k.clone();
        other[35] ^= 1;
        assert!(!published_key(&other));
        assert!(!published_key(&k[..35]));
    }

    #[test]
    fn files_readable_by_group_or_others_are_exposed() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("k");
        std::fs::write(&f, "x").unwrap();
        for (mode, want) in [
            (0o600, None),
            (0o400, None),
            (0o640, Some("its group (mode 0640)")),
            (0o604, Some("others (mode 0604)")),
            (0o644, Some("its group and by others (mode 0644)")),
        ] {
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
            match (exposed(&f), want) {
                (None, None) => {}
                (Some(got), Some(want)) => assert!(got.contains(want), "{got}"),
                (got, want) => panic!("mode {mode:o}: {got:?}, wanted {want:?}"),
            }
        }
        assert_eq!(exposed(&dir.path().join("missing")), None);
    }

    /// Every PSK and static key written in the repository's examples,
    /// docs, README and demo is in the lists.
    #[test]
    fn the_lists_hold_every_published_secret() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut texts = vec![];
        for dir in ["examples", "docs"] {
            for e in std::fs::read_dir(root.join(dir)).unwrap() {
                let p = e.unwrap().path();
                if p.extension().is_some_and(|x| x == "toml" || x == "md") {
                    texts.push(std::fs::read_to_string(&p).unwrap());
                }
            }
        }
        for f in ["README.md", "crates/esparto-testbed/src/demo.rs", "crates/esparto-ike/tests/interop/strongswan.sh"] {
            texts.push(std::fs::read_to_string(root.join(f)).unwrap());
        }
        let quoted_after = |line: &str, key: &str| -> Option<String> {
            let rest = line.trim_start().strip_prefix(key)?.trim_start();
            let rest = rest.strip_prefix('=').or_else(|| rest.strip_prefix(':'))?.trim_start();
            let rest = rest.strip_prefix('"')?;
            Some(rest[..rest.find('"')?].to_string())
        };
        let (mut psks, mut keys) = (0, 0);
        for t in &texts {
            for line in t.lines() {
                for k in ["secret", "psk", "PSK"] {
                    if let Some(s) = quoted_after(line, k).filter(|s| !s.starts_with('$') && !s.is_empty()) {
                        assert!(PUBLISHED_PSKS.contains(&s.as_str()), "{s:?} is not in PUBLISHED_PSKS");
                        psks += 1;
                    }
                }
                for k in ["in_key", "out_key"] {
                    if let Some(s) = quoted_after(line, k) {
                        let hex = s.trim_start_matches("0x");
                        assert!(PUBLISHED_KEYS.contains(&hex), "{hex} is not in PUBLISHED_KEYS");
                        keys += 1;
                    }
                }
            }
        }
        assert!(psks >= PUBLISHED_PSKS.len(), "found only {psks} PSKs");
        assert!(keys >= PUBLISHED_KEYS.len(), "found only {keys} keys");
    }
}
