//! `esparto plan … --calibrate`: a short measurement, saved, for a machine
//! that has none.
//!
//! In process, the data plane benchmark at every size with short
//! measurements (a few seconds in all). End to end needs two gateways in
//! network namespaces, which is the test bed's work, not the gateway's:
//! if `esparto-testbed` is beside this binary (or named with `--testbed`),
//! its quick `bench tunnel` runs Esparto alone (no strongSwan, no routed
//! path) at the sizes a plan reads, with this very binary as the gateways,
//! and saves into the same directory; it needs root and takes about a
//! minute. Without it, the report says the end-to-end figure is missing.
//! Either way the figures are coarser than a full run's: the plan names
//! the files, so a reader can tell.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result};
use esparto_crypto::EspSuite;

use crate::bench::dataplane::{self, Size};
use crate::results::{self, DataplaneData, Kind};

/// Sizes measured in process.
pub const SIZES: [Size; 7] = [
    Size::Fixed(64),
    Size::Fixed(128),
    Size::Fixed(256),
    Size::Fixed(512),
    Size::Fixed(1024),
    Size::Fixed(1420),
    Size::Imix,
];
/// Seconds per in-process measurement (six per size).
pub const SECONDS: f64 = 0.2;
/// Inner IP sizes of the end-to-end zero-loss search.
pub const TUNNEL_SIZES: &str = "64,128,256,512,1024,1400";
/// The test bed's executable.
pub const TESTBED: &str = "esparto-testbed";

/// What a calibration did, for the operator.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// One line per step.
    pub lines: Vec<String>,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for l in &self.lines {
            writeln!(f, "calibrate: {l}")?;
        }
        Ok(())
    }
}

/// The test bed: `explicit`, else the one beside this executable.
fn testbed(explicit: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = explicit {
        return Some(p.to_path_buf());
    }
    let exe = std::env::current_exe().ok()?;
    let p = exe.parent()?.join(TESTBED);
    p.is_file().then_some(p)
}

/// Measures `suite` in process and (with the test bed) end to end, and
/// saves both into `dir`.
pub fn run(dir: &Path, suite: EspSuite, explicit_testbed: Option<&Path>) -> Result<Report> {
    let mut report = Report::default();
    let workers = esparto_io::cpu::default_workers();
    eprintln!("calibrate: {suite} in process, {} sizes, {workers} workers …", SIZES.len());
    let opts = dataplane::Options { suite, sizes: SIZES.to_vec(), workers, seconds: SECONDS, runs: 1, count: None };
    let rows = dataplane::run(&opts).context("measuring the data plane in process")?;
    let data = DataplaneData { suite: suite.name().into(), workers, seconds: SECONDS, runs: 1, rows };
    let path = results::save(dir, suite.name(), &results::envelope(Kind::Dataplane, data))?;
    report.lines.push(format!("in process: saved {}", path.display()));

    let Some(tb) = testbed(explicit_testbed) else {
        report.lines.push(format!(
            "end to end: not measured ({TESTBED} is not beside this binary; --testbed PATH names it): the end-to-end \
             figure is missing"
        ));
        return Ok(report);
    };
    let exe = std::env::current_exe().context("finding this executable")?;
    eprintln!("calibrate: end to end with {} (quick, Esparto only; as root, about a minute) …", tb.display());
    let status = Command::new(&tb)
        .arg("--esparto")
        .arg(&exe)
        .args(["bench", "tunnel", "--quick", "--skip-strongswan", "--skip-routed", "--flows", "--sizes", TUNNEL_SIZES])
        .arg("--save")
        .arg("--results")
        .arg(dir)
        // Its tables go with its progress, to stderr: stdout is the plan's.
        .stdout(Stdio::from(std::io::stderr()))
        .status()
        .with_context(|| format!("running {}", tb.display()))?;
    if status.success() {
        let suite_note =
            if suite == EspSuite::Aes256Gcm16 { String::new() } else { " (the test bed measures aes256gcm16)".into() };
        report.lines.push(format!("end to end: saved by {} into {}{suite_note}", tb.display(), dir.display()));
    } else {
        report.lines.push(format!("end to end: {} failed ({status}): the end-to-end figure is missing", tb.display()));
    }
    Ok(report)
}
