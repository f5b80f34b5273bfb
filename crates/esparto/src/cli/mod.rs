//! The command line: `esparto <command>`.
//!
//! The command tree is defined here ([`Cli`]) and each command's work
//! lives with its kind:
//!
//! - `args`: the arguments of the gateway's own commands;
//! - `client`: the commands that talk to a running daemon over its
//!   control socket (`status`, `sas`, `list-conns`, `up`, `down`, `rekey`,
//!   `reload`), and their errors ([`Failure`]);
//! - `local`: the commands that work from the configuration file itself
//!   (`check-config`, `run`);
//! - `plan`: what `plan voip --config` reads of a configuration.
//!
//! `bench` and `plan` are `esparto-bench`'s commands, their arguments and
//! their drivers included; this module only places them in the tree.
//! A command asked for `--json` prints its errors as JSON too, on stdout.

mod args;
mod client;
mod local;
mod plan;

use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};
use esparto_bench::bench::BenchCmd;
use esparto_bench::plan::PlanCmd;

use args::{CheckConfigArgs, LogArgs, RekeyArgs, ReloadArgs, RunArgs, StatusArgs, UpDownArgs};
pub use client::Failure;

/// Esparto: a site-to-site IPsec gateway in userspace.
#[derive(Debug, Parser)]
#[command(
    name = "esparto",
    version,
    about = "A site-to-site IPsec gateway in userspace (ESP data plane, IKEv2)",
    long_about = None,
    after_help = "strongSwan's swanctl drives the daemon too, over its VICI socket: `swanctl --list-certs`, \
                  `--list-pols`, `--list-algs`, `--counters`, `--load-all` … `--uri \
                  unix:///run/esparto/charon.vici`.\n\n\
                  The demo and the end-to-end benchmarks (two gateways in network namespaces) are \
                  `esparto-testbed demo` and `esparto-testbed bench tunnel|setup` (`make demo`).",
    after_long_help = "Files:\n\n\
        /etc/esparto/esparto.toml: the configuration `run` reads, and where the other commands find the \
        control socket ([daemon] control) unless given -c FILE.\n\n\
        /run/esparto/: the control socket (esparto.sock) and the lock files of running daemons.\n\n\
        /etc/esparto/NAME.toml, /run/esparto/NAME/, /var/lib/esparto/NAME/: those of instance NAME \
        (--instance NAME; the unit esparto@NAME.service).\n\n\
        /var/lib/esparto/: the sequence numbers of statically keyed SAs ([daemon] state_dir).\n\n\
        The systemd unit esparto.service runs `esparto run`; `systemctl reload esparto` runs `esparto \
        reload`, which fails with the errors if the file is refused (SIGHUP reloads too, without an answer). \
        Every configuration key: /usr/share/doc/esparto/docs/CONFIG.md; troubleshooting: docs/OPERATIONS.md there.\n\n\
        Exit status of the client commands (status, sas, list-conns, up, down, rekey, reload, log): 0 done; 1 \
        failed (a negotiation that failed, a reload applied with problems); 2 usage; 3 refused by the daemon \
        (an unknown connection, an invalid file to reload, …); 4 no daemon at the control socket; 5 no \
        answer or outcome within --timeout; 6 the configuration does not say where the control socket is; 7 \
        a broken exchange with the daemon. With --json the error is one object on stdout, its `kind` naming \
        the case."
)]
pub struct Cli {
    /// Be, or talk to, the daemon instance NAME: its configuration is
    /// /etc/esparto/NAME.toml, and what that file does not set defaults to
    /// the control socket /run/esparto/NAME/esparto.sock (VICI beside it),
    /// the TUN device esp-NAME and the state directory /var/lib/esparto/NAME
    /// (the unit esparto@NAME.service runs `esparto --instance NAME run`).
    #[arg(long, global = true, value_name = "NAME")]
    instance: Option<String>,
    #[command(subcommand)]
    command: Cmd,
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    use clap::{CommandFactory, FromArgMatches};
    use std::io::IsTerminal;
    // Help wraps to the terminal, or to 80 columns into a pipe or a file.
    let mut cmd = Cli::command();
    if !std::io::stdout().is_terminal() {
        cmd = cmd.term_width(80);
    }
    let usage = |e: clap::Error| -> ExitCode {
        // With --json a usage error is JSON too, like every other error.
        let asked_json = std::env::args_os().any(|a| a == "--json");
        match e.kind() {
            clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => e.exit(),
            _ if asked_json => {
                let text = e.render().to_string();
                let first = text.lines().next().unwrap_or_default().trim_start_matches("error: ");
                println!("{}", serde_json::json!({ "ok": false, "error": first, "kind": "usage" }));
                ExitCode::from(client::exit_status("usage"))
            }
            _ => e.exit(),
        }
    };
    let cli = match cmd.try_get_matches().and_then(|m| Cli::from_arg_matches(&m)) {
        Ok(c) => c,
        Err(e) => return usage(e),
    };
    let json = cli.command.json();
    if let Some(name) = &cli.instance {
        if let Err(e) = crate::config::instance::set(name) {
            let e = clap::Error::raw(clap::error::ErrorKind::InvalidValue, format!("--instance: {e}\n"));
            return usage(e.with_cmd(&Cli::command()));
        }
    }
    match dispatch(cli) {
        Ok(code) => code,
        Err(e) => {
            let kind = e.downcast_ref::<Failure>().map_or("error", |f| f.kind);
            if json {
                // The error is the command's output: stdout, like a result.
                println!("{}", serde_json::json!({ "ok": false, "error": format!("{e:#}"), "kind": kind }));
            } else {
                eprintln!("esparto: {e:#}");
            }
            ExitCode::from(client::exit_status(kind))
        }
    }
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run the gateway (in the foreground).
    ///
    /// Reads the configuration (refusing to start on any error), checks its
    /// capabilities (CAP_NET_ADMIN for the TUN device, routes and policy
    /// rules; CAP_NET_BIND_SERVICE for UDP ports below
    /// net.ipv4.ip_unprivileged_port_start, i.e. 500; CAP_BPF, if
    /// unprivileged eBPF is disabled, for the TUN steering program), then
    /// claims its TUN device and ports, creates them, starts its workers and
    /// IKE, and keeps only CAP_NET_ADMIN. Under systemd (NOTIFY_SOCKET set)
    /// it reports READY=1 once all that is done, RELOADING=1 and READY=1
    /// around each reload, and STOPPING=1 when it stops. SIGTERM and SIGINT
    /// stop it cleanly (IKE SAs deleted with the peers first); SIGHUP
    /// reloads the configuration file, as `esparto reload` does.
    ///
    /// Exit status: 0 after SIGTERM or SIGINT; 78 if it refused to start
    /// before setting anything up (the configuration is missing or
    /// invalid, or a capability is missing), which the systemd unit does
    /// not restart on; 1 on any other failure.
    Run(RunArgs),
    /// Show the running daemon's workers and SAs (packets, bytes, drops by reason).
    Status(StatusArgs),
    /// List the loaded connections and children (addresses, proposals, selectors, start actions).
    ListConns(StatusArgs),
    /// List IKE SAs and their Child SAs (SPIs, algorithms, ages, bytes, workers).
    Sas(StatusArgs),
    /// Bring a connection up (IKE) and wait until its Child SA is installed,
    /// showing the negotiation's log lines as they happen (as `swanctl
    /// --initiate` does; --quiet hides them).
    ///
    /// Exit status: 0 once a Child SA is installed; 1 if the negotiation
    /// failed (the reason is the last line); 3 if the daemon refused (an
    /// unknown connection, or one that is up already); 5 if the timeout
    /// passed; the others as `esparto --help` lists them.
    Up(UpDownArgs),
    /// Take a connection down (delete its IKE SA and Child SAs) and wait.
    Down(UpDownArgs),
    /// Rekey a connection's Child SAs (or, with --ike, its IKE SA), make-before-break.
    Rekey(RekeyArgs),
    /// Re-read the daemon's configuration file and apply what changed (as SIGHUP does).
    Reload(ReloadArgs),
    /// Follow the running daemon's log, and its SAs coming up, going down
    /// and being rekeyed, as they happen (as `swanctl --log` does), until
    /// interrupted.
    ///
    /// The lines are those the daemon's `[daemon] log` filter lets
    /// through. A client that reads too slowly loses lines, counted.
    Log(LogArgs),
    /// Validate a configuration file: every error with file, line, column and key.
    CheckConfig(CheckConfigArgs),
    /// Measure the data plane on this machine.
    #[command(subcommand)]
    Bench(BenchCmd),
    /// Plan from this machine's saved measurements: VoIP calls per codec, cores per link.
    #[command(subcommand)]
    Plan(PlanCmd),
}

impl Cmd {
    /// Whether the command was asked for JSON (then its errors are JSON too).
    fn json(&self) -> bool {
        match self {
            Cmd::Status(a) | Cmd::ListConns(a) | Cmd::Sas(a) => a.output.json,
            Cmd::Up(a) | Cmd::Down(a) => a.output.json,
            Cmd::Rekey(a) => a.output.json,
            Cmd::Reload(a) => a.output.json,
            Cmd::Log(a) => a.output.json,
            Cmd::Bench(b) => b.json(),
            Cmd::CheckConfig(a) => a.json,
            Cmd::Plan(_) | Cmd::Run(_) => false,
        }
    }
}

fn dispatch(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Cmd::Bench(b) => b.run(),
        Cmd::Plan(p) => p.run(plan::voip_config),
        Cmd::CheckConfig(a) => local::check_config(a),
        Cmd::Run(a) => local::run(a),
        Cmd::Status(a) => client::status(a),
        Cmd::Sas(a) => client::sas(a),
        Cmd::ListConns(a) => client::list_conns(a),
        Cmd::Up(a) => client::up_down(a, true),
        Cmd::Down(a) => client::up_down(a, false),
        Cmd::Rekey(a) => client::rekey(a),
        Cmd::Reload(a) => client::reload(a),
        Cmd::Log(a) => client::log(a),
    }
}
