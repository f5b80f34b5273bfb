//! Loader tests: a table of bad files, each with the exact position and key
//! the message must name (`bad`); the examples and defaults load as
//! documented (`good`); arbitrary text never panics (here).
#![allow(clippy::unwrap_used)]

mod bad;
mod good;
mod layer;
mod warnings;

use proptest::prelude::*;

use super::*;

/// 36-byte keys (AES-256-GCM KEYMAT), hex: no two SAs or directions may
/// share one (`check::static_keys`).
const K36: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f20212223";
const K36B: &str = "404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f60616263";
const K36C: &str = "808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9fa0a1a2a3";
const K36D: &str = "c0c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9dadbdcdddedfe0e1e2e3";

/// A valid static configuration; the line numbers in the table refer to it.
fn base() -> String {
    format!(
        r#"[daemon]
workers = 2

[connections.site]
local_addrs = ["192.0.2.1"]
remote_addrs = ["192.0.2.2"]

[connections.site.children.lan]
local_ts = ["10.1.0.0/16"]
remote_ts = ["10.2.0.0/16"]
esp_proposals = ["aes256gcm16"]

[[connections.site.children.lan.static_sas]]
in_spi = 0xc0000101
out_spi = 0xc0000201
in_key = "0x{K36}"
out_key = "0x{K36B}"
"#
    )
}

/// A second connection appended to `base()` (its header is line 19).
fn second(local_ts: &str, remote_ts: &str, in_spi: &str) -> String {
    format!(
        r#"
[connections.other]
local_addrs = ["192.0.2.1"]
remote_addrs = ["192.0.2.3"]

[connections.other.children.net]
local_ts = ["{local_ts}"]
remote_ts = ["{remote_ts}"]
esp_proposals = ["aes256gcm16"]

[[connections.other.children.net.static_sas]]
in_spi = {in_spi}
out_spi = 0xc0000301
in_key = "{K36C}"
out_key = "{K36D}"
"#
    )
}

fn errors_of(text: &str) -> Vec<ConfigError> {
    match parse_str(text, "west.toml") {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e.0,
    }
}

const L: &str = "connections.site.children.lan";

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, .. ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,400}") {
        let _ = parse_str(&text, "fuzz.toml");
    }

    #[test]
    fn toml_shaped_text_never_panics(
        lines in proptest::collection::vec(
            prop_oneof![
                Just("[daemon]".to_string()),
                Just("[connections.a.children.b]".to_string()),
                Just("[[connections.a.children.b.static_sas]]".to_string()),
                "[a-z_]{1,12} = [0-9]{1,12}",
                "[a-z_]{1,12} = \"[ -~]{0,40}\"",
                "[a-z_]{1,12} = \\[\"[0-9a-f.:/\\-\\[\\]]{0,30}\"\\]",
            ],
            0..24,
        )
    ) {
        let _ = parse_str(&lines.join("\n"), "fuzz.toml");
    }

    #[test]
    fn mutated_base_never_panics(at in 0usize..1000, byte in any::<u8>()) {
        let mut b = base().into_bytes();
        let i = at % b.len();
        b[i] = byte;
        if let Ok(text) = String::from_utf8(b) {
            let _ = parse_str(&text, "fuzz.toml");
        }
    }
}
