//! The commands that talk to a running daemon over its control socket:
//! `status`, `sas`, `list-conns`, `up`, `down`, `rekey` and `reload`.
//!
//! Each finds the socket through a configuration file or takes it outright
//! ([`Target`]), sends one request (or, for `up`, reads the stream of the
//! negotiation's log lines), and prints the answer as text or JSON. Every
//! way this can fail is a [`Failure`] of a named kind, which `--json`
//! prints as `{"ok":false,"error":…,"kind":…}`.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;

use super::args::{LogArgs, RekeyArgs, ReloadArgs, StatusArgs, Target, UpDownArgs};
use crate::control::{self, ClientError, Request, Response, Socket};
use crate::render;

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

/// The exit status of a client command that failed with `kind`, as
/// `esparto --help` documents them.
pub(super) fn exit_status(kind: &str) -> u8 {
    match kind {
        "usage" => 2,
        "refused" => 3,
        "no_daemon" => 4,
        "timeout" => 5,
        "config" => 6,
        "protocol" | "io" => 7,
        // A negotiation that failed, or anything else.
        _ => 1,
    }
}

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
                "no esparto daemon at {} ({}): is esparto running? (another daemon: --instance NAME, -c CONFIG or --control SOCKET)",
                p.display(),
                sock.source
            ),
        ),
        e @ ClientError::Timeout(_) => fail("timeout", e.to_string()),
        e @ ClientError::Protocol(_) => fail("protocol", e.to_string()),
        e @ ClientError::Io(..) => fail("io", e.to_string()),
    }
}

pub(super) fn status(a: StatusArgs) -> Result<ExitCode> {
    let timeout = timeout_arg(a.timeout)?;
    match ask(&a.target.socket()?, &Request::Status, timeout)? {
        Response::Status(s) if a.output.json => println!("{}", serde_json::to_string_pretty(&s)?),
        Response::Status(s) => print!("{}", render::status_text(&s)),
        r => return Err(refused(r)),
    }
    Ok(ExitCode::SUCCESS)
}

pub(super) fn sas(a: StatusArgs) -> Result<ExitCode> {
    let sas = fetch_sas(&a.target.socket()?, timeout_arg(a.timeout)?)?;
    if a.output.json {
        println!("{}", serde_json::to_string_pretty(&sas)?);
    } else {
        print!("{}", render::ike_sas_text(&sas));
    }
    Ok(ExitCode::SUCCESS)
}

pub(super) fn list_conns(a: StatusArgs) -> Result<ExitCode> {
    match ask(&a.target.socket()?, &Request::ListConns, timeout_arg(a.timeout)?)? {
        Response::Conns(c) if a.output.json => println!("{}", serde_json::to_string_pretty(&c)?),
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
pub(super) fn up_down(a: UpDownArgs, up: bool) -> Result<ExitCode> {
    let timeout = timeout_arg(a.timeout)?;
    let sock = a.target.socket()?;
    if up && !a.quiet {
        return up_streamed(&a, &sock, timeout);
    }
    let rpc = Duration::from_secs(5);
    let req = if up {
        Request::Up { name: a.name.clone(), watch: false, force: a.force }
    } else {
        Request::Down { name: a.name.clone() }
    };
    let first = match ask(&sock, &req, rpc)? {
        Response::Done(msg) => msg,
        r => return Err(refused(r)),
    };
    if !a.output.json {
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
            if a.output.json {
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
    let req = Request::Up { name: a.name.clone(), watch: true, force: a.force };
    let json = a.output.json;
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
            control::StreamItem::Event { .. } | control::StreamItem::End(_) => Ok(()),
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
    if a.output.json {
        println!("{}", outcome_json(&message, Some(&sas)));
    } else {
        println!("{message}");
        print!("{}", render::ike_sas_text(&sas));
    }
    Ok(ExitCode::SUCCESS)
}

pub(super) fn rekey(a: RekeyArgs) -> Result<ExitCode> {
    let sock = a.target.socket()?;
    match ask(&sock, &Request::Rekey { name: a.name.clone(), ike: a.ike }, Duration::from_secs(5))? {
        Response::Done(msg) if a.output.json => println!("{}", outcome_json(&msg, None)),
        Response::Done(msg) => println!("{msg}"),
        r => return Err(refused(r)),
    }
    Ok(ExitCode::SUCCESS)
}

/// `reload`: the daemon's report; a refused reload (its reasons on
/// stderr, or as JSON) exits 1, and so does one that applied with problems.
pub(super) fn reload(a: ReloadArgs) -> Result<ExitCode> {
    match ask(&a.target.socket()?, &Request::Reload, timeout_arg(a.timeout)?)? {
        Response::Reload(r) => {
            if a.output.json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                print!("{}", render::reload_text(&r));
            }
            Ok(if r.problems.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
        }
        r => Err(refused(r)),
    }
}

/// `log`: the daemon's log lines and SA events, until interrupted or the
/// daemon goes.
pub(super) fn log(a: LogArgs) -> Result<ExitCode> {
    use std::io::Write as _;
    // As long as the daemon runs; the daemon ends nothing by time.
    const FOREVER: Duration = Duration::from_secs(10 * 365 * 86_400);
    let sock = a.target.socket()?;
    let json = a.output.json;
    let mut each = |item: control::StreamItem| {
        let mut out = std::io::stdout().lock();
        let _ = match &item {
            _ if json => writeln!(out, "{}", serde_json::to_string(&item).unwrap_or_default()),
            control::StreamItem::Started { .. } | control::StreamItem::End(_) => Ok(()),
            control::StreamItem::Log { log } => writeln!(out, "{log}"),
            control::StreamItem::Dropped { dropped } => {
                writeln!(out, "… {dropped} line(s) dropped (this client read too slowly)")
            }
            control::StreamItem::Event { event } => {
                let what = match (event.kind.as_str(), event.up) {
                    ("ike-updown", true) => "IKE SA up",
                    ("ike-updown", false) => "IKE SA down",
                    ("child-updown", true) => "Child SA up",
                    ("child-updown", false) => "Child SA down",
                    ("ike-rekey", _) => "IKE SA rekeyed",
                    _ => "Child SA rekeyed",
                };
                let children: Vec<String> =
                    event.sa.children.iter().map(|c| format!("{} {}_i {}_o", c.child, c.in_spi, c.out_spi)).collect();
                writeln!(
                    out,
                    "event: {}: {what} #{} {}...{}{}",
                    event.sa.connection,
                    event.sa.id,
                    event.sa.local,
                    event.sa.remote,
                    if children.is_empty() { String::new() } else { format!(" [{}]", children.join(", ")) }
                )
            }
        };
        let _ = out.flush();
    };
    let end = control::stream(&sock.path, &Request::Events { log: true }, FOREVER, &mut each).map_err(|e| client_error(&sock, e))?;
    match end {
        Response::Error(e) => Err(fail("refused", e)),
        r => Err(refused(r)),
    }
}
