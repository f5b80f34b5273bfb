//! The VICI commands: each takes the request message strongSwan's
//! README documents, asks the daemon through a [`Backend`] (the control
//! socket), and answers with the keys strongSwan's clients read.
//!
//! What Esparto does not do answers `success = no` with an `errmsg` that
//! says so ([`UNSUPPORTED`]); a command strongSwan does not have either
//! gets `CMD_UNKNOWN`. Numbers are decimal strings and booleans `yes`/`no`,
//! as strongSwan sends them.
//!
//! Esparto's IKE SAs are known by their initiator's SPI and its Child SAs
//! by their inbound SPI; VICI clients know them by small numbers
//! (`uniqueid`, `swanctl --terminate --ike-id 3`). [`Ids`] hands those out
//! as SAs are first listed and keeps them while the SAs exist.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use esparto_wire::vici::{Builder, Section};

use crate::control::{self, ClientError, Request, Response, StreamItem};
use crate::status::{ChildSaStatus, ConnStatus, IkeSaStatus, Status};

/// Events a client may register for: the ones this server raises.
/// Registering for another (`ike-update`, `alert`, …) answers
/// `EVENT_UNKNOWN`, so a client learns it will not get them.
pub const EVENTS: &[&str] = &[
    "control-log",
    "list-sa",
    "list-conn",
    "list-policy",
    "list-cert",
    "list-authority",
    "ike-updown",
    "child-updown",
    "ike-rekey",
    "child-rekey",
    "log",
];

/// The events of [`EVENTS`] the daemon raises by itself, not in answer to
/// a command: a client registered for one follows the daemon's event
/// stream ([`Request::Events`]).
pub const DAEMON_EVENTS: &[&str] = &["ike-updown", "child-updown", "ike-rekey", "child-rekey", "log"];

/// strongSwan commands Esparto does not implement, with why.
pub const UNSUPPORTED: &[(&str, &str)] = &[
    ("reload-settings", "Esparto has no strongswan.conf; `esparto reload` reads its configuration again"),
    ("redirect", "Esparto does not redirect IKE SAs (RFC 5685)"),
    ("load-token", "Esparto has no smartcard support"),
    ("load-pool", "Esparto assigns no virtual IPs (site-to-site only)"),
    ("unload-pool", "Esparto assigns no virtual IPs (site-to-site only)"),
];

/// How long one control request may take (a status of 10,000 SAs takes
/// well under a second).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// `initiate` with `timeout = 0` (wait for the outcome): as long as the
/// daemon follows a negotiation for a client, and a little more.
const INITIATE_FOREVER: Duration = Duration::from_secs(crate::daemon::watch::WATCH_LIMIT.as_secs() + 5);

/// What the commands ask of the daemon.
pub trait Backend {
    /// One request, its answer (a failure to ask is a [`Response::Error`]).
    fn request(&mut self, req: &Request) -> Response;
    /// `up` with its log streamed to `each`, for at most `timeout`.
    fn up(&mut self, name: &str, timeout: Duration, each: &mut dyn FnMut(StreamItem)) -> Response;
}

/// The daemon's control socket as a [`Backend`].
#[derive(Debug)]
pub struct ControlBackend {
    path: PathBuf,
    /// One connection for the requests that follow each other.
    session: control::Session,
}

impl ControlBackend {
    /// Requests go to the control socket at `path`.
    pub fn new(path: &Path) -> Self {
        ControlBackend { path: path.to_path_buf(), session: control::Session::new(path) }
    }
}

impl Backend for ControlBackend {
    fn request(&mut self, req: &Request) -> Response {
        self.session.request(req, REQUEST_TIMEOUT).unwrap_or_else(|e| Response::Error(e.to_string()))
    }

    fn up(&mut self, name: &str, timeout: Duration, each: &mut dyn FnMut(StreamItem)) -> Response {
        let req = Request::Up { name: name.to_string(), watch: true, force: false };
        match control::stream(&self.path, &req, timeout, each) {
            Ok(r) => r,
            Err(ClientError::Timeout(_)) => Response::Error(format!(
                "{name}: no outcome within {} ms; the negotiation goes on",
                timeout.as_millis()
            )),
            Err(e) => Response::Error(e.to_string()),
        }
    }
}

/// The small numbers VICI clients know SAs by, and the other state every
/// client shares: where `reset-counters` put the counters' zero.
#[derive(Debug, Default)]
pub struct Ids {
    next: u32,
    ike: HashMap<String, u32>,
    child: HashMap<String, u32>,
    reqid: HashMap<(String, String), u32>,
    next_reqid: u32,
    counters_zero: HashMap<&'static str, u64>,
}

impl Ids {
    fn take(next: &mut u32) -> u32 {
        *next = next.checked_add(1).unwrap_or(1);
        *next
    }

    /// The number of the IKE SA Esparto calls `id`.
    pub fn ike(&mut self, id: &str) -> u32 {
        if let Some(n) = self.ike.get(id) {
            return *n;
        }
        let n = Self::take(&mut self.next);
        self.ike.insert(id.to_string(), n);
        n
    }

    /// The number of the Child SA whose inbound SPI is `spi`.
    pub fn child(&mut self, spi: &str) -> u32 {
        if let Some(n) = self.child.get(spi) {
            return *n;
        }
        let n = Self::take(&mut self.next);
        self.child.insert(spi.to_string(), n);
        n
    }

    /// The reqid of a child configuration (as strongSwan, one per
    /// configured child and its selectors).
    pub fn reqid(&mut self, conn: &str, child: &str) -> u32 {
        let key = (conn.to_string(), child.to_string());
        if let Some(n) = self.reqid.get(&key) {
            return *n;
        }
        let n = Self::take(&mut self.next_reqid);
        self.reqid.insert(key, n);
        n
    }

    /// Forget the SAs not in `sas` (a complete listing).
    fn retain(&mut self, sas: &[IkeSaStatus]) {
        let ike: HashSet<&str> = sas.iter().map(|s| s.id.as_str()).collect();
        let child: HashSet<&str> = sas.iter().flat_map(|s| s.children.iter().map(|c| c.in_spi.as_str())).collect();
        self.ike.retain(|k, _| ike.contains(k.as_str()));
        self.child.retain(|k, _| child.contains(k.as_str()));
    }
}

/// What a command hands the server to send.
pub struct Cx<'a> {
    /// Where requests go.
    pub backend: &'a mut dyn Backend,
    /// The numbers of SAs, shared by every client.
    pub ids: &'a Mutex<Ids>,
}

/// The answer to a request.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A `CMD_RESPONSE` with this message.
    Reply(Vec<u8>),
    /// `CMD_UNKNOWN`: no such command.
    Unknown,
}

/// Raises an event (sent if the client registered for it); `false` when
/// the client is gone and the command should stop.
pub type Emit<'a> = dyn FnMut(&'static str, &[u8]) -> bool + 'a;

/// Raises `event` with the message `b` built for `what`; `false` when the
/// client is gone. A message that cannot be encoded (over a VICI limit)
/// is left out and logged.
pub(super) fn raise(emit: &mut Emit<'_>, event: &'static str, what: &str, b: Builder) -> bool {
    match b.finish() {
        Ok(m) => emit(event, &m),
        Err(e) => {
            tracing::warn!("vici: {event} event for {what} left out: {e}");
            true
        }
    }
}

pub(super) fn finish(b: Builder) -> Vec<u8> {
    b.finish().unwrap_or_else(|e| failure(&format!("cannot encode the answer: {e}")))
}

/// `success = no`, `errmsg = …`. The message is one line: swanctl prints
/// a value with control characters as hex (several errors are joined
/// with `; `).
pub fn failure(errmsg: &str) -> Vec<u8> {
    let errmsg = errmsg.trim_end().replace(":\n", ": ").replace('\n', "; ");
    let mut b = Builder::new();
    // An errmsg longer than a VICI value is cut at a character boundary.
    let mut end = errmsg.len().min(esparto_wire::vici::MAX_VALUE);
    while !errmsg.is_char_boundary(end) {
        end -= 1;
    }
    b.kv("success", "no").kv("errmsg", &errmsg[..end]);
    b.finish().unwrap_or_default()
}

pub(super) fn success() -> Builder {
    let mut b = Builder::new();
    b.kv("success", "yes");
    b
}

/// Answer one request (`cmd` with message `req`), raising events through
/// `emit`.
pub fn handle(cmd: &str, req: &Section, cx: &mut Cx<'_>, emit: &mut Emit<'_>) -> Outcome {
    let reply = match cmd {
        "version" => version(),
        "get-algorithms" => algorithms(),
        "get-counters" => counters(req, cx, false),
        "reset-counters" => counters(req, cx, true),
        "stats" => stats(cx),
        "list-sas" => list_sas(req, cx, emit),
        "list-conns" => list_conns(req, cx, emit),
        "list-policies" => list_policies(req, cx, emit),
        "list-certs" => list_certs(req, cx, emit),
        "load-conn" => super::load::load_conn(req, cx),
        "unload-conn" => super::load::unload_conn(req, cx),
        "load-shared" => super::load::load_shared(req, cx),
        "unload-shared" => super::load::unload_shared(req, cx),
        "load-cert" => super::creds::load_cert(req, cx),
        "load-key" => super::creds::load_key(req, cx),
        "unload-key" => super::creds::unload_key(req, cx),
        "load-authority" => super::creds::load_authority(req, cx),
        "unload-authority" => super::creds::unload_authority(req, cx),
        "list-authorities" => super::creds::list_authorities(req, cx, emit),
        "clear-creds" => super::creds::clear_creds(cx),
        "flush-certs" => super::creds::flush_certs(),
        // What was loaded over VICI (strongSwan's meaning of these), not
        // what the TOML file holds. Esparto has no address pools.
        "get-conns" | "get-shared" | "get-keys" | "get-authorities" => super::load::get(cx, cmd),
        "get-pools" => Vec::new(),
        "install" => trap(req, cx, true),
        "uninstall" => trap(req, cx, false),
        "initiate" => initiate(req, cx, emit),
        "terminate" => terminate(req, cx),
        "rekey" => rekey(req, cx),
        _ => match UNSUPPORTED.iter().find(|(c, _)| *c == cmd) {
            Some((_, why)) => failure(&format!("{cmd}: {why}")),
            None => return Outcome::Unknown,
        },
    };
    Outcome::Reply(reply)
}

/// strongSwan's IKE counters (its `counters` plugin, in its order), from
/// the daemon's status.
fn counter_values(st: &Status) -> [(&'static str, u64); 21] {
    let ev = &st.ike_events;
    let ike = |k: &str| st.ike.get(k).copied().unwrap_or(0);
    let msg = |k: &str| ev.ike_messages.get(k).copied().unwrap_or(0);
    [
        ("ike-rekey-init", ev.ike_sa_rekeys_initiated),
        ("ike-rekey-resp", ev.ike_sa_rekeys.saturating_sub(ev.ike_sa_rekeys_initiated)),
        ("child-rekey", ev.child_sa_rekeys),
        ("invalid", ike("malformed") + ike("integrity_failures")),
        ("invalid-spi", ike("unknown_spi")),
        ("ike-init-in-req", msg("ike-init-in-req")),
        ("ike-init-in-resp", msg("ike-init-in-resp")),
        ("ike-init-out-req", msg("ike-init-out-req")),
        ("ike-init-out-resp", msg("ike-init-out-resp")),
        ("ike-auth-in-req", msg("ike-auth-in-req")),
        ("ike-auth-in-resp", msg("ike-auth-in-resp")),
        ("ike-auth-out-req", msg("ike-auth-out-req")),
        ("ike-auth-out-resp", msg("ike-auth-out-resp")),
        ("create-child-in-req", msg("create-child-in-req")),
        ("create-child-in-resp", msg("create-child-in-resp")),
        ("create-child-out-req", msg("create-child-out-req")),
        ("create-child-out-resp", msg("create-child-out-resp")),
        ("info-in-req", msg("info-in-req")),
        ("info-in-resp", msg("info-in-resp")),
        ("info-out-req", msg("info-out-req")),
        ("info-out-resp", msg("info-out-resp")),
    ]
}

/// `get-counters` (`reset`: `reset-counters`): the global counters since
/// the daemon started or the last reset. The daemon's own counters
/// (`esparto status`, the metrics) never go back; a reset moves the
/// zero VICI counts from. Esparto keeps no counters per connection.
fn counters(req: &Section, cx: &mut Cx<'_>, reset: bool) -> Vec<u8> {
    let all = text(req, &["all"]).is_some_and(|v| v == "yes");
    if all || text(req, &["name"]).is_some_and(|n| !n.is_empty()) {
        return failure("Esparto keeps global IKE counters only, none per connection: omit name and all");
    }
    let st = match cx.backend.request(&Request::Status) {
        Response::Status(s) => s,
        Response::Error(e) => return failure(&e),
        _ => return failure("unexpected answer from the daemon"),
    };
    let values = counter_values(&st);
    let mut ids = cx.ids.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if reset {
        ids.counters_zero = values.into_iter().collect();
        return finish(success());
    }
    let mut b = success();
    b.begin("counters").begin("");
    for (name, n) in values {
        b.kv_display(name, n.saturating_sub(ids.counters_zero.get(name).copied().unwrap_or(0)));
    }
    b.end().end();
    finish(b)
}

/// The algorithms IKE and ESP negotiate, by strongSwan's names, each
/// with the library that implements it (strongSwan names its plugin).
fn algorithms() -> Vec<u8> {
    use esparto_crypto::Integ;
    use esparto_crypto::ike::{IkeEncr, KeGroup, Prf};
    const AWS_LC: &str = "aws-lc-rs";
    let mut b = Builder::new();
    // Each algorithm once, whatever its key sizes (as strongSwan lists them).
    let (mut ciphers, mut aeads) = (Vec::new(), Vec::new());
    for e in IkeEncr::ALL {
        let (list, name) = match e {
            IkeEncr::AesCbc { .. } => (&mut ciphers, "AES_CBC"),
            IkeEncr::AesGcm16 { .. } => (&mut aeads, "AES_GCM_16"),
            IkeEncr::ChaCha20Poly1305 => (&mut aeads, "CHACHA20_POLY1305"),
        };
        if !list.contains(&name) {
            list.push(name);
        }
    }
    b.begin("encryption");
    for name in ciphers {
        b.kv(name, AWS_LC);
    }
    b.end().begin("integrity");
    for i in [Integ::HmacSha1_96, Integ::HmacSha256_128, Integ::HmacSha384_192, Integ::HmacSha512_256] {
        let name = match i {
            Integ::HmacSha1_96 => "HMAC_SHA1_96",
            Integ::HmacSha256_128 => "HMAC_SHA2_256_128",
            Integ::HmacSha384_192 => "HMAC_SHA2_384_192",
            Integ::HmacSha512_256 => "HMAC_SHA2_512_256",
        };
        b.kv(name, AWS_LC);
    }
    b.end().begin("aead");
    for name in aeads {
        b.kv(name, AWS_LC);
    }
    b.end().begin("prf");
    for p in Prf::ALL {
        let name = match p {
            Prf::HmacSha1 => "PRF_HMAC_SHA1",
            Prf::HmacSha256 => "PRF_HMAC_SHA2_256",
            Prf::HmacSha384 => "PRF_HMAC_SHA2_384",
            Prf::HmacSha512 => "PRF_HMAC_SHA2_512",
        };
        b.kv(name, AWS_LC);
    }
    b.end().begin("ke");
    for g in KeGroup::ALL {
        let (name, by) = match g {
            KeGroup::Modp2048 => ("MODP_2048", "crypto-bigint"),
            KeGroup::Modp3072 => ("MODP_3072", "crypto-bigint"),
            KeGroup::Ecp256 => ("ECP_256", AWS_LC),
            KeGroup::Ecp384 => ("ECP_384", AWS_LC),
            KeGroup::Curve25519 => ("CURVE_25519", AWS_LC),
        };
        b.kv(name, by);
    }
    b.end().begin("rng").kv("RNG_STRONG", AWS_LC).end();
    finish(b)
}

fn version() -> Vec<u8> {
    let read = |p: &str| std::fs::read_to_string(p).map(|s| s.trim().to_string()).unwrap_or_default();
    let mut b = Builder::new();
    b.kv("daemon", "esparto")
        .kv("version", env!("CARGO_PKG_VERSION"))
        .kv("sysname", read("/proc/sys/kernel/ostype"))
        .kv("release", read("/proc/sys/kernel/osrelease"))
        .kv("machine", std::env::consts::ARCH);
    finish(b)
}

/// strongSwan's relative time (`%V`): seconds, minutes, hours or days,
/// whichever unit the delta exceeds twice.
fn relative(secs: u64) -> String {
    let (n, unit) = match secs {
        s if s > 2 * 86_400 => (s / 86_400, "day"),
        s if s > 2 * 3_600 => (s / 3_600, "hour"),
        s if s > 2 * 60 => (s / 60, "minute"),
        s => (s, "second"),
    };
    format!("{n} {unit}{}", if n == 1 { "" } else { "s" })
}

/// `Dec 03 07:27:06 2026` (strongSwan's `%T`), in UTC.
fn absolute(t: SystemTime) -> String {
    let secs = t.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Days since 1970-01-01 to a civil date (H. Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let m = MONTHS[(month - 1).clamp(0, 11) as usize];
    format!("{m} {day:02} {:02}:{:02}:{:02} {year}", rem / 3600, rem % 3600 / 60, rem % 60)
}

fn stats(cx: &mut Cx<'_>) -> Vec<u8> {
    let st = match cx.backend.request(&Request::Status) {
        Response::Status(s) => s,
        Response::Error(e) => return failure(&e),
        _ => return failure("unexpected answer from the daemon"),
    };
    let up = st.uptime_s.max(0.0);
    let since = SystemTime::now().checked_sub(Duration::from_secs_f64(up)).unwrap_or(SystemTime::UNIX_EPOCH);
    let half_open = st.ike_sas.iter().filter(|s| s.state != "established").count();
    let mut b = Builder::new();
    b.begin("uptime").kv("running", relative(up as u64)).kv("since", absolute(since)).end();
    // Esparto's threads are its data-plane workers and one control
    // thread; it has no job queues, so those counts are zero.
    b.begin("workers")
        .kv_display("total", st.workers.len())
        .kv_display("idle", 0)
        .begin("active")
        .kv_display("critical", 0)
        .kv_display("high", 0)
        .kv_display("medium", 0)
        .kv_display("low", 0)
        .end()
        .end();
    b.begin("queues")
        .kv_display("critical", 0)
        .kv_display("high", 0)
        .kv_display("medium", 0)
        .kv_display("low", 0)
        .end();
    b.kv_display("scheduled", 0);
    b.begin("ikesas").kv_display("total", st.ike_sas.len()).kv_display("half-open", half_open).end();
    b.list::<&str>("plugins", []);
    finish(b)
}

/// An IKE or ESP algorithm in strongSwan's naming, split as `list-sa`
/// has it: `AES_GCM_16_256` is `AES_GCM_16` with key size 256.
fn split_keysize(t: &str) -> (&str, Option<&str>) {
    match t.rsplit_once('_') {
        Some((alg, bits)) if !bits.is_empty() && bits.bytes().all(|c| c.is_ascii_digit()) && alg.starts_with("AES_") => {
            (alg, Some(bits))
        }
        _ => (t, None),
    }
}

/// The algorithms of a negotiated proposal in strongSwan's syntax
/// (`IKE:AES_GCM_16_256/PRF_HMAC_SHA2_256/CURVE_25519`).
#[derive(Debug, Default, PartialEq, Eq)]
struct Algs {
    encr: Option<(String, Option<String>)>,
    integ: Option<String>,
    prf: Option<String>,
    ke: Vec<String>,
}

fn proposal_algs(proposal: &str) -> Algs {
    let body = proposal.split_once(':').map_or(proposal, |(_, b)| b);
    let mut a = Algs::default();
    for t in body.split('/').filter(|t| !t.is_empty() && !t.ends_with("EXT_SEQ")) {
        if t.starts_with("PRF_") {
            a.prf.get_or_insert_with(|| t.to_string());
        } else if t.starts_with("HMAC_") || t.starts_with("AES_XCBC") || t.starts_with("AES_CMAC") {
            a.integ.get_or_insert_with(|| t.to_string());
        } else if ["MODP_", "ECP_", "CURVE_", "ML_KEM_", "KE"].iter().any(|p| t.starts_with(p)) {
            // Additional key exchanges come as KE1_…, KE2_…
            let name = t.split_once('_').filter(|(k, _)| k.len() == 3 && k.starts_with("KE")).map_or(t, |(_, n)| n);
            a.ke.push(name.to_string());
        } else if a.encr.is_none() {
            let (alg, bits) = split_keysize(t);
            a.encr = Some((alg.to_string(), bits.map(str::to_string)));
        }
    }
    a
}

/// An ESP suite in Esparto's (strongSwan's proposal keyword) spelling
/// to `list-sa`'s encryption and integrity names.
fn esp_algs(suite: &str) -> (String, Option<&'static str>, Option<&'static str>) {
    match suite {
        "aes128gcm16" => ("AES_GCM_16".into(), Some("128"), None),
        "aes256gcm16" => ("AES_GCM_16".into(), Some("256"), None),
        "chacha20poly1305" => ("CHACHA20_POLY1305".into(), None, None),
        s => match s.split_once('-') {
            Some((aes, integ)) => {
                let bits = match aes {
                    "aes256" => "256",
                    _ => "128",
                };
                let integ = match integ {
                    "sha1" => "HMAC_SHA1_96",
                    "sha256" => "HMAC_SHA2_256_128",
                    "sha384" => "HMAC_SHA2_384_192",
                    "sha512" => "HMAC_SHA2_512_256",
                    _ => "UNKNOWN",
                };
                ("AES_CBC".into(), Some(bits), Some(integ))
            }
            None => (s.to_ascii_uppercase(), None, None),
        },
    }
}

/// `host:port` (either family) to its parts.
fn host_port(a: &str) -> (String, String) {
    match a.parse::<std::net::SocketAddr>() {
        Ok(s) => (s.ip().to_string(), s.port().to_string()),
        Err(_) => (a.to_string(), String::new()),
    }
}

fn secs(s: f64) -> String {
    format!("{}", s.max(0.0) as u64)
}

/// An identity as charon prints it (`%Y`): an FQDN without Esparto's
/// `@`, a DN without quotes; the others as they are.
fn charon_id(id: &str) -> &str {
    if let Some(fqdn) = id.strip_prefix('@').filter(|r| !r.starts_with('#')) {
        return fqdn;
    }
    id.strip_prefix('"').and_then(|r| r.strip_suffix('"')).unwrap_or(id)
}

/// The IKE SA's keys of a `list-sa` event, without `child-sas`.
fn ike_sa_keys(b: &mut Builder, sa: &IkeSaStatus, uniqueid: u32) {
    let (lh, lp) = host_port(&sa.local);
    let (rh, rp) = host_port(&sa.remote);
    let spi_i = if sa.initiator_spi.is_empty() { sa.id.as_str() } else { sa.initiator_spi.as_str() };
    let spi_r = if sa.responder_spi.is_empty() { "0000000000000000" } else { sa.responder_spi.as_str() };
    b.kv_display("uniqueid", uniqueid)
        .kv("version", "2")
        .kv("state", sa.state.to_ascii_uppercase())
        .kv("local-host", lh)
        .kv("local-port", lp)
        .kv("local-id", charon_id(&sa.local_id))
        .kv("remote-host", rh)
        .kv("remote-port", rp)
        .kv("remote-id", charon_id(&sa.remote_id))
        .kv_bool("initiator", sa.initiator)
        .kv("initiator-spi", spi_i)
        .kv("responder-spi", spi_r);
    if sa.nat.local_behind_nat {
        b.kv("nat-local", "yes");
    }
    if sa.nat.remote_behind_nat {
        b.kv("nat-remote", "yes");
    }
    if sa.nat.encap_forced {
        b.kv("nat-fake", "yes");
    }
    if sa.nat.local_behind_nat || sa.nat.remote_behind_nat || sa.nat.encap_forced {
        b.kv("nat-any", "yes");
    }
    let a = proposal_algs(&sa.proposal);
    if let Some((encr, bits)) = &a.encr {
        b.kv("encr-alg", encr);
        if let Some(bits) = bits {
            b.kv("encr-keysize", bits);
        }
    }
    if let Some(i) = &a.integ {
        b.kv("integ-alg", i);
    }
    if let Some(p) = &a.prf {
        b.kv("prf-alg", p);
    }
    for (i, ke) in a.ke.iter().enumerate().take(8) {
        if i == 0 {
            b.kv("dh-group", ke);
        } else {
            b.kv(&format!("ake{i}"), ke);
        }
    }
    if sa.state == "established" {
        b.kv("established", secs(sa.age_s));
        if let Some(r) = sa.rekey_in_s {
            b.kv("rekey-time", secs(r));
        }
    }
    // No virtual IPs (site to site): charon leaves the empty lists out.
}

/// One Child SA's section of a `list-sa` event.
fn child_sa(b: &mut Builder, c: &ChildSaStatus, uniqueid: u32, reqid: u32) {
    b.begin(&format!("{}-{uniqueid}", c.child));
    child_sa_keys(b, c, uniqueid, reqid);
    b.end();
}

/// The keys of one Child SA's section.
fn child_sa_keys(b: &mut Builder, c: &ChildSaStatus, uniqueid: u32, reqid: u32) {
    b.kv("name", &c.child)
        .kv_display("uniqueid", uniqueid)
        .kv_display("reqid", reqid)
        .kv("state", "INSTALLED")
        .kv("mode", "TUNNEL")
        .kv("protocol", "ESP");
    // Esparto's data plane sends ESP in UDP only (RFC 3948).
    b.kv("encap", "yes").kv("spi-in", &c.in_spi).kv("spi-out", &c.out_spi);
    if let Some(cpi) = c.ipcomp.split_once("cpi in ").and_then(|(_, r)| r.split_once(" out ")) {
        b.kv("cpi-in", cpi.0).kv("cpi-out", cpi.1);
    }
    // RFC 9611: a fallback SA and one sub-SA per worker. `cpu` is the
    // worker the sub-SA belongs to.
    match c.role.as_str() {
        "fallback" => {
            b.kv("per-cpu-sas", "yes");
        }
        "sub" => {
            b.kv("per-cpu-sas", "yes");
            if let Some(w) = c.out_worker.or(c.in_worker) {
                b.kv_display("cpu", w);
            }
        }
        _ => {}
    }
    let (encr, bits, integ) = esp_algs(&c.suite);
    b.kv("encr-alg", encr);
    if let Some(bits) = bits {
        b.kv("encr-keysize", bits);
    }
    if let Some(i) = integ {
        b.kv("integ-alg", i);
    }
    b.kv_display("bytes-in", c.in_bytes).kv_display("packets-in", c.in_packets);
    if let Some(t) = c.in_idle_s {
        b.kv("use-in", secs(t));
    }
    b.kv_display("bytes-out", c.out_bytes).kv_display("packets-out", c.out_packets);
    if let Some(t) = c.out_idle_s {
        b.kv("use-out", secs(t));
    }
    if let Some(t) = c.rekey_in_s {
        b.kv("rekey-time", secs(t));
    }
    if let Some(t) = c.expire_in_s {
        b.kv("life-time", secs(t));
    }
    b.kv("install-time", secs(c.age_s));
    b.list("local-ts", &c.local_ts).list("remote-ts", &c.remote_ts);
}

/// A number in a request (`ike-id = 3`); `Err` names a bad one.
fn number(req: &Section, key: &str) -> Result<Option<u32>, String> {
    match req.str(key) {
        None => Ok(None),
        Some(s) => s.trim().parse::<u32>().map(Some).map_err(|_| format!("{key} = '{s}' is not a number")),
    }
}

/// The first of `keys` that the request has, as text.
fn text<'a>(req: &'a Section, keys: &[&str]) -> Option<&'a str> {
    keys.iter().find_map(|k| req.str(k)).filter(|s| !s.is_empty())
}

fn sas(cx: &mut Cx<'_>) -> Result<Vec<IkeSaStatus>, String> {
    match cx.backend.request(&Request::Sas) {
        Response::Sas(s) => Ok(s),
        Response::Error(e) => Err(e),
        _ => Err("unexpected answer from the daemon".into()),
    }
}

fn conns(cx: &mut Cx<'_>) -> Result<Vec<ConnStatus>, String> {
    match cx.backend.request(&Request::ListConns) {
        Response::Conns(c) => Ok(c),
        Response::Error(e) => Err(e),
        _ => Err("unexpected answer from the daemon".into()),
    }
}

fn list_sas(req: &Section, cx: &mut Cx<'_>, emit: &mut Emit<'_>) -> Vec<u8> {
    let (ike, child) = (text(req, &["ike"]), text(req, &["child"]));
    let (ike_id, child_id) = match (number(req, "ike-id"), number(req, "child-id")) {
        (Ok(i), Ok(c)) => (i.filter(|n| *n != 0), c.filter(|n| *n != 0)),
        (Err(e), _) | (_, Err(e)) => return failure(&e),
    };
    let all = match sas(cx) {
        Ok(s) => s,
        Err(e) => return failure(&e),
    };
    // Number every SA first, then build and send each event without the
    // lock: a client that reads slowly must not hold up the others.
    let numbered: Vec<(u32, Vec<(u32, u32)>)> = {
        let mut ids = cx.ids.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if ike.is_none() && child.is_none() && ike_id.is_none() && child_id.is_none() {
            ids.retain(&all);
        }
        all.iter()
            .map(|sa| {
                let ike = ids.ike(&sa.id);
                let children = sa.children.iter().map(|c| (ids.child(&c.in_spi), ids.reqid(&sa.connection, &c.child))).collect();
                (ike, children)
            })
            .collect()
    };
    for (sa, (uniqueid, child_ids)) in all.iter().zip(&numbered) {
        if ike.is_some_and(|n| n != sa.connection) || ike_id.is_some_and(|n| n != *uniqueid) {
            continue;
        }
        let children: Vec<(&ChildSaStatus, &(u32, u32))> = sa
            .children
            .iter()
            .zip(child_ids)
            .filter(|(c, (id, _))| child.is_none_or(|n| n == c.child) && child_id.is_none_or(|n| n == *id))
            .collect();
        if (child.is_some() || child_id.is_some()) && children.is_empty() {
            continue;
        }
        let mut b = Builder::new();
        b.begin(&sa.connection);
        ike_sa_keys(&mut b, sa, *uniqueid);
        b.begin("child-sas");
        for (c, (id, reqid)) in children {
            child_sa(&mut b, c, *id, *reqid);
        }
        b.end().end();
        if !raise(emit, "list-sa", &sa.connection, b) {
            break;
        }
    }
    Vec::new()
}

/// One `list-cert` event per X.509 certificate the configuration holds
/// (Esparto has no other kind), filtered by `type`, `flag` and
/// `subject` as charon filters them.
fn list_certs(req: &Section, cx: &mut Cx<'_>, emit: &mut Emit<'_>) -> Vec<u8> {
    // Names in any case, as charon reads them.
    let kind = text(req, &["type"]).unwrap_or("ANY").to_ascii_uppercase();
    let flag = text(req, &["flag"]).unwrap_or("ANY").to_ascii_uppercase();
    if !["ANY", "X509", "X509_AC", "X509_CRL", "OCSP_RESPONSE", "PUBKEY"].contains(&kind.as_str()) {
        return failure(&format!("invalid certificate type '{kind}'"));
    }
    if !["ANY", "NONE", "CA", "AA", "OCSP"].contains(&flag.as_str()) {
        return failure(&format!("invalid certificate flag '{flag}'"));
    }
    let subject = match text(req, &["subject"]).map(esparto_ike::Identity::parse) {
        None => None,
        Some(Ok(id)) => Some(id),
        Some(Err(e)) => return failure(&format!("subject: {e}")),
    };
    if !matches!(kind.as_str(), "ANY" | "X509") {
        return Vec::new();
    }
    let certs = match cx.backend.request(&Request::Certs) {
        Response::Certs(c) => c,
        Response::Error(e) => return failure(&e),
        _ => return failure("unexpected answer from the daemon"),
    };
    for c in certs {
        let cert_flag = if c.ca { "CA" } else { "NONE" };
        if flag != "ANY" && flag != cert_flag {
            continue;
        }
        let der = &c.der;
        if subject.as_ref().is_some_and(|id| !esparto_ike::cert::cert_has_subject(der, id)) {
            continue;
        }
        let mut b = Builder::new();
        b.kv("type", "X509").kv("flag", cert_flag);
        if c.private_key {
            b.kv("has_privkey", "yes");
        }
        b.kv("data", der);
        if !raise(emit, "list-cert", "a certificate", b) {
            break;
        }
    }
    Vec::new()
}

fn list_conns(req: &Section, cx: &mut Cx<'_>, emit: &mut Emit<'_>) -> Vec<u8> {
    let only = text(req, &["ike"]);
    let all = match conns(cx) {
        Ok(c) => c,
        Err(e) => return failure(&e),
    };
    for c in all.iter().filter(|c| only.is_none_or(|n| n == c.name)) {
        let mut b = Builder::new();
        b.begin(&c.name);
        b.list("local_addrs", &c.local_addrs).list("remote_addrs", &c.remote_addrs);
        b.kv("version", "IKEv2");
        b.kv_display("remote_port", c.remote_port);
        if let Some(ike) = &c.ike {
            let unique = esparto_ike::Unique::NAMES.iter().find(|(n, _)| *n == ike.unique).map_or(esparto_ike::Unique::No, |(_, u)| *u);
            b.kv_display("reauth_time", 0).kv_display("rekey_time", ike.rekey_time_s.unwrap_or(0));
            b.kv("unique", unique.charon_name());
            // charon's names of the authentication classes.
            let class = |auth: &str| if auth == "pubkey" { "public key" } else { "pre-shared key" };
            b.begin("local-1").kv("class", class(&ike.auth.0)).kv("id", charon_id(&ike.local_id)).end();
            b.begin("remote-1").kv("class", class(&ike.auth.1)).kv("id", charon_id(&ike.remote_id)).end();
        }
        b.begin("children");
        for ch in &c.children {
            b.begin(&ch.name)
                .kv("mode", "TUNNEL")
                .kv_display("rekey_time", ch.rekey_time_s.unwrap_or(0))
                .kv_display("rekey_bytes", 0)
                .kv_display("rekey_packets", 0)
                .list("local-ts", &ch.local_ts)
                .list("remote-ts", &ch.remote_ts)
                .end();
        }
        b.end().end();
        if !raise(emit, "list-conn", &c.name, b) {
            break;
        }
    }
    Vec::new()
}

/// Trap policies: the children with `start_action = "trap"` (Esparto
/// installs no drop or bypass policies).
fn list_policies(req: &Section, cx: &mut Cx<'_>, emit: &mut Emit<'_>) -> Vec<u8> {
    let (ike, child) = (text(req, &["ike"]), text(req, &["child"]));
    if req.str("trap") != Some("yes") {
        return Vec::new();
    }
    let all = match conns(cx) {
        Ok(c) => c,
        Err(e) => return failure(&e),
    };
    let traps: Vec<(&ConnStatus, &crate::status::ChildConnStatus, u32)> = {
        let mut ids = cx.ids.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        all.iter()
            .filter(|c| ike.is_none_or(|n| n == c.name))
            .flat_map(|c| c.children.iter().map(move |ch| (c, ch)))
            .filter(|(_, ch)| ch.trap && child.is_none_or(|n| n == ch.name))
            .map(|(c, ch)| (c, ch, ids.reqid(&c.name, &ch.name)))
            .collect()
    };
    for (c, ch, reqid) in traps {
        let mut b = Builder::new();
        let name = format!("{}/{}", c.name, ch.name);
        b.begin(&name)
            .kv("child", &ch.name)
            .kv("ike", &c.name)
            .kv_display("reqid", reqid)
            .kv("mode", "TUNNEL")
            .list("local-ts", &ch.local_ts)
            .list("remote-ts", &ch.remote_ts)
            .end();
        if !raise(emit, "list-policy", &name, b) {
            break;
        }
    }
    Vec::new()
}

/// The connection a request names: `ike`, or the one holding child
/// `child`.
fn connection_of(req: &Section, cx: &mut Cx<'_>) -> Result<String, String> {
    if let Some(ike) = text(req, &["ike"]) {
        return Ok(ike.to_string());
    }
    let Some(child) = text(req, &["child"]) else {
        return Err("missing configuration name".into());
    };
    let all = conns(cx)?;
    let mut holding = all.iter().filter(|c| c.children.iter().any(|ch| ch.name == child));
    match (holding.next(), holding.next()) {
        (Some(c), None) => Ok(c.name.clone()),
        (Some(_), Some(_)) => Err(format!("CHILD_SA config '{child}' is in several connections; name the connection with ike")),
        (None, _) => Err(format!("CHILD_SA config '{child}' not found")),
    }
}

/// `install` / `uninstall`: `{ child = …, ike = … }`, a child's trap
/// policy.
fn trap(req: &Section, cx: &mut Cx<'_>, install: bool) -> Vec<u8> {
    let name = match connection_of(req, cx) {
        Ok(n) => n,
        Err(e) => return failure(&e),
    };
    let child = text(req, &["child"]).unwrap_or_default().to_string();
    let r = match install {
        true => cx.backend.request(&Request::Install { name, child }),
        false => cx.backend.request(&Request::Uninstall { name, child }),
    };
    match r {
        Response::Error(e) => failure(&e),
        _ => finish(success()),
    }
}

fn initiate(req: &Section, cx: &mut Cx<'_>, emit: &mut Emit<'_>) -> Vec<u8> {
    let name = match connection_of(req, cx) {
        Ok(n) => n,
        Err(e) => return failure(&e),
    };
    // strongSwan: 0 waits for the outcome, -1 returns at once.
    let timeout: i64 = req.str("timeout").and_then(|t| t.trim().parse().ok()).unwrap_or(0);
    let level: i64 = req.str("loglevel").and_then(|t| t.trim().parse().ok()).unwrap_or(1);
    if timeout < 0 {
        return match cx.backend.request(&Request::Up { name: name.clone(), watch: false, force: false }) {
            Response::Error(e) => failure(&e),
            _ => finish(success()),
        };
    }
    let timeout = if timeout == 0 { INITIATE_FOREVER } else { Duration::from_millis(timeout as u64).min(INITIATE_FOREVER) };
    let mut gone = false;
    let mut each = |item: StreamItem| {
        if gone {
            return;
        }
        let line = match item {
            StreamItem::Log { log } => log,
            StreamItem::Dropped { dropped } => crate::daemon::watch::LogLine {
                level: "WARN".into(),
                target: String::new(),
                message: format!("{dropped} log lines dropped"),
            },
            _ => return,
        };
        let lvl = level_of(&line.level);
        if lvl > level {
            return;
        }
        let mut b = Builder::new();
        b.kv("group", "IKE").kv_display("level", lvl).kv("ikesa-name", &name).kv("msg", &line.message);
        if let Ok(m) = b.finish() {
            gone = !emit("control-log", &m);
        }
    };
    match cx.backend.up(&name, timeout, &mut each) {
        Response::Error(e) => failure(&e),
        _ => finish(success()),
    }
}

/// strongSwan's log level (0: errors and audit … 4) of one of ours.
fn level_of(level: &str) -> i64 {
    match level {
        "ERROR" | "WARN" => 0,
        "INFO" => 1,
        "DEBUG" => 2,
        _ => 3,
    }
}

/// strongSwan's log group of the module that logged a line.
fn group_of(target: &str) -> &'static str {
    if target.contains("ike") {
        "IKE"
    } else if target.contains("config") || target.contains("reload") || target.contains("vici") {
        "CFG"
    } else if target.contains("esp") || target.contains("datapath") || target.contains("io") {
        "NET"
    } else {
        "DMN"
    }
}

/// A `log` event of one of the daemon's log lines.
fn log_event(line: &crate::daemon::watch::LogLine) -> Option<Vec<u8>> {
    let mut b = Builder::new();
    b.kv("group", group_of(&line.target)).kv_display("level", level_of(&line.level)).kv("thread", "0").kv("msg", &line.message);
    b.finish().ok()
}

/// The VICI event of one item of the daemon's event stream
/// ([`Request::Events`]): its name and message; `None` for what VICI has
/// no event for.
pub fn daemon_event(item: &StreamItem, ids: &Mutex<Ids>) -> Option<(&'static str, Vec<u8>)> {
    match item {
        StreamItem::Event { event } => sa_event(event, ids),
        StreamItem::Log { log } => Some(("log", log_event(log)?)),
        StreamItem::Dropped { dropped } => {
            let line = crate::daemon::watch::LogLine {
                level: "WARN".into(),
                target: "esparto::vici".into(),
                message: format!("{dropped} events or log lines dropped: this client read too slowly"),
            };
            Some(("log", log_event(&line)?))
        }
        StreamItem::Started { .. } | StreamItem::End(_) => None,
    }
}

/// `ike-updown`, `child-updown`, `ike-rekey` or `child-rekey`, as
/// charon's vici plugin builds them.
fn sa_event(ev: &control::SaEvent, ids: &Mutex<Ids>) -> Option<(&'static str, Vec<u8>)> {
    let sa = &ev.sa;
    let mut ids = ids.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut b = Builder::new();
    let name = match ev.kind.as_str() {
        "ike-updown" => {
            if ev.up {
                b.kv("up", "yes");
            }
            b.begin(&sa.connection);
            ike_sa_keys(&mut b, sa, ids.ike(&sa.id));
            b.end();
            "ike-updown"
        }
        "child-updown" => {
            if ev.up {
                b.kv("up", "yes");
            }
            b.begin(&sa.connection);
            ike_sa_keys(&mut b, sa, ids.ike(&sa.id));
            b.begin("child-sas");
            for c in &sa.children {
                let (id, reqid) = (ids.child(&c.in_spi), ids.reqid(&sa.connection, &c.child));
                child_sa(&mut b, c, id, reqid);
            }
            b.end().end();
            "child-updown"
        }
        "ike-rekey" => {
            let old = ev.old.as_ref()?;
            b.begin(&old.connection).begin("old");
            ike_sa_keys(&mut b, old, ids.ike(&old.id));
            b.end().begin("new");
            ike_sa_keys(&mut b, sa, ids.ike(&sa.id));
            b.end().end();
            "ike-rekey"
        }
        "child-rekey" => {
            let [old, new] = sa.children.as_slice() else { return None };
            let reqid = ids.reqid(&sa.connection, &old.child);
            b.begin(&sa.connection);
            ike_sa_keys(&mut b, sa, ids.ike(&sa.id));
            b.begin("child-sas").begin(&old.child).begin("old");
            child_sa_keys(&mut b, old, ids.child(&old.in_spi), reqid);
            b.end().begin("new");
            child_sa_keys(&mut b, new, ids.child(&new.in_spi), reqid);
            b.end().end().end().end();
            "child-rekey"
        }
        _ => return None,
    };
    Some((name, b.finish().ok()?))
}

/// The connection of IKE SA number `id`, and of the IKE SA holding Child
/// SA number `child_id`.
fn connection_by_id(cx: &mut Cx<'_>, ike_id: Option<u32>, child_id: Option<u32>) -> Result<Option<String>, String> {
    if ike_id.is_none() && child_id.is_none() {
        return Ok(None);
    }
    let all = sas(cx)?;
    let mut ids = cx.ids.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    for sa in &all {
        if ike_id.is_some_and(|n| n == ids.ike(&sa.id)) {
            return Ok(Some(sa.connection.clone()));
        }
        if child_id.is_some_and(|n| sa.children.iter().any(|c| ids.child(&c.in_spi) == n)) {
            return Ok(Some(sa.connection.clone()));
        }
    }
    Err(match (ike_id, child_id) {
        (Some(n), _) => format!("no IKE_SA with unique id {n}"),
        (_, Some(n)) => format!("no CHILD_SA with unique id {n}"),
        _ => String::new(),
    })
}

/// `ike-id` and `child-id`, in either spelling (`ike_id` is older).
fn ids_of(req: &Section) -> Result<(Option<u32>, Option<u32>), String> {
    let ike = match number(req, "ike-id")? {
        Some(n) => Some(n),
        None => number(req, "ike_id")?,
    };
    let child = match number(req, "child-id")? {
        Some(n) => Some(n),
        None => number(req, "child_id")?,
    };
    Ok((ike, child))
}

fn terminate(req: &Section, cx: &mut Cx<'_>) -> Vec<u8> {
    let (ike_id, child_id) = match ids_of(req) {
        Ok(v) => v,
        Err(e) => return failure(&e),
    };
    if child_id.is_some() || text(req, &["child"]).is_some() {
        return terminate_children(req, cx, ike_id, child_id);
    }
    let name = match (connection_by_id(cx, ike_id, None), text(req, &["ike"])) {
        (Ok(Some(n)), _) => n,
        (Ok(None), Some(n)) => n.to_string(),
        (Ok(None), None) => return failure("missing configuration name or unique id"),
        (Err(e), _) => return failure(&e),
    };
    match cx.backend.request(&Request::Down { name }) {
        Response::Error(e) => failure(&e),
        Response::Done(msg) => {
            // "deleting 2 IKE SA(s) of site"; "no IKE SA; its pending
            // re-initiation is cancelled".
            let n = first_number(&msg).unwrap_or(0);
            let mut b = success();
            b.kv_display("matches", n).kv_display("terminated", n);
            finish(b)
        }
        _ => finish(success()),
    }
}

/// `terminate` of Child SAs: the one numbered `child_id`, or every one
/// of the child named `child` (within the IKE SA `ike`/`ike-id` if
/// given), each deleted with the peer while its IKE SA stays.
fn terminate_children(req: &Section, cx: &mut Cx<'_>, ike_id: Option<u32>, child_id: Option<u32>) -> Vec<u8> {
    let all = match sas(cx) {
        Ok(s) => s,
        Err(e) => return failure(&e),
    };
    let (ike, child) = (text(req, &["ike"]), text(req, &["child"]));
    let targets: Vec<(String, String)> = {
        let mut ids = cx.ids.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut out = Vec::new();
        for sa in &all {
            if ike.is_some_and(|n| n != sa.connection) || ike_id.is_some_and(|n| n != ids.ike(&sa.id)) {
                continue;
            }
            for c in &sa.children {
                let by_id = child_id.is_none_or(|n| n == ids.child(&c.in_spi));
                if by_id && child.is_none_or(|n| n == c.child) {
                    out.push((sa.connection.clone(), c.in_spi.clone()));
                }
            }
        }
        out
    };
    if targets.is_empty() {
        return failure(&match child_id {
            Some(n) => format!("no CHILD_SA with unique id {n}"),
            None => format!("no CHILD_SA named '{}'", child.unwrap_or_default()),
        });
    }
    let mut errors = Vec::new();
    let mut done = 0usize;
    for (name, spi) in &targets {
        let Ok(in_spi) = u32::from_str_radix(spi, 16) else {
            errors.push(format!("{name}: Child SA {spi}: not an SPI"));
            continue;
        };
        match cx.backend.request(&Request::DownChild { name: name.clone(), in_spi }) {
            Response::Done(_) => done += 1,
            Response::Error(e) => errors.push(e),
            _ => errors.push(format!("{name}: unexpected answer from the daemon")),
        }
    }
    if !errors.is_empty() {
        return failure(&errors.join("; "));
    }
    let mut b = success();
    b.kv_display("matches", targets.len()).kv_display("terminated", done);
    finish(b)
}

fn rekey(req: &Section, cx: &mut Cx<'_>) -> Vec<u8> {
    if req.str("reauth").is_some_and(|v| v == "yes") {
        return failure("reauthentication is not supported; rekey the IKE_SA instead");
    }
    let (ike_id, child_id) = match ids_of(req) {
        Ok(v) => v,
        Err(e) => return failure(&e),
    };
    let whole = ike_id.is_some() || (text(req, &["ike"]).is_some() && text(req, &["child"]).is_none() && child_id.is_none());
    let name = match connection_by_id(cx, ike_id, child_id) {
        Ok(Some(n)) => n,
        Ok(None) => match connection_of(req, cx) {
            Ok(n) => n,
            Err(e) => return failure(&e),
        },
        Err(e) => return failure(&e),
    };
    match cx.backend.request(&Request::Rekey { name, ike: whole }) {
        Response::Error(e) => failure(&e),
        Response::Done(msg) => {
            // "rekeying 3 Child SA(s) of site"
            let mut b = success();
            b.kv_display("matches", first_number(&msg).unwrap_or(1));
            finish(b)
        }
        _ => finish(success()),
    }
}

/// The first whole word of `msg` that is a number.
fn first_number(msg: &str) -> Option<u32> {
    msg.split_whitespace().find_map(|w| w.parse().ok())
}

#[cfg(test)]
mod tests;
