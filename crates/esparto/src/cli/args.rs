//! The arguments of the gateway's own commands: where a client command
//! finds the daemon ([`Target`]), and each command's flags.

use std::path::PathBuf;

use clap::Args;
use esparto_bench::args::Json;

use crate::config;

/// How a client command finds the daemon: the control socket named by a
/// configuration, or given outright.
#[derive(Debug, Args)]
pub(super) struct Target {
    /// The daemon's configuration: talk to the control socket its
    /// `[daemon] control` names [default: /etc/esparto/esparto.toml if it
    /// exists, else the socket /run/esparto/esparto.sock; with --instance
    /// NAME, /etc/esparto/NAME.toml and /run/esparto/NAME/esparto.sock]
    #[arg(short = 'c', long = "config", value_name = "FILE")]
    pub(super) config: Option<PathBuf>,
    /// The control socket itself, instead of the one a configuration names.
    #[arg(long, value_name = "SOCKET", conflicts_with = "config")]
    pub(super) control: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(super) struct ReloadArgs {
    #[command(flatten)]
    pub(super) target: Target,
    #[command(flatten)]
    pub(super) output: Json,
    /// Seconds to wait for the daemon's answer.
    #[arg(long, default_value_t = 30.0)]
    pub(super) timeout: f64,
}

#[derive(Debug, Args)]
pub(super) struct RekeyArgs {
    /// The connection name (`[connections.NAME]`).
    pub(super) name: String,
    /// Rekey the IKE SA instead of the Child SAs.
    #[arg(long)]
    pub(super) ike: bool,
    #[command(flatten)]
    pub(super) target: Target,
    #[command(flatten)]
    pub(super) output: Json,
}

#[derive(Debug, Args)]
#[command(mut_arg("json", |a| a.help("Print the outcome (or the error) as JSON; `up` prints each log line as a JSON object first")))]
pub(super) struct UpDownArgs {
    /// The connection name (`[connections.NAME]`).
    pub(super) name: String,
    #[command(flatten)]
    pub(super) target: Target,
    /// Seconds to wait for the outcome.
    #[arg(long, default_value_t = 15.0)]
    pub(super) timeout: f64,
    #[command(flatten)]
    pub(super) output: Json,
    /// `up`: do not show the negotiation's log lines, only the outcome.
    #[arg(long, short = 'q')]
    pub(super) quiet: bool,
    /// `up`: start another IKE SA even if one is up or being negotiated
    /// (else only the children without a Child SA are negotiated, and
    /// nothing starts if none is missing).
    #[arg(long)]
    pub(super) force: bool,
}

#[derive(Debug, Args)]
pub(super) struct CheckConfigArgs {
    /// The configuration file (TOML); `-c FILE` as for the other commands.
    #[arg(conflicts_with = "config")]
    pub(super) file: Option<PathBuf>,
    /// The configuration file (TOML).
    #[arg(long, short = 'c', value_name = "FILE")]
    pub(super) config: Option<PathBuf>,
    /// Fail (exit 1) on warnings too.
    #[arg(long)]
    pub(super) strict: bool,
    /// One JSON object on stdout: `ok`, and every error and warning as an
    /// object with `file`, `line`, `column`, `key`, `message`, `severity`.
    #[arg(long)]
    pub(super) json: bool,
}

impl CheckConfigArgs {
    /// The file to check.
    pub(super) fn path(&self) -> PathBuf {
        self.config.clone().or_else(|| self.file.clone()).unwrap_or_else(|| config::instance::Defaults::current().config)
    }
}

#[derive(Debug, Args)]
pub(super) struct RunArgs {
    /// The configuration file (TOML) [default: /etc/esparto/esparto.toml;
    /// with --instance NAME, /etc/esparto/NAME.toml]
    #[arg(long, short = 'c', value_name = "FILE")]
    pub(super) config: Option<PathBuf>,
    /// Control socket path (default: daemon.control from the file, else /run/esparto/esparto.sock).
    #[arg(long, value_name = "SOCKET")]
    pub(super) control: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(super) struct LogArgs {
    #[command(flatten)]
    pub(super) target: Target,
    #[command(flatten)]
    pub(super) output: Json,
}

#[derive(Debug, Args)]
pub(super) struct StatusArgs {
    #[command(flatten)]
    pub(super) target: Target,
    #[command(flatten)]
    pub(super) output: Json,
    /// Seconds to wait for the daemon's answer.
    #[arg(long, default_value_t = 5.0)]
    pub(super) timeout: f64,
}
