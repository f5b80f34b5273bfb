//! (c) TSO/USO super-packets from the stack are split by `recv_batch` into
//! MTU-sized packets with valid checksums, and `send_batch` delivers packets
//! (coalesced again) to the stack; (d) the kernel spreads flows over the
//! queues of a multi-queue TUN by flow hash and learns a flow's queue from
//! the queue userspace writes it on.
//!
//! Topology for (c): namespaces A and B, each with a TUN (10.99.0.1/24 in A,
//! 10.99.0.2/24 in B); this test relays packets between the two TUN queues,
//! checking every packet on the way, so a TCP stream from A to a listener on
//! B's TUN address crosses our recv_batch/send_batch in both directions.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use esparto_netns::Netns;
use esparto_io::tun::{Steering, TunConfig, TunDevice, TunQueue, VNET_HDR_LEN};
use esparto_io::udp::{UdpConfig, UdpSocket};
use esparto_io::{RxBatch, TxBatch};

const MTU: u16 = 1420;

#[derive(Default, Debug)]
struct RelayLog {
    packets: [u64; 2],
    /// Reads from A that split a super-packet of UDP datagrams (USO).
    uso_super_reads: u64,
    max_len: usize,
    bad: Vec<String>,
}

fn tun_in(ns: &Netns, name: &str, addr: Ipv4Addr, queues: usize) -> TunDevice {
    tun_steered(ns, name, addr, queues, Steering::FlowTable)
}

fn tun_steered(ns: &Netns, name: &str, addr: Ipv4Addr, queues: usize, steering: Steering) -> TunDevice {
    let cfg = TunConfig {
        name: name.into(),
        queues,
        mtu: MTU,
        ipv4: Some((addr, 24)),
        steering,
        ..TunConfig::default()
    };
    ns.run(|| TunDevice::create(&cfg)).unwrap().unwrap()
}

/// Move packets A→B and B→A until `stop`, checking each one.
fn relay(
    mut qa: TunQueue,
    mut qb: TunQueue,
    stop: Arc<AtomicBool>,
) -> (RelayLog, TunQueue, TunQueue) {
    let mut log = RelayLog::default();
    let mut rx = RxBatch::new(128, 32, 1500, 128);
    let mut tx = TxBatch::new(128, 16, 65_535);
    while !stop.load(Ordering::Relaxed) {
        let mut idle = true;
        for dir in 0..2 {
            let (from, to) = if dir == 0 {
                (&mut qa, &mut qb)
            } else {
                (&mut qb, &mut qa)
            };
            let gso_before = from.stats().rx_gso_reads;
            let n = from.recv_batch(&mut rx).unwrap();
            if n == 0 {
                continue;
            }
            idle = false;
            // (Late TCP ACK/FIN packets may share the batch; the TCP stream
            // has finished, so a super-packet read now is the UDP one.)
            let udp = rx
                .iter()
                .filter(|(p, _)| p[0] >> 4 == 4 && p[9] == 17)
                .count();
            if dir == 0 && udp > 1 && from.stats().rx_gso_reads > gso_before {
                log.uso_super_reads += 1;
            }
            for (p, _) in rx.iter() {
                log.max_len = log.max_len.max(p.len());
                if let Some(e) = common::checksum_error(p) {
                    log.bad.push(e);
                }
                tx.push(None, p).unwrap();
            }
            log.packets[dir] += n as u64;
            to.send_batch(&mut tx).unwrap();
        }
        if idle {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    (log, qa, qb)
}

/// Start relaying between two TUN queues; stop with the flag, join for
/// the log and the queues.
fn start_relay(
    qa: TunQueue,
    qb: TunQueue,
) -> (Arc<AtomicBool>, std::thread::JoinHandle<(RelayLog, TunQueue, TunQueue)>) {
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    (stop, std::thread::spawn(move || relay(qa, qb, s)))
}

/// Send `data` over TCP from namespace `from` to `dst`, where `listener`
/// accepts; return what arrived (short if the stream stalled for 10 s).
fn tcp_through(from: &Netns, listener: TcpListener, dst: &str, data: &Arc<Vec<u8>>) -> Vec<u8> {
    let len = data.len();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut got = Vec::with_capacity(len);
        let _ = s.read_to_end(&mut got);
        got
    });
    let client = {
        let data = data.clone();
        let ns_path = format!("/var/run/netns/{}", from.name());
        let dst: SocketAddr = dst.parse().unwrap();
        std::thread::spawn(move || {
            let f = std::fs::File::open(ns_path).unwrap();
            // Join the namespace on this thread only.
            use std::os::fd::AsRawFd;
            // SAFETY: setns on a namespace fd we opened, for this thread.
            assert_eq!(unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) }, 0);
            let mut s = TcpStream::connect_timeout(&dst, Duration::from_secs(5)).unwrap();
            s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
            // A stalled stream shows as a short read in the server.
            let _ = s.write_all(&data);
        })
    };
    client.join().unwrap();
    server.join().unwrap()
}

/// Send 40 datagrams of 1,000 bytes from `src` in namespace `from` to
/// `dst` in one UDP GSO batch (a USO super-packet into the TUN when USO
/// is on); return them and what `rx` received within 5 s.
fn udp_through(from: &Netns, src: &str, dst: &str, rx: &std::net::UdpSocket, seed: u32) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let src: SocketAddr = src.parse().unwrap();
    let dst: SocketAddr = dst.parse().unwrap();
    let mut us = from.run(|| UdpSocket::bind(src, &UdpConfig::default(), false)).unwrap().unwrap();
    let mut batch = TxBatch::new(64, 0, 1500);
    let mut sent = Vec::new();
    for i in 0..40u32 {
        let mut d = common::pattern(1000, seed + i);
        d[..4].copy_from_slice(&[9, 9, 9, 9]);
        batch.push(Some(dst), &d).unwrap();
        sent.push(d);
    }
    assert_eq!(us.send_batch(&batch).unwrap(), 40);
    rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 2000];
    let mut got = Vec::new();
    while got.len() < sent.len() {
        match rx.recv(&mut buf) {
            Ok(n) => got.push(buf[..n].to_vec()),
            Err(_) => break,
        }
    }
    (sent, got)
}

fn sysfs_counter(ns: &Netns, dev: &str, name: &str) -> u64 {
    let out = ns
        .exec("cat", &[&format!("/sys/class/net/{dev}/statistics/{name}")])
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

#[test]
fn tso_uso_split_and_gro_write_through_two_tuns() {
    require_netns!("tso_uso_split_and_gro_write_through_two_tuns");
    let a = Netns::new("tun-a").unwrap();
    let b = Netns::new("tun-b").unwrap();
    let ta = tun_in(&a, "tunA", Ipv4Addr::new(10, 99, 0, 1), 1);
    let tb = tun_in(&b, "tunB", Ipv4Addr::new(10, 99, 0, 2), 1);
    let qa = ta.into_queues().remove(0);
    let qb = tb.into_queues().remove(0);
    assert!(qa.offload(), "IFF_VNET_HDR + TSO accepted");
    let uso = qa.udp_offload();

    let listener = b
        .run(|| TcpListener::bind("10.99.0.2:5000"))
        .unwrap()
        .unwrap();
    let udp_rx = b
        .run(|| std::net::UdpSocket::bind("10.99.0.2:6000"))
        .unwrap()
        .unwrap();
    let (stop, relay_t) = start_relay(qa, qb);

    // TCP: 8 MiB from A to B's TUN address.
    const LEN: usize = 8 << 20;
    let data = Arc::new(common::pattern(LEN, 99));
    let got = tcp_through(&a, listener, "10.99.0.2:5000", &data);
    assert!(got == *data, "TCP stream corrupted or cut ({} of {LEN} bytes)", got.len());

    // UDP with GSO from A's stack: a USO super-packet into tunA when USO is on.
    let (sent, udp_got) = udp_through(&a, "10.99.0.1:0", "10.99.0.2:6000", &udp_rx, 0);
    assert_eq!(udp_got, sent);

    stop.store(true, Ordering::Relaxed);
    let (log, qa, _qb) = relay_t.join().unwrap();
    assert!(
        log.bad.is_empty(),
        "bad checksums: {:?}",
        &log.bad[..log.bad.len().min(5)]
    );
    assert!(
        log.max_len <= MTU as usize,
        "packet of {} > MTU",
        log.max_len
    );
    let sa = qa.stats();
    assert!(
        sa.rx_gso_reads > 0,
        "no TSO/USO super-packet was read: {sa:?}"
    );
    assert_eq!(sa.rx_malformed + sa.rx_split_overflow, 0, "{sa:?}");
    if uso {
        assert!(
            log.uso_super_reads > 0,
            "USO on, but no UDP super-packet was split"
        );
    }
    // GRO on write: tunB received fewer skbs than we gave send_batch.
    let written = log.packets[0];
    let rx_skbs = sysfs_counter(&b, "tunB", "rx_packets");
    assert!(
        rx_skbs < written,
        "no coalescing: {rx_skbs} skbs for {written} packets"
    );
    eprintln!(
        "relay: A→B {} packets ({} reads, {} super), B→A {}; tunB saw {rx_skbs} skbs; USO {uso} ({} UDP super reads)",
        log.packets[0], sa.rx_reads, sa.rx_gso_reads, log.packets[1], log.uso_super_reads
    );
}

/// Read every queue until `want` packets were seen; record queue per flow.
fn collect(queues: &mut [TunQueue], want: usize, per_flow: &mut BTreeMap<u16, BTreeSet<usize>>) {
    let mut rx = RxBatch::new(64, 0, 1500, 64);
    let mut seen = 0;
    common::wait_until(Duration::from_secs(5), || {
        for (qi, q) in queues.iter_mut().enumerate() {
            q.recv_batch(&mut rx).unwrap();
            for (p, _) in rx.iter() {
                if p[0] >> 4 == 4 && p[9] == 17 {
                    let (sport, _) = common::ports4(p).unwrap();
                    per_flow.entry(sport).or_default().insert(qi);
                    seen += 1;
                }
            }
        }
        seen >= want
    });
}

/// Without our steering program the kernel learns a flow's queue from the
/// queue its reverse traffic is written on (the reason for the program).
#[test]
fn multiqueue_spreads_flows_and_learns_from_writes() {
    require_netns!("multiqueue_spreads_flows_and_learns_from_writes");
    let ns = Netns::new("mq").unwrap();
    let mut queues = tun_steered(&ns, "tunMQ", Ipv4Addr::new(10, 98, 0, 1), 2, Steering::Kernel).into_queues();
    assert_eq!(queues.len(), 2);
    let socks: Vec<std::net::UdpSocket> = ns
        .run(|| {
            (0..16)
                .map(|_| std::net::UdpSocket::bind("10.98.0.1:0").unwrap())
                .collect()
        })
        .unwrap();
    let dst: SocketAddr = "10.98.0.2:7000".parse().unwrap();
    for _ in 0..3 {
        for s in &socks {
            s.send_to(b"flow", dst).unwrap();
        }
    }
    let mut per_flow = BTreeMap::new();
    collect(&mut queues, 48, &mut per_flow);
    assert_eq!(per_flow.len(), 16, "every flow seen");
    for (port, qs) in &per_flow {
        assert_eq!(
            qs.len(),
            1,
            "flow from port {port} hit queues {qs:?}: must stay on one"
        );
    }
    let used: BTreeSet<usize> = per_flow.values().flatten().copied().collect();
    assert_eq!(used.len(), 2, "16 flows all on one queue: no hashing?");

    // Learning: write a packet of the *reverse* flow on the other queue; the
    // forward flow then follows it there (tun_flow_update / automq).
    let s = &socks[0];
    let sport = s.local_addr().unwrap().port();
    let q_before = *per_flow[&sport].iter().next().unwrap();
    let q_other = 1 - q_before;
    let reply = common::udp4(
        (Ipv4Addr::new(10, 98, 0, 2), 7000),
        (Ipv4Addr::new(10, 98, 0, 1), sport),
        b"reply",
    );
    let mut tx = TxBatch::new(4, VNET_HDR_LEN.next_multiple_of(8), 2048);
    tx.push(None, &reply).unwrap();
    queues[q_other].send_batch(&mut tx).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 16];
    let n = s.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"reply", "written packet reached the socket");
    for _ in 0..3 {
        s.send_to(b"again", dst).unwrap();
    }
    let mut after = BTreeMap::new();
    collect(&mut queues, 3, &mut after);
    assert_eq!(
        after.get(&sport),
        Some(&BTreeSet::from([q_other])),
        "flow did not follow the write queue"
    );
}

/// With the hash-only steering program every flow lands on the queue our
/// hash names (`tun_steer::flow_queue`), and stays there when its reverse
/// traffic is written on another queue.
#[test]
fn steering_program_picks_the_queue_by_flow_hash() {
    require_netns!("steering_program_picks_the_queue_by_flow_hash");
    let ns = Netns::new("mqs").unwrap();
    let dev = tun_steered(&ns, "tunMQS", Ipv4Addr::new(10, 97, 0, 1), 2, Steering::FlowHash);
    assert_eq!(dev.steering(), (Steering::FlowHash, None), "the steering program must load as root");
    let mut queues = dev.into_queues();
    let socks: Vec<std::net::UdpSocket> =
        ns.run(|| (0..16).map(|_| std::net::UdpSocket::bind("10.97.0.1:0").unwrap()).collect()).unwrap();
    let dst: SocketAddr = "10.97.0.2:7000".parse().unwrap();
    // Reverse traffic of every flow written on queue 0: learning would pull
    // them all there; the program must not care.
    let mut tx = TxBatch::new(32, VNET_HDR_LEN.next_multiple_of(8), 2048);
    for s in &socks {
        let sport = s.local_addr().unwrap().port();
        let reply = common::udp4((Ipv4Addr::new(10, 97, 0, 2), 7000), (Ipv4Addr::new(10, 97, 0, 1), sport), b"r");
        tx.push(None, &reply).unwrap();
    }
    queues[0].send_batch(&mut tx).unwrap();
    for _ in 0..3 {
        for s in &socks {
            s.send_to(b"flow", dst).unwrap();
        }
    }
    let mut per_flow = BTreeMap::new();
    collect(&mut queues, 48, &mut per_flow);
    assert_eq!(per_flow.len(), 16, "every flow seen");
    for (port, qs) in &per_flow {
        let pkt = common::udp4((Ipv4Addr::new(10, 97, 0, 1), *port), (Ipv4Addr::new(10, 97, 0, 2), 7000), b"flow");
        let want = esparto_io::tun_steer::flow_queue(&pkt, 2);
        assert_eq!(qs, &BTreeSet::from([want]), "flow from port {port}: kernel and flow_queue disagree");
    }
    let used: BTreeSet<usize> = per_flow.values().flatten().copied().collect();
    assert_eq!(used.len(), 2, "16 flows all on one queue");
}

/// With the flow table (the default) new flows take the queues in turn —
/// 12 flows over 3 queues land 4–4–4, whatever their hashes — each flow
/// stays on its queue, and reverse traffic written on another queue does
/// not move it.
#[test]
fn flow_table_deals_new_flows_out_in_turn() {
    require_netns!("flow_table_deals_new_flows_out_in_turn");
    let ns = Netns::new("mqt").unwrap();
    let dev = tun_in(&ns, "tunMQT", Ipv4Addr::new(10, 96, 0, 1), 3);
    assert_eq!(dev.steering(), (Steering::FlowTable, None), "the flow table must load as root");
    let mut queues = dev.into_queues();
    let socks: Vec<std::net::UdpSocket> =
        ns.run(|| (0..12).map(|_| std::net::UdpSocket::bind("10.96.0.1:0").unwrap()).collect()).unwrap();
    let dst: SocketAddr = "10.96.0.2:7000".parse().unwrap();
    // First packets one flow after another: `send_to` runs the steering
    // program before it returns, so this is the order tickets are taken in.
    let order: Vec<u16> = socks.iter().map(|s| s.local_addr().unwrap().port()).collect();
    for s in &socks {
        s.send_to(b"first", dst).unwrap();
    }
    let mut per_flow = BTreeMap::new();
    collect(&mut queues, 12, &mut per_flow);
    assert_eq!(per_flow.len(), 12, "every flow seen");
    let first_queue = |per_flow: &BTreeMap<u16, BTreeSet<usize>>, port: u16| -> usize {
        let qs = &per_flow[&port];
        assert_eq!(qs.len(), 1, "flow from port {port} hit queues {qs:?}: must stay on one");
        *qs.iter().next().unwrap()
    };
    let q0 = first_queue(&per_flow, order[0]);
    for (i, port) in order.iter().enumerate() {
        assert_eq!(first_queue(&per_flow, *port), (q0 + i) % 3, "flow {i} (port {port}) out of turn");
    }
    // Reverse traffic of every flow written on queue 0, then more packets
    // of each flow: nobody moves.
    let mut tx = TxBatch::new(32, VNET_HDR_LEN.next_multiple_of(8), 2048);
    for port in &order {
        let reply = common::udp4((Ipv4Addr::new(10, 96, 0, 2), 7000), (Ipv4Addr::new(10, 96, 0, 1), *port), b"r");
        tx.push(None, &reply).unwrap();
    }
    queues[0].send_batch(&mut tx).unwrap();
    for _ in 0..3 {
        for s in &socks {
            s.send_to(b"again", dst).unwrap();
        }
    }
    collect(&mut queues, 36, &mut per_flow);
    for (i, port) in order.iter().enumerate() {
        assert_eq!(first_queue(&per_flow, *port), (q0 + i) % 3, "flow {i} (port {port}) moved");
    }
}

/// `InCsumErrors` of the `Tcp:` or `Udp:` line of a namespace's
/// `/proc/net/snmp`.
fn csum_errors(ns: &Netns, proto: &str) -> u64 {
    let out = ns.exec("cat", &["/proc/net/snmp"]).unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines().filter(|l| l.starts_with(&format!("{proto}:")));
    let (names, values) = (lines.next().unwrap(), lines.next().unwrap());
    let i = names.split_whitespace().position(|n| n == "InCsumErrors").unwrap();
    values.split_whitespace().nth(i).unwrap().parse().unwrap()
}

/// The super-packets `send_batch` coalesces must be right on a real wire,
/// not only to a local socket (which trusts a partial checksum): B forwards
/// what we write to its TUN out of a veth with checksum offload off, so the
/// kernel segments and checksums them in software, and C, with receive
/// checksumming off, verifies every checksum. A wrong pseudo-header sum, length or
/// sequence number would show as checksum errors in C and a stream that
/// does not arrive.
#[test]
fn coalesced_writes_are_segmented_and_checksummed_right_by_the_kernel() {
    require_netns!("coalesced_writes_are_segmented_and_checksummed_right_by_the_kernel");
    let a = Netns::new("gro-a").unwrap();
    let b = Netns::new("gro-b").unwrap();
    let c = Netns::new("gro-c").unwrap();
    let ta = tun_in(&a, "tunA", Ipv4Addr::new(10, 99, 0, 1), 1);
    let tb = tun_in(&b, "tunB", Ipv4Addr::new(10, 99, 0, 2), 1);
    b.veth("vb", &c, "vc").unwrap();
    b.addr("vb", "10.98.0.1/24").unwrap();
    c.addr("vc", "10.98.0.2/24").unwrap();
    b.sysctl("net.ipv4.ip_forward", "1").unwrap();
    a.route("10.98.0.0/24", None, Some("tunA")).unwrap();
    c.route("10.99.0.0/24", Some("10.98.0.1"), None).unwrap();
    // B: no checksum offload (hence no TSO/USO) towards C; C: verify all.
    b.exec("ethtool", &["-K", "vb", "tx", "off"]).unwrap();
    c.exec("ethtool", &["-K", "vc", "rx", "off"]).unwrap();
    let qa = ta.into_queues().remove(0);
    let qb = tb.into_queues().remove(0);
    let uso = qa.udp_offload();

    let listener = c.run(|| TcpListener::bind("10.98.0.2:5000")).unwrap().unwrap();
    let udp_rx = c.run(|| std::net::UdpSocket::bind("10.98.0.2:6000")).unwrap().unwrap();
    let (stop, relay_t) = start_relay(qa, qb);

    const LEN: usize = 4 << 20;
    let data = Arc::new(common::pattern(LEN, 7));
    let got = tcp_through(&a, listener, "10.98.0.2:5000", &data);
    let (sent, udp_got) = udp_through(&a, "10.99.0.1:0", "10.98.0.2:6000", &udp_rx, 1000);

    stop.store(true, Ordering::Relaxed);
    let (log, _qa, qb) = relay_t.join().unwrap();
    let (tcp_err, udp_err) = (csum_errors(&c, "Tcp"), csum_errors(&c, "Udp"));
    let sb = qb.stats();
    eprintln!("A→C {} packets in {} writes to tunB ({} bad checksums); C: TCP/UDP checksum errors {tcp_err}/{udp_err}; USO {uso}", sb.tx_packets, sb.tx_writes, sb.tx_bad_csum);
    assert!(got == *data, "TCP stream to C corrupted or cut ({} of {LEN} bytes)", got.len());
    assert_eq!(udp_got, sent, "UDP datagrams to C");
    assert_eq!((tcp_err, udp_err), (0, 0), "checksum errors in C");
    assert!(log.bad.is_empty(), "{:?}", &log.bad[..log.bad.len().min(5)]);
    assert!(sb.tx_writes * 2 < sb.tx_packets, "little coalescing: {sb:?}");
    assert_eq!(sb.tx_bad_csum, 0);
}

/// A write the kernel refuses (not IP: `EINVAL`) is counted per packet
/// lost (`TunStats::tx_failed`, `tun_write_error` in `esparto status`);
/// the rest of the batch is still written.
#[test]
fn refused_writes_are_counted_per_packet() {
    require_netns!("refused_writes_are_counted_per_packet");
    let a = Netns::new("tun-w").unwrap();
    let mut q = tun_in(&a, "tunW", Ipv4Addr::new(10, 98, 0, 1), 1).into_queues().remove(0);
    let sink = a.run(|| std::net::UdpSocket::bind("10.98.0.1:7000")).unwrap().unwrap();
    sink.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut batch = TxBatch::new(4, VNET_HDR_LEN.next_multiple_of(8), 2048);
    let src = (Ipv4Addr::new(10, 98, 0, 9), 5000);
    let dst = (Ipv4Addr::new(10, 98, 0, 1), 7000);
    batch.push(None, &common::udp4(src, dst, b"first")).unwrap();
    batch.push(None, &[0u8; 40]).unwrap(); // version 0: not IP
    batch.push(None, &common::udp4(src, dst, b"third")).unwrap();
    assert!(q.send_batch(&mut batch).is_err());
    let st = q.stats();
    assert_eq!((st.tx_packets, st.tx_failed, st.tx_errors), (3, 1, 1), "{st:?}");
    let mut buf = [0u8; 64];
    let mut got = Vec::new();
    while got.len() < 2 {
        let n = sink.recv(&mut buf).expect("the valid packets are delivered");
        got.push(buf[..n].to_vec());
    }
    got.sort();
    assert_eq!(got, [b"first".to_vec(), b"third".to_vec()]);
}
