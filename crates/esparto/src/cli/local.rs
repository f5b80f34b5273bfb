//! The commands that work from the configuration file itself, with no
//! daemon to ask: `check-config` (every error and warning of a file) and
//! `run` (the daemon, in the foreground).

use std::process::ExitCode;

use anyhow::Result;

use super::args::{CheckConfigArgs, RunArgs};
use crate::{config, daemon};

/// The routing of the network namespace we run in, for the warnings that
/// compare a file with it; if it cannot be read, a note says so and those
/// warnings are skipped.
fn host_routing() -> config::Host {
    config::Host::read().unwrap_or_else(|e| {
        eprintln!("esparto: note: cannot read this host's routes and rules ({e}); warnings about them skipped");
        config::Host::default()
    })
}

pub(super) fn check_config(a: CheckConfigArgs) -> Result<ExitCode> {
    match config::load_on(&a.file, &host_routing()) {
        Ok(c) => {
            if let Err(e) = daemon::check_static_keys(&c) {
                eprintln!("{}: {e}", a.file.display());
                return Ok(ExitCode::FAILURE);
            }
            for w in &c.warnings {
                eprintln!("{w}");
            }
            let (n, m, w) = (c.connections.len(), c.child_count(), c.warnings.len());
            let plural = |k: usize| if k == 1 { "" } else { "s" };
            let warned = if w == 0 { String::new() } else { format!(", {w} warning{}", plural(w)) };
            if a.strict && w > 0 {
                eprintln!("{}: {w} warning{} (--strict)", a.file.display(), plural(w));
                return Ok(ExitCode::FAILURE);
            }
            println!(
                "{}: OK ({n} connection{}, {m} child{}{warned})",
                a.file.display(),
                plural(n),
                if m == 1 { "" } else { "ren" }
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(errors) => {
            eprintln!("{errors}");
            let k = errors.len();
            eprintln!("{}: {k} error{}", a.file.display(), if k == 1 { "" } else { "s" });
            Ok(ExitCode::FAILURE)
        }
    }
}

pub(super) fn run(a: RunArgs) -> Result<ExitCode> {
    let refused = ExitCode::from(daemon::EXIT_REFUSED);
    if !a.config.exists() && a.config == std::path::Path::new(config::DEFAULT_CONFIG) {
        eprintln!(
            "esparto: {}: no such file: write the configuration there (docs/CONFIG.md; examples in \
             /usr/share/doc/esparto/examples) or give another with --config FILE",
            a.config.display()
        );
        return Ok(refused);
    }
    // Refuse to start on an invalid configuration: every error, then exit.
    let config = match config::load_on(&a.config, &host_routing()) {
        Ok(c) => c,
        Err(errors) => {
            eprintln!("{errors}");
            eprintln!("esparto: {}: invalid configuration, not starting", a.config.display());
            return Ok(refused);
        }
    };
    let control = a.control.unwrap_or_else(|| config.daemon.control.clone());
    match daemon::run(config, &control) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) if e.is::<daemon::Refused>() => {
            eprintln!("esparto: {e:#}");
            Ok(refused)
        }
        Err(e) => Err(e),
    }
}
