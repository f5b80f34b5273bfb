//! Config load scaling: does loading *n* tunnels cost *n* times one?
//!
//! FreeS/WAN's start-up was quadratic — 200 tunnels took minutes — because
//! every new connection was checked against every loaded one. This
//! measurement generates hub configurations with 1,000 … 10,000
//! connections (each its own peer in 198.18.0.0/15, RFC 2544's benchmarking
//! range, its own identity and PSK, and one child from the hub's LAN to its
//! own /24), then times what `esparto run` does with such a file: the
//! loader (`config::parse_str`: TOML, every key, the cross-file checks) and
//! adding every connection and the PSKs to an IKE [`Endpoint`]. It prints
//! the time per connection for each size: flat means linear.
//!
//! The hub's side of every child is the same LAN, the usual hub-and-spoke
//! shape and the hard case for the selector-overlap check: every pair of
//! children intersects on the local side and only the remote side tells
//! them apart.

use std::fmt::Write as _;
use std::time::Instant;

use anyhow::{Result, bail};
use esparto_crypto::SystemRng;
use esparto_ike::{Endpoint, EndpointConfig, SteeringSpiAllocator};
use serde::Serialize;

use crate::bench::median;
use ::esparto::config;

/// Most connections a generated file can hold (one /24 of 10.128.0.0/9 each).
pub const MAX_CONNECTIONS: usize = 1 << 15;

/// The timings for one size (medians over the runs).
#[derive(Debug, Clone, Serialize)]
pub struct ConfigLoadRow {
    /// Connections in the file (one child each).
    pub connections: usize,
    /// Size of the file in bytes.
    pub file_bytes: usize,
    /// `config::parse_str`, milliseconds.
    pub parse_ms: f64,
    /// Adding every connection and the PSKs to an `Endpoint`, milliseconds.
    pub endpoint_ms: f64,
    /// Both, per connection, microseconds.
    pub us_per_connection: f64,
}

/// A hub configuration with `n` spokes (see the module docs).
pub fn generate(n: usize) -> Result<String> {
    if n == 0 || n > MAX_CONNECTIONS {
        bail!("a generated configuration holds 1..={MAX_CONNECTIONS} connections, not {n}");
    }
    let mut s = String::with_capacity(n * 700);
    s.push_str("[daemon]\nworkers = 2\n");
    for i in 0..n {
        // Spoke i: peer 198.18.0.0 + i + 1, LAN 10.128.0.0 + i·256 /24.
        let peer = std::net::Ipv4Addr::from(0xc612_0000u32 + i as u32 + 1);
        let lan = std::net::Ipv4Addr::from(0x0a80_0000u32 + ((i as u32) << 8));
        // Writing to a String cannot fail.
        let _ = write!(
            s,
            r#"
[connections.spoke{i}]
local_addrs = ["192.0.2.1"]
remote_addrs = ["{peer}"]
proposals = ["aes256gcm16-prfsha256-x25519"]
encap = true
local.auth = "psk"
local.id = "@hub.example"
remote.auth = "psk"
remote.id = "@spoke{i}.example"

[connections.spoke{i}.children.lan]
local_ts = ["10.0.0.0/16"]
remote_ts = ["{lan}/24"]
esp_proposals = ["aes256gcm16"]

[secrets.spoke{i}]
ids = ["@hub.example", "@spoke{i}.example"]
secret = "benchmark key for spoke {i}"
"#
        );
    }
    Ok(s)
}

/// Time loading each size `runs` times; medians.
pub fn measure(sizes: &[usize], runs: usize) -> Result<Vec<ConfigLoadRow>> {
    let mut rows = Vec::new();
    for &n in sizes {
        let text = generate(n)?;
        let (mut parse, mut add) = (Vec::new(), Vec::new());
        for _ in 0..runs.max(1) {
            let (p, a) = load_once(&text, n)?;
            parse.push(p);
            add.push(a);
        }
        let (parse_ms, endpoint_ms) = (median(&parse) * 1e3, median(&add) * 1e3);
        rows.push(ConfigLoadRow {
            connections: n,
            file_bytes: text.len(),
            parse_ms,
            endpoint_ms,
            us_per_connection: (parse_ms + endpoint_ms) * 1e3 / n as f64,
        });
    }
    Ok(rows)
}

/// One load: seconds in the loader, seconds adding to the endpoint.
fn load_once(text: &str, n: usize) -> Result<(f64, f64)> {
    let t0 = Instant::now();
    let cfg = match config::parse_str(text, "generated.toml") {
        Ok(c) => c,
        Err(e) => bail!("the generated configuration does not load:\n{e}"),
    };
    let t1 = Instant::now();
    // As `esparto run` does (daemon::ike): the endpoint gets the IKE side
    // of every connection and the PSK store.
    let mut ep = Endpoint::new(
        EndpointConfig::default(),
        Box::new(SystemRng),
        Box::new(SteeringSpiAllocator::new(2, ::esparto::datapath::spi_for_worker, ::esparto::datapath::spi_to_worker)),
    );
    let mut added = 0;
    for c in &cfg.connections {
        if let Some(ike) = &c.ike {
            ep.add_connection(ike.clone())?;
            added += 1;
        }
    }
    *ep.secrets_mut() = cfg.secrets;
    let t2 = Instant::now();
    if added != n {
        bail!("{added} IKE connections loaded, {n} generated");
    }
    drop(ep);
    Ok(((t1 - t0).as_secs_f64(), (t2 - t1).as_secs_f64()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn generated_files_load_with_every_connection() {
        let text = generate(300).unwrap();
        let cfg = config::parse_str(&text, "gen.toml").unwrap();
        assert_eq!(cfg.connections.len(), 300);
        assert_eq!(cfg.child_count(), 300);
        assert_eq!(cfg.secrets.psks.len(), 300);
        // Distinct peers and remote selectors, the same hub side.
        let last = &cfg.connections[299];
        assert_eq!(last.remote_addrs[0].to_string(), "198.18.1.44");
        assert_eq!(last.children[0].remote_ts[0].to_string(), "10.129.43.0/24");
        assert_eq!(
            last.children[0].local_ts,
            cfg.connections[0].children[0].local_ts
        );
        let rows = measure(&[100, 200], 1).unwrap();
        assert_eq!(rows.len(), 2);
        assert!(
            rows.iter()
                .all(|r| r.parse_ms > 0.0 && r.us_per_connection > 0.0)
        );
    }

    #[test]
    fn sizes_out_of_range_are_refused() {
        assert!(generate(0).is_err());
        assert!(generate(MAX_CONNECTIONS + 1).is_err());
        assert!(generate(MAX_CONNECTIONS).is_ok());
    }
}
