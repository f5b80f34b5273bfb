//! A private scratch directory for one gateway's files (configuration,
//! sockets, pid file, logs): `/tmp/esparto-tb-<pid>-<n>-<role>`, mode 0700,
//! removed on drop unless [`WorkDir::keep`] was called — a harness calls it
//! when something failed, so the logs survive for the report.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use anyhow::{Context, Result};

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A scratch directory owned by this process.
#[derive(Debug)]
pub struct WorkDir {
    path: PathBuf,
    keep: AtomicBool,
}

/// Where scratch directories go: `$ESPARTO_TESTBED_DIR`, else the system's
/// temporary directory.
pub fn base_dir() -> PathBuf {
    std::env::var_os("ESPARTO_TESTBED_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
}

/// The name prefix of process `pid`'s scratch directories.
pub fn prefix(pid: u32) -> String {
    format!("esparto-tb-{pid}-")
}

/// `ESPARTO_TESTBED_KEEP` is set: no scratch directory is ever removed.
pub fn keep_all() -> bool {
    std::env::var_os("ESPARTO_TESTBED_KEEP").is_some()
}

impl WorkDir {
    /// Create `/tmp/esparto-tb-<pid>-<n>-<role>` (or under `$ESPARTO_TESTBED_DIR`).
    pub fn new(role: &str) -> Result<Self> {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = base_dir().join(format!("{}{n}-{role}", prefix(std::process::id())));
        std::fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700))?;
        Ok(Self {
            path,
            keep: AtomicBool::new(false),
        })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A path inside the directory.
    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Keep the directory (and its logs) when this is dropped.
    pub fn keep(&self) {
        self.keep.store(true, Ordering::Relaxed);
    }

    /// Whether the directory will be kept.
    pub fn kept(&self) -> bool {
        self.keep.load(Ordering::Relaxed)
    }
}

/// Remove this process's scratch directories (`esparto-tb-<pid>-*`), for
/// when a signal ends the process before `Drop` runs. Kept if
/// `ESPARTO_TESTBED_KEEP` is set. Returns how many were removed.
pub(super) fn sweep_own() -> usize {
    if keep_all() {
        return 0;
    }
    of(std::process::id())
        .iter()
        .filter(|p| std::fs::remove_dir_all(p).is_ok())
        .count()
}

/// Process `pid`'s scratch directories.
pub fn of(pid: u32) -> Vec<PathBuf> {
    let prefix = prefix(pid);
    let Ok(entries) = std::fs::read_dir(base_dir()) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect()
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if !self.kept() && !keep_all() {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn removed_unless_kept() {
        let a = WorkDir::new("unit-a").unwrap();
        let pa = a.path().to_path_buf();
        std::fs::write(a.join("f"), b"x").unwrap();
        let b = WorkDir::new("unit-b").unwrap();
        let pb = b.path().to_path_buf();
        assert_ne!(pa, pb);
        b.keep();
        drop(a);
        drop(b);
        if std::env::var_os("ESPARTO_TESTBED_KEEP").is_none() {
            assert!(!pa.exists());
        }
        assert!(pb.exists());
        std::fs::remove_dir_all(pb).unwrap();
    }
}
