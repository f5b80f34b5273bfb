//! `esparto-testbed bench tunnel --quick --json` end to end: the run succeeds, its
//! JSON parses into the report type, every figure is positive, the SA
//! layouts are what the tables claim (one pair: a single SA each way;
//! per-CPU: a fallback plus one per worker), and one SA pair is decrypted by
//! one worker while per-CPU SAs spread over both.
//!
//! About a minute and a half with a release build; needs root, iproute2,
//! iperf3, ping, ethtool (SKIP otherwise) and strongSwan (without it the
//! run skips strongSwan and the test says so). The figures themselves are
//! not checked: the machine is shared, and a smoke run's trials are short.
#![allow(clippy::unwrap_used)]

use std::process::Command;

use esparto_testbed::bench::tunnel::{Figure, Measure, Report, Row};
use esparto_testbed::baseline::Section;
use esparto_testbed::{missing, skip};

fn positive(what: &str, f: &Figure) {
    assert!(f.mbps > 0.0, "{what}: {f:?}");
    assert!(f.pps.is_none_or(|p| p > 0.0), "{what}: {f:?}");
    assert!(f.confirmed, "{what}: no confirmed zero-loss rate: {f:?}");
    let cpu = f.gateway_s_per_gb.unwrap_or(0.0);
    assert!(cpu > 0.0, "{what}: gateway CPU per GB {cpu}: {f:?}");
}

fn section_positive(what: &str, s: &Section) {
    assert!(
        !s.tcp.is_empty() && !s.udp.is_empty(),
        "{what}: empty section"
    );
    for t in &s.tcp {
        assert!(
            t.result.received_mbps > 0.0 && t.result.bytes > 0,
            "{what}: {t:?}"
        );
    }
    for u in &s.udp {
        assert!(u.rate_pps > 0.0 && u.ip_mbps > 0.0, "{what}: {u:?}");
    }
}

fn rows_positive(what: &str, rows: &[Row], with_baseline: bool) {
    assert!(!rows.is_empty(), "{what}: no rows");
    for r in rows {
        let name = format!("{what} {:?} ×{}", r.measure, r.flows);
        positive(&name, r.subject.as_ref().unwrap());
        if with_baseline {
            positive(&name, r.baseline.as_ref().unwrap());
            assert!(r.ratio.unwrap() > 0.0, "{name}: {r:?}");
        }
    }
}

#[test]
fn quick_json_run() {
    if skip("bench_tunnel_smoke", false) {
        return;
    }
    let swan = missing(true).is_empty();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_esparto-testbed"));
    cmd.args(["bench", "tunnel", "--quick", "--json", "--workers", "2"]);
    if !swan {
        eprintln!("bench_tunnel_smoke: strongSwan is missing, running with --skip-strongswan");
        cmd.arg("--skip-strongswan");
    }
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {}: {stderr}", out.status);
    let r: Report = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("JSON: {e}\n{}", String::from_utf8_lossy(&out.stdout)));
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert!(r.options.quick && r.options.workers == 2);
    assert!(
        r.machine.cpus > 0 && !r.machine.kernel.is_empty() && !r.machine.loadavg_end.is_empty()
    );

    section_positive("routed", r.routed.as_ref().unwrap());
    section_positive("Esparto", r.esparto.as_ref().unwrap());
    // Esparto as configured by default: a Child SA per worker.
    assert_eq!(
        r.esparto_sas.as_deref(),
        Some("in: 1 fallback, 4 sub; out: 1 fallback, 2 sub")
    );
    // TCP 1 and 4 streams, UDP 64 and 1400 bytes.
    assert_eq!(r.comparison.len(), 4, "{:?}", r.comparison);
    if swan {
        section_positive("strongSwan", r.strongswan.as_ref().unwrap());
        assert!(
            r.machine
                .strongswan
                .as_deref()
                .unwrap_or("")
                .contains("strongSwan")
        );
    }
    rows_positive("strongSwan/Esparto", &r.comparison, swan);

    let p = r.per_cpu.as_ref().unwrap();
    // IKEv2 eager on both sides: each negotiates a sub-SA per worker, so
    // each receives on its own two and the peer's two.
    assert_eq!(
        p.per_cpu_sas.as_deref(),
        Some("in: 1 fallback, 4 sub; out: 1 fallback, 2 sub")
    );
    assert_eq!(
        p.one_pair_sas.as_deref(),
        Some("in: 1 single; out: 1 single")
    );
    assert_eq!(
        p.sections.iter().map(|s| s.flows).collect::<Vec<_>>(),
        [1, 8]
    );
    // Per flow count: TCP with as many streams, and UDP 1400.
    let want: Vec<(usize, Measure)> = [1u32, 8]
        .iter()
        .flat_map(|&n| [(n as usize, Measure::Tcp { streams: n }), (n as usize, Measure::Udp { ip_size: 1400 })])
        .collect();
    let got: Vec<(usize, Measure)> = p.rows.iter().map(|r| (r.flows, r.measure)).collect();
    assert_eq!(got, want);
    rows_positive("per-CPU/one pair", &p.rows, true);
    for row in &p.rows {
        // One inbound SA is steered to one worker: it decrypts everything.
        let one = row.baseline.as_ref().unwrap().decap_busiest_share.unwrap();
        assert!(one > 0.99, "one pair decrypted on several workers? {row:?}");
    }
    // Eight flows over two workers' own SAs: both decrypt (all eight flows
    // hashing to one worker, for TCP and UDP alike, is a 1-in-16384 chance).
    let spread = p
        .rows
        .iter()
        .filter(|r| r.flows == 8)
        .filter_map(|r| r.subject.as_ref()?.decap_busiest_share)
        .fold(1.0f64, f64::min);
    assert!(
        spread < 0.99,
        "per-CPU SAs with 8 flows stayed on one worker: {:?}",
        p.rows
    );
}
