//! Statically keyed SAs across crashes: the sequence number is the AES-GCM
//! nonce, so after a `kill -9` and a restart a gateway must never send an
//! (SPI, sequence number) it sent before, and its peer must accept the
//! restarted gateway's traffic at once.
//!
//! - `kill9_restarts_never_repeat_an_spi_and_sequence_number`: gw-west runs
//!   Esparto with static keys under constant UDP load; gw-east is not a
//!   gateway here: the test owns its UDP port 4500 and logs the SPI and
//!   sequence number of every ESP-in-UDP datagram that arrives. gw-west is
//!   killed with SIGKILL and restarted [`RESTARTS`] times (alternately with
//!   one SA pair, the fallback shared by both workers, and with three, one
//!   sub-SA per worker); no pair may be seen twice, and the state file must
//!   cover every sequence number seen.
//! - `after_a_kill9_the_peer_accepts_the_restarted_gateway_at_once`: both
//!   gateways run Esparto; numbered UDP datagrams cross the tunnel while
//!   gw-west is killed and restarted three times. Only datagrams sent
//!   from just before a kill until the new daemon is up (ready, or
//!   carrying traffic if that comes later) are lost, and gw-east drops
//!   nothing as replay. On a starved machine a TUN queue or the
//!   receiver's socket buffer may overflow at any time; such losses must
//!   be counted (by a gateway's drop counters or the receiving
//!   namespace's UDP `RcvbufErrors`), never silent.
//!
//! Needs root: SKIP otherwise.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use esparto::status::Status;
use esparto_testbed::esparto::{EspartoConfig, EspartoGateway, Keying, StaticPair};
use esparto_testbed::topology::{Net, Node, Topology, udp_rcvbuf_errors};
use esparto_testbed::{Family, WorkDir, skip, wait_for};

/// Crash-and-restart cycles of the first test.
const RESTARTS: usize = 100;
/// Datagrams the recorder must see from each run before it is killed.
const PER_RUN: u64 = 200;
/// A pause in arrivals at least this long counts as an outage.
const GAP: Duration = Duration::from_millis(20);

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_esparto"))
}

/// gw-west's view of `n` SA pairs (fallback first), each key distinct.
fn pairs(n: u32) -> Vec<StaticPair> {
    (0..n)
        .map(|i| StaticPair {
            in_spi: 0xc000_0200 + i,
            out_spi: 0xc000_0100 + i,
            in_key: format!("{:02x}", 0x20 + i).repeat(36),
            out_key: format!("{:02x}", 0x10 + i).repeat(36),
        })
        .collect()
}

fn west_config(n: u32, state: &Path) -> EspartoConfig {
    let mut c = EspartoConfig::site(Node::GwWest, Keying::Static(pairs(n))).unwrap();
    c.workers = Some(2);
    c.state_dir = Some(state.to_path_buf());
    c
}

/// Constant UDP load from host-west to host-east on `flows` flows, about
/// `flows` datagrams a millisecond, each carrying its number (u64, LE);
/// the send time of each number is kept.
struct Load {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<(Vec<Instant>, Vec<u64>)>>,
}

impl Load {
    fn start(topo: &Topology, flows: usize, port: u16) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let src = Topology::addr(Node::HostWest, Net::Lan, Family::V4);
        let dst = SocketAddr::new(Topology::addr(Node::HostEast, Net::Lan, Family::V4), port);
        // Sockets made in host-west stay there, whichever thread uses them.
        let socks: Vec<UdpSocket> = topo
            .ns(Node::HostWest)
            .run(|| (0..flows).map(|_| UdpSocket::bind(SocketAddr::new(src, 0)).unwrap()).collect())
            .unwrap();
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut sent = Vec::new();
            let mut refused = Vec::new();
            let t0 = Instant::now();
            let mut round = 0u32;
            while !s.load(Ordering::Relaxed) {
                for sock in &socks {
                    let n = sent.len() as u64;
                    sent.push(Instant::now());
                    // Down gateway: the send goes nowhere and the number
                    // is lost. A send the local stack refuses (a full
                    // queue on a starved machine) is counted here.
                    if sock.send_to(&n.to_le_bytes(), dst).is_err() {
                        refused.push(n);
                    }
                }
                round += 1;
                let next = t0 + Duration::from_millis(u64::from(round));
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
            }
            (sent, refused)
        });
        Self { stop, thread: Some(thread) }
    }

    /// Stops and returns the send time of every number, and the numbers
    /// whose send failed.
    fn stop(mut self) -> (Vec<Instant>, Vec<u64>) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap()
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// What arrived at a socket the test owns, logged by a thread.
struct Recorder<T> {
    stop: Arc<AtomicBool>,
    count: Arc<AtomicU64>,
    thread: Option<JoinHandle<T>>,
}

impl<T: Send + 'static> Recorder<T> {
    /// Receives on `sock` until stopped, handing each datagram to `log`.
    fn start(sock: UdpSocket, mut state: T, mut log: impl FnMut(&mut T, &[u8]) + Send + 'static) -> Self {
        sock.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let count = Arc::new(AtomicU64::new(0));
        let (s, c) = (stop.clone(), count.clone());
        let thread = std::thread::spawn(move || {
            let mut buf = [0u8; 2048];
            while !s.load(Ordering::Relaxed) {
                if let Ok(n) = sock.recv(&mut buf) {
                    log(&mut state, &buf[..n]);
                    c.fetch_add(1, Ordering::Relaxed);
                }
            }
            state
        });
        Self { stop, count, thread: Some(thread) }
    }

    fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    fn stop(mut self) -> T {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap()
    }
}

impl<T> Drop for Recorder<T> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// ESP-in-UDP as it leaves gw-west: every (SPI, sequence number) seen.
#[derive(Default)]
struct Wire {
    seen: HashMap<u32, HashSet<u32>>,
    repeats: Vec<(u32, u32)>,
    datagrams: u64,
    /// Pauses in arrivals of at least [`GAP`] (the gateway was down).
    gaps: Vec<Duration>,
    last: Option<Instant>,
}

impl Wire {
    fn log(&mut self, d: &[u8]) {
        let now = Instant::now();
        if let Some(gap) = self.last.map(|t| now - t).filter(|g| *g >= GAP) {
            self.gaps.push(gap);
        }
        self.last = Some(now);
        // RFC 3948 §2.2: a zero first word is IKE (non-ESP marker), a lone
        // 0xff a keepalive; gw-west sends neither here, but they are not ESP.
        if d.len() < 8 || d[..4] == [0; 4] {
            return;
        }
        let spi = u32::from_be_bytes(d[..4].try_into().unwrap());
        let seq = u32::from_be_bytes(d[4..8].try_into().unwrap());
        self.datagrams += 1;
        if !self.seen.entry(spi).or_default().insert(seq) {
            self.repeats.push((spi, seq));
        }
    }
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

#[test]
fn kill9_restarts_never_repeat_an_spi_and_sequence_number() {
    if skip("static_restart_netns", false) {
        return;
    }
    let began = Instant::now();
    let topo = Topology::new().unwrap();
    let state = WorkDir::new("static-restart-state").unwrap();
    // gw-east's ESP-in-UDP port belongs to the test.
    let peer = SocketAddr::new(Topology::addr(Node::GwEast, Net::Transit, Family::V4), 4500);
    let sock = topo.ns(Node::GwEast).run(|| UdpSocket::bind(peer)).unwrap().unwrap();
    let wire = Recorder::start(sock, Wire::default(), Wire::log);
    let load = Load::start(&topo, 8, 9);

    let mut starts = Vec::with_capacity(RESTARTS);
    for run in 0..RESTARTS {
        // Alternately one pair (the fallback, shared by both workers) and
        // three (a sub-SA per worker; the fallback idle): the fallback's
        // key is the same in both.
        let cfg = west_config(if run % 2 == 0 { 3 } else { 1 }, state.path());
        let before = wire.count();
        let t = Instant::now();
        let mut gw =
            EspartoGateway::start(topo.ns(Node::GwWest), bin(), &cfg).unwrap_or_else(|e| panic!("run {run}: {e:#}"));
        starts.push(t.elapsed());
        wait_for(
            &format!("run {run}: {PER_RUN} datagrams from gw-west"),
            Duration::from_secs(20),
            Duration::from_millis(2),
            || Ok((wire.count() >= before + PER_RUN).then_some(())),
        )
        .unwrap();
        gw.kill().unwrap();
    }
    load.stop();
    // Whatever was still in flight.
    std::thread::sleep(Duration::from_millis(100));
    let mut w = wire.stop();

    let spis: BTreeMap<u32, usize> = w.seen.iter().map(|(s, q)| (*s, q.len())).collect();
    let mut gaps = w.gaps.clone();
    eprintln!(
        "static_restart_netns: {RESTARTS} kill -9 restarts in {:.1} s; {} ESP datagrams checked, {} (SPI, sequence number) repeated; \
         per SPI {spis:x?}; daemon start to ready: median {:?}, max {:?}; outage seen on the wire: {} gaps ≥ {GAP:?}, median {:?}, max {:?}",
        began.elapsed().as_secs_f64(),
        w.datagrams,
        w.repeats.len(),
        median(&mut starts),
        starts.iter().max().unwrap(),
        gaps.len(),
        median(&mut gaps),
        gaps.iter().max().copied().unwrap_or_default(),
    );
    assert!(w.repeats.is_empty(), "(SPI, sequence number) sent twice: {:x?}", &w.repeats[..w.repeats.len().min(20)]);
    assert!(w.datagrams >= RESTARTS as u64 * PER_RUN, "{} datagrams", w.datagrams);
    // Every outbound SA carried traffic: the fallback (shared) and both
    // workers' sub-SAs.
    for spi in [0xc000_0100, 0xc000_0101, 0xc000_0102] {
        assert!(spis.get(&spi).is_some_and(|n| *n > 0), "SPI {spi:08x} never seen: {spis:x?}");
    }
    // The state file covers every number that was sent.
    let text = std::fs::read_to_string(state.join(esparto::daemon::STATE_FILE)).unwrap();
    let file: serde_json::Value = serde_json::from_str(&text).unwrap();
    for e in file["sas"].as_array().unwrap() {
        let spi = u32::from_str_radix(e["out_spi"].as_str().unwrap(), 16).unwrap();
        let reserved = e["reserved"].as_u64().unwrap();
        let top = w.seen.get(&spi).and_then(|q| q.iter().max()).copied().unwrap_or(0);
        assert!(u64::from(top) <= reserved, "SPI {spi:08x}: sent {top}, reserved {reserved}");
        // 100 restarts of a non-ESN SA leave most of its space.
        assert!(reserved < u64::from(u32::MAX) / 10, "SPI {spi:08x}: {reserved} reserved");
    }
    w.seen.clear();
}

/// The numbers received, for the second test.
#[derive(Default)]
struct Numbers(HashSet<u64>);

impl Numbers {
    fn log(&mut self, d: &[u8]) {
        if let Ok(b) = d.try_into() {
            self.0.insert(u64::from_le_bytes(b));
        }
    }
}

#[test]
fn after_a_kill9_the_peer_accepts_the_restarted_gateway_at_once() {
    if skip("static_restart_netns", false) {
        return;
    }
    const KILLS: usize = 3;
    let topo = Topology::new().unwrap();
    let state = WorkDir::new("static-restart-peer-state").unwrap();
    let mut east_cfg =
        EspartoConfig::site(Node::GwEast, Keying::Static(pairs(3).iter().map(StaticPair::mirrored).collect())).unwrap();
    east_cfg.workers = Some(2);
    let east = EspartoGateway::start(topo.ns(Node::GwEast), bin(), &east_cfg).unwrap();
    let mut west = EspartoGateway::start(topo.ns(Node::GwWest), bin(), &west_config(3, state.path())).unwrap();

    let dst = SocketAddr::new(Topology::addr(Node::HostEast, Net::Lan, Family::V4), 7000);
    let sock = topo.ns(Node::HostEast).run(|| UdpSocket::bind(dst)).unwrap().unwrap();
    let rcvbuf_before = udp_rcvbuf_errors(topo.ns(Node::HostEast)).unwrap();
    let got = Recorder::start(sock, Numbers::default(), Numbers::log);
    let load = Load::start(&topo, 4, 7000);
    wait_for("traffic through the tunnel", Duration::from_secs(10), Duration::from_millis(10), || {
        Ok((got.count() > 200).then_some(()))
    })
    .unwrap();

    // (killed, ready again)
    let mut kills: Vec<(Instant, Instant)> = Vec::new();
    // Drops gw-west counted (each incarnation's, read before it dies).
    let counted = |st: &Status| st.drops.values().sum::<u64>();
    let mut west_counted = 0;
    for _ in 0..KILLS {
        std::thread::sleep(Duration::from_millis(700));
        west_counted += west.status().map_or(0, |st| counted(&st));
        let killed = Instant::now();
        west.kill().unwrap();
        west.restart().unwrap();
        kills.push((killed, Instant::now()));
    }
    std::thread::sleep(Duration::from_millis(700));
    let (sent, refused) = load.stop();
    std::thread::sleep(Duration::from_millis(200));
    let got = got.stop().0;
    let east_status = east.status().unwrap();
    west_counted += west.status().map_or(0, |st| counted(&st));
    let rcvbuf = udp_rcvbuf_errors(topo.ns(Node::HostEast)).unwrap() - rcvbuf_before;

    // Each outage: from the kill to the first datagram sent after it that
    // arrived. Nothing else may be lost.
    let backs: Vec<Option<Instant>> = kills
        .iter()
        .map(|(killed, _)| {
            sent.iter().enumerate().filter(|(n, t)| *t > killed && got.contains(&(*n as u64))).map(|(_, t)| *t).min()
        })
        .collect();
    let mut lost_in = vec![0usize; KILLS];
    let mut lost_outside = Vec::new();
    for (n, t) in sent.iter().enumerate() {
        if got.contains(&(n as u64)) || refused.contains(&(n as u64)) {
            continue;
        }
        // In flight in gw-west when it died, or sent before the new
        // daemon was up (ready, or carrying traffic if that came first).
        let during = kills.iter().zip(&backs).position(|((k, ready), b)| {
            *t + Duration::from_millis(50) >= *k && (*t <= *ready || b.is_none_or(|b| *t <= b))
        });
        match during {
            Some(i) => lost_in[i] += 1,
            None => lost_outside.push(n),
        }
    }
    let outages: Vec<Option<Duration>> = kills.iter().zip(&backs).map(|((k, _), b)| b.map(|b| b - *k)).collect();
    let restarts: Vec<Duration> = kills.iter().map(|(k, r)| *r - *k).collect();
    eprintln!(
        "static_restart_netns: {} datagrams sent, {} received; per kill -9: lost {lost_in:?}, outage (kill to first datagram through) {outages:?}, \
         restart (kill to ready) {restarts:?}; gw-east drops {:?}; gw-west counted {west_counted} drops; \
         the receiver's socket dropped {rcvbuf}; {} sends refused; lost outside the outages {}",
        sent.len(),
        got.len(),
        east_status.drops,
        refused.len(),
        lost_outside.len(),
    );
    assert_eq!(
        east_status.drops.get("replay"),
        None,
        "gw-east dropped the restarted gateway's packets as replays: {:?}",
        east_status.drops
    );
    assert_eq!(east_status.drops.get("icv_failure"), None, "{:?}", east_status.drops);
    for (i, ((_, ready), back)) in kills.iter().zip(&backs).enumerate() {
        let back = back.unwrap_or_else(|| panic!("nothing arrived after kill {i}"));
        assert!(
            back <= *ready + Duration::from_secs(2),
            "kill {i}: traffic came back {:?} after gw-west was ready again",
            back - *ready
        );
    }
    let when = |n: usize| -> String {
        let t = sent[n];
        kills
            .iter()
            .zip(&backs)
            .map(|((k, r), b)| {
                format!(
                    "{:?} after a kill ({:?} after ready, back {:?})",
                    t.saturating_duration_since(*k),
                    t.saturating_duration_since(*r),
                    b.map(|b| t.saturating_duration_since(b))
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    // Outside the outages nothing may be lost that nobody counted: on a
    // starved machine a gateway's TUN queue or the receiver's socket
    // buffer may overflow, and each says so.
    let explained = west_counted + counted(&east_status) + rcvbuf;
    assert!(
        lost_outside.len() as u64 <= explained,
        "lost outside the outages: {} datagrams ({explained} counted by the gateways and the receiver), first {:?}: sent {}",
        lost_outside.len(),
        &lost_outside[..lost_outside.len().min(10)],
        when(lost_outside[0])
    );
    west.stop().unwrap();
    east.stop().unwrap();
}
