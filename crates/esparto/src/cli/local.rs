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
    let file = a.path();
    let shown = file.display().to_string();
    let as_json = |e: &config::ConfigError, severity: &str| {
        serde_json::json!({
            "file": e.file, "line": e.line, "column": e.column, "key": e.key, "message": e.message, "severity": severity,
        })
    };
    let report = |ok: bool, problems: Vec<serde_json::Value>, summary: serde_json::Value| {
        println!("{}", serde_json::json!({ "ok": ok, "file": shown, "problems": problems, "summary": summary }));
    };
    match config::load_on(&file, &host_routing()) {
        Ok(c) => {
            let warnings: Vec<serde_json::Value> = c.warnings.iter().map(|w| as_json(&w.0, "warning")).collect();
            let (n, m, w) = (c.connections.len(), c.child_count(), c.warnings.len());
            let failed = a.strict && w > 0;
            if a.json {
                report(!failed, warnings, serde_json::json!({ "connections": n, "children": m, "warnings": w }));
                return Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS });
            }
            for w in &c.warnings {
                eprintln!("{w}");
            }
            let plural = |k: usize| if k == 1 { "" } else { "s" };
            let warned = if w == 0 { String::new() } else { format!(", {w} warning{}", plural(w)) };
            if failed {
                eprintln!("{shown}: {w} warning{} (--strict)", plural(w));
                return Ok(ExitCode::FAILURE);
            }
            println!("{shown}: OK ({n} connection{}, {m} child{}{warned})", plural(n), if m == 1 { "" } else { "ren" });
            Ok(ExitCode::SUCCESS)
        }
        Err(errors) => {
            if a.json {
                report(false, errors.iter().map(|e| as_json(e, "error")).collect(), serde_json::Value::Null);
                return Ok(ExitCode::FAILURE);
            }
            eprintln!("{errors}");
            let k = errors.len();
            eprintln!("{shown}: {k} error{}", if k == 1 { "" } else { "s" });
            Ok(ExitCode::FAILURE)
        }
    }
}

pub(super) fn run(a: RunArgs) -> Result<ExitCode> {
    let refused = ExitCode::from(daemon::EXIT_REFUSED);
    let path = a.config.clone().unwrap_or_else(|| config::instance::Defaults::current().config);
    if a.config.is_none() && !path.exists() {
        eprintln!(
            "esparto: {}: no such file: write the configuration there (docs/CONFIG.md; examples in \
             /usr/share/doc/esparto/examples) or give another with --config FILE",
            path.display()
        );
        return Ok(refused);
    }
    // Refuse to start on an invalid configuration: every error, then exit.
    let config = match config::load_on(&path, &host_routing()) {
        Ok(c) => c,
        Err(errors) => {
            eprintln!("{errors}");
            eprintln!("esparto: {}: invalid configuration, not starting", path.display());
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
