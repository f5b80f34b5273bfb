//! Worker threads end to end: two "gateways" in namespaces, each with a
//! 2-queue TUN, a 2-socket reuseport group with SPI steering and two pinned
//! workers running a plaintext stand-in for ESP (SPI | seq | inner packet).
//! A TCP stream crosses west → east; commands reach the workers through
//! their queues; IKE-marked datagrams reach the control socket; shutdown
//! joins the threads and the TUN devices disappear.

#![allow(clippy::unwrap_used)]

mod common;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use esparto_io::netns::{Netns, Pair};
use esparto_io::tun::{TunConfig, TunDevice};
use esparto_io::udp::{UdpConfig, UdpGroup};
use esparto_io::worker::{ControlDatagram, WorkerConfig, WorkerReport};
use esparto_io::{Datapath, RxBatch, TxBatch, Workers, spi_for_worker, steer_index};

const WORKERS: usize = 2;

enum Cmd {
    SetPeer(SocketAddr),
    Ping(mpsc::Sender<usize>),
}

#[derive(Default)]
struct Counters {
    ticks: AtomicU64,
    strays: AtomicU64,
    no_peer: AtomicU64,
}

struct PlainTunnel {
    index: usize,
    spi: u32,
    seq: u32,
    peer: Option<SocketAddr>,
    counters: Arc<Counters>,
}

impl Datapath for PlainTunnel {
    type Command = Cmd;

    fn on_command(&mut self, _now: Instant, cmd: Cmd, _io: &WorkerReport) {
        match cmd {
            Cmd::SetPeer(p) => self.peer = Some(p),
            Cmd::Ping(reply) => {
                let _ = reply.send(self.index);
            }
        }
    }

    fn outbound(
        &mut self,
        _now: Instant,
        pkts: &mut RxBatch,
        from: usize,
        out: &mut TxBatch,
        _to_tun: &mut TxBatch,
    ) -> usize {
        let Some(peer) = self.peer else {
            self.counters
                .no_peer
                .fetch_add((pkts.len() - from) as u64, Ordering::Relaxed);
            return pkts.len();
        };
        for (p, _) in pkts.iter().skip(from) {
            self.seq += 1;
            let (spi, seq) = (self.spi, self.seq);
            let _ = out.push_with(Some(peer), |buf| {
                buf[..4].copy_from_slice(&spi.to_be_bytes());
                buf[4..8].copy_from_slice(&seq.to_be_bytes());
                buf[8..8 + p.len()].copy_from_slice(p);
                8 + p.len()
            });
        }
        pkts.len()
    }

    fn inbound(
        &mut self,
        _now: Instant,
        dgrams: &mut RxBatch,
        from: usize,
        to_tun: &mut TxBatch,
        to_control: &mut TxBatch,
    ) -> usize {
        for (i, (d, peer)) in dgrams.iter().enumerate().skip(from) {
            if to_tun.is_full() || to_control.is_full() {
                return i;
            }
            let idx = steer_index(d, WORKERS);
            if idx == WORKERS {
                let _ = to_control.push(peer, d);
                continue;
            }
            if idx != self.index {
                self.counters.strays.fetch_add(1, Ordering::Relaxed);
            }
            let _ = to_tun.push(None, &d[8..]);
        }
        dgrams.len()
    }

    fn on_tick(&mut self, _now: Instant) {
        self.counters.ticks.fetch_add(1, Ordering::Relaxed);
    }
}

struct Gateway {
    workers: Workers<Cmd>,
    control: esparto_io::UdpSocket,
    counters: Arc<Counters>,
}

fn gateway(
    ns: &Netns,
    tun_name: &str,
    tun_addr: Ipv4Addr,
    bind: SocketAddr,
    ctl: mpsc::Sender<ControlDatagram>,
) -> Gateway {
    let (tun, group) = ns
        .run(|| {
            let tun = TunDevice::create(&TunConfig {
                name: tun_name.into(),
                queues: WORKERS,
                mtu: 1400,
                ipv4: Some((tun_addr, 24)),
                ..TunConfig::default()
            })?;
            let group = UdpGroup::bind(bind, WORKERS, &UdpConfig::default())?;
            std::io::Result::Ok((tun, group))
        })
        .unwrap()
        .unwrap();
    let counters = Arc::new(Counters::default());
    let dps = (0..WORKERS)
        .map(|k| PlainTunnel {
            index: k,
            // Per-worker SA: an SPI the peer steers to its worker k.
            spi: spi_for_worker(0x5eed_0000 + 977 * k as u32, k, WORKERS).unwrap(),
            seq: 0,
            peer: None,
            counters: counters.clone(),
        })
        .collect();
    let cfg = WorkerConfig {
        tick: Duration::from_millis(20),
        ..WorkerConfig::default()
    };
    let UdpGroup {
        workers: socks,
        control,
    } = group;
    let workers = Workers::spawn(&cfg, tun.into_queues(), socks, dps, Some(ctl)).unwrap();
    Gateway {
        workers,
        control,
        counters,
    }
}

#[test]
fn two_gateways_carry_tcp_and_shut_down_cleanly() {
    require_netns!("two_gateways_carry_tcp_and_shut_down_cleanly");
    let pair = Pair::new("gw", "10.205.0.1/24", "10.205.0.2/24").unwrap();
    let (west_ul, east_ul): (SocketAddr, SocketAddr) = (
        "10.205.0.1:4500".parse().unwrap(),
        "10.205.0.2:4500".parse().unwrap(),
    );
    let (ctl_tx, ctl_rx) = mpsc::channel();
    let west = gateway(
        &pair.a,
        "tunW",
        Ipv4Addr::new(10, 90, 0, 1),
        west_ul,
        ctl_tx.clone(),
    );
    let east = gateway(
        &pair.b,
        "tunE",
        Ipv4Addr::new(10, 90, 0, 2),
        east_ul,
        ctl_tx,
    );

    // Commands: tell every worker its peer, then check each applied it.
    for k in 0..WORKERS {
        assert!(west.workers.send(k, Cmd::SetPeer(east_ul)).is_ok());
        assert!(east.workers.send(k, Cmd::SetPeer(west_ul)).is_ok());
    }
    for gw in [&west, &east] {
        for k in 0..WORKERS {
            let (tx, rx) = mpsc::channel();
            assert!(gw.workers.send(k, Cmd::Ping(tx)).is_ok());
            assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), k);
        }
    }

    // A TCP stream west → east across the tunnel.
    const LEN: usize = 4 << 20;
    let data = Arc::new(common::pattern(LEN, 5));
    let listener = pair
        .b
        .run(|| TcpListener::bind("10.90.0.2:5001"))
        .unwrap()
        .unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).unwrap();
        got
    });
    let d2 = data.clone();
    let client = pair
        .a
        .run(move || {
            let mut s = TcpStream::connect_timeout(
                &"10.90.0.2:5001".parse().unwrap(),
                Duration::from_secs(5),
            )?;
            s.write_all(&d2)
        })
        .unwrap();
    client.unwrap();
    let got = server.join().unwrap();
    assert!(
        got == *data,
        "stream corrupted: {} of {LEN} bytes",
        got.len()
    );

    // IKE (non-ESP marker) to east:4500 lands on the control socket, not a worker.
    let ike_src = pair
        .a
        .run(|| std::net::UdpSocket::bind("10.205.0.1:0"))
        .unwrap()
        .unwrap();
    let mut ike = vec![0u8; 4];
    ike.extend(common::pattern(36, 1));
    ike_src.send_to(&ike, east_ul).unwrap();
    let mut buf = [0u8; 128];
    let mut got_ike = None;
    common::wait_until(Duration::from_secs(5), || {
        got_ike = east.control.recv_from(&mut buf).unwrap();
        got_ike.is_some()
    });
    let (n, from) = got_ike.expect("IKE datagram at the control socket");
    assert_eq!((&buf[..n], from), (&ike[..], ike_src.local_addr().unwrap()));
    assert!(ctl_rx.try_recv().is_err(), "no worker saw the IKE datagram");

    assert!(west.counters.ticks.load(Ordering::Relaxed) > 0, "ticks run");
    assert_eq!(west.counters.strays.load(Ordering::Relaxed), 0);
    assert_eq!(
        east.counters.strays.load(Ordering::Relaxed),
        0,
        "every datagram reached its SA's worker"
    );

    let west_reports = west.workers.shutdown();
    let east_reports = east.workers.shutdown();
    assert_eq!(west_reports.len(), WORKERS);
    let sent: u64 = west_reports.iter().map(|r| r.udp.tx_datagrams).sum();
    let recvd: u64 = east_reports.iter().map(|r| r.udp.rx_datagrams).sum();
    assert!(sent > 1000 && recvd > 1000, "sent {sent}, received {recvd}");
    for r in west_reports.iter().chain(&east_reports) {
        assert!(r.cpu.is_some(), "worker {} not pinned", r.index);
        assert_eq!(r.io_errors, 0, "{r:?}");
        if r.udp.rx_calls == 0 && r.tun.rx_reads == 0 {
            // Idle: woken only by ticks (20 ms) and commands, never spinning.
            assert!(r.loops < 500, "idle worker looped {} times", r.loops);
        }
    }
    eprintln!("west: {west_reports:#?}\neast: {east_reports:#?}");
    // Queues closed → the TUN devices are gone. A device lives while any
    // fd to it is open, and a process spawned at that moment holds copies
    // until its exec: wait a little rather than ask once.
    assert!(
        common::wait_until(Duration::from_secs(5), || pair
            .a
            .ip(&["link", "show", "tunW"])
            .is_err()),
        "tunW still exists"
    );
    assert!(
        common::wait_until(Duration::from_secs(5), || pair
            .b
            .ip(&["link", "show", "tunE"])
            .is_err()),
        "tunE still exists"
    );
}
