//! Where a client finds the daemon: the control socket's path, and why
//! that path.
//!
//! The daemon binds the socket its configuration names (`[daemon]
//! control`, else the default, [`Defaults::control`]) unless `esparto run
//! --control` overrides it. A client looks where the same configuration
//! says: `--control SOCKET` if given, else the socket named by `-c FILE`,
//! else the one named by the default configuration
//! ([`Defaults::config`]) if that file exists, else the default socket.
//! The defaults are the instance's with `--instance NAME`. Only `[daemon] control` is read from the file
//! ([`config::control_socket`]), so a configuration being edited while
//! the daemon runs does not lock the operator out of it. The [`Source`]
//! goes into the client's errors: an operator sees which file led to
//! which path.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::config::instance::Defaults;
use crate::config::{self, ConfigErrors};

/// Why a client uses the socket it uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Given with `--control`.
    Flag,
    /// Named by `[daemon] control` in this file.
    Named(PathBuf),
    /// The default: this file names no socket.
    Unnamed(PathBuf),
    /// The default: there is no file at the default configuration path.
    NoConfig(PathBuf),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Flag => write!(f, "given with --control"),
            Source::Named(file) => write!(f, "named by [daemon] control in {}", file.display()),
            Source::Unnamed(file) => write!(f, "the default: {} names no [daemon] control", file.display()),
            Source::NoConfig(file) => write!(f, "the default: there is no {}", file.display()),
        }
    }
}

/// A control socket and why it is the one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Socket {
    /// The socket's path.
    pub path: PathBuf,
    /// Where the path came from.
    pub source: Source,
}

/// The socket for `-c config` / `--control control` (see the module docs).
/// A configuration given with `-c` must exist; the default one may be
/// missing.
pub fn locate(config: Option<&Path>, control: Option<&Path>) -> Result<Socket, ConfigErrors> {
    let d = Defaults::current();
    locate_in(&d.config, &d.control, config, control)
}

/// [`locate`] with another default configuration path (for tests).
pub(crate) fn locate_in(
    default_config: &Path,
    default_control: &Path,
    config: Option<&Path>,
    control: Option<&Path>,
) -> Result<Socket, ConfigErrors> {
    if let Some(path) = control {
        return Ok(Socket { path: path.to_path_buf(), source: Source::Flag });
    }
    let file = match config {
        Some(f) => f,
        None if !default_config.exists() => {
            return Ok(Socket {
                path: default_control.to_path_buf(),
                source: Source::NoConfig(default_config.to_path_buf()),
            });
        }
        None => default_config,
    };
    Ok(match config::control_socket(file)? {
        Some(path) => Socket { path, source: Source::Named(file.to_path_buf()) },
        None => Socket { path: default_control.to_path_buf(), source: Source::Unnamed(file.to_path_buf()) },
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::config::DEFAULT_CONTROL;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn control_flag_wins_over_any_file() {
        let d = tempfile::tempdir().unwrap();
        let cfg = write(d.path(), "e.toml", "[daemon]\ncontrol = \"/run/x.sock\"\n");
        let s = locate_in(&cfg, Path::new(DEFAULT_CONTROL), None, Some(Path::new("/tmp/y.sock"))).unwrap();
        assert_eq!(s, Socket { path: "/tmp/y.sock".into(), source: Source::Flag });
        assert_eq!(s.source.to_string(), "given with --control");
    }

    #[test]
    fn the_socket_named_by_the_file_relative_to_its_directory() {
        let d = tempfile::tempdir().unwrap();
        let cfg = write(d.path(), "e.toml", "[daemon]\ncontrol = \"run/e.sock\"\n");
        let missing_default = d.path().join("absent.toml");
        let s = locate_in(&missing_default, Path::new(DEFAULT_CONTROL), Some(&cfg), None).unwrap();
        assert_eq!(s.path, d.path().join("run/e.sock"));
        assert_eq!(s.source, Source::Named(cfg.clone()));
        assert_eq!(s.source.to_string(), format!("named by [daemon] control in {}", cfg.display()));
    }

    #[test]
    fn the_default_configuration_is_read_when_it_exists() {
        let d = tempfile::tempdir().unwrap();
        let default = write(d.path(), "esparto.toml", "[daemon]\ncontrol = \"/run/esparto/a.sock\"\n");
        let s = locate_in(&default, Path::new(DEFAULT_CONTROL), None, None).unwrap();
        assert_eq!(s, Socket { path: "/run/esparto/a.sock".into(), source: Source::Named(default.clone()) });
        // A file without the key, and no file at all: the default socket.
        std::fs::write(&default, "[daemon]\nworkers = 2\n").unwrap();
        let s = locate_in(&default, Path::new(DEFAULT_CONTROL), None, None).unwrap();
        assert_eq!(s, Socket { path: DEFAULT_CONTROL.into(), source: Source::Unnamed(default.clone()) });
        std::fs::remove_file(&default).unwrap();
        let s = locate_in(&default, Path::new(DEFAULT_CONTROL), None, None).unwrap();
        assert_eq!(s, Socket { path: DEFAULT_CONTROL.into(), source: Source::NoConfig(default.clone()) });
        assert_eq!(s.source.to_string(), format!("the default: there is no {}", default.display()));
    }

    #[test]
    fn only_the_control_key_is_read() {
        // Errors elsewhere (an unknown key, a bad selector) do not hide the
        // socket of a daemon that runs on an earlier version of the file.
        let d = tempfile::tempdir().unwrap();
        let cfg = write(
            d.path(),
            "e.toml",
            "[daemon]\ncontrol = \"/run/e.sock\"\nworkrs = 2\n[connections.a.children.b]\nremote_ts = \"10.0.0.0/33\"\n",
        );
        assert!(config::load(&cfg).is_err());
        assert_eq!(locate_in(&cfg, Path::new(DEFAULT_CONTROL), Some(&cfg), None).unwrap().path, Path::new("/run/e.sock"));
    }

    #[test]
    fn a_missing_or_bad_file_is_an_error_naming_it() {
        let d = tempfile::tempdir().unwrap();
        let absent = d.path().join("absent.toml");
        let e = locate_in(&absent, Path::new(DEFAULT_CONTROL), Some(&absent), None).unwrap_err().to_string();
        assert!(e.contains("absent.toml") && e.contains("cannot read"), "{e}");
        let bad = write(d.path(), "bad.toml", "[daemon]\ncontrol = 7\n");
        let e = locate_in(&absent, Path::new(DEFAULT_CONTROL), Some(&bad), None).unwrap_err().to_string();
        assert!(e.contains("bad.toml:2:") && e.contains("daemon.control"), "{e}");
        let syntax = write(d.path(), "syntax.toml", "[daemon\n");
        let e = locate_in(&syntax, Path::new(DEFAULT_CONTROL), None, None).unwrap_err().to_string();
        assert!(e.contains("syntax.toml:1:") && e.contains("TOML syntax"), "{e}");
    }
}
