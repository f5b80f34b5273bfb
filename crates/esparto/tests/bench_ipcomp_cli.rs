//! `esparto bench ipcomp` as an operator runs it: the JSON rows, `--save`,
//! and bad input refused with the reason. (Speed is not checked: short
//! measurements on a shared machine.)

#![allow(clippy::unwrap_used)]


mod common;
use common::esparto;

#[test]
fn rows_per_corpus_and_size_and_a_saved_file() {
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().join("bench");
    let (ok, out, err) = esparto(&[
        "bench", "ipcomp", "--corpora", "text,random", "--sizes", "200,1400", "--seconds", "0.01", "--runs", "1",
        "--json", "--save", "--results", results.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let rows: serde_json::Value = serde_json::from_str(&out).unwrap();
    let rows = rows.as_array().unwrap();
    let got: Vec<(&str, u64)> =
        rows.iter().map(|r| (r["corpus"].as_str().unwrap(), r["size"].as_u64().unwrap())).collect();
    assert_eq!(got, [("text", 200), ("text", 1400), ("random", 200), ("random", 1400)]);
    for r in rows {
        assert!(r["compress_cycles_per_byte"].as_f64().unwrap() > 0.0, "{r}");
        let share = r["compressed_share"].as_f64().unwrap();
        if r["corpus"] == "random" {
            assert_eq!((share, r["ratio"].as_f64().unwrap()), (0.0, 1.0), "{r}");
        } else {
            assert!(share > 0.9 && r["ratio"].as_f64().unwrap() < 0.9, "{r}");
            assert!(r["decompress_cycles_per_byte"].as_f64().unwrap() > 0.0, "{r}");
        }
    }
    let files: Vec<_> = std::fs::read_dir(&results).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let saved: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&files[0]).unwrap()).unwrap();
    assert_eq!(saved["kind"], "ipcomp");
    assert_eq!(saved["data"]["rows"].as_array().unwrap().len(), 4);
    assert!(err.contains("saved "), "{err}");
}

#[test]
fn bad_input_is_refused_with_the_reason() {
    let (ok, _, err) = esparto(&["bench", "ipcomp", "--corpora", "jpeg", "--runs", "1"]);
    assert!(!ok && err.contains("unknown corpus 'jpeg'"), "{err}");
    let (ok, _, err) = esparto(&["bench", "ipcomp", "--sizes", "20", "--runs", "1", "--seconds", "0.01"]);
    assert!(!ok && err.contains("packet size 20"), "{err}");
    let (ok, _, err) = esparto(&["bench", "ipcomp", "--seconds", "0"]);
    assert!(!ok && err.contains("--seconds"), "{err}");
}
