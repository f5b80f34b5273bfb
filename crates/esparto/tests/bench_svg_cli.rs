//! `esparto bench dataplane --sas … --svg FILE` as an operator runs it: the
//! chart is written and names what it shows; a chart with nowhere to go is
//! refused before anything is measured.

#![cfg(feature = "svg")]
#![allow(clippy::unwrap_used)]


mod common;
use common::esparto;

#[test]
fn svg_chart_of_the_agility_run() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("sas.svg");
    let (ok, out, err) = esparto(&[
        "bench", "dataplane", "--sas", "1,10", "--sizes", "64,200", "--count", "640", "--runs", "1", "--workers", "1",
        "--svg", svg.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("SAs"), "the table is still printed: {out}");
    assert!(err.contains("wrote"), "{err}");
    let text = std::fs::read_to_string(&svg).unwrap();
    let doc = roxmltree::Document::parse(&text).unwrap();
    let texts: Vec<&str> = doc.descendants().filter_map(|n| n.text()).map(str::trim).collect();
    for want in ["64 B, round-robin", "200 B, round-robin", "active SA pairs per worker (log)"] {
        assert!(texts.contains(&want), "{want:?} missing from {texts:?}");
    }
    // The footnote names the suite and the command.
    assert!(texts.iter().any(|t| t.starts_with("aes256gcm16, 1 worker(s)")), "{texts:?}");
}

#[test]
fn svg_needs_a_directory_and_sas() {
    let (ok, _, err) =
        esparto(&["bench", "dataplane", "--sas", "1", "--count", "64", "--svg", "/nonexistent-esparto-dir/x.svg"]);
    assert!(!ok);
    assert!(err.contains("no directory /nonexistent-esparto-dir"), "{err}");
    assert!(!err.contains("SAs"), "refused before measuring: {err}");
    let (ok, _, err) = esparto(&["bench", "dataplane", "--count", "64", "--svg", "x.svg"]);
    assert!(!ok);
    assert!(err.contains("--sas"), "{err}");
}
