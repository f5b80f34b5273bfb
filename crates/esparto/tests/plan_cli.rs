//! `esparto plan voip` and `esparto plan capacity` as an operator runs them,
//! on a results directory made here: the figures, the file each came from,
//! and the files set aside.

#![allow(clippy::unwrap_used)]

use std::path::Path;

use esparto_bench::results::{self, DataplaneData, Kind, TunnelData, ZeroLoss};

/// Runs the binary; (success, stdout, stderr).
mod common;
use common::esparto;

/// The LANCOM 8011's zero-loss rates (its techpaper's Table 5), as if this
/// machine had measured them.
fn lancom_8011() -> TunnelData {
    let rates = [(64, 8192.0), (128, 9216.0), (256, 9267.0), (512, 9216.0), (1024, 7322.0), (1364, 6054.0)];
    TunnelData {
        suite: "aes256gcm16".into(),
        workers: 2,
        flows: 4,
        trial_seconds: 2.0,
        resolution: 0.03,
        loss_tolerance: 0.0,
        zero_loss: rates
            .iter()
            .map(|&(ip_size, pps)| ZeroLoss {
                ip_size,
                pps,
                lower_bound: false,
                confirmed: true,
                gateway_s_per_gb: Some(20.0),
            })
            .collect(),
        tcp: vec![],
        report: serde_json::Value::Null,
    }
}

fn line<'a>(text: &'a str, start: &str) -> &'a str {
    text.lines().find(|l| l.starts_with(start)).unwrap_or_else(|| panic!("no line starting {start:?} in\n{text}"))
}

#[test]
fn plan_voip_reads_the_newest_results_of_this_machine() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let good = results::save(d, "aes256gcm16", &results::envelope(Kind::Tunnel, lancom_8011())).unwrap();
    let mut foreign = results::envelope(Kind::Tunnel, lancom_8011());
    foreign.machine.id = "not-this-machine".into();
    foreign.unix += 3600; // newer, but not ours
    let foreign = results::save(d, "foreign", &foreign).unwrap();
    std::fs::write(d.join("corrupt.json"), "{\"format\": 1, \"kind\": \"tunnel\", \"machine\": ").unwrap();
    let mut old = serde_json::to_value(results::envelope(Kind::Tunnel, lancom_8011())).unwrap();
    old["format"] = 0.into();
    std::fs::write(d.join("old.json"), old.to_string()).unwrap();

    let dir_s = d.to_str().unwrap();
    let (ok, out, err) = esparto(&["plan", "voip", "--results", dir_s, "--codecs", "g729-30ms,g711-20ms"]);
    assert!(ok, "{out}\n{err}");
    // G.729 30 ms: a 70-byte IP packet; between 8,192 pps at 64 B and 9,216 at 128 B the
    // time per packet gives 8,278 pps: 8,278 / (2 × 33.3) = 124.2 calls.
    let g729 = line(&out, "G.729 30 ms");
    assert!(g729.contains("8,278 (interpolated 64–128 B)"), "{g729}");
    assert!(g729.trim_end().ends_with(" 124"), "{g729}");
    // 30 B voice, 70 B IP, 132 B ESP-in-UDP with AES-256-GCM: 35.2 kbit/s.
    assert!(
        g729.contains("   30 ") && g729.contains("   70 ") && g729.contains("   132 ") && g729.contains("35.2"),
        "{g729}"
    );
    // G.711 20 ms: 200 B, between 128 and 256 B: 9,245 pps, 92 calls.
    let g711 = line(&out, "G.711 20 ms");
    assert!(g711.contains("9,245 (interpolated 128–256 B)") && g711.trim_end().ends_with(" 92"), "{g711}");
    // Which measurement: the file, its date, its commit.
    let from = line(&out, "zero-loss rates: ");
    assert!(
        from.contains(good.to_str().unwrap()) && from.contains(results::COMMIT.get(..12).unwrap_or(results::COMMIT)),
        "{from}"
    );
    // The others are named and set aside.
    assert!(err.contains(&format!("ignored {}: from another machine", foreign.display())), "{err}");
    assert!(err.contains("corrupt.json: corrupt: not JSON"), "{err}");
    assert!(err.contains("old.json: older format 0"), "{err}");

    // Does 100 fit? With a 10 Mbit/s link?
    let (ok, out, _) =
        esparto(&["plan", "voip", "--results", dir_s, "--codec", "g711-20ms", "--calls", "100", "--link-mbps", "10"]);
    assert!(ok);
    let g711 = line(&out, "G.711 20 ms");
    // The link holds 10 Mbit/s ÷ (264 B × 8 × 50/s) = 94 calls, the gateway 92.4: the gateway
    // limits, and 100 calls are 8 % more than it carries.
    assert!(g711.contains(" 94 ") && g711.contains("gateway") && g711.contains("no, 92 fit"), "{g711}");

    // JSON carries the same figures.
    let (ok, out, _) = esparto(&["plan", "voip", "--results", dir_s, "--codecs", "g729-30ms", "--json"]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["rows"][0]["calls"], 124);
    assert_eq!(v["rows"][0]["ipsec_bytes"], 132);
    assert_eq!(v["ignored"].as_array().unwrap().len(), 3);
}

#[test]
fn plan_voip_without_results_says_so_and_bad_names_list_the_known_ones() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("none");
    let (ok, out, err) =
        esparto(&["plan", "voip", "--results", missing.to_str().unwrap(), "--suite", "aes128-sha1", "--raw-esp"]);
    assert!(ok, "{err}");
    // The model alone still answers: LANCOM's Table 1.
    let g729 = line(&out, "G.729 30 ms");
    assert!(g729.contains("   136 ") && g729.contains("36.3"), "{g729}");
    assert!(out.contains("no results directory") && out.contains("--calibrate"), "{out}");
    assert!(!out.contains("zero-loss rates:"), "{out}");

    // `--codec` and the earlier codec names are still taken.
    let (ok, _, err) = esparto(&["plan", "voip", "--codec", "g711-20,ilbc"]);
    assert!(!ok);
    assert!(err.contains("unknown codec 'ilbc'; known: g711-10ms, g711-20ms") && err.contains("opus-64k-20ms"), "{err}");
    let (ok, _, err) = esparto(&["plan", "voip", "--suite", "3des-md5"]);
    assert!(!ok);
    assert!(err.contains("unknown ESP suite '3des-md5'; known: aes256gcm16, aes128gcm16, chacha20poly1305"), "{err}");
    let (ok, _, err) = esparto(&["plan", "capacity", "--suite", "rot13"]);
    assert!(!ok && err.contains("unknown ESP suite 'rot13'"), "{err}");
    // Nothing measured: one line saying what to run, and a failure, not
    // an empty table.
    for json in [false, true] {
        let mut args = vec!["plan", "capacity", "--results", missing.to_str().unwrap()];
        if json {
            args.push("--json");
        }
        let (ok, out, err) = esparto(&args);
        assert!(!ok && out.is_empty(), "{out}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains("no results directory") && err.contains("esparto bench dataplane --save"), "{err}");
    }
}

#[test]
fn plan_capacity_names_its_sources() {
    let dir = tempfile::tempdir().unwrap();
    let d: &Path = dir.path();
    // `esparto bench dataplane --json` of 2026-11-21 on the project's 2-vCPU machine
    // (docs/BENCHMARKS.md, "Data plane in process").
    let rows: Vec<esparto_bench::bench::dataplane::Row> =
        serde_json::from_str(include_str!("data/dataplane_aes256gcm16.json")).unwrap();
    let data = DataplaneData { suite: "aes256gcm16".into(), workers: 2, seconds: 0.5, runs: 5, rows };
    let dp = results::save(d, "aes256gcm16", &results::envelope(Kind::Dataplane, data)).unwrap();
    let t = results::save(d, "aes256gcm16", &results::envelope(Kind::Tunnel, lancom_8011())).unwrap();
    let (ok, out, err) = esparto(&["plan", "capacity", "--results", d.to_str().unwrap(), "--mbps", "250"]);
    assert!(ok, "{err}");
    assert!(out.contains(&format!("[1] ESP in process: {}", dp.display())), "{out}");
    assert!(out.contains(&format!("[2] end to end, UDP: {}", t.display())), "{out}");
    let r = line(&out, "aes256gcm16, ESP in process [1]");
    // imix measured directly: 2.94 cycles per byte, 2.94 / 8 MHz per Mbit/s.
    assert!(r.contains(" 2.94 ") && (r.contains(" 0.367 ") || r.contains(" 0.368 ")), "{r}");
    assert!(out.lines().any(|l| l.contains("250")), "{out}");
    // 100 Gbit/s needs more than 2 cores: marked and explained.
    assert!(r.ends_with('*') || r.contains("* "), "{r}");
    assert!(out.contains("[1] *: more than the 2 cores measured"), "{out}");
}

#[test]
fn plan_capacity_tunnels_adds_the_measured_agility_cost_and_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let d: &Path = dir.path();
    let rows: Vec<esparto_bench::bench::dataplane::Row> =
        serde_json::from_str(include_str!("data/dataplane_aes256gcm16.json")).unwrap();
    let data = DataplaneData { suite: "aes256gcm16".into(), workers: 2, seconds: 0.5, runs: 5, rows };
    results::save(d, "aes256gcm16", &results::envelope(Kind::Dataplane, data)).unwrap();
    let ds = d.to_str().unwrap();
    // No key-agility measurement: said, and the row is unchanged.
    let (ok, plain, err) = esparto(&["plan", "capacity", "--results", ds, "--size", "64"]);
    assert!(ok, "{err}");
    let (ok, out, err) = esparto(&["plan", "capacity", "--results", ds, "--size", "64", "--tunnels", "100000"]);
    assert!(ok, "{err}");
    assert!(out.contains("--tunnels 100000: no key-agility measurement of aes256gcm16"), "{out}");
    assert_eq!(line(&out, "aes256gcm16, ESP in process [1]"), line(&plain, "aes256gcm16, ESP in process [1]"));
    // With one: 1 Mpps with one SA on one worker, half that with 100,000
    // SAs, so a 64-byte packet costs twice the cycles.
    let row = |sas: usize, ratio: f64| esparto_bench::bench::dataplane::AgilityRow {
        size: 64,
        sas,
        mix: esparto_bench::bench::dataplane::SaMix::Zipf,
        workers: 1,
        suite: "aes256gcm16".into(),
        mpps: ratio,
        gbps: ratio * 64.0 * 8.0 / 1e3,
        mpps_1: 1.0,
        ratio,
        packets: 1000,
        sas_used: sas,
        out_bytes_per_sa: None,
        in_bytes_per_sa: None,
        out_heap_per_sa: None,
        in_heap_per_sa: None,
        prefetch: true,
    };
    let agility = results::AgilityData {
        suite: "aes256gcm16".into(),
        workers: 1,
        seconds: 0.3,
        runs: 5,
        rows: vec![row(1, 1.0), row(100_000, 0.5)],
    };
    let saved = results::envelope(Kind::Agility, agility);
    let a = results::save(d, "aes256gcm16", &saved).unwrap();
    let (ok, out, err) = esparto(&["plan", "capacity", "--results", ds, "--size", "64", "--tunnels", "100000"]);
    assert!(ok, "{err}");
    // One round trip with one SA: a microsecond of this clock's cycles.
    let extra = format!("100,000 tunnels: +{:.0} cycles per packet", saved.clock_hz / 1e6);
    assert!(out.contains(&extra), "{extra}: {out}");
    assert!(out.contains(&format!("from the key-agility measurement {}", a.display())), "{out}");
    assert!(!out.contains("no key-agility measurement"), "{out}");
    // More tunnels than measured: marked.
    let (ok, out, _) = esparto(&["plan", "capacity", "--results", ds, "--size", "64", "--tunnels", "1000000"]);
    assert!(ok);
    assert!(out.contains("more than the most SAs measured"), "{out}");
    let (ok, _, err) = esparto(&["plan", "capacity", "--results", ds, "--tunnels", "0"]);
    assert!(!ok && err.contains("--tunnels must be at least 1"), "{err}");
}
