//! The command line: `esparto <command>`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use clap::{Args, Parser, Subcommand};

use crate::bench::dataplane;
use crate::config;
use crate::control::{self, ClientError, Request, Response, Socket};
use crate::daemon;
use crate::plan::{self, results};
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

#[derive(Debug, Subcommand)]
enum PlanCmd {
    /// Full-duplex calls per codec (G.711, G.729, G.726, G.722, Opus, AMR-WB): bytes, bit rates, calls.
    Voip(plan::voip::Args),
    /// Cores needed for a link of C Mbit/s per suite, for a traffic mix.
    Capacity(plan::capacity::Args),
}

#[derive(Debug, Subcommand)]
enum BenchCmd {
    /// In-process ESP throughput against the raw cipher, by packet size and worker count.
    Dataplane(DataplaneArgs),
    /// IPComp's DEFLATE in process, per corpus and packet size: cycles per byte, ratio, share compressed.
    Ipcomp(IpcompArgs),
}

#[derive(Debug, Args)]
struct IpcompArgs {
    /// Corpora, comma separated: text, json, records, random [default: all four; with --file: none].
    #[arg(long, value_delimiter = ',')]
    corpora: Vec<String>,
    /// Also measure this file's bytes (a sample of your own traffic) as corpus "file".
    #[arg(long, value_name = "PATH")]
    file: Option<std::path::PathBuf>,
    /// Inner packet sizes in bytes (IP header included), comma separated.
    #[arg(long, value_delimiter = ',', default_values_t = crate::bench::ipcomp::DEFAULT_SIZES)]
    sizes: Vec<usize>,
    /// Seconds per measurement (compress and decompress each).
    #[arg(long, default_value_t = 0.5)]
    seconds: f64,
    /// Measurements per figure; the median is reported.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Print a JSON array instead of the table.
    #[arg(long)]
    json: bool,
    /// Save the results (with this machine, the commit and the date).
    #[arg(long)]
    save: bool,
    /// Directory --save writes into.
    #[arg(long, value_name = "DIR", default_value = results::DEFAULT_DIR)]
    results: PathBuf,
}

#[derive(Debug, Args)]
struct DataplaneArgs {
    /// ESP suite in strongSwan syntax: aes256gcm16, aes128gcm16, chacha20poly1305, aes256-sha256, …
    #[arg(long, default_value = "aes256gcm16")]
    suite: String,
    /// Inner packet sizes in bytes, comma separated; "imix" for the simple IMIX mix
    /// [default: 64,128,256,512,1024,1420,imix; with --sas: 64,1420].
    #[arg(long, value_delimiter = ',')]
    sizes: Vec<String>,
    /// Key agility: spread the packets over N active SA pairs per worker (N policies,
    /// groups and inbound SAs), each N measured beside one SA; comma separated.
    #[arg(long, value_delimiter = ',', value_name = "N")]
    sas: Vec<usize>,
    /// With --sas: how packets are spread over the SAs, "round-robin" or "zipf" (Zipf, s = 1).
    #[arg(long, default_value = "round-robin", requires = "sas")]
    sa_mix: String,
    /// With --sas: do not prefetch each packet's SA state ahead in the batch
    /// (to measure what prefetching buys).
    #[arg(long, requires = "sas")]
    no_prefetch: bool,
    /// Worker threads (default: the CPUs this process may use).
    #[arg(long)]
    workers: Option<usize>,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 0.5)]
    seconds: f64,
    /// Measurements per figure; the median is reported.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Exactly this many packets per thread and measurement instead of
    /// --seconds (for instruction counts: `valgrind --tool=callgrind`).
    #[arg(long)]
    count: Option<u64>,
    /// Print a JSON array instead of the table.
    #[arg(long)]
    json: bool,
    /// Save the results (with this machine, the commit and the date) for `esparto plan`.
    #[arg(long)]
    save: bool,
    /// Directory --save writes into.
    #[arg(long, value_name = "DIR", default_value = results::DEFAULT_DIR)]
    results: PathBuf,
    /// With --sas: also draw the rate (Mpps, Gbit/s) against the number of
    /// active SAs, one line per packet size, as an SVG chart into FILE.
    #[arg(long, value_name = "FILE", requires = "sas")]
    svg: Option<PathBuf>,
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
            Cmd::Bench(BenchCmd::Dataplane(a)) => a.json,
            Cmd::Bench(BenchCmd::Ipcomp(a)) => a.json,
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
        Cmd::Bench(BenchCmd::Dataplane(a)) => bench_dataplane(a),
        Cmd::Bench(BenchCmd::Ipcomp(a)) => bench_ipcomp(a),
        Cmd::Plan(PlanCmd::Voip(a)) => plan::voip::main(&a),
        Cmd::Plan(PlanCmd::Capacity(a)) => plan::capacity::main(&a),
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

fn default_workers() -> usize {
    esparto_io::cpu::allowed_cpus().map(|c| c.len()).unwrap_or(1).max(1)
}

/// Sizes `bench dataplane` measures unless told.
const DEFAULT_SIZES: &str = "64,128,256,512,1024,1420,imix";
/// Sizes `bench dataplane --sas` measures unless told.
const DEFAULT_AGILITY_SIZES: &str = "64,1420";

fn bench_agility(a: DataplaneArgs, suite: esparto_crypto::EspSuite) -> Result<ExitCode> {
    let sizes = if a.sizes.is_empty() { DEFAULT_AGILITY_SIZES.split(',').map(str::to_string).collect() } else { a.sizes };
    let sizes = sizes
        .iter()
        .map(|s| match dataplane::Size::parse(s)? {
            dataplane::Size::Fixed(n) => Ok(n),
            dataplane::Size::Imix => anyhow::bail!("--sas measures fixed sizes only, not imix"),
        })
        .collect::<Result<Vec<_>>>()?;
    if !(a.seconds > 0.0 && a.seconds <= 600.0) {
        anyhow::bail!("--seconds must be in (0, 600]");
    }
    if let Some(&n) = a.sas.iter().find(|&&n| n == 0 || n > dataplane::MAX_SAS) {
        anyhow::bail!("--sas {n}: must be between 1 and {}", dataplane::MAX_SAS);
    }
    let workers = a.workers.unwrap_or_else(default_workers);
    if workers == 0 || workers > 1024 {
        anyhow::bail!("--workers must be between 1 and 1024");
    }
    let opts = dataplane::AgilityOptions {
        suite,
        sizes,
        sas: a.sas,
        mix: dataplane::SaMix::parse(&a.sa_mix)?,
        workers,
        seconds: a.seconds,
        runs: a.runs,
        count: a.count,
        prefetch: !a.no_prefetch,
    };
    if let Some(path) = &a.svg {
        svg_writable(path)?;
    }
    let rows = dataplane::run_agility(&opts)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        dataplane::print_agility(&rows);
    }
    if let Some(path) = &a.svg {
        agility_chart(path, &rows)?;
        eprintln!("wrote {}", path.display());
    }
    if a.save {
        if a.count.is_some() {
            anyhow::bail!("--save: a --count run is for instruction counts, not for planning; not saved");
        }
        let data = results::AgilityData { suite: suite.name().into(), workers, seconds: a.seconds, runs: a.runs, rows };
        let path = results::save(&a.results, suite.name(), &results::envelope(results::Kind::Agility, data))?;
        eprintln!("saved {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// Fails before a measurement, not after, if the chart has nowhere to go.
#[cfg(feature = "svg")]
fn svg_writable(path: &std::path::Path) -> Result<()> {
    crate::plot::check_destination(path)
}

#[cfg(not(feature = "svg"))]
fn svg_writable(_: &std::path::Path) -> Result<()> {
    anyhow::bail!("--svg: this esparto was built without charts (cargo feature \"svg\")")
}

#[cfg(feature = "svg")]
fn agility_chart(path: &std::path::Path, rows: &[dataplane::AgilityRow]) -> Result<()> {
    let Some(first) = rows.first() else { anyhow::bail!("--svg: nothing was measured") };
    let (_, date) = results::now();
    let note = format!(
        "{}, {} worker(s); {}; load average {}; {date}; {}",
        first.suite,
        first.workers,
        results::Machine::this().cpu_model,
        results::load_average(),
        std::env::args().collect::<Vec<_>>().join(" ")
    );
    crate::plot::active_sas(path, "Key agility: ESP rate against active SAs (in process)", &note, &crate::plot::agility_series(rows))
}

#[cfg(not(feature = "svg"))]
fn agility_chart(_: &std::path::Path, _: &[dataplane::AgilityRow]) -> Result<()> {
    anyhow::bail!("--svg: this esparto was built without charts (cargo feature \"svg\")")
}

fn bench_dataplane(a: DataplaneArgs) -> Result<ExitCode> {
    let suite = plan::parse_suite(&a.suite)?;
    if !a.sas.is_empty() {
        return bench_agility(a, suite);
    }
    let sizes = if a.sizes.is_empty() { DEFAULT_SIZES.split(',').map(str::to_string).collect() } else { a.sizes.clone() };
    let sizes = sizes.iter().map(|s| dataplane::Size::parse(s)).collect::<Result<Vec<_>>>()?;
    if !(a.seconds > 0.0 && a.seconds <= 600.0) {
        anyhow::bail!("--seconds must be in (0, 600]");
    }
    let workers = a.workers.unwrap_or_else(default_workers);
    if workers == 0 || workers > 1024 {
        anyhow::bail!("--workers must be between 1 and 1024");
    }
    let opts = dataplane::Options { suite, sizes, workers, seconds: a.seconds, runs: a.runs, count: a.count };
    let rows = dataplane::run(&opts)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        dataplane::print_table(&rows);
    }
    if a.save {
        if a.count.is_some() {
            anyhow::bail!("--save: a --count run is for instruction counts, not for planning; not saved");
        }
        let data = results::DataplaneData { suite: suite.name().into(), workers, seconds: a.seconds, runs: a.runs, rows };
        let path = results::save(&a.results, suite.name(), &results::envelope(results::Kind::Dataplane, data))?;
        eprintln!("saved {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

fn bench_ipcomp(a: IpcompArgs) -> Result<ExitCode> {
    use crate::bench::{
        corpus::{Corpus, CorpusFile},
        ipcomp,
    };
    let file = a.file.as_deref().map(CorpusFile::read).transpose()?;
    let mut corpora = if a.corpora.is_empty() && file.is_some() {
        Vec::new()
    } else if a.corpora.is_empty() {
        Corpus::ALL.to_vec()
    } else {
        a.corpora.iter().map(|c| Corpus::parse(c)).collect::<Result<Vec<_>>>()?
    };
    if let Some(f) = &file {
        corpora.push(Corpus::File);
        eprintln!("corpus file: {} ({} bytes, repeated as needed)", f.path().display(), f.len());
    }
    if !(a.seconds > 0.0 && a.seconds <= 600.0) {
        anyhow::bail!("--seconds must be in (0, 600]");
    }
    if a.runs == 0 || a.runs > 1000 {
        anyhow::bail!("--runs must be between 1 and 1000");
    }
    let file_name = file.as_ref().map(|f| f.path().display().to_string());
    let opts = ipcomp::Options { corpora, sizes: a.sizes, seconds: a.seconds, runs: a.runs, file };
    let rows = ipcomp::run(&opts)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        ipcomp::print_table(&rows);
    }
    if a.save {
        let data = results::IpcompData { seconds: a.seconds, runs: a.runs, file: file_name, rows };
        let path = results::save(&a.results, "deflate", &results::envelope(results::Kind::Ipcomp, data))?;
        eprintln!("saved {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}
