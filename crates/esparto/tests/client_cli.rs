//! The client commands without a daemon, as an operator runs them: with
//! `--json` every error is one JSON object on stdout (`ok`, `error`,
//! `kind`) and the exit status is 1; without it, a line on stderr.
//! Needs no root: nothing listens on the sockets named here.

#![allow(clippy::unwrap_used)]


/// Runs the binary; (success, stdout, stderr).
mod common;
use common::esparto;

/// `args` fails with a JSON error of `kind` on stdout; its message.
fn json_error(args: &[&str], kind: &str) -> String {
    let (ok, out, err) = esparto(args);
    assert!(!ok, "{args:?} succeeded: {out}");
    assert!(err.is_empty(), "{args:?}: nothing on stderr with --json: {err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"));
    assert_eq!((v["ok"].as_bool(), v["kind"].as_str()), (Some(false), Some(kind)), "{args:?}: {out}");
    v["error"].as_str().unwrap().to_string()
}

#[test]
fn every_client_command_reports_a_missing_daemon_as_json() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("esparto.sock");
    let sock = sock.to_str().unwrap();
    let commands: [&[&str]; 7] =
        [&["status"], &["sas"], &["list-conns"], &["up", "site"], &["down", "site"], &["rekey", "site"], &["reload"]];
    for cmd in commands {
        let mut args = cmd.to_vec();
        args.extend(["--json", "--control", sock]);
        let e = json_error(&args, "no_daemon");
        assert!(e.starts_with(&format!("no esparto daemon at {sock}")), "{e}");
        // Without --json: the same on stderr, nothing on stdout.
        let mut plain = cmd.to_vec();
        plain.extend(["--control", sock]);
        let (ok, out, err) = esparto(&plain);
        assert!(!ok && out.is_empty(), "{cmd:?}: {out}");
        assert!(err.starts_with("esparto: no esparto daemon at "), "{cmd:?}: {err}");
    }
}

#[test]
fn a_configuration_that_names_the_socket_is_read_or_the_error_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.toml");
    let e = json_error(&["sas", "--json", "-c", missing.to_str().unwrap()], "config");
    assert!(e.contains("missing.toml"), "{e}");
    // A file that names a socket nobody listens on: the file is named.
    let cfg = dir.path().join("esparto.toml");
    std::fs::write(&cfg, "[daemon]\ncontrol = \"other.sock\"\n").unwrap();
    let e = json_error(&["status", "--json", "-c", cfg.to_str().unwrap()], "no_daemon");
    assert!(e.contains("other.sock") && e.contains("esparto.toml"), "{e}");
}

#[test]
fn a_bad_option_value_is_a_usage_error() {
    let e = json_error(&["sas", "--json", "--timeout", "0", "--control", "/nonexistent/esparto.sock"], "usage");
    assert!(e.contains("--timeout"), "{e}");
}
