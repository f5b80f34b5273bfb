//! `esparto bench dataplane --sas` as an operator runs it, with a packet
//! count instead of a duration: the rows, their counts, and bad input.

#![allow(clippy::unwrap_used)]


mod common;
use common::esparto;

#[test]
fn sas_rows_carry_every_packet_over_every_sa() {
    let (ok, out, err) = esparto(&[
        "bench", "dataplane", "--sas", "3,1", "--sa-mix", "zipf", "--sizes", "64,200", "--count", "640", "--runs", "1",
        "--workers", "1", "--json",
    ]);
    assert!(ok, "{err}");
    let rows: serde_json::Value = serde_json::from_str(&out).unwrap();
    let rows = rows.as_array().unwrap();
    let got: Vec<(u64, u64)> =
        rows.iter().map(|r| (r["sas"].as_u64().unwrap(), r["size"].as_u64().unwrap())).collect();
    assert_eq!(got, [(1, 64), (1, 200), (3, 64), (3, 200)]);
    for r in rows {
        assert_eq!(r["packets"], 640);
        assert_eq!(r["mix"], "zipf");
        assert!(r["sas_used"].as_u64().unwrap() >= 1 && r["sas_used"].as_u64().unwrap() <= r["sas"].as_u64().unwrap());
        assert!(r["ratio"].as_f64().unwrap() > 0.0);
        assert!(r["out_bytes_per_sa"].is_null());
    }
}

#[test]
fn bad_sas_input_is_refused_with_the_reason() {
    let (ok, _, err) = esparto(&["bench", "dataplane", "--sas", "4", "--sa-mix", "pareto", "--count", "64"]);
    assert!(!ok);
    assert!(err.contains("round-robin, zipf"), "{err}");
    let (ok, _, err) = esparto(&["bench", "dataplane", "--sas", "0", "--count", "64"]);
    assert!(!ok);
    assert!(err.contains("between 1 and"), "{err}");
    let (ok, _, err) = esparto(&["bench", "dataplane", "--sas", "2", "--sizes", "imix", "--count", "64"]);
    assert!(!ok);
    assert!(err.contains("fixed sizes only"), "{err}");
}

#[test]
fn saved_agility_results_are_kept_and_not_set_aside_by_plan() {
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().to_str().unwrap();
    let (ok, _, err) = esparto(&[
        "bench", "dataplane", "--sas", "2", "--sizes", "64", "--seconds", "0.01", "--runs", "1", "--workers", "1",
        "--save", "--results", results,
    ]);
    assert!(ok, "{err}");
    let files: Vec<String> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(files[0].starts_with("agility-aes256gcm16-"), "{files:?}");
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join(&files[0])).unwrap()).unwrap();
    assert_eq!(saved["kind"], "agility");
    // One row per listed N; one SA is measured beside it (`mpps_1`).
    assert_eq!(saved["data"]["rows"].as_array().unwrap().len(), 1);
    assert_eq!(saved["data"]["rows"][0]["sas"], 2);
    assert!(saved["data"]["rows"][0]["mpps_1"].as_f64().unwrap() > 0.0);
    // plan reads the directory without naming the file as set aside.
    let (_, out, err) = esparto(&["plan", "capacity", "--results", results]);
    assert!(!err.contains(&files[0]) && !out.contains(&files[0]), "{out}\n{err}");
}
