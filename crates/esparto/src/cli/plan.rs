//! What `esparto plan voip --config FILE` reads of a gateway's
//! configuration. The planner (`esparto-bench`) knows no configuration
//! file; the command line reads it here, with the gateway's own loader, and
//! hands the planner the suite and the address family.

use std::path::Path;

use anyhow::Result;
use esparto_bench::plan::voip::Configured;

use crate::config;

/// `esparto plan voip --config FILE`: the suite of the file's first child
/// with an ESP proposal (its static SAs' suite, or its first ESP proposal),
/// and the family of that connection's first peer.
pub(super) fn voip_config(path: &Path) -> Result<Configured> {
    let cfg = config::load(path).map_err(|e| anyhow::anyhow!("{e}"))?;
    for conn in &cfg.connections {
        let outer = match conn.remote_addrs.first() {
            Some(a) if a.is_ipv6() => esparto_esp::Family::V6,
            _ => esparto_esp::Family::V4,
        };
        for child in &conn.children {
            let suite = if let Some(s) = &child.static_sas {
                Some(s.suite)
            } else {
                conn.ike
                    .as_ref()
                    .and_then(|ike| ike.children.iter().find(|c| *c.name == *child.name))
                    .and_then(|c| c.esp_proposals.first())
                    .and_then(|p| {
                        let sel = esparto_ike::proposal::Selected {
                            number: 1,
                            spi: esparto_wire::ike::Spi::U32(0),
                            encr: *p.encr.first()?,
                            prf: None,
                            integ: p.integ.first().copied(),
                            ke: None,
                            esn: false,
                            ake: Default::default(),
                        };
                        esparto_ike::keys::esp_suite(&sel)
                    })
            };
            if let Some(suite) = suite {
                let from = format!("first ESP proposal of {}.{} in {}", conn.name, child.name, path.display());
                return Ok(Configured { suite, outer, from });
            }
        }
    }
    anyhow::bail!("{}: no child with an ESP proposal", path.display())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use esparto_crypto::{EspSuite, Integ};

    use super::*;

    #[test]
    fn suite_and_family_from_a_configuration() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gw.toml");
        std::fs::write(
            &path,
            r#"
[connections.site]
local_addrs = ["2001:db8::1"]
remote_addrs = ["2001:db8::2"]
local.auth = "psk"
local.id = "@west.example"
remote.auth = "psk"
remote.id = "@east.example"
[connections.site.children.lan]
local_ts = ["10.1.0.0/16"]
remote_ts = ["10.2.0.0/16"]
esp_proposals = ["aes128-sha256", "aes256gcm16"]
[secrets.west-east]
ids = ["@west.example", "@east.example"]
secret = "a test secret of more than thirty-two characters"
"#,
        )
        .unwrap();
        let c = match voip_config(&path) {
            Ok(x) => x,
            Err(e) => panic!("{e:#}"),
        };
        assert_eq!(c.suite, EspSuite::AesCbc { key_bits: 128, integ: Integ::HmacSha256_128 });
        assert_eq!(c.outer, esparto_esp::Family::V6);
        assert!(c.from.contains("site.lan"), "{}", c.from);
    }
}
