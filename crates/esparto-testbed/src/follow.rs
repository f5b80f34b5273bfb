//! A command that runs until it is stopped (`swanctl --log`, `esparto
//! log`), its output collected in a file that a test reads as it grows;
//! killed when dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{Context, Result};

/// A running follower and the file its stdout goes to.
#[derive(Debug)]
pub struct Follower {
    child: Child,
    out: PathBuf,
}

impl Follower {
    /// Starts `cmd` with its stdout into `out` (created) and its stderr
    /// discarded.
    pub fn spawn(mut cmd: Command, out: &Path) -> Result<Self> {
        let file = std::fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
        let child = cmd.stdout(file).stderr(Stdio::null()).spawn().context("starting the follower")?;
        Ok(Follower { child, out: out.to_path_buf() })
    }

    /// What it wrote so far.
    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }

    /// Whether a line it wrote contains `what`.
    pub fn has_line(&self, what: &str) -> bool {
        self.output().lines().any(|l| l.contains(what))
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
