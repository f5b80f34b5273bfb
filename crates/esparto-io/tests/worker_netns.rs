//! Worker threads end to end: two "gateways" in namespaces, each with a
//! 2-queue TUN, a 2-socket reuseport group with SPI steering and two pinned
//! workers running a plaintext stand-in for ESP (SPI | seq | inner packet).
//! A TCP stream crosses west → east; commands reach the workers through
//! their queues; IKE-marked datagrams reach the control socket; shutdown
//! joins the threads and the TUN devices disappear. GSO trains of IKE
//! behind one ESP-looking datagram, which the steering program hands to a
//! worker whole, reach the control thread only as far as the worker's pool
//! allows: the rest is dropped and counted.

#![allow(clippy::unwrap_used)]

mod common;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use esparto_netns::{Netns, Pair};
use esparto_io::tun::{TunConfig, TunDevice};
use esparto_io::udp::{UdpConfig, UdpGroup};
use esparto_io::control::{CONTROL_POOL, ControlTx, control_channel};
use esparto_io::worker::{COMMAND_QUEUE, IoStats, WorkerConfig};
use esparto_io::{Datapath, RxBatch, TxBatch, Workers, socket_index};

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

    fn on_command(&mut self, _now: Instant, cmd: Cmd, _io: &IoStats) {
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
            let idx = socket_index(&common::KEY, d, WORKERS);
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
    ctl: ControlTx,
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
            let group = UdpGroup::bind(bind, WORKERS, &common::steered())?;
            std::io::Result::Ok((tun, group))
        })
        .unwrap()
        .unwrap();
    let counters = Arc::new(Counters::default());
    let dps = (0..WORKERS)
        .map(|k| PlainTunnel {
            index: k,
            // Per-worker SA: an SPI the peer steers to its worker k.
            spi: common::key_for_worker(0x5eed_0000 + 977 * k as u32, k, WORKERS).unwrap(),
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
    let (ctl_tx, ctl_rx) = control_channel(2 * WORKERS);
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

    // More commands than a worker's queue holds: the sender waits for
    // room, and none is lost (counted at shutdown).
    for _ in 0..3 * COMMAND_QUEUE {
        assert!(west.workers.send(0, Cmd::SetPeer(east_ul)).is_ok());
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
    assert!(ctl_rx.try_recv().is_none(), "no worker saw the IKE datagram");

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
    assert_eq!(west_reports[0].commands, 3 * COMMAND_QUEUE as u64 + 2, "every command applied");
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

/// Datagrams per train: one ESP-looking, then IKE behind the non-ESP marker.
const TRAIN: usize = 60;

#[test]
fn ike_trains_behind_esp_are_bounded_by_the_pool_and_counted() {
    require_netns!("ike_trains_behind_esp_are_bounded_by_the_pool_and_counted");
    let pair = Pair::new("gt", "10.206.0.1/24", "10.206.0.2/24").unwrap();
    let east_ul: SocketAddr = "10.206.0.2:4500".parse().unwrap();
    let (ctl_tx, ctl_rx) = control_channel(WORKERS);
    let east = gateway(&pair.b, "tunT", Ipv4Addr::new(10, 91, 0, 2), east_ul, ctl_tx);
    // The attacker: GSO sends of TRAIN equal-sized datagrams, the first
    // with an SPI that steers to worker 1, the others IKE-marked.
    let cfg = UdpConfig { gro: false, gso: true, steering: None, ..UdpConfig::default() };
    let mut src = pair
        .a
        .run(|| esparto_io::UdpSocket::bind("10.206.0.1:0".parse().unwrap(), &cfg, false))
        .unwrap()
        .unwrap();
    let spi = common::key_for_worker(0x7777_0000, 1, WORKERS).unwrap();
    let mut train = TxBatch::new(TRAIN, 0, 64);
    let send_trains = |src: &mut esparto_io::UdpSocket, train: &mut TxBatch, n: usize| {
        for t in 0..n {
            train.clear();
            for i in 0..TRAIN {
                train
                    .push_with(Some(east_ul), |b| {
                        b[..48].fill(i as u8 ^ t as u8);
                        let head = if i == 0 { spi.to_be_bytes() } else { [0; 4] };
                        b[..4].copy_from_slice(&head);
                        48
                    })
                    .unwrap();
            }
            assert_eq!(src.send_batch(train).unwrap(), TRAIN);
        }
    };
    const TRAINS: usize = 50;
    send_trains(&mut src, &mut train, TRAINS);
    assert_eq!(src.stats().tx_msgs, TRAINS as u64, "one GSO super-packet per train");
    // Nobody reads the control side: worker 1 forwards one pool's worth and
    // drops the rest, counted; nothing else grows.
    let ike = (TRAINS * (TRAIN - 1)) as u64;
    let report = |gw: &Gateway| {
        let (tx, rx) = mpsc::channel();
        assert!(gw.workers.send(1, Cmd::Ping(tx)).is_ok());
        rx.recv_timeout(Duration::from_secs(5)).unwrap();
    };
    let mut queued = Vec::new();
    assert!(
        common::wait_until(Duration::from_secs(10), || {
            report(&east);
            while let Some(d) = ctl_rx.try_recv() {
                queued.push(d);
            }
            queued.len() == CONTROL_POOL
        }),
        "{} datagrams queued, expected {CONTROL_POOL}",
        queued.len()
    );
    assert!(queued.iter().all(|d| d.worker() == 1 && d.bytes().len() == 48 && d.bytes()[..4] == [0; 4]));
    // Held datagrams keep their buffers: still nothing more gets through.
    send_trains(&mut src, &mut train, 1);
    std::thread::sleep(Duration::from_millis(200));
    assert!(ctl_rx.try_recv().is_none(), "the pool is spent while its buffers are held");
    // Handled (dropped): the buffers return, and the next train's
    // datagrams get through, one pool's worth again.
    queued.clear();
    send_trains(&mut src, &mut train, 2);
    // Held while counted: a buffer dropped here would go back to the pool
    // and let one more datagram through (the worker may take the two
    // trains in two batches, with this loop between them).
    let mut more = Vec::new();
    assert!(common::wait_until(Duration::from_secs(10), || {
        while let Some(d) = ctl_rx.try_recv() {
            more.push(d);
        }
        more.len() >= CONTROL_POOL
    }), "{} datagrams after the pool was returned", more.len());
    // And no more come.
    std::thread::sleep(Duration::from_millis(200));
    while let Some(d) = ctl_rx.try_recv() {
        more.push(d);
    }
    assert_eq!(more.len(), CONTROL_POOL, "datagrams after the pool was returned");
    drop(more);
    let reports = east.workers.shutdown();
    let r1 = &reports[1];
    let offered = ike + 3 * (TRAIN as u64 - 1);
    eprintln!("worker 1: {:?}", r1.drops());
    assert_eq!(r1.udp.rx_datagrams, offered + TRAINS as u64 + 3, "every datagram reached worker 1");
    assert_eq!(r1.control_queue_full, offered - 2 * CONTROL_POOL as u64, "{r1:?}");
    assert_eq!(r1.drops()[0], ("control_queue_full", r1.control_queue_full));
    assert_eq!(reports[0].udp.rx_datagrams, 0, "worker 0 saw none of it");
    assert_eq!(east.counters.strays.load(Ordering::Relaxed), 0);
}
