//! The command line: `esparto <command>`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use clap::{Args, Parser, Subcommand};

use esparto_bench::bench::BenchCmd;
use esparto_bench::plan::PlanCmd;
use esparto_bench::plan::voip::Configured;

use crate::config;
use crate::control::{self, ClientError, Request, Response, Socket};
use crate::daemon;
use crate::render;

/// Esparto: a site-to-site IPsec gateway in userspace.
#[derive(Debug, Parser)]
#[command(
    name = "esparto",
    version,
    about = "A site-to-site IPsec gateway in userspace (ESP data plane, IKEv2)",
    long_about = None,
    after_help = "The demo and the end-to-end benchmarks (two gateways in network namespaces) are \
                  `esparto-testbed demo` and `esparto-testbed bench tunnel|setup` (`make demo`).",
    after_long_help = "Files:\n\n\
        /etc/esparto/esparto.toml: the configuration `run` reads, and where the other commands find the \
        control socket ([daemon] control) unless given -c FILE.\n\n\
        /run/esparto/: the control socket (esparto.sock) and the lock files of running daemons.\n\n\
        /var/lib/esparto/: the sequence numbers of statically keyed SAs ([daemon] state_dir).\n\n\
        The systemd unit esparto.service runs `esparto run`; `systemctl reload esparto` sends SIGHUP, \
        which reloads the configuration as `esparto reload` does. \
        Every configuration key: /usr/share/doc/esparto/CONFIG.md (docs/CONFIG.md in the source)."
)]
pub struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Measure the data plane on this machine.
    #[command(subcommand)]
    Bench(BenchCmd),
    /// Plan from this machine's saved measurements: VoIP calls per codec, cores per link.
    #[command(subcommand)]
    Plan(PlanCmd),
    /// Validate a configuration file: every error with file, line, column and key.
    CheckConfig(CheckConfigArgs),
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
    /// failed (the reason is the last line), the daemon refused, or the
    /// timeout passed.
    Up(UpDownArgs),
    /// Take a connection down (delete its IKE SA and Child SAs) and wait.
    Down(UpDownArgs),
    /// Rekey a connection's Child SAs (or, with --ike, its IKE SA), make-before-break.
    Rekey(RekeyArgs),
    /// Re-read the daemon's configuration file and apply what changed (as SIGHUP does).
    Reload(ReloadArgs),
}

/// How a client command finds the daemon: the control socket named by a
/// configuration, or given outright.
#[derive(Debug, Args)]
struct Target {
    /// The daemon's configuration: talk to the control socket its
    /// `[daemon] control` names [default: /etc/esparto/esparto.toml if it
    /// exists, else the socket /run/esparto/esparto.sock]
    #[arg(short = 'c', long = "config", value_name = "FILE")]
    config: Option<PathBuf>,
    /// The control socket itself, instead of the one a configuration names.
    #[arg(long, value_name = "SOCKET", conflicts_with = "config")]
    control: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct ReloadArgs {
    #[command(flatten)]
    target: Target,
    /// Print what the reload did as JSON.
    #[arg(long)]
    json: bool,
    /// Seconds to wait for the daemon's answer.
    #[arg(long, default_value_t = 30.0)]
    timeout: f64,
}

#[derive(Debug, Args)]
struct RekeyArgs {
    /// The connection name (`[connections.NAME]`).
    name: String,
    /// Rekey the IKE SA instead of the Child SAs.
    #[arg(long)]
    ike: bool,
    #[command(flatten)]
    target: Target,
    /// Print the answer (or the error) as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct UpDownArgs {
    /// The connection name (`[connections.NAME]`).
    name: String,
    #[command(flatten)]
    target: Target,
    /// Seconds to wait for the outcome.
    #[arg(long, default_value_t = 15.0)]
    timeout: f64,
    /// Print the outcome (or the error) as JSON; `up` prints each log line
    /// as a JSON object first.
    #[arg(long)]
    json: bool,
    /// `up`: do not show the negotiation's log lines, only the outcome.
    #[arg(long, short = 'q')]
    quiet: bool,
}

#[derive(Debug, Args)]
struct CheckConfigArgs {
    /// The configuration file (TOML).
    #[arg(default_value = config::DEFAULT_CONFIG)]
    file: PathBuf,
    /// Fail (exit 1) on warnings too.
    #[arg(long)]
    strict: bool,
}

#[derive(Debug, Args)]
struct RunArgs {
    /// The configuration file (TOML).
    #[arg(long, short = 'c', value_name = "FILE", default_value = config::DEFAULT_CONFIG)]
    config: PathBuf,
    /// Control socket path (default: daemon.control from the file, else /run/esparto/esparto.sock).
    #[arg(long, value_name = "SOCKET")]
    control: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct StatusArgs {
    #[command(flatten)]
    target: Target,
    /// Print the status as JSON.
    #[arg(long)]
    json: bool,
    /// Seconds to wait for the daemon's answer.
    #[arg(long, default_value_t = 5.0)]
    timeout: f64,
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let json = cli.command.json();
    match dispatch(cli) {
        Ok(code) => code,
        Err(e) if json => {
            // The error is the command's output: stdout, like a result.
            let kind = e.downcast_ref::<Failure>().map_or("error", |f| f.kind);
            println!("{}", serde_json::json!({ "ok": false, "error": format!("{e:#}"), "kind": kind }));
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("esparto: {e:#}");
            ExitCode::FAILURE
        }
    }
}

impl Cmd {
    /// Whether the command was asked for JSON (then its errors are JSON too).
    fn json(&self) -> bool {
        match self {
            Cmd::Status(a) | Cmd::ListConns(a) | Cmd::Sas(a) => a.json,
            Cmd::Up(a) | Cmd::Down(a) => a.json,
            Cmd::Rekey(a) => a.json,
            Cmd::Reload(a) => a.json,
            Cmd::Bench(b) => b.json(),
            Cmd::Plan(_) | Cmd::CheckConfig(_) | Cmd::Run(_) => false,
        }
    }
}

/// A client command's failure, with the `kind` its JSON form names:
/// `no_daemon` (nothing listens at the control socket), `config` (the
/// configuration that names the socket cannot be read), `timeout`,
/// `protocol` (an answer that is not one), `io` (permission denied, …),
/// `refused` (the daemon said no: an unknown connection, …), `failed`
/// (the negotiation failed), `usage` (a bad option value).
#[derive(Debug)]
pub struct Failure {
    /// The kind.
    pub kind: &'static str,
    /// What happened.
    pub message: String,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}

fn fail(kind: &'static str, message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Failure { kind, message: message.into() })
}

/// `--timeout` in (0, 600] seconds.
fn timeout_arg(secs: f64) -> Result<Duration> {
    if !(secs > 0.0 && secs <= 600.0) {
        return Err(fail("usage", "--timeout must be in (0, 600] seconds"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// The daemon's refusal of a request, or an answer of the wrong kind.
fn refused(r: Response) -> anyhow::Error {
    match r {
        Response::Error(e) => fail("refused", e),
        other => fail("protocol", format!("unexpected answer from the daemon: {other:?}")),
    }
}

fn dispatch(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Cmd::Bench(b) => b.run(),
        Cmd::Plan(p) => p.run(plan_voip_config),
        Cmd::CheckConfig(a) => check_config(a),
        Cmd::Run(a) => run(a),
        Cmd::Status(a) => status(a),
        Cmd::Sas(a) => sas(a),
        Cmd::ListConns(a) => list_conns(a),
        Cmd::Up(a) => up_down(a, true),
        Cmd::Down(a) => up_down(a, false),
        Cmd::Rekey(a) => rekey(a),
        Cmd::Reload(a) => reload(a),
    }
}

/// The routing of the network namespace we run in, for the warnings that
/// compare a file with it; if it cannot be read, a note says so and those
/// warnings are skipped.
fn host_routing() -> config::Host {
    config::Host::read().unwrap_or_else(|e| {
        eprintln!("esparto: note: cannot read this host's routes and rules ({e}); warnings about them skipped");
        config::Host::default()
    })
}

fn check_config(a: CheckConfigArgs) -> Result<ExitCode> {
    match config::load_on(&a.file, &host_routing()) {
        Ok(c) => {
            if let Err(e) = crate::daemon::check_static_keys(&c) {
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

impl Target {
    /// The control socket (see `control::locate`).
    fn socket(&self) -> Result<Socket> {
        control::locate(self.config.as_deref(), self.control.as_deref()).map_err(|e| {
            fail(
                "config",
                format!(
                    "{e}\ncannot tell where the daemon's control socket is: fix the file, or name the socket with \
                     --control SOCKET"
                ),
            )
        })
    }
}

/// One request to the daemon at `sock`; a daemon that is not there is
/// reported with the file that led to the socket.
fn ask(sock: &Socket, req: &Request, timeout: Duration) -> Result<Response> {
    control::request(&sock.path, req, timeout).map_err(|e| client_error(sock, e))
}

/// A failed exchange with the daemon, with the file that led to the socket.
fn client_error(sock: &Socket, e: ClientError) -> anyhow::Error {
    match e {
        ClientError::NoDaemon(p) => fail(
            "no_daemon",
            format!(
                "no esparto daemon at {} ({}): is esparto running? (another daemon: -c CONFIG or --control SOCKET)",
                p.display(),
                sock.source
            ),
        ),
        e @ ClientError::Timeout(_) => fail("timeout", e.to_string()),
        e @ ClientError::Protocol(_) => fail("protocol", e.to_string()),
        e @ ClientError::Io(..) => fail("io", e.to_string()),
    }
}

fn run(a: RunArgs) -> Result<ExitCode> {
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

fn status(a: StatusArgs) -> Result<ExitCode> {
    let timeout = timeout_arg(a.timeout)?;
    match ask(&a.target.socket()?, &Request::Status, timeout)? {
        Response::Status(s) if a.json => println!("{}", serde_json::to_string_pretty(&s)?),
        Response::Status(s) => print!("{}", render::status_text(&s)),
        r => return Err(refused(r)),
    }
    Ok(ExitCode::SUCCESS)
}

fn sas(a: StatusArgs) -> Result<ExitCode> {
    let sas = fetch_sas(&a.target.socket()?, timeout_arg(a.timeout)?)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&sas)?);
    } else {
        print!("{}", render::ike_sas_text(&sas));
    }
    Ok(ExitCode::SUCCESS)
}

fn list_conns(a: StatusArgs) -> Result<ExitCode> {
    match ask(&a.target.socket()?, &Request::ListConns, timeout_arg(a.timeout)?)? {
        Response::Conns(c) if a.json => println!("{}", serde_json::to_string_pretty(&c)?),
        Response::Conns(c) => print!("{}", render::conns_text(&c)),
        r => return Err(refused(r)),
    }
    Ok(ExitCode::SUCCESS)
}

fn fetch_sas(sock: &Socket, timeout: Duration) -> Result<Vec<crate::status::IkeSaStatus>> {
    match ask(sock, &Request::Sas, timeout)? {
        Response::Sas(s) => Ok(s),
        r => Err(refused(r)),
    }
}

/// What `up`/`down --json` prints last.
fn outcome_json(message: &str, sas: Option<&[crate::status::IkeSaStatus]>) -> serde_json::Value {
    match sas {
        Some(sas) => serde_json::json!({ "ok": true, "message": message, "sas": sas }),
        None => serde_json::json!({ "ok": true, "message": message }),
    }
}

/// `up`: initiate and show the negotiation's log lines as the daemon
/// streams them, ending with its outcome (as `swanctl --initiate` does);
/// with `--quiet`, or for `down`, ask and then watch `sas` until the
/// outcome.
fn up_down(a: UpDownArgs, up: bool) -> Result<ExitCode> {
    let timeout = timeout_arg(a.timeout)?;
    let sock = a.target.socket()?;
    if up && !a.quiet {
        return up_streamed(&a, &sock, timeout);
    }
    let rpc = Duration::from_secs(5);
    let req = if up { Request::Up { name: a.name.clone(), watch: false } } else { Request::Down { name: a.name.clone() } };
    let first = match ask(&sock, &req, rpc)? {
        Response::Done(msg) => msg,
        r => return Err(refused(r)),
    };
    if !a.json {
        println!("{first}");
    }
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let sas = fetch_sas(&sock, rpc)?;
        let mine: Vec<_> = sas.into_iter().filter(|s| s.connection == a.name).collect();
        let done = if up {
            mine.iter().any(|s| s.state == "established" && !s.children.is_empty())
        } else {
            mine.is_empty()
        };
        if done {
            let message = if up { format!("{}: up", a.name) } else { format!("{}: down", a.name) };
            if a.json {
                println!("{}", outcome_json(&message, up.then_some(&mine[..])));
            } else if up {
                print!("{}", render::ike_sas_text(&mine));
            } else {
                println!("{message}");
            }
            return Ok(ExitCode::SUCCESS);
        }
        if std::time::Instant::now() >= deadline {
            return Err(fail(
                "timeout",
                format!(
                    "{}: not {} after {:.0} s (see the daemon's log)",
                    a.name,
                    if up { "established" } else { "deleted" },
                    a.timeout
                ),
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `up` with the negotiation's log lines: each printed as it arrives
/// (`--json`: one JSON object per line), then the outcome and the SAs.
fn up_streamed(a: &UpDownArgs, sock: &Socket, timeout: Duration) -> Result<ExitCode> {
    use std::io::Write as _;
    let req = Request::Up { name: a.name.clone(), watch: true };
    let json = a.json;
    let mut started = false;
    let mut each = |item: control::StreamItem| {
        let mut out = std::io::stdout().lock();
        started |= matches!(item, control::StreamItem::Started { .. });
        let _ = match item {
            _ if json => writeln!(out, "{}", serde_json::to_string(&item).unwrap_or_default()),
            control::StreamItem::Started { .. } => Ok(()),
            control::StreamItem::Log { log } => writeln!(out, "{log}"),
            control::StreamItem::Dropped { dropped } => {
                writeln!(out, "… {dropped} log line(s) dropped (this client read too slowly)")
            }
            control::StreamItem::End(_) => Ok(()),
        };
        let _ = out.flush();
    };
    let end = control::stream(&sock.path, &req, timeout, &mut each).map_err(|e| match e {
        ClientError::Timeout(_) => fail(
            "timeout",
            format!("{}: no outcome after {:.0} s (see the daemon's log and `esparto sas`)", a.name, a.timeout),
        ),
        e => client_error(sock, e),
    })?;
    let message = match end {
        Response::Done(m) => m,
        // Refused before it started (an unknown connection, …), or failed.
        Response::Error(e) => return Err(fail(if started { "failed" } else { "refused" }, e)),
        r => return Err(refused(r)),
    };
    let sas: Vec<_> = fetch_sas(sock, Duration::from_secs(5))?.into_iter().filter(|s| s.connection == a.name).collect();
    if a.json {
        println!("{}", outcome_json(&message, Some(&sas)));
    } else {
        println!("{message}");
        print!("{}", render::ike_sas_text(&sas));
    }
    Ok(ExitCode::SUCCESS)
}

fn rekey(a: RekeyArgs) -> Result<ExitCode> {
    let sock = a.target.socket()?;
    match ask(&sock, &Request::Rekey { name: a.name.clone(), ike: a.ike }, Duration::from_secs(5))? {
        Response::Done(msg) if a.json => println!("{}", outcome_json(&msg, None)),
        Response::Done(msg) => println!("{msg}"),
        r => return Err(refused(r)),
    }
    Ok(ExitCode::SUCCESS)
}

/// `reload`: the daemon's report; a refused reload (its reasons on
/// stderr, or as JSON) exits 1, and so does one that applied with problems.
fn reload(a: ReloadArgs) -> Result<ExitCode> {
    match ask(&a.target.socket()?, &Request::Reload, timeout_arg(a.timeout)?)? {
        Response::Reload(r) => {
            if a.json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                print!("{}", render::reload_text(&r));
            }
            Ok(if r.problems.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
        }
        r => Err(refused(r)),
    }
}

/// `esparto plan voip --config FILE`: the suite of the file's first child
/// with an ESP proposal (its static SAs' suite, or its first ESP proposal),
/// and the family of that connection's first peer.
fn plan_voip_config(path: &std::path::Path) -> Result<Configured> {
    let cfg = config::load(path).map_err(|e| anyhow::anyhow!("{e}"))?;
    for conn in &cfg.connections {
        let outer = match conn.remote_addrs.first() {
            Some(a) if a.is_ipv6() => esparto_esp::Family::V6,
            _ => esparto_esp::Family::V4,
        };
        for child in &conn.children {
            let suite = if let Some(s) = &child.static_sas {
                Some(s.suite)
            } else {
                conn.ike
                    .as_ref()
                    .and_then(|ike| ike.children.iter().find(|c| *c.name == *child.name))
                    .and_then(|c| c.esp_proposals.first())
                    .and_then(|p| {
                        let sel = esparto_ike::proposal::Selected {
                            number: 1,
                            spi: esparto_wire::ike::Spi::U32(0),
                            encr: *p.encr.first()?,
                            prf: None,
                            integ: p.integ.first().copied(),
                            ke: None,
                            esn: false,
                        };
                        esparto_ike::keys::esp_suite(&sel)
                    })
            };
            if let Some(suite) = suite {
                let from = format!("first ESP proposal of {}.{} in {}", conn.name, child.name, path.display());
                return Ok(Configured { suite, outer, from });
            }
        }
    }
    anyhow::bail!("{}: no child with an ESP proposal", path.display())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use esparto_crypto::{EspSuite, Integ};

    use super::*;

    #[test]
    fn suite_and_family_from_a_configuration() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gw.toml");
        std::fs::write(
            &path,
            r#"
[connections.site]
local_addrs = ["2001:db8::1"]
remote_addrs = ["2001:db8::2"]
local.auth = "psk"
local.id = "@west.example"
remote.auth = "psk"
remote.id = "@east.example"
[connections.site.children.lan]
local_ts = ["10.1.0.0/16"]
remote_ts = ["10.2.0.0/16"]
esp_proposals = ["aes128-sha256", "aes256gcm16"]
[secrets.west-east]
ids = ["@west.example", "@east.example"]
secret = "a test secret of more than thirty-two characters"
"#,
        )
        .unwrap();
        let c = match plan_voip_config(&path) {
            Ok(x) => x,
            Err(e) => panic!("{e:#}"),
        };
        assert_eq!(c.suite, EspSuite::AesCbc { key_bits: 128, integ: Integ::HmacSha256_128 });
        assert_eq!(c.outer, esparto_esp::Family::V6);
        assert!(c.from.contains("site.lan"), "{}", c.from);
    }
}
