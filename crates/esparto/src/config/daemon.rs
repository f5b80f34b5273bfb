//! `[daemon]`: process-wide settings. Every key is optional; the defaults
//! are named constants here and listed in `docs/CONFIG.md`.
//!
//! strongSwan keeps these in `strongswan.conf` (`charon.port`,
//! `charon.port_nat_t`, …) rather than in `swanctl.conf`; Esparto keeps one
//! file, so they live in their own section.

use std::net::SocketAddr;
use std::path::PathBuf;

use super::error::KeyPath;
use super::model::{Daemon, IkeLimits, Routing, ViciSocket};
use super::tree::{Cx, Field, Kind, Node};

/// Default control socket path (of the unnamed daemon: an instance's
/// defaults are [`super::instance::Defaults`]).
pub const DEFAULT_CONTROL: &str = "/run/esparto/esparto.sock";
/// File name of the default VICI socket, in the control socket's
/// directory (`/run/esparto/charon.vici` by default; charon's own is
/// `/var/run/charon.vici`).
pub const DEFAULT_VICI_NAME: &str = "charon.vici";
/// Default state directory (the sequence numbers of static SAs).
pub const DEFAULT_STATE_DIR: &str = "/var/lib/esparto";
/// Default TUN device name.
pub const DEFAULT_TUN: &str = "esparto0";
/// Default UDP port for ESP-in-UDP and IKE with NAT-T (RFC 3948 §2.1).
pub const DEFAULT_PORT: u16 = 4500;
/// Default UDP port for IKE (RFC 7296 §2).
pub const DEFAULT_IKE_PORT: u16 = 500;
/// Default path MTU towards peers.
pub const DEFAULT_PATH_MTU: u16 = 1500;
/// Default packets each TUN queue holds before the kernel drops (the
/// device's `txqueuelen`, per queue). Deeper than the kernel's 500 and the
/// usual 1,000: a worker that loses its CPU for a few milliseconds on a
/// busy machine would otherwise lose small packets (docs/BENCHMARKS.md).
pub const DEFAULT_TUN_QUEUE_LEN: u32 = 4096;
/// Largest `tun_queue_len` accepted.
pub const MAX_TUN_QUEUE_LEN: u32 = 65_536;
/// Default log filter.
pub const DEFAULT_LOG: &str = "info";
pub use esparto_io::cpu::MAX_WORKERS;
/// Highest CPU number accepted in `cpus` (the kernel's default NR_CPUS
/// limit is 8192).
pub const MAX_CPU: usize = 8191;
/// Smallest path MTU accepted (RFC 791: every IPv4 host accepts 576 bytes).
pub const MIN_PATH_MTU: u16 = 576;
/// Default routing table of the tunnel routes (strongSwan's
/// `charon.routing_table` default).
pub const DEFAULT_ROUTING_TABLE: u32 = 220;
/// Default priority of the first policy rule (strongSwan's
/// `charon.routing_table_prio` default); the rules take it and the next two.
pub const DEFAULT_ROUTING_TABLE_PRIO: u32 = 220;
/// Highest `routing_table_prio`: its three rules must come before the
/// kernel's main-table rule at 32766.
pub const MAX_ROUTING_TABLE_PRIO: u32 = 32766 - esparto_io::routing::PRIORITIES;
/// Longest Unix socket path: `sun_path` is 108 bytes with the NUL (unix(7)).
const MAX_SOCKET_PATH: usize = 107;
/// Longest interface name: IFNAMSIZ is 16 with the NUL (netdevice(7)).
const MAX_IFNAME: usize = 15;

const KEYS: &[&str] = &[
    "workers",
    "cpus",
    "control",
    "vici",
    "state_dir",
    "tun",
    "port",
    "ike_port",
    "path_mtu",
    "tun_queue_len",
    "log",
    "window_size",
    "fragment_size",
    "cookie_threshold",
    "cookie_threshold_per_source",
    "half_open_per_source",
    "cookie_threshold_per_peer",
    "half_open_per_peer",
    "max_half_open",
    "initiating_per_peer",
    "routing_table",
    "routing_table_prio",
    "routing_mark",
    "metrics",
];

/// The number of workers when the file does not say: the CPUs this process
/// may run on (its affinity mask, not the machine's CPU count).
pub fn default_workers() -> usize {
    esparto_io::cpu::default_workers()
}

/// `cpus = [0, 1, ...]`: distinct CPU numbers, at least one.
fn cpu_list(cx: &mut Cx<'_>, f: &Field<'_>) -> Vec<usize> {
    let Kind::Array(items) = &f.node.kind else {
        cx.err_at(
            f,
            format!(
                "expected an array of CPU numbers, found {}",
                f.node.type_name()
            ),
        );
        return Vec::new();
    };
    if items.is_empty() {
        cx.err_at(
            f,
            "empty list: leave `cpus` out to use every CPU the process may run on",
        );
        return Vec::new();
    }
    let mut cpus = Vec::with_capacity(items.len());
    for (i, n) in items.iter().enumerate() {
        let fld = Field {
            node: n,
            path: f.path.index(i),
        };
        if let Some(c) = cx.int::<usize>(&fld, 0..=MAX_CPU as i64) {
            if cpus.contains(&c) {
                cx.err_at(&fld, format!("CPU {c} is listed twice"));
            } else {
                cpus.push(c);
            }
        }
    }
    cpus
}

/// Parse `[daemon]` (absent: all defaults).
pub(crate) fn parse(cx: &mut Cx<'_>, root: &Node) -> Daemon {
    let defaults = super::instance::Defaults::current();
    let mut d = Daemon {
        workers: default_workers(),
        cpus: Vec::new(),
        control: defaults.control,
        vici: ViciSocket::Default,
        tun: defaults.tun,
        port: DEFAULT_PORT,
        ike_port: DEFAULT_IKE_PORT,
        path_mtu: DEFAULT_PATH_MTU,
        tun_queue_len: DEFAULT_TUN_QUEUE_LEN,
        log: DEFAULT_LOG.to_string(),
        state_dir: defaults.state_dir,
        ike: IkeLimits::default(),
        routing: Routing::default(),
        metrics: None,
    };
    let root_path = KeyPath::root();
    let Some(f) = root.field(&root_path, "daemon") else {
        return d;
    };
    let Some(t) = cx.table(&f) else {
        return d;
    };
    let path = f.path.clone();
    cx.check_keys(t, &path, KEYS, &[]);

    if let Some(f) = t.field(&path, "cpus") {
        d.cpus = cpu_list(cx, &f);
        if !d.cpus.is_empty() {
            d.workers = d.cpus.len().min(MAX_WORKERS);
        }
    }
    if let Some(f) = t.field(&path, "workers") {
        if let Some(w) = cx.int::<usize>(&f, 1..=MAX_WORKERS as i64) {
            d.workers = w;
        }
    }
    if let Some(p) = t
        .field(&path, "control")
        .and_then(|f| control_socket(cx, &f))
    {
        d.control = p;
    }
    if let Some(f) = t.field(&path, "vici") {
        if matches!(&f.node.kind, Kind::Str(s) if s.is_empty()) {
            d.vici = ViciSocket::Off;
        } else if let Some(p) = control_socket(cx, &f) {
            if p == d.control {
                cx.err_at(&f, "the VICI socket cannot be the control socket");
            } else {
                d.vici = ViciSocket::Path(p);
            }
        }
    }
    if let Some(p) = t.field(&path, "state_dir").and_then(|f| state_dir(cx, &f)) {
        d.state_dir = p;
    }
    if let Some(name) = t.field(&path, "tun").and_then(|f| interface_name(cx, &f)) {
        d.tun = name;
    }
    ports(cx, t, &path, &mut d);
    if let Some(f) = t.field(&path, "path_mtu") {
        if let Some(m) = cx.int::<u16>(&f, i64::from(MIN_PATH_MTU)..=65535) {
            d.path_mtu = m;
        }
    }
    if let Some(f) = t.field(&path, "tun_queue_len") {
        if let Some(q) = cx.int::<u32>(&f, 16..=i64::from(MAX_TUN_QUEUE_LEN)) {
            d.tun_queue_len = q;
        }
    }
    ike_limits(cx, t, &path, &mut d.ike);
    d.routing = routing(cx, t, &path);
    if let Some(f) = t.field(&path, "metrics") {
        d.metrics = metrics_addr(cx, &f);
    }
    if let Some(f) = t.field(&path, "log") {
        if let Some(s) = cx.str(&f) {
            match check_log(s) {
                Ok(()) => d.log = s.to_string(),
                Err(e) => cx.err_at(&f, e),
            }
        }
    }
    d
}

/// Log levels, as `log` takes them alone.
const LOG_LEVELS: &[&str] = &["error", "warn", "info", "debug", "trace", "off"];

/// Targets `log` may name without a level (`esparto_ike` is
/// `esparto_ike=trace`), besides any `crate::module` path.
const LOG_TARGETS: &[&str] = &["esparto", "esparto_ike", "esparto_esp", "esparto_io", "esparto_wire", "esparto_crypto"];

/// A `log` filter: a level, or directives such as `info,esparto_ike=debug`.
/// A bare word that is neither a level nor one of Esparto's targets is a
/// typo (`debgu`), not a filter on a target of that name.
fn check_log(s: &str) -> Result<(), String> {
    if let Err(e) = tracing_subscriber::EnvFilter::try_new(s) {
        return Err(format!("'{s}' is not a log filter: {e}"));
    }
    for d in s.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let bare = !d.contains(['=', '[', ':']);
        if bare && !LOG_LEVELS.contains(&d.to_ascii_lowercase().as_str()) && !LOG_TARGETS.contains(&d) {
            let hint = super::tree::suggest(&d.to_ascii_lowercase(), LOG_LEVELS)
                .map_or_else(String::new, |l| format!(" (did you mean '{l}'?)"));
            return Err(format!(
                "'{d}' is not a log level{hint}: levels are {}; or give directives such as \
                 \"info,esparto_ike=debug\"",
                LOG_LEVELS.join(", ")
            ));
        }
    }
    Ok(())
}

/// `[daemon] control` alone, for a client looking for the daemon: the path
/// if the file names one (checked as [`parse`] checks it), `None` if not.
pub(crate) fn control_only(cx: &mut Cx<'_>, root: &Node) -> Option<PathBuf> {
    let root_path = KeyPath::root();
    let f = root.field(&root_path, "daemon")?;
    let t = cx.table(&f)?;
    let path = f.path.clone();
    t.field(&path, "control")
        .and_then(|f| control_socket(cx, &f))
}

/// `control`: the control socket's path, relative to the file's directory,
/// short enough for a Unix socket address.
fn control_socket(cx: &mut Cx<'_>, f: &Field<'_>) -> Option<PathBuf> {
    let s = cx.str(f)?;
    let p = cx.dir.join(s);
    if s.is_empty() {
        cx.err_at(f, "empty path");
        None
    } else if p.as_os_str().len() > MAX_SOCKET_PATH {
        cx.err_at(
            f,
            format!(
                "socket path is {} bytes long; Unix sockets allow at most {MAX_SOCKET_PATH}",
                p.as_os_str().len()
            ),
        );
        None
    } else {
        Some(p)
    }
}

/// `metrics`: where the Prometheus endpoint listens, an IP address and a
/// port (`"127.0.0.1:9720"`, `"[::1]:9720"`). No host names: the daemon
/// binds before it resolves anything, and a name could change meaning.
fn metrics_addr(cx: &mut Cx<'_>, f: &Field<'_>) -> Option<SocketAddr> {
    let s = cx.str(f)?;
    match s.parse::<SocketAddr>() {
        Ok(a) if a.port() == 0 => {
            cx.err_at(f, format!("'{s}': port 0 would listen on a random port; name one (e.g. 9720)"));
            None
        }
        Ok(a) => Some(a),
        Err(_) => {
            cx.err_at(
                f,
                format!("'{s}' is not an IP address and port (e.g. \"127.0.0.1:9720\" or \"[::1]:9720\")"),
            );
            None
        }
    }
}

/// `state_dir`, relative to the file's directory.
fn state_dir(cx: &mut Cx<'_>, f: &Field<'_>) -> Option<PathBuf> {
    let s = cx.str(f)?;
    if s.is_empty() {
        cx.err_at(f, "empty path");
        return None;
    }
    Some(cx.dir.join(s))
}

/// `tun`: a name the kernel accepts for a network interface.
fn interface_name(cx: &mut Cx<'_>, f: &Field<'_>) -> Option<String> {
    let s = cx.str(f)?;
    let ok_chars = s
        .chars()
        .all(|c| c.is_ascii_graphic() && c != '/' && c != ':');
    if s.is_empty() || s.len() > MAX_IFNAME || !ok_chars || s == "." || s == ".." {
        cx.err_at(
            f,
            format!(
                "'{s}' is not a valid interface name (1 to {MAX_IFNAME} printable characters, no '/' or ':')"
            ),
        );
        return None;
    }
    Some(s.to_string())
}

/// `port` and `ike_port`, which must differ, written or not.
fn ports(cx: &mut Cx<'_>, t: &Node, path: &KeyPath, d: &mut Daemon) {
    if let Some(f) = t.field(path, "port") {
        if let Some(p) = cx.int::<u16>(&f, 1..=65535) {
            d.port = p;
            if p == d.ike_port && t.field(path, "ike_port").is_none() {
                cx.err_at(
                    &f,
                    format!(
                        "port = {p} is IKE's port (ike_port, {p} by default): the NAT-T port frames IKE \
                         differently (RFC 3948 §2.2); use another port for ESP in UDP (4500 is the standard \
                         one), or move IKE with ike_port"
                    ),
                );
            }
        }
    }
    let Some(f) = t.field(path, "ike_port") else {
        return;
    };
    let Some(p) = cx.int::<u16>(&f, 1..=65535) else {
        return;
    };
    if p == d.port {
        // RFC 3948 §2.2: datagrams on the NAT-T port carry a non-ESP
        // marker before IKE; on the IKE port they do not. One port
        // cannot be both.
        cx.err_at(
            &f,
            format!(
                "ike_port must differ from port ({p}): the NAT-T port frames IKE differently (RFC 3948 §2.2)"
            ),
        );
    } else {
        d.ike_port = p;
    }
}

/// `routing_table`, `routing_table_prio` and `routing_mark`.
fn routing(cx: &mut Cx<'_>, t: &Node, path: &KeyPath) -> Routing {
    let mut r = Routing::default();
    let mut mark_set = false;
    if let Some(f) = t.field(path, "routing_table") {
        match &f.node.kind {
            Kind::Str(s) if ["main", "local", "default"].contains(&s.as_str()) => cx.err_at(
                &f,
                format!(
                    "'{s}' is one of the host's own tables: Esparto keeps its routes in a table of its own (a selector such as 0.0.0.0/0 would otherwise replace the host's routes); give a number, e.g. {DEFAULT_ROUTING_TABLE}"
                ),
            ),
            Kind::Int(n @ (253..=255)) => cx.err_at(
                &f,
                format!("table {n} is the host's own (253 default, 254 main, 255 local): Esparto keeps its routes in a table of its own, e.g. {DEFAULT_ROUTING_TABLE}"),
            ),
            _ => {
                if let Some(n) = cx.int::<u32>(&f, 1..=i64::from(u32::MAX)) {
                    r.table = n;
                }
            }
        }
    }
    if let Some(f) = t.field(path, "routing_table_prio") {
        if let Some(n) = cx.int::<u32>(&f, 1..=i64::from(MAX_ROUTING_TABLE_PRIO)) {
            r.priority = n;
        }
    }
    if let Some(f) = t.field(path, "routing_mark") {
        if let Some(n) = cx.int::<u32>(&f, 1..=i64::from(u32::MAX)) {
            r.mark = n;
            mark_set = true;
        }
    }
    if !mark_set {
        r.mark = r.table;
    }
    r
}

/// The IKE endpoint's limits (strongSwan: charon.cookie_threshold,
/// cookie_threshold_ip, block_threshold, init_limit_half_open), its
/// initiator pacing and its window size.
fn ike_limits(cx: &mut Cx<'_>, t: &Node, path: &KeyPath, ike: &mut IkeLimits) {
    let limits: [(&str, i64, &mut usize); 6] = [
        ("cookie_threshold", 1_000_000, &mut ike.cookie_threshold),
        (
            "cookie_threshold_per_source",
            1_000_000,
            &mut ike.cookie_threshold_per_source,
        ),
        (
            "half_open_per_source",
            1_000_000,
            &mut ike.half_open_per_source,
        ),
        ("cookie_threshold_per_peer", 1_000_000, &mut ike.cookie_threshold_per_peer),
        ("half_open_per_peer", 1_000_000, &mut ike.half_open_per_peer),
        ("max_half_open", 10_000_000, &mut ike.max_half_open),
    ];
    for (key, max, slot) in limits {
        if let Some(f) = t.field(path, key) {
            if let Some(v) = cx.int::<usize>(&f, 1..=max) {
                *slot = v;
            }
        }
    }
    if let Some(f) = t.field(path, "initiating_per_peer") {
        if let Some(v) = cx.int::<usize>(&f, 0..=1_000_000) {
            ike.initiating_per_peer = v;
        }
    }
    if let Some(f) = t.field(path, "window_size") {
        if let Some(v) = cx.int::<u32>(&f, 1..=64) {
            ike.window_size = v;
        }
    }
    if let Some(f) = t.field(path, "fragment_size") {
        if let Some(v) = cx.int::<usize>(&f, esparto_ike::config::MIN_FRAGMENT_SIZE as i64..=65_535) {
            ike.fragment_size = v;
        }
    }
}
