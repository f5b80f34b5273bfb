//! What the command-line tests share: running the `esparto` binary.

#![allow(clippy::unwrap_used)]

use std::process::Command;

/// Runs `esparto ARGS`: whether it exited 0, its stdout, its stderr.
pub(crate) fn esparto(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_esparto")).args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
