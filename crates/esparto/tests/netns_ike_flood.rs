//! A flood of IKE_SA_INIT requests from forged addresses against a real
//! Esparto responder, while a legitimate tunnel comes up through it and
//! stays up (RFC 7296 §2.6). Needs root: SKIP otherwise.
//!
//! ```text
//!  host-west ── gw-west ══ wan ══ gw-east ── host-east
//!                                   │ fl0 10.99.0.1/30
//!                                   │
//!                                 flood   fl0 10.99.0.2/30
//!                                         local 198.51.100.0/24 dev lo
//! ```
//!
//! The flooder is a namespace of its own on a link to gw-east. Its
//! "spoofed" sources are real to the kernel — an AnyIP route makes the
//! whole of 198.51.100.0/24 (RFC 5737 TEST-NET-2) local there and gw-east
//! routes it back over `fl0` — so it can bind one socket per source
//! without raw sockets (the crate forbids `unsafe`), and count what the
//! responder answers. It sends genuine IKE_SA_INIT requests (an
//! `esparto_ike` initiator's, with a fresh SPIi and nonce each) paced at
//! `ESPARTO_FLOOD_PPS` (default 20 000/s; 5 000/s in a debug build) for
//! `ESPARTO_FLOOD_SECS` (default 10 s), and never returns a cookie: that
//! is what a forger who cannot see the answers does.
//!
//! 1. `flood_from_many_sources_while_a_tunnel_comes_up`: the east gateway
//!    answers anyone (`remote_addrs = %any`, a hub's configuration, the
//!    worst case: every forged request gets as far as the key exchange
//!    unless the COOKIE defence stops it). The flood starts first and
//!    pushes the responder over `cookie_threshold` (100 half-open SAs);
//!    then the west gateway starts (`start_action = start`), gets a COOKIE,
//!    returns it, and the tunnel comes up. Pings pass during and after the
//!    flood, `esparto sas` shows the same IKE and Child SA on both sides.
//!    Once the tunnel is up, pings cross it both ways for the rest of the
//!    flood, and none may be lost.
//!    Checked: at most `cookie_threshold` requests were ever accepted (no
//!    half-open SA expires within the flood), everything else answered
//!    with a COOKIE. Reported: offered and answered rates, the responder's
//!    CPU time, answers per CPU second.
//! 2. `blind_flood_forging_the_peer_address`: the east gateway accepts
//!    only the west gateway's address (the standard site configuration),
//!    and the flood forges exactly that address (192.0.2.1, made local in
//!    the flood namespace; gw-east's reverse-path filter off on `fl0`).
//!    The answers go to the real west gateway, which knows none of the
//!    SPIs. The per-source cookie threshold (3) must keep the forger from
//!    locking the real peer out: the tunnel still comes up, and pings cross
//!    it both ways for the rest of the flood without loss.
//!
//! In both, the responder's resident memory (`VmHWM` at the end, `VmRSS`
//! sampled) must stay within its idle size + 64 MiB, and its log must grow
//! by a bounded number of lines: the lines a flood causes are limited per
//! kind (`esparto::daemon::log_limit`), not one per request.
//!
//! Besides what the flooder saw, each run prints the namespaces' UDP
//! counters (`/proc/net/snmp`: datagrams in, drops at a full receive
//! buffer) and the responder's CPU time (`testbed::cpu`). The daemon's own
//! IKE counters (`Stats`: cookies sent, verified, rejected, half-open
//! drops) are in `esparto status` under `ike`.
//!
//! Measured (release build, 2 cores shared with other builds, load average
//! ≈ 9, so noisy): at 20 000 requests/s offered, 98 % were answered, all
//! but the first 100 with a COOKIE, the responder using 18 % of one core
//! — 7–9.5 µs of its CPU per answer, ≈ 110–140k answers per CPU second,
//! most of it the two syscalls per datagram (the sans-IO path alone is
//! ≈ 1.5 µs, `benches/cookie.rs`). At ≈ 90–100k/s offered, 35–42k/s were
//! answered and the rest overflowed the IKE socket's receive buffer while
//! the daemon was waiting for a CPU (it used only 25–30 % of one): then a
//! genuine request can be lost too, and the tunnel comes up after the
//! initiator's first retransmission (4 s) instead of at once.

#![allow(clippy::unwrap_used)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use esparto::status::IkeSaStatus;
use esparto_testbed::esparto::{EspartoConfig, EspartoGateway, Keying};
use esparto_testbed::topology::{Net, Node, Topology};
use esparto_testbed::{Family, WorkDir, cpu, loadavg, mem, skip, traffic, wait_for};
use esparto_netns::Netns;
use esparto_wire::ike::{ExchangeType, Header, HeaderRepr, Message, NotifyType, PayloadRepr};

/// The two tests share two cores with each other otherwise.
static SERIAL: Mutex<()> = Mutex::new(());

const PSK: &str = "correct horse battery staple";
/// `EndpointConfig::default().cookie_threshold`, which the daemon uses.
const COOKIE_THRESHOLD: u64 = 100;
/// The responder's memory may grow by this much under the flood, at most.
const MAX_GROWTH_KIB: u64 = 64 * 1024;
/// Lines the responder may log during the flood: its lifecycle lines for
/// the one tunnel, and 10 per kind per 10 s of what the flood causes.
const MAX_LOG_LINES: usize = 200;

fn keying(initiator: bool, west: bool) -> Keying {
    let (l, r) = if west {
        ("@west", "@east")
    } else {
        ("@east", "@west")
    };
    Keying::Ike {
        proposal: "aes256gcm16-prfsha256-x25519".into(),
        local_id: l.into(),
        remote_id: r.into(),
        psk: PSK.into(),
        initiator,
    }
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

// ---------------------------------------------------------------------------
// The east daemon, started from a configuration we may edit (the harness's
// `EspartoGateway` writes its own and has no `%any`).

struct Daemon {
    bin: PathBuf,
    ns: String,
    child: Option<Child>,
    pid: u32,
    control: PathBuf,
    dir: WorkDir,
}

impl Daemon {
    fn start(ns: &Netns, bin: &Path, cfg: &EspartoConfig, edit: impl Fn(String) -> String) -> Self {
        let dir = WorkDir::new(&format!("esparto-flood-{}", ns.name())).unwrap();
        let control = dir.join("esparto.sock");
        let config = dir.join("esparto.toml");
        std::fs::write(&config, edit(cfg.to_toml(&control))).unwrap();
        let log = std::fs::File::create(dir.join("esparto.log")).unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", ns.name()])
            .arg(bin)
            .arg("run")
            .arg("--config")
            .arg(&config)
            .arg("--control")
            .arg(&control)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let mut d = Daemon {
            bin: bin.to_path_buf(),
            ns: ns.name().to_string(),
            pid: child.id(),
            child: Some(child),
            control,
            dir,
        };
        let ready = wait_for(
            "esparto's control socket",
            Duration::from_secs(10),
            Duration::from_millis(50),
            || {
                if let Some(st) = d.child.as_mut().unwrap().try_wait()? {
                    anyhow::bail!("esparto exited at start ({st})");
                }
                Ok(d.control.exists().then_some(()))
            },
        );
        if let Err(e) = ready {
            d.dir.keep();
            panic!("{e:#}: {}", d.log());
        }
        d
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("esparto.log")).unwrap_or_default()
    }

    fn log_lines(&self) -> usize {
        self.log().lines().count()
    }

    fn sas(&self) -> Vec<IkeSaStatus> {
        sas(&self.bin, &self.ns, &self.control)
    }

    fn stop(mut self) {
        let mut child = self.child.take().unwrap();
        assert!(
            child.try_wait().unwrap().is_none(),
            "east daemon died: {}",
            self.log()
        );
        Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .status()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(st) = child.try_wait().unwrap() {
                assert!(st.success(), "east daemon exited with {st}");
                return;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("east daemon ignored SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            self.dir.keep();
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn sas(bin: &Path, ns: &str, control: &Path) -> Vec<IkeSaStatus> {
    let o = Command::new("ip")
        .args(["netns", "exec", ns])
        .arg(bin)
        .args(["sas", "--json", "--control"])
        .arg(control)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

fn established(s: &[IkeSaStatus]) -> Option<&IkeSaStatus> {
    s.iter()
        .find(|s| s.state == "established" && !s.children.is_empty())
}

// ---------------------------------------------------------------------------
// The flooder.

/// A genuine IKE_SA_INIT (the proposal the east gateway accepts) and
/// where its nonce sits, so each copy gets its own SPIi and nonce.
fn template() -> (Vec<u8>, usize, usize) {
    use esparto_ike::{
        ChildConfig, ConnectionConfig, Endpoint, EndpointConfig, RandomSpiAllocator,
    };
    let mut i = Endpoint::new(
        EndpointConfig::default(),
        Box::new(esparto_crypto::DeterministicRng::new(1)),
        Box::new(RandomSpiAllocator::new()),
    );
    let mut c = ConnectionConfig::new("f", "aes256gcm16-prfsha256-x25519").unwrap();
    c.local_addrs = vec!["198.51.100.1".parse().unwrap()];
    c.remote_addrs = vec!["192.0.2.2".parse().unwrap()];
    c.children
        .push(ChildConfig::new("c", "10.1.0.0/24", "10.2.0.0/24", "aes256gcm16").unwrap());
    i.add_connection(c).unwrap();
    i.initiate(Instant::now(), "f", None).unwrap();
    let data = i.poll_transmit().unwrap().data;
    let m = Message::parse(&data).unwrap();
    let (off, len) = m
        .payloads
        .iter()
        .find_map(|p| match p {
            // Where the nonce lies inside `data` (both borrow the same buffer).
            PayloadRepr::Nonce(n) => Some((
                n.data.as_ptr() as usize - data.as_ptr() as usize,
                n.data.len(),
            )),
            _ => None,
        })
        .unwrap();
    (data.clone(), off, len)
}

#[derive(Default)]
struct Counts {
    sent: AtomicU64,
    send_errors: AtomicU64,
    cookies: AtomicU64,
    accepted: AtomicU64,
    other: AtomicU64,
}

struct Flood {
    stop: Arc<AtomicBool>,
    counts: Arc<Counts>,
    threads: Vec<JoinHandle<()>>,
    started: Instant,
}

impl Flood {
    /// Send from `socks` round-robin to `target` at `pps`; if `listen`,
    /// count the answers arriving on the same sockets.
    fn start(socks: Vec<UdpSocket>, target: SocketAddr, pps: u64, listen: bool) -> Self {
        let socks = Arc::new(socks);
        let stop = Arc::new(AtomicBool::new(false));
        let counts = Arc::new(Counts::default());
        let (tpl, nonce_at, nonce_len) = template();
        let mut threads = Vec::new();
        let (s, st, c) = (Arc::clone(&socks), Arc::clone(&stop), Arc::clone(&counts));
        threads.push(std::thread::spawn(move || {
            let mut buf = tpl;
            let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
            let t0 = Instant::now();
            let mut n: u64 = 0;
            while !st.load(Ordering::Relaxed) {
                let due = (t0.elapsed().as_secs_f64() * pps as f64) as u64;
                if n >= due {
                    std::thread::sleep(Duration::from_micros(200));
                    continue;
                }
                // Catch up in bursts of at most 64, then look at the clock.
                for _ in 0..(due - n).min(64) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    buf[..8].copy_from_slice(&(x | 1).to_be_bytes());
                    for (k, b) in buf[nonce_at..nonce_at + nonce_len]
                        .iter_mut()
                        .enumerate()
                        .take(16)
                    {
                        *b = (x.rotate_left(k as u32 * 4) ^ n) as u8;
                    }
                    let sock = &s[(n % s.len() as u64) as usize];
                    if sock.send_to(&buf, target).is_err() {
                        c.send_errors.fetch_add(1, Ordering::Relaxed);
                    }
                    n += 1;
                }
                c.sent.store(n, Ordering::Relaxed);
            }
            c.sent.store(n, Ordering::Relaxed);
        }));
        if listen {
            let (s, st, c) = (Arc::clone(&socks), Arc::clone(&stop), Arc::clone(&counts));
            threads.push(std::thread::spawn(move || {
                let mut buf = [0u8; 2048];
                // Drain a little after the stop so late answers count.
                let mut quiet_since: Option<Instant> = None;
                loop {
                    let mut got = 0;
                    for sock in s.iter() {
                        while let Ok((len, _)) = sock.recv_from(&mut buf) {
                            got += 1;
                            classify(&buf[..len], &c);
                        }
                    }
                    if st.load(Ordering::Relaxed) {
                        let q = *quiet_since.get_or_insert_with(Instant::now);
                        if got == 0 && q.elapsed() > Duration::from_millis(500) {
                            return;
                        }
                    }
                    if got == 0 {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
            }));
        }
        Flood {
            stop,
            counts,
            threads,
            started: Instant::now(),
        }
    }

    fn finish(self) -> (Arc<Counts>, Duration) {
        self.stop.store(true, Ordering::Relaxed);
        let d = self.started.elapsed();
        for t in self.threads {
            t.join().unwrap();
        }
        (self.counts, d)
    }
}

fn classify(d: &[u8], c: &Counts) {
    let header = Header::new_checked(d)
        .ok()
        .and_then(|h| HeaderRepr::parse(&h).ok());
    let ok = header.is_some_and(|h| h.exchange == ExchangeType::IKE_SA_INIT && h.response);
    let kind = ok
        .then(|| Message::parse(d).ok())
        .flatten()
        .map(|m| match m.payloads.as_slice() {
            [PayloadRepr::Notify(n)] if n.kind == NotifyType::COOKIE => 0,
            p if p.iter().any(|p| matches!(p, PayloadRepr::Sa(_))) => 1,
            _ => 2,
        });
    match kind {
        Some(0) => c.cookies.fetch_add(1, Ordering::Relaxed),
        Some(1) => c.accepted.fetch_add(1, Ordering::Relaxed),
        _ => c.other.fetch_add(1, Ordering::Relaxed),
    };
}

/// The flooder's namespace on a link to gw-east, with `sources` local
/// to it (AnyIP) and routed back to it from gw-east when `route_back`.
fn flooder(topo: &Topology, sources: &str, route_back: bool) -> Netns {
    let f = Netns::new("flood").unwrap();
    let east = topo.ns(Node::GwEast);
    east.veth("fl0", &f, "fl0").unwrap();
    east.addr("fl0", "10.99.0.1/30").unwrap();
    f.addr("fl0", "10.99.0.2/30").unwrap();
    f.route("default", Some("10.99.0.1"), None).unwrap();
    f.ip(&["route", "add", "local", sources, "dev", "lo"])
        .unwrap();
    if route_back {
        east.route(sources, Some("10.99.0.2"), None).unwrap();
    }
    for ns in [east, &f] {
        for k in ["all", "default", "fl0"] {
            ns.sysctl(&format!("net.ipv4.conf.{k}.rp_filter"), "0")
                .unwrap();
        }
    }
    f
}

fn sockets(ns: &Netns, addrs: &[IpAddr]) -> Vec<UdpSocket> {
    let addrs = addrs.to_vec();
    ns.run(move || {
        addrs
            .iter()
            .map(|a| {
                let s = UdpSocket::bind(SocketAddr::new(*a, 500)).unwrap();
                s.set_nonblocking(true).unwrap();
                s
            })
            .collect()
    })
    .unwrap()
}

/// The namespace's UDP counters (`/proc/net/snmp`, per namespace): what
/// arrived, and what the kernel dropped because a socket's receive buffer
/// was full (a flood the daemon did not keep up with loses packets there,
/// genuine ones included).
#[derive(Debug, Clone, Copy, Default)]
struct Udp {
    in_datagrams: u64,
    rcvbuf_errors: u64,
}

impl Udp {
    fn read(ns: &Netns) -> Self {
        let out = ns.exec("cat", &["/proc/net/snmp"]).unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let mut lines = text.lines().filter(|l| l.starts_with("Udp:"));
        let (names, values) = (lines.next().unwrap(), lines.next().unwrap());
        let get = |key: &str| {
            let i = names.split_whitespace().position(|n| n == key).unwrap();
            values.split_whitespace().nth(i).unwrap().parse().unwrap()
        };
        Udp {
            in_datagrams: get("InDatagrams"),
            rcvbuf_errors: get("RcvbufErrors"),
        }
    }

    fn since(self, before: Udp) -> Udp {
        Udp {
            in_datagrams: self.in_datagrams - before.in_datagrams,
            rcvbuf_errors: self.rcvbuf_errors - before.rcvbuf_errors,
        }
    }
}

/// Packets sent out of `dev` in `ns` so far.
fn tx_packets(ns: &Netns, dev: &str) -> u64 {
    let out = ns
        .exec(
            "cat",
            &[&format!("/sys/class/net/{dev}/statistics/tx_packets")],
        )
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

fn rate(n: u64, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64()
}

fn build() -> &'static str {
    if cfg!(debug_assertions) {
        "debug build"
    } else {
        "release build"
    }
}

fn ping_east(topo: &Topology, n: u32) -> traffic::PingResult {
    let dst = Topology::addr(Node::HostEast, Net::Lan, Family::V4);
    traffic::ping(topo.ns(Node::HostWest), dst, n, Duration::from_millis(200)).unwrap()
}

/// Pings across the tunnel both ways at once, for about `d` (at least a
/// second): (host-west → host-east, host-east → host-west).
fn ping_both_ways(topo: &Topology, d: Duration) -> (traffic::PingResult, traffic::PingResult) {
    let n = (d.as_millis() / 100).max(10) as u32;
    let every = Duration::from_millis(100);
    let (w, e) = (
        Topology::addr(Node::HostWest, Net::Lan, Family::V4),
        Topology::addr(Node::HostEast, Net::Lan, Family::V4),
    );
    std::thread::scope(|s| {
        let to_west = s.spawn(|| traffic::ping(topo.ns(Node::HostEast), w, n, every).unwrap());
        let to_east = traffic::ping(topo.ns(Node::HostWest), e, n, every).unwrap();
        (to_east, to_west.join().unwrap())
    })
}

/// The responder's memory before and after the flood, and its growth
/// checked against [`MAX_GROWTH_KIB`]; returns a line for the report.
fn check_memory(idle: mem::Memory, end: mem::Memory, sampled_peak: u64) -> String {
    let mib = |k: u64| k as f64 / 1024.0;
    let peak = end.hwm_kib.max(sampled_peak);
    let line = format!(
        "responder memory: idle VmRSS {:.1} MiB, peak VmHWM {:.1} MiB (sampled VmRSS at most {:.1} MiB), growth {:.1} MiB",
        mib(idle.rss_kib),
        mib(end.hwm_kib),
        mib(sampled_peak),
        mib(peak.saturating_sub(idle.rss_kib))
    );
    assert!(peak <= idle.rss_kib + MAX_GROWTH_KIB, "{line}: over idle + {} MiB", mib(MAX_GROWTH_KIB));
    line
}

/// Offered requests per second and seconds of flood: `ESPARTO_FLOOD_PPS`
/// (default 20 000; 5 000 in a debug build) and `ESPARTO_FLOOD_SECS`
/// (default 10, at least 4).
fn flood_rate() -> (u64, u64) {
    let pps = env_or("ESPARTO_FLOOD_PPS", if cfg!(debug_assertions) { 5_000 } else { 20_000 });
    (pps, env_or("ESPARTO_FLOOD_SECS", 10).max(4))
}

// ---------------------------------------------------------------------------

#[test]
fn flood_from_many_sources_while_a_tunnel_comes_up() {
    if skip("netns_ike_flood", false) {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (pps, secs) = flood_rate();
    let bin = Path::new(env!("CARGO_BIN_EXE_esparto"));
    let topo = Topology::new().unwrap();
    let flood_ns = flooder(&topo, "198.51.100.0/24", true);
    let sources: Vec<IpAddr> = (1..=254)
        .map(|i| IpAddr::V4(Ipv4Addr::new(198, 51, 100, i)))
        .collect();
    let socks = sockets(&flood_ns, &sources);

    let mut ecfg = EspartoConfig::site(Node::GwEast, keying(false, false)).unwrap();
    ecfg.workers = Some(2);
    let west_addr = Topology::addr(Node::GwWest, Net::Transit, Family::V4);
    let east = Daemon::start(topo.ns(Node::GwEast), bin, &ecfg, |t| {
        let fixed = format!("remote_addrs = [\"{west_addr}\"]");
        assert!(t.contains(&fixed), "{t}");
        t.replace(&fixed, "remote_addrs = [\"%any\"]")
    });

    let cpu0 = cpu::sample(east.pid).unwrap();
    let (e_udp0, w_udp0) = (
        Udp::read(topo.ns(Node::GwEast)),
        Udp::read(topo.ns(Node::GwWest)),
    );
    let load = loadavg();
    let idle = mem::sample(east.pid).unwrap();
    let lines0 = east.log_lines();
    let watch = mem::Watch::start(east.pid, Duration::from_millis(100));
    let target = SocketAddr::new(Topology::addr(Node::GwEast, Net::Transit, Family::V4), 500);
    let flood = Flood::start(socks, target, pps, true);
    // Let the flood push the responder over its cookie threshold first.
    wait_for(
        "the flood to be answered with cookies",
        Duration::from_secs(10),
        Duration::from_millis(50),
        || Ok((flood.counts.cookies.load(Ordering::Relaxed) > 0).then_some(())),
    )
    .unwrap();

    let mut wcfg = EspartoConfig::site(Node::GwWest, keying(true, true)).unwrap();
    wcfg.workers = Some(2);
    let t_west = Instant::now();
    let west = EspartoGateway::start(topo.ns(Node::GwWest), bin, &wcfg).unwrap();
    let wns = topo.ns(Node::GwWest).name().to_string();
    let up = wait_for(
        "the tunnel under the flood",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || Ok(established(&sas(bin, &wns, west.control_path())).map(|_| t_west.elapsed())),
    );
    let up = match up {
        Ok(d) => d,
        Err(e) => {
            let (c, _) = flood.finish();
            panic!(
                "{e:#}; flood: {} sent, {} cookies; east log:\n{}",
                c.sent.load(Ordering::Relaxed),
                c.cookies.load(Ordering::Relaxed),
                east.log()
            );
        }
    };
    let w_during = sas(bin, &wns, west.control_path());
    let ike_id = established(&w_during).unwrap().id.clone();
    // The established tunnel carries pings both ways for the rest of the flood.
    let rest = Duration::from_secs(secs).saturating_sub(flood.started.elapsed());
    let (to_east, to_west) = ping_both_ways(&topo, rest);
    let (c, dur) = flood.finish();
    let cpu1 = cpu::sample(east.pid).unwrap();
    let (sampled, _) = watch.stop();
    let memory = check_memory(idle, mem::sample(east.pid).unwrap(), sampled);
    let lines = east.log_lines() - lines0;
    let e_udp = Udp::read(topo.ns(Node::GwEast)).since(e_udp0);
    let w_udp = Udp::read(topo.ns(Node::GwWest)).since(w_udp0);

    let after = ping_east(&topo, 5);
    let w_after = sas(bin, &wns, west.control_path());
    let e_after = east.sas();
    let w_sa = established(&w_after).expect("west: tunnel gone after the flood");
    let e_sa = established(&e_after).expect("east: tunnel gone after the flood");

    let (sent, cookies, accepted, other) = (
        c.sent.load(Ordering::Relaxed),
        c.cookies.load(Ordering::Relaxed),
        c.accepted.load(Ordering::Relaxed),
        c.other.load(Ordering::Relaxed),
    );
    let answered = cookies + accepted + other;
    let cpu_s = cpu1.process.total_s() - cpu0.process.total_s();
    eprintln!(
        "IKE_SA_INIT flood ({}, load average {:.1} before): {} sources, offered {sent} in {:.1} s = {:.0}/s \
         ({} send errors); east UDP: {} datagrams in, {} dropped at a full receive buffer; answered {answered} \
         = {:.0}/s: {cookies} COOKIE, {accepted} accepted (half-open SAs), {other} other; responder CPU \
         {cpu_s:.2} s = {:.0}% of one core, {:.0} answers per CPU second ({:.1} us each); tunnel up {:.2} s \
         after the initiator started (west UDP drops {}); pings during (both ways) {}/{} and {}/{}, after {}/{}; \
         {memory}; responder log: {lines} lines during the flood",
        build(),
        load.unwrap_or(f64::NAN),
        sources.len(),
        dur.as_secs_f64(),
        rate(sent, dur),
        c.send_errors.load(Ordering::Relaxed),
        e_udp.in_datagrams,
        e_udp.rcvbuf_errors,
        rate(answered, dur),
        100.0 * cpu_s / dur.as_secs_f64(),
        answered as f64 / cpu_s.max(0.01),
        1e6 * cpu_s / answered.max(1) as f64,
        up.as_secs_f64(),
        w_udp.rcvbuf_errors,
        to_east.received,
        to_east.transmitted,
        to_west.received,
        to_west.transmitted,
        after.received,
        after.transmitted,
    );

    // The tunnel came up under the flood and is the same one afterwards.
    assert_eq!(w_sa.id, ike_id, "the IKE SA was not replaced");
    assert_eq!(w_sa.children[0].in_spi, e_sa.children[0].out_spi);
    assert_eq!(w_sa.children[0].out_spi, e_sa.children[0].in_spi);
    assert!(w_sa.initiator && !e_sa.initiator);
    assert_eq!(
        e_after.iter().filter(|s| s.state == "established").count(),
        1,
        "{e_after:?}"
    );
    assert!(
        to_east.all_answered() && to_west.all_answered(),
        "pings through the established tunnel during the flood: {to_east:?} {to_west:?}"
    );
    assert!(after.all_answered(), "pings after the flood: {after:?}");
    assert!(lines <= MAX_LOG_LINES, "the responder logged {lines} lines during the flood");
    // The defence: no half-open SA expires within the flood (30 s), so at
    // most `cookie_threshold` forged requests ever got a key exchange; the
    // rest got a stateless COOKIE.
    assert!(
        accepted <= COOKIE_THRESHOLD,
        "{accepted} forged requests accepted"
    );
    assert!(cookies > 0 && cookies + accepted <= sent);
    assert_eq!(other, 0, "only cookies and SA responses");
    assert!(
        answered * 4 >= sent,
        "answered {answered} of {sent}: the responder fell far behind"
    );
    west.stop().unwrap();
    east.stop();
    drop(flood_ns);
}

#[test]
fn blind_flood_forging_the_peer_address() {
    if skip("netns_ike_flood", false) {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (pps, secs) = flood_rate();
    let bin = Path::new(env!("CARGO_BIN_EXE_esparto"));
    let topo = Topology::new().unwrap();
    let west_addr = Topology::addr(Node::GwWest, Net::Transit, Family::V4);
    // The peer's own address, local in the flood namespace; gw-east keeps
    // routing it to the real peer, so the forger never sees an answer.
    let flood_ns = flooder(&topo, &format!("{west_addr}/32"), false);
    let socks = sockets(&flood_ns, &[west_addr]);

    let mut ecfg = EspartoConfig::site(Node::GwEast, keying(false, false)).unwrap();
    ecfg.workers = Some(2);
    let east = Daemon::start(topo.ns(Node::GwEast), bin, &ecfg, |t| t);
    let cpu0 = cpu::sample(east.pid).unwrap();
    let (e_udp0, w_udp0) = (
        Udp::read(topo.ns(Node::GwEast)),
        Udp::read(topo.ns(Node::GwWest)),
    );
    let tx0 = tx_packets(topo.ns(Node::GwEast), "wan0");
    let load = loadavg();
    let idle = mem::sample(east.pid).unwrap();
    let lines0 = east.log_lines();
    let watch = mem::Watch::start(east.pid, Duration::from_millis(100));
    let target = SocketAddr::new(Topology::addr(Node::GwEast, Net::Transit, Family::V4), 500);
    let flood = Flood::start(socks, target, pps, false);
    std::thread::sleep(Duration::from_millis(500));

    let mut wcfg = EspartoConfig::site(Node::GwWest, keying(true, true)).unwrap();
    wcfg.workers = Some(2);
    let t_west = Instant::now();
    let west = EspartoGateway::start(topo.ns(Node::GwWest), bin, &wcfg).unwrap();
    let wns = topo.ns(Node::GwWest).name().to_string();
    let up = wait_for(
        "the tunnel under a flood forging its address",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || Ok(established(&sas(bin, &wns, west.control_path())).map(|_| t_west.elapsed())),
    );
    let up = match up {
        Ok(d) => d,
        Err(e) => {
            flood.finish();
            panic!("{e:#}; east log:\n{}", east.log());
        }
    };
    // The established tunnel carries pings both ways for the rest of the flood.
    let rest = Duration::from_secs(secs).saturating_sub(flood.started.elapsed());
    let (to_east, to_west) = ping_both_ways(&topo, rest);
    let (c, dur) = flood.finish();
    let cpu1 = cpu::sample(east.pid).unwrap();
    let (sampled, _) = watch.stop();
    let memory = check_memory(idle, mem::sample(east.pid).unwrap(), sampled);
    let lines = east.log_lines() - lines0;
    // The real peer receives the reflected COOKIEs: its log is bounded too.
    let west_lines = std::fs::read_to_string(west.dir().join("esparto.log")).unwrap_or_default().lines().count();
    let e_udp = Udp::read(topo.ns(Node::GwEast)).since(e_udp0);
    let w_udp = Udp::read(topo.ns(Node::GwWest)).since(w_udp0);
    // What east sent towards the real peer: the COOKIEs it reflected (and
    // a little tunnel and IKE traffic).
    let reflected = tx_packets(topo.ns(Node::GwEast), "wan0") - tx0;
    let after = ping_east(&topo, 5);
    let e_after = east.sas();
    let sent = c.sent.load(Ordering::Relaxed);
    let cpu_s = cpu1.process.total_s() - cpu0.process.total_s();
    eprintln!(
        "blind IKE_SA_INIT flood forging {west_addr} ({}, load average {:.1} before): offered {sent} in {:.1} s \
         = {:.0}/s; east UDP: {} datagrams in, {} dropped at a full receive buffer; east sent {reflected} \
         packets to the real peer ({:.0}/s, the reflected COOKIEs), west UDP: {} in, {} dropped; responder \
         CPU {cpu_s:.2} s = {:.0}% of one core, {:.1} us per packet sent to the peer; tunnel up {:.2} s \
         after the initiator started; pings during (both ways) {}/{} and {}/{}, after {}/{}; {memory}; \
         responder log: {lines} lines during the flood, the real peer's: {west_lines} lines",
        build(),
        load.unwrap_or(f64::NAN),
        dur.as_secs_f64(),
        rate(sent, dur),
        e_udp.in_datagrams,
        e_udp.rcvbuf_errors,
        rate(reflected, dur),
        w_udp.in_datagrams,
        w_udp.rcvbuf_errors,
        100.0 * cpu_s / dur.as_secs_f64(),
        1e6 * cpu_s / reflected.max(1) as f64,
        up.as_secs_f64(),
        to_east.received,
        to_east.transmitted,
        to_west.received,
        to_west.transmitted,
        after.received,
        after.transmitted,
    );
    assert!(established(&e_after).is_some(), "east: {e_after:?}");
    assert_eq!(
        e_after.iter().filter(|s| s.state == "established").count(),
        1
    );
    assert!(
        to_east.all_answered() && to_west.all_answered(),
        "pings through the established tunnel during the flood: {to_east:?} {to_west:?}"
    );
    assert!(after.all_answered(), "pings after the flood: {after:?}");
    assert!(lines <= MAX_LOG_LINES, "the responder logged {lines} lines during the flood");
    assert!(west_lines <= MAX_LOG_LINES, "the real peer logged {west_lines} lines");
    west.stop().unwrap();
    east.stop();
    drop(flood_ns);
}
