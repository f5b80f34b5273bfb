//! `esparto-testbed demo`, the command `make demo` runs, end to end: with `--json`
//! it reports every ping answered, TCP and UDP carried through the tunnel
//! and both gateways' workers with their packet counts; and a SIGTERM (or
//! an operator's Ctrl-C) in the middle of a run stops its gateways and
//! removes its namespaces and scratch directories.
//!
//! Needs root, iproute2, iperf3, ping and ethtool (SKIP otherwise).
#![allow(clippy::unwrap_used)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use esparto_testbed::skip;
use esparto_testbed::workdir;
use esparto_netns::{self as netns, running as alive};

fn testbed() -> Command {
    Command::new(env!("CARGO_BIN_EXE_esparto-testbed"))
}

fn namespaces(prefix: &str) -> Vec<String> {
    netns::names_with_prefix(prefix).unwrap()
}

#[test]
fn demo_json_reports_traffic_through_the_tunnel() {
    if skip("demo_json_reports_traffic_through_the_tunnel", false) {
        return;
    }
    let out = testbed()
        .args(["demo", "--json", "--seconds", "2", "--workers", "2"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "esparto-testbed demo failed: {}\n{stderr}", out.status);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("demo --json output is not JSON ({e}):\n{}", String::from_utf8_lossy(&out.stdout)));
    assert_eq!(v["ping_ok"], true, "{v:#}");
    assert!(v["tcp_mbps"].as_f64().unwrap() > 0.0, "{v:#}");
    assert!(v["udp_1400_mbps"].as_f64().unwrap() > 0.0, "{v:#}");
    for (gw, field) in [("west", "tx_packets"), ("east", "rx_packets")] {
        let workers = v[gw]["workers"].as_array().unwrap();
        assert_eq!(workers.len(), 2, "{gw}: {v:#}");
        let total: u64 = workers.iter().map(|w| w[field].as_u64().unwrap()).sum();
        assert!(total > 0, "{gw} carried nothing: {v:#}");
        assert!(v[gw]["ike_sas"].as_u64().unwrap() >= 1, "{gw}: {v:#}");
        // A fallback pair plus one pair per worker (RFC 9611).
        assert!(v[gw]["child_sas"].as_u64().unwrap() >= 3, "{gw}: {v:#}");
    }
}

#[test]
fn interrupted_demo_leaves_nothing_behind() {
    if skip("interrupted_demo_leaves_nothing_behind", false) {
        return;
    }
    let mut child = testbed()
        .args(["demo", "--seconds", "30", "--workers", "2"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let prefix = format!("esp-{}-", child.id());
    // Wait until both gateways run (a process in each gw namespace).
    let t0 = Instant::now();
    let (names, pids) = loop {
        let names = namespaces(&prefix);
        let gws: Vec<Vec<u32>> = names.iter().filter(|n| n.contains("-gw-")).map(|n| netns::pids_in(n).unwrap()).collect();
        if names.len() == 4 && gws.len() == 2 && gws.iter().all(|p| !p.is_empty()) {
            break (names, gws.concat());
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "the demo's gateways did not start: {names:?}");
        assert!(child.try_wait().unwrap().is_none(), "the demo ended early");
        std::thread::sleep(Duration::from_millis(100));
    };
    std::thread::sleep(Duration::from_millis(500)); // into the traffic phases
    let kill = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(kill.success());
    let status = child.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(128 + 15), "exit status after SIGTERM: {status}\n{err}");
    assert_eq!(namespaces(&prefix), Vec::<String>::new(), "namespaces left behind (had {names:?})");
    let t1 = Instant::now();
    while pids.iter().any(|&p| alive(p)) && t1.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let left: Vec<u32> = pids.iter().copied().filter(|&p| alive(p)).collect();
    assert!(left.is_empty(), "gateway processes still running: {left:?}");
    let kept = workdir::of(child.id());
    assert!(
        workdir::keep_all() || kept.is_empty(),
        "scratch directories left behind: {kept:?}"
    );
}
