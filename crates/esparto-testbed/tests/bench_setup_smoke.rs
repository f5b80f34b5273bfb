//! `esparto-testbed bench setup` end to end, small: two peer processes in network
//! namespaces bring up a few hundred IKE tunnels, and the report must say
//! every one came up on both sides with no failure, retransmission or drop,
//! and give positive figures; once over veth with one connection, once over
//! loopback with a COOKIE round per tunnel and 50 spoke connections. Speed
//! is not asserted (shared machine). Needs root and iproute2; skipped
//! otherwise.

#![allow(clippy::unwrap_used, missing_docs)]

use std::process::Command;

use serde_json::Value;

fn root_with_ip() -> bool {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    root && Command::new("ip")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn run(args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_esparto-testbed"))
        .args(["bench", "setup", "--json", "--timeout", "60"])
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "bench setup failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&stdout).unwrap()
}

fn f(v: &Value, path: &str) -> f64 {
    v.pointer(path)
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("{path} missing in {v:#}"))
}

fn check_tunnels(r: &Value, n: u64) {
    let t = &r["tunnels"];
    assert_eq!(t["clean"], Value::Bool(true), "{t:#}");
    for side in ["initiator", "responder"] {
        let p = &t[side];
        assert_eq!(p["tunnels"].as_u64(), Some(n), "{side}: {p:#}");
        assert_eq!(p["ike_sas"].as_u64(), Some(n), "{side}: {p:#}");
        assert_eq!(p["failures"].as_u64(), Some(0), "{side}: {p:#}");
        assert_eq!(p["retransmissions"].as_u64(), Some(0), "{side}: {p:#}");
        assert_eq!(p["socket_drops"].as_u64(), Some(0), "{side}: {p:#}");
        assert_eq!(
            p["engine"]["integrity_failures"].as_u64(),
            Some(0),
            "{side}: {p:#}"
        );
        assert!(f(p, "/cpu_seconds") > 0.0, "{side}: {p:#}");
        assert!(f(p, "/tunnels_per_cpu_second") > 0.0, "{side}: {p:#}");
        assert!(f(p, "/rss_after") > f(p, "/rss_before"), "{side}: {p:#}");
    }
    assert!(f(t, "/seconds") > 0.0);
    assert!(f(t, "/tunnels_per_second") > 0.0);
    assert!(t["initiator"]["latency"]["median_ms"].as_f64().unwrap() > 0.0);
    assert_eq!(t["initiator"]["deciles"].as_array().unwrap().len(), 10);
    assert!(f(r, "/x25519/per_second") > 0.0);
    assert!(f(r, "/spi/ike_spi_ns") > 0.0);
    assert!(f(r, "/spi/esp_spi_steering_ns") > 0.0);
}

#[test]
fn veth_run_is_clean_and_reports_every_figure() {
    if !root_with_ip() {
        eprintln!("SKIP bench_setup_smoke: needs root and iproute2");
        return;
    }
    let r = run(&[
        "--tunnels",
        "300",
        "--concurrency",
        "50",
        "--config-sizes",
        "100,200",
        "--config-runs",
        "1",
    ]);
    check_tunnels(&r, 300);
    assert_eq!(r["tunnels"]["topology"], "veth");
    let rows = r["config_load"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for row in rows {
        assert!(row["us_per_connection"].as_f64().unwrap() > 0.0, "{row:#}");
    }
    assert!(f(&r, "/config_load_growth/parse") > 0.0);
    assert!(f(&r, "/config_load_growth/endpoint") > 0.0);
}

#[test]
fn loopback_run_with_cookies_and_many_connections_is_clean() {
    if !root_with_ip() {
        eprintln!("SKIP bench_setup_smoke: needs root and iproute2");
        return;
    }
    let r = run(&[
        "--tunnels",
        "200",
        "--concurrency",
        "40",
        "--topology",
        "loopback",
        "--cookies",
        "--connections",
        "50",
        "--config-sizes",
        "none",
    ]);
    check_tunnels(&r, 200);
    assert_eq!(r["tunnels"]["topology"], "loopback");
    // Every IKE_SA_INIT was answered with a COOKIE first (RFC 7296 §2.6).
    assert_eq!(
        r["tunnels"]["responder"]["engine"]["cookies_sent"].as_u64(),
        Some(200)
    );
    assert!(r["config_load"].as_array().unwrap().is_empty());
}
