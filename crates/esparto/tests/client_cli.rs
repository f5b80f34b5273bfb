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

/// `check-config` takes `-c FILE` as the other commands do, and with
/// `--json` says everything as one object: each error and warning with
/// file, line, column, key, message and severity.
#[test]
fn check_config_takes_dash_c_and_answers_in_json() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[daemon]\nworkrs = 2\nlog = \"debgu\"\n").unwrap();
    let path = bad.display().to_string();
    let (ok, out, err) = esparto(&["check-config", "-c", &path]);
    assert!(!ok && out.is_empty(), "{out}");
    assert!(err.contains("bad.toml:2:1: daemon.workrs: unknown key (did you mean 'workers'?)"), "{err}");
    let (ok, out, err) = esparto(&["check-config", "-c", &path, "--json"]);
    assert!(!ok && err.is_empty(), "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v["ok"], false, "{v}");
    let problems = v["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 2, "{v}");
    assert_eq!((problems[0]["line"].as_u64(), problems[0]["column"].as_u64()), (Some(2), Some(1)), "{v}");
    assert_eq!((problems[0]["key"].as_str(), problems[0]["severity"].as_str()), (Some("daemon.workrs"), Some("error")), "{v}");
    assert!(problems[1]["message"].as_str().unwrap().contains("did you mean 'debug'?"), "{v}");
    let good = dir.path().join("good.toml");
    std::fs::write(&good, "[daemon]\nworkers = 2\n").unwrap();
    let (ok, out, _) = esparto(&["check-config", &good.display().to_string(), "--json"]);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert!(ok && v["ok"] == true, "{v}");
    assert_eq!(v["problems"][0]["severity"], "warning", "a file without connections is warned about: {v}");
    assert_eq!(v["summary"]["connections"], 0, "{v}");
}

/// Help into a pipe wraps at 80 columns, and lists the operator's commands
/// before the benchmarks.
#[test]
fn help_wraps_and_puts_the_operators_commands_first() {
    for args in [&["--help"][..], &["run", "--help"], &["up", "--help"], &["check-config", "--help"]] {
        let (ok, out, _) = esparto(args);
        assert!(ok, "{args:?}");
        let widest = out.lines().map(|l| l.chars().count()).max().unwrap_or(0);
        assert!(widest <= 80, "{args:?}: a line of {widest} columns:\n{out}");
    }
    let (_, out, _) = esparto(&["--help"]);
    let at = |cmd: &str| out.find(&format!("\n  {cmd} ")).unwrap_or_else(|| panic!("{cmd} not listed:\n{out}"));
    assert!(at("run") < at("status") && at("status") < at("bench") && at("reload") < at("bench"), "{out}");
}

/// Each kind of failure has its exit status (`esparto --help` lists
/// them), and a usage error is JSON too when `--json` was asked.
#[test]
fn failures_exit_with_distinct_statuses() {
    let bin = env!("CARGO_BIN_EXE_esparto");
    let code = |args: &[&str]| std::process::Command::new(bin).args(args).output().unwrap();
    let nowhere = "/nonexistent/esparto.sock";
    let out = code(&["status", "--control", nowhere]);
    assert_eq!(out.status.code(), Some(4), "no daemon");
    let out = code(&["status", "--json", "--control", nowhere, "--timeout", "abc"]);
    assert_eq!(out.status.code(), Some(2), "usage");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((v["ok"].as_bool(), v["kind"].as_str()), (Some(false), Some("usage")), "{v}");
    assert!(v["error"].as_str().unwrap().contains("invalid value 'abc' for '--timeout"), "{v}");
    let out = code(&["status", "--control", nowhere, "--timeout", "abc"]);
    assert_eq!(out.status.code(), Some(2), "usage without --json: clap's text");
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid value 'abc'"));
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("broken.toml");
    std::fs::write(&broken, "[daemon\n").unwrap();
    let out = code(&["status", "-c", &broken.display().to_string()]);
    assert_eq!(out.status.code(), Some(6), "the file does not say where the socket is");
    let (_, help, _) = esparto(&["--help"]);
    assert!(help.contains("4 no daemon at the control socket"), "{help}");
}
