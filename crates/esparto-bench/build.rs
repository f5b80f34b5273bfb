//! Records the commit the binary is built from (`ESPARTO_COMMIT`), which
//! saved benchmark results carry so that a figure can be traced to the code
//! that produced it.
//!
//! `ESPARTO_COMMIT` set in the build's environment wins (a packager building
//! from a tarball); otherwise `git rev-parse HEAD`, rerun whenever HEAD or
//! the branch it names moves; without git, "unknown".

use std::path::PathBuf;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!s.is_empty()).then_some(s)
}

fn main() {
    println!("cargo:rerun-if-env-changed=ESPARTO_COMMIT");
    println!("cargo:rerun-if-changed=build.rs");
    if let Ok(c) = std::env::var("ESPARTO_COMMIT") {
        println!("cargo:rustc-env=ESPARTO_COMMIT={c}");
        return;
    }
    let commit = git(&["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".into());
    // HEAD, its reflog, the ref it points at and packed refs: a commit,
    // checkout or reset changes one of them (paths resolved by git, so
    // worktrees work). Only existing files: cargo reruns a script on every
    // build while a path it watches is missing.
    let mut watch = vec!["HEAD".to_string(), "logs/HEAD".to_string(), "packed-refs".to_string()];
    if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watch.push(r);
    }
    for w in watch {
        if let Some(p) = git(&["rev-parse", "--path-format=absolute", "--git-path", &w]) {
            let p = PathBuf::from(p);
            if p.exists() {
                println!("cargo:rerun-if-changed={}", p.display());
            }
        }
    }
    println!("cargo:rustc-env=ESPARTO_COMMIT={commit}");
}
