//! Instances: several daemons on one host, each with a name
//! (`esparto --instance NAME …`, the unit `esparto@NAME.service`).
//!
//! An instance changes only defaults — where the configuration is read
//! from and what it does not set: the control socket (and so the VICI
//! socket beside it), the state directory and the TUN device. What is
//! written in the file wins, as for the unnamed daemon. Resources two
//! daemons may not share are claimed at start either way
//! (`esparto_io::instance`): a clash is refused, naming the other's pid.
//!
//! The name is process-wide, set once by the command line before any
//! configuration is read, so every reader of defaults — `run`, a reload,
//! `check-config`, a client looking for the control socket — agrees.

use std::path::PathBuf;
use std::sync::OnceLock;

use super::daemon::{DEFAULT_CONTROL, DEFAULT_STATE_DIR, DEFAULT_TUN};
use super::DEFAULT_CONFIG;

/// Longest instance name: `esp-NAME` must fit a device name (15 bytes).
pub const MAX_NAME: usize = 11;

static CURRENT: OnceLock<String> = OnceLock::new();

/// What the defaults are, for the unnamed daemon or an instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Defaults {
    /// The configuration file: `/etc/esparto/NAME.toml`.
    pub config: PathBuf,
    /// `[daemon] control`: `/run/esparto/NAME/esparto.sock`.
    pub control: PathBuf,
    /// `[daemon] state_dir`: `/var/lib/esparto/NAME`.
    pub state_dir: PathBuf,
    /// `[daemon] tun`: `esp-NAME`.
    pub tun: String,
}

impl Defaults {
    /// The defaults of instance `name` (`None`: the unnamed daemon).
    pub fn of(name: Option<&str>) -> Self {
        match name {
            None => Defaults {
                config: PathBuf::from(DEFAULT_CONFIG),
                control: PathBuf::from(DEFAULT_CONTROL),
                state_dir: PathBuf::from(DEFAULT_STATE_DIR),
                tun: DEFAULT_TUN.to_string(),
            },
            Some(n) => Defaults {
                config: PathBuf::from(format!("/etc/esparto/{n}.toml")),
                control: PathBuf::from(format!("/run/esparto/{n}/esparto.sock")),
                state_dir: PathBuf::from(format!("{DEFAULT_STATE_DIR}/{n}")),
                tun: format!("esp-{n}"),
            },
        }
    }

    /// The defaults of this process's instance.
    pub fn current() -> Self {
        Self::of(current())
    }
}

/// Is `name` usable as an instance name? It goes into paths and a device
/// name: 1 to [`MAX_NAME`] of `A-Z a-z 0-9 _ -`, not starting with `-`.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok_chars = name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if name.is_empty() || name.len() > MAX_NAME || !ok_chars || name.starts_with('-') {
        return Err(format!(
            "instance name '{name}': 1 to {MAX_NAME} of A-Z a-z 0-9 _ - (not starting with -): \
             it names /etc/esparto/NAME.toml, /run/esparto/NAME/ and the TUN device esp-NAME"
        ));
    }
    Ok(())
}

/// Make this process instance `name` (once, before any configuration is
/// read).
pub fn set(name: &str) -> Result<(), String> {
    check_name(name)?;
    match CURRENT.set(name.to_string()) {
        Ok(()) => Ok(()),
        Err(_) if current() == Some(name) => Ok(()),
        Err(_) => Err(format!("the instance is already {:?}", current())),
    }
}

/// This process's instance, if it is one.
pub fn current() -> Option<&'static str> {
    CURRENT.get().map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instance_moves_every_default_and_the_unnamed_keeps_them() {
        let d = Defaults::of(Some("v6"));
        assert_eq!(d.config, PathBuf::from("/etc/esparto/v6.toml"));
        assert_eq!(d.control, PathBuf::from("/run/esparto/v6/esparto.sock"));
        assert_eq!(d.state_dir, PathBuf::from("/var/lib/esparto/v6"));
        assert_eq!(d.tun, "esp-v6");
        let u = Defaults::of(None);
        assert_eq!((u.config.to_str(), u.tun.as_str()), (Some(DEFAULT_CONFIG), DEFAULT_TUN));
    }

    #[test]
    fn names_fit_paths_and_a_device_name() {
        for good in ["v6", "site_b", "a-1", "12345678901"] {
            assert!(check_name(good).is_ok(), "{good}");
            assert!(Defaults::of(Some(good)).tun.len() <= 15);
        }
        for bad in ["", "../x", "a/b", "-x", "a b", "123456789012", "é"] {
            let e = check_name(bad).unwrap_err();
            assert!(e.contains("1 to 11 of A-Z a-z 0-9 _ -"), "{e}");
        }
    }
}
