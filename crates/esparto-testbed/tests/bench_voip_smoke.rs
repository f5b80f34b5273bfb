//! `esparto-testbed bench voip` end to end, small: a few G.729 30 ms calls
//! through Esparto (and strongSwan when it is installed), `--json` and
//! `--save`. The run succeeds, its JSON parses into the report type, every
//! trial sent and received calls with a measured delay, the ramp doubled
//! as asked, the saved file is one the planner reads without setting
//! it aside, and `plot voip` redraws it. The figures themselves are not checked: the machine is
//! shared, and the trials are short.
//!
//! Needs root, iproute2, ethtool, ping (SKIP otherwise); a release build
//! makes it quick (`cargo test --release`), a debug one works.
#![allow(clippy::unwrap_used)]

use std::process::Command;

use esparto_bench::results;
use esparto_testbed::bench::callrate::RateReport;
use esparto_testbed::bench::voip::{Limit, Peer, Report};
use esparto_testbed::{missing, skip};

#[test]
fn small_run_of_both_pairs() {
    if skip("bench_voip_smoke", false) {
        return;
    }
    let swan = missing(true).is_empty();
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_esparto-testbed"));
    cmd.args([
        "bench", "voip", "--codecs", "g729-30ms", "--seconds", "0.5", "--start-calls", "8", "--max-calls", "32",
        "--workers", "2", "--json", "--save", "--results",
    ]);
    cmd.arg(dir.path());
    if swan {
        cmd.args(["--peers", "strongswan,esparto"]);
    } else {
        eprintln!("bench_voip_smoke: strongSwan is missing, measuring Esparto only");
        cmd.args(["--peers", "esparto"]);
    }
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {}: {stderr}", out.status);
    let r: Report = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("JSON: {e}\n{}", String::from_utf8_lossy(&out.stdout)));
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.codecs.len(), 1);
    let c = &r.codecs[0];
    assert_eq!((c.key.as_str(), c.ip_bytes, c.ptime_ms), ("g729-30ms", 70, 30));
    let want: Vec<Peer> = if swan { vec![Peer::Strongswan, Peer::Esparto] } else { vec![Peer::Esparto] };
    assert_eq!(c.peers.iter().map(|p| p.peer).collect::<Vec<_>>(), want);
    for p in &c.peers {
        assert!(p.error.is_none(), "{p:?}");
        let first = p.steps.first().unwrap();
        assert_eq!(first.trial.calls, 8, "the ramp starts where asked");
        for s in &p.steps {
            let t = &s.trial;
            assert!(t.calls <= 32, "{t:?}");
            // N calls for 0.5 s at 33.3 packets/s each way: about 33 N packets.
            let expect = 2.0 * f64::from(t.calls) * (1000.0 / 30.0) * 0.5;
            assert!((t.sent as f64 - expect).abs() <= expect * 0.1 + 2.0 * f64::from(t.calls), "{t:?}");
            assert!(t.received > 0 && t.delay.is_some(), "{:?}: nothing crossed: {t:?}", p.peer);
            assert!(s.mos_min >= 1.0 && s.mos_min <= 4.5);
        }
        // The ramp doubles from 8 while calls stay good; whatever ended it is recorded.
        assert!(p.zero_loss.is_some() && p.mos.is_some(), "{p:?}");
        assert!(p.mos.unwrap().calls >= p.zero_loss.unwrap().calls || p.zero_loss.unwrap().calls == 0);
    }
    assert_eq!(r.summary.len(), want.len());
    // Saved where asked, and not set aside by the planner's reader.
    let saved: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("voip-aes256gcm16-"))
        .collect();
    assert_eq!(saved.len(), 1, "{stderr}");
    let found = results::load_dir(dir.path(), &results::Machine::this()).unwrap();
    assert!(found.ignored.is_empty(), "{:?}", found.ignored);
    // The saved run redraws as the calls-per-codec chart (both pairs needed).
    if swan {
        let svg = dir.path().join("voip.svg");
        let out = Command::new(env!("CARGO_BIN_EXE_esparto-testbed"))
            .args(["plot", "voip", "--from"])
            .arg(saved[0].path())
            .arg("--svg")
            .arg(&svg)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(text.contains("<svg") && text.contains("G.729 30 ms"), "{text}");
    }
}

/// `bench voip --rates`: the zero-loss packet rate of call-like traffic at
/// two IP sizes through Esparto, saved as a call-rate result the planner
/// reads (and names), and set beside the next `bench voip` run's calls.
#[test]
fn rate_search_is_saved_for_the_plan() {
    if skip("bench_voip_smoke", false) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_esparto-testbed"))
        .args([
            "bench", "voip", "--rates", "70,200", "--peers", "esparto", "--seconds", "0.5", "--start-calls", "8",
            "--max-calls", "32", "--workers", "2", "--json", "--save", "--results",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {}: {stderr}", out.status);
    let r: RateReport = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("JSON: {e}\n{}", String::from_utf8_lossy(&out.stdout)));
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.points.iter().map(|p| (p.peer, p.ip_size, p.ptime_ms)).collect::<Vec<_>>(), [
        (Peer::Esparto, 70, 20),
        (Peer::Esparto, 200, 20)
    ]);
    for p in &r.points {
        let found = p.calls.unwrap();
        assert_eq!(p.zero_loss_pps, 2.0 * f64::from(found.calls) * 50.0, "{p:?}");
        assert_eq!(p.lower_bound, found.limit != Limit::Gateway, "{p:?}");
        // The ramp starts where asked (a loss there bisects below it).
        assert!(p.steps.iter().any(|s| s.trial.calls == 8), "{:?}", p.steps);
        assert!(p.steps.iter().all(|s| s.trial.calls <= 32), "{:?}", p.steps);
        assert!(p.steps.iter().any(|s| s.trial.received > 0 && s.trial.delay.is_some()), "nothing crossed: {p:?}");
    }
    let found = results::load_dir(dir.path(), &results::Machine::this()).unwrap();
    assert!(found.ignored.is_empty(), "{:?}", found.ignored);
    let c = found.newest_call_rate().expect("a call-rate result saved");
    assert!(c.path.file_name().unwrap().to_string_lossy().starts_with("callrate-aes256gcm16-"), "{:?}", c.path);
    let sizes: Vec<_> = c.saved.data.zero_loss.iter().map(|z| z.ip_size).collect();
    assert_eq!(sizes, [70, 200]);
    assert_eq!((c.saved.data.ptime_ms, c.saved.data.tuples), (20, r.tuples));
}
