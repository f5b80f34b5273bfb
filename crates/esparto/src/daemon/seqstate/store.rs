//! Where the state lives: a [`Store`] holds one file's bytes and replaces
//! them durably. [`FsStore`] is the state directory; tests use a store in
//! memory that can fail or "crash" at any step.
//!
//! A replacement is durable when `save` returns: the new bytes go to a
//! temporary file that is fsync'd, renamed over the old file (atomic: a
//! reader sees the old or the new file, never a mix), and the directory
//! is fsync'd so that the rename itself survives a power loss. A crash
//! before the rename leaves the old file (and a stray temporary file,
//! overwritten next time).
//!
//! The directory is locked (`flock`) for the daemon's lifetime: two
//! daemons sharing a state directory would each continue from the same
//! number, which is the reuse the file exists to prevent. The kernel
//! drops the lock when the process ends, however it ends.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use rustix::fs::{FlockOperation, flock};
use tracing::warn;

/// The state file's name in the state directory.
pub const STATE_FILE: &str = "static-sa-seq.json";
/// The temporary file a new state is written to before the rename.
const TEMP_FILE: &str = "static-sa-seq.json.tmp";

/// One file's bytes, replaced durably.
pub(crate) trait Store {
    /// The file, for messages.
    fn path(&self) -> &Path;
    /// Its bytes, or `None` if there is no file yet.
    fn load(&mut self) -> io::Result<Option<Vec<u8>>>;
    /// Replaces it; once this returns `Ok`, a crash at any later moment
    /// leaves the new bytes.
    fn save(&mut self, bytes: &[u8]) -> io::Result<()>;
}

/// The state directory on disk.
#[derive(Debug)]
pub(crate) struct FsStore {
    dir: PathBuf,
    file: PathBuf,
    /// The directory, open: locked, and fsync'd after each rename.
    handle: File,
}

impl FsStore {
    /// Opens (creating it with mode 0700 if missing) and locks the state
    /// directory; errors name it.
    pub(crate) fn open(dir: &Path) -> Result<Self> {
        let d = dir.display();
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("state_dir {d}: cannot create it"))?;
        let meta = std::fs::metadata(dir).with_context(|| format!("state_dir {d}"))?;
        if !meta.is_dir() {
            bail!("state_dir {d}: not a directory");
        }
        if meta.permissions().mode() & 0o022 != 0 {
            warn!(state_dir = %d, "state directory is writable by others: anyone who can write there can make static SAs reuse sequence numbers");
        }
        let handle = File::open(dir).with_context(|| format!("state_dir {d}: cannot open it"))?;
        flock(&handle, FlockOperation::NonBlockingLockExclusive).map_err(|e| {
            if e == rustix::io::Errno::WOULDBLOCK {
                anyhow::anyhow!(
                    "state_dir {d} is in use by another esparto: each daemon needs a state directory of its own"
                )
            } else {
                anyhow::anyhow!("state_dir {d}: cannot lock it: {e}")
            }
        })?;
        Ok(Self { dir: dir.to_path_buf(), file: dir.join(STATE_FILE), handle })
    }
}

impl Store for FsStore {
    fn path(&self) -> &Path {
        &self.file
    }

    fn load(&mut self) -> io::Result<Option<Vec<u8>>> {
        match std::fs::read(&self.file) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn save(&mut self, bytes: &[u8]) -> io::Result<()> {
        let tmp = self.dir.join(TEMP_FILE);
        let mut f = OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, &self.file)?;
        self.handle.sync_all()
    }
}
