//! `esparto plan`: capacity planning from this machine's own measurements.
//!
//! An operator's question is not "how many cycles per byte" but "how many
//! calls, or how many cores for my link". Two old answers show the method:
//! the FreeS/WAN performance notes turn a cost per byte into the clock a
//! link needs (MHz ≈ Mbit/s × cycles per byte ÷ 8, with a safety factor),
//! and the LANCOM techpaper turns the zero-loss packet rate at each size
//! into full-duplex VoIP calls (rate ÷ (2 × packets per second per call)),
//! with the exact ESP overhead of every codec's packet. The planner does
//! both, exactly, from figures this machine measured:
//!
//! - [`voip`]: `esparto plan voip`, per codec ([`codec`]) the voice, IP and
//!   IPsec bytes and bit rates (from the packet-overhead model,
//!   [`esparto_esp::Framing`]) and the calls the gateway carries;
//! - [`capacity`]: `esparto plan capacity`, per suite the cores a link of
//!   C Mbit/s needs for a traffic mix;
//! - [`agility`]: what many active tunnels add to a packet's cost
//!   (`plan capacity --tunnels N`);
//! - [`curve`]: figures measured at a few sizes, read at any size;
//! - [`calibrate`]: `--calibrate`, a short measurement when there is none.
//!
//! The figures are the measurements kept with `--save`, read back from
//! [`crate::results`] with the machine, commit and date checked. Every
//! figure printed names the file and date it came from, and says when it
//! was interpolated or extrapolated rather than measured.

pub mod agility;
pub mod calibrate;
pub mod capacity;
pub mod codec;
pub mod curve;
pub mod voip;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use esparto_crypto::EspSuite;

use crate::args::{Json, ResultsDir};
use crate::results;

/// `esparto plan`'s commands.
#[derive(Debug, clap::Subcommand)]
pub enum PlanCmd {
    /// Full-duplex calls per codec (G.711, G.729, G.726, G.722, Opus, AMR-WB): bytes, bit rates, calls.
    Voip(voip::Args),
    /// Cores needed for a link of C Mbit/s per suite, for a traffic mix.
    Capacity(capacity::Args),
}

impl PlanCmd {
    /// Runs the command; `read_config` reads a gateway's configuration for
    /// `plan voip --config FILE`.
    pub fn run(&self, read_config: voip::ReadConfig) -> Result<ExitCode> {
        match self {
            PlanCmd::Voip(a) => voip::main(a, read_config),
            PlanCmd::Capacity(a) => capacity::main(a),
        }
    }
}

/// The options every `plan` command takes.
#[derive(Debug, Clone, clap::Args)]
pub struct Common {
    /// Where the saved results are (`esparto bench dataplane --save`, `esparto-testbed bench tunnel --save`).
    #[command(flatten)]
    pub results: ResultsDir,
    /// Measure first, save, then plan: the data plane in process, and end to end with esparto-testbed if it is
    /// beside this binary (root; about a minute).
    #[arg(long)]
    pub calibrate: bool,
    /// The esparto-testbed binary for --calibrate (default: the one beside this binary).
    #[arg(long, value_name = "PATH")]
    pub testbed: Option<PathBuf>,
    /// How to print the plan.
    #[command(flatten)]
    pub output: Json,
}

/// Parses a suite in strongSwan syntax, or says which ones exist.
pub fn parse_suite(s: &str) -> Result<EspSuite> {
    EspSuite::from_proposal(s.trim()).ok_or_else(|| {
        let known: Vec<&str> = EspSuite::ALL.iter().map(|s| s.name()).collect();
        anyhow::anyhow!("unknown ESP suite '{s}'; known: {}", known.join(", "))
    })
}

/// `n` with thousands separators, rounded to a whole number.
pub fn thousands(n: f64) -> String {
    let s = format!("{:.0}", n.abs());
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0.0 && s != "0" { format!("-{out}") } else { out }
}

/// Reads the results directory (after measuring, with `--calibrate`) and
/// names every file set aside, on stderr.
fn load(common: &Common, suite: EspSuite) -> Result<results::Found> {
    if common.calibrate {
        let report = calibrate::run(&common.results.dir, suite, common.testbed.as_deref())?;
        eprint!("{report}");
    }
    let found = results::load_dir(&common.results.dir, &results::Machine::this())?;
    for i in &found.ignored {
        eprintln!("esparto plan: {i}");
    }
    Ok(found)
}

/// What to do when there is nothing to plan from.
fn how_to_measure(found: &results::Found) -> String {
    format!(
        "{}: measure with `esparto plan … --calibrate`, or `esparto bench dataplane --save` (in process) and \
         `esparto-testbed bench tunnel --save` (end to end, as root){}",
        if found.missing_dir {
            format!("no results directory {}", found.dir.display())
        } else {
            format!("no usable results for this machine in {}", found.dir.display())
        },
        if found.dir.as_os_str() == results::DEFAULT_DIR {
            String::new()
        } else {
            format!(" with --results {}", found.dir.display())
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0.0), "0");
        assert_eq!(thousands(999.4), "999");
        assert_eq!(thousands(1_000.0), "1,000");
        assert_eq!(thousands(1_234_567.0), "1,234,567");
        assert_eq!(thousands(-12_345.0), "-12,345");
    }

    #[test]
    fn unknown_suites_list_the_known_ones() {
        assert_eq!(parse_suite(" aes128gcm16 ").unwrap(), EspSuite::Aes128Gcm16);
        let e = parse_suite("3des-md5").unwrap_err().to_string();
        assert!(
            e.starts_with(
                "unknown ESP suite '3des-md5'; known: aes256gcm16, aes128gcm16, chacha20poly1305, aes128-sha1"
            ),
            "{e}"
        );
    }
}
