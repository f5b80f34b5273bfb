//! Two gateways in network namespaces, in process, with static keys:
//! host-west — gw-west ══ESP-in-UDP══ gw-east — host-east.
//!
//! This exercises the daemon's data plane (TUN, SPI steering, workers,
//! per-CPU sub-SAs) without the CLI; the CLI-level tests run `esparto run`.
//! Needs root; skipped otherwise.

#![allow(clippy::unwrap_used, missing_docs)]

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::time::Duration;

use esparto::config::{Child, Config, Connection, Daemon, PerCpuSas, StaticPair, StaticSas};
use esparto::daemon::Gateway;
use esparto_crypto::{EspSuite, SecretBytes};
use esparto_esp::Lifetime;
use esparto_testbed::topology::{Node, Topology};
use esparto_netns::{self as netns, Netns};

fn key(tag: u8, suite: EspSuite) -> SecretBytes {
    SecretBytes::from_slice(&(0..suite.keymat_len()).map(|i| (i as u8) ^ tag).collect::<Vec<_>>())
}

/// West's config (east's is the mirror: `east = true`); the static SAs'
/// sequence numbers are kept in `state`.
fn config(east: bool, suite: EspSuite, workers: usize, state: &Path) -> Config {
    let (local, remote) = if east { ("192.0.2.2", "192.0.2.1") } else { ("192.0.2.1", "192.0.2.2") };
    let ts = |s: &str| s.parse().unwrap();
    let (lts, rts) = if east {
        (vec![ts("10.2.0.0/24"), ts("fd00:2::/64")], vec![ts("10.1.0.0/24"), ts("fd00:1::/64")])
    } else {
        (vec![ts("10.1.0.0/24"), ts("fd00:1::/64")], vec![ts("10.2.0.0/24"), ts("fd00:2::/64")])
    };
    // Pair i: west→east SPI 0xc000_0100+i, east→west 0xc000_0200+i.
    let pairs = (0..=workers as u32)
        .map(|i| {
            let (we, ew) = (0xc000_0100 + i, 0xc000_0200 + i);
            let (kwe, kew) = (key(i as u8, suite), key(0x80 | i as u8, suite));
            if east {
                StaticPair { in_spi: we, out_spi: ew, in_key: kwe, out_key: kew }
            } else {
                StaticPair { in_spi: ew, out_spi: we, in_key: kew, out_key: kwe }
            }
        })
        .collect();
    Config {
        path: PathBuf::from("test.toml"),
        text: "".into(),
        layer: Default::default(),
        daemon: Daemon {
            workers,
            cpus: Vec::new(),
            control: PathBuf::from("/nonexistent"),
            vici: esparto::config::ViciSocket::Off,
            tun: "esparto0".into(),
            port: 4500,
            ike_port: 500,
            path_mtu: 1500,
            tun_queue_len: esparto::config::DEFAULT_TUN_QUEUE_LEN,
            log: "info".into(),
            state_dir: state.join(if east { "east" } else { "west" }),
            ike: Default::default(),
            routing: Default::default(),
            metrics: None,
        },
        connections: vec![std::sync::Arc::new(Connection {
            name: "site".into(),
            local_addrs: vec![local.parse().unwrap()],
            remote_addrs: vec![remote.parse().unwrap()],
            remote_hosts: vec![],
            remote_port: 4500,
            ike: None,
            children: vec![Child {
                name: "lan".into(),
                local_ts: lts,
                remote_ts: rts,
                replay_window: 4096,
                lifetime: Lifetime::default(),
                per_cpu_sas: PerCpuSas::No,
                per_cpu_max: workers,
                static_sas: Some(StaticSas { suite, esn: true, pairs }),
                ipcomp: None,
                link_mbps: None,
            }],
        })],
        secrets: Default::default(),
        warnings: Vec::new(),
    }
}

fn ping(from: &Netns, to: &str) -> bool {
    let v6 = to.contains(':');
    let args: Vec<&str> = if v6 { vec!["-6", "-c", "3", "-i", "0.2", "-W", "2", to] } else { vec!["-c", "3", "-i", "0.2", "-W", "2", to] };
    from.exec("ping", &args).is_ok()
}

#[test]
fn two_gateways_carry_ping_tcp_udp_on_per_worker_sas() {
    if !netns::available() {
        eprintln!("SKIP: needs root and iproute2");
        return;
    }
    let topo = Topology::new().unwrap();
    let (hw, gw, ge, he) =
        (topo.ns(Node::HostWest), topo.ns(Node::GwWest), topo.ns(Node::GwEast), topo.ns(Node::HostEast));
    let suite = EspSuite::Aes256Gcm16;
    let state = tempfile::tempdir().unwrap();
    let west = gw.run(|| Gateway::start(&config(false, suite, 2, state.path()))).unwrap().unwrap();
    // gw-east pins its workers by `[daemon] cpus`, in descending order; a
    // CPU the process may not use is refused before anything is set up.
    let allowed = esparto_io::cpu::allowed_cpus().unwrap();
    let mut bad = config(true, suite, 2, state.path());
    bad.daemon.cpus = vec![allowed[0], allowed.iter().max().unwrap() + 1];
    let err = ge.run(|| Gateway::start(&bad)).unwrap().unwrap_err();
    assert!(format!("{err:#}").contains("[daemon] cpus: CPU"), "{err:#}");
    let mut east_cfg = config(true, suite, 2, state.path());
    east_cfg.daemon.cpus = allowed.iter().rev().copied().collect();
    let east = ge.run(|| Gateway::start(&east_cfg)).unwrap().unwrap();

    assert!(ping(hw, "10.2.0.10"), "IPv4 ping west→east");
    assert!(ping(he, "10.1.0.10"), "IPv4 ping east→west");
    assert!(ping(hw, "fd00:2::10"), "IPv6 ping west→east");
    assert!(ping(he, "fd00:1::10"), "IPv6 ping east→west");

    // TCP: 4 MiB through the tunnel.
    let listener = he.run(|| TcpListener::bind("10.2.0.10:5001")).unwrap().unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut total = 0usize;
        let mut buf = vec![0u8; 65536];
        loop {
            match s.read(&mut buf).unwrap() {
                0 => break total,
                n => total += n,
            }
        }
    });
    let sent = hw
        .run(|| {
            let mut c = TcpStream::connect_timeout(&"10.2.0.10:5001".parse().unwrap(), Duration::from_secs(5)).unwrap();
            let chunk = vec![0x5au8; 65536];
            for _ in 0..64 {
                c.write_all(&chunk).unwrap();
            }
            64 * 65536
        })
        .unwrap();
    assert_eq!(server.join().unwrap(), sent);

    // UDP: 16 flows of 64- and 1400-byte packets; the kernel spreads flows
    // over the TUN queues, so both workers must carry traffic on their own
    // sub-SA. P(all 16 flows on one of 2 queues) = 2^-15.
    let rx = he.run(|| UdpSocket::bind("10.2.0.10:6000")).unwrap().unwrap();
    rx.set_read_timeout(Some(Duration::from_millis(1000))).unwrap();
    // Receive concurrently: the test host's socket buffer, not the tunnel,
    // would otherwise be the bottleneck of a burst.
    let receiver = std::thread::spawn(move || {
        let mut got = 0;
        let mut buf = [0u8; 2000];
        while rx.recv(&mut buf).is_ok() {
            got += 1;
        }
        got
    });
    hw
        .run(|| {
            for port in 0..16u16 {
                let s = UdpSocket::bind(SocketAddr::new(IpAddr::V4("10.1.0.10".parse().unwrap()), 7000 + port)).unwrap();
                for len in [64 - 28, 1400 - 28] {
                    for _ in 0..10 {
                        s.send_to(&vec![1u8; len], "10.2.0.10:6000").unwrap();
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        })
        .unwrap();
    let got = receiver.join().unwrap();
    let st = west.status().unwrap();
    let east_st = east.status().unwrap();
    let nstat = |ns: &Netns| {
        ns.exec("nstat", &["-az", "UdpRcvbufErrors"]).map(|o| String::from_utf8_lossy(&o.stdout).to_string()).unwrap_or_default()
    };
    assert_eq!(got, 320, "UDP datagrams received\nwest: {:?}\neast: {:?}\nhost-east: {}", st.workers, east_st.workers, nstat(he));

    for w in &st.workers {
        let own = st.sas.iter().find(|s| s.direction == "out" && s.role == "sub" && s.worker == w.worker).unwrap();
        assert!(own.packets > 0, "worker {} sent nothing on its own sub-SA {}: {:#?}", w.worker, own.spi, st);
    }
    let fallback_out: u64 = st.sas.iter().filter(|s| s.direction == "out" && s.role == "fallback").map(|s| s.packets).sum();
    assert_eq!(fallback_out, 0, "with sub-SAs on every worker the fallback is unused");
    // Every inbound SA is processed by the worker its SPI steers to.
    for sa in east_st.sas.iter().filter(|s| s.direction == "in") {
        let spi = u32::from_str_radix(&sa.spi, 16).unwrap();
        assert_eq!(usize::from(sa.worker), esparto::datapath::spi_to_worker(spi, 2));
    }
    assert_eq!(east_st.drops.get("unknown_spi"), None, "{:?}", east_st.drops);
    assert_eq!(st.steering, "flow table", "outbound flows are dealt out by the steering program's flow table");
    for w in &east_st.workers {
        let want = east_cfg.daemon.cpus[usize::from(w.worker) % east_cfg.daemon.cpus.len()];
        assert_eq!(w.cpu, Some(want), "east worker {} not on the CPU `cpus` names", w.worker);
    }
    // The I/O counters add up: every packet encapsulated was read from the
    // TUN (ping, TCP and UDP — a few more reads carry packets dropped before
    // encryption, e.g. the kernel's own), and left in a `sendmmsg`; every
    // packet decapsulated came in through a `recvmmsg` and went to the TUN.
    for w in &st.workers {
        let io = &w.io;
        assert!(io.tun_rx_packets >= w.tx_packets, "west worker {}: {io:?} vs {w:?}", w.worker);
        assert!(io.tun_reads > 0 && io.tun_reads <= io.tun_rx_packets, "{io:?}");
        assert!(io.udp_send_calls > 0 && io.udp_tx_datagrams >= w.tx_packets, "{io:?} vs {w:?}");
    }
    for w in &east_st.workers {
        let io = &w.io;
        assert!(io.udp_recv_calls > 0 && io.udp_rx_datagrams >= w.rx_packets, "east worker {}: {io:?} vs {w:?}", w.worker);
        assert!(io.tun_tx_packets >= w.rx_packets, "{io:?} vs {w:?}");
    }
    west.shutdown();
    east.shutdown();
}

/// Sends `data` over TCP from host-west to host-east port `port`; returns
/// the bytes host-east received.
fn tcp_through(hw: &Netns, he: &Netns, port: u16, data: Vec<u8>) -> usize {
    let addr: SocketAddr = format!("10.2.0.10:{port}").parse().unwrap();
    let listener = he.run(|| TcpListener::bind(addr)).unwrap().unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut total = 0usize;
        let mut buf = vec![0u8; 65536];
        loop {
            match s.read(&mut buf).unwrap() {
                0 => break total,
                n => total += n,
            }
        }
    });
    hw.run(|| {
        let mut c = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
        c.write_all(&data).unwrap();
    })
    .unwrap();
    server.join().unwrap()
}

/// Text-like bytes (compress to about a third) or xorshift noise (not at all).
fn corpus(text: bool, len: usize) -> Vec<u8> {
    let words = [
        "gateway ",
        "tunnel ",
        "<td>packet</td> ",
        "compress ",
        "{\"level\":\"info\"} ",
        "link ",
    ];
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    let mut v = Vec::with_capacity(len + 32);
    while v.len() < len {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        if text {
            v.extend_from_slice(words[(s % words.len() as u64) as usize].as_bytes());
        } else {
            v.extend_from_slice(&s.to_le_bytes());
        }
    }
    v.truncate(len);
    v
}

#[test]
fn two_gateways_with_static_ipcomp_compress_text_and_skip_noise() {
    if !netns::available() {
        eprintln!("SKIP: needs root and iproute2");
        return;
    }
    let topo = Topology::new().unwrap();
    let (hw, gw, ge, he) = (
        topo.ns(Node::HostWest),
        topo.ns(Node::GwWest),
        topo.ns(Node::GwEast),
        topo.ns(Node::HostEast),
    );
    let suite = EspSuite::Aes256Gcm16;
    let state = tempfile::tempdir().unwrap();
    let with_ipcomp = |east: bool, mode: esparto_esp::IpcompMode| {
        let mut c = config(east, suite, 1, state.path());
        std::sync::Arc::make_mut(&mut c.connections[0]).children[0].ipcomp = Some(mode);
        if mode == esparto_esp::IpcompMode::Adaptive {
            // A slow WAN: compressing text pays as long as the CPU keeps
            // up with 50 Mbit/s, which it does by far.
            std::sync::Arc::make_mut(&mut c.connections[0]).children[0].link_mbps = Some(50);
        }
        c
    };
    // West compresses adaptively, east always: both decompress either.
    let west = gw
        .run(|| Gateway::start(&with_ipcomp(false, esparto_esp::IpcompMode::Adaptive)))
        .unwrap()
        .unwrap();
    let east = ge
        .run(|| Gateway::start(&with_ipcomp(true, esparto_esp::IpcompMode::Always)))
        .unwrap()
        .unwrap();

    assert!(ping(hw, "10.2.0.10"), "IPv4 ping west→east");
    assert!(ping(he, "fd00:1::10"), "IPv6 ping east→west");
    let text = corpus(true, 4 << 20);
    assert_eq!(tcp_through(hw, he, 5101, text.clone()), text.len());

    let out_ipcomp = |st: &esparto::status::Status| {
        st.sas
            .iter()
            .filter(|s| s.direction == "out")
            .filter_map(|s| s.ipcomp.clone())
            .collect::<Vec<_>>()
    };
    let in_ipcomp = |st: &esparto::status::Status| {
        st.sas
            .iter()
            .filter(|s| s.direction == "in")
            .filter_map(|s| s.ipcomp.clone())
            .collect::<Vec<_>>()
    };
    let st = west.status().unwrap();
    let sent: u64 = out_ipcomp(&st).iter().map(|c| c.compressed).sum();
    let saved: u64 = out_ipcomp(&st).iter().map(|c| c.bytes_saved).sum();
    assert!(sent > 1000, "west compressed {sent} packets: {:#?}", st.sas);
    assert!(
        saved > (2 << 20) as u64,
        "west saved only {saved} B of 4 MiB of text"
    );
    let est = east.status().unwrap();
    let got: u64 = in_ipcomp(&est).iter().map(|c| c.compressed).sum();
    assert!(got >= sent, "east decompressed {got} of {sent}");
    // East's ACKs are short: sent as they are, and counted as skipped.
    let skipped: u64 = out_ipcomp(&est).iter().map(|c| c.skipped).sum();
    assert!(skipped > 0, "{:#?}", est.sas);
    for c in in_ipcomp(&est).iter().chain(&in_ipcomp(&st)) {
        assert_eq!((c.decompress_failed, c.too_big), (0, 0), "{c:?}");
    }

    // Noise: the adaptive side backs off, and the data still arrives.
    let noise = corpus(false, 4 << 20);
    assert_eq!(tcp_through(hw, he, 5102, noise.clone()), noise.len());
    let st = west.status().unwrap();
    let off: u64 = out_ipcomp(&st).iter().map(|c| c.switches_off).sum();
    assert!(
        off > 0,
        "adaptive west never backed off on random data: {:#?}",
        out_ipcomp(&st)
    );
    assert!(
        out_ipcomp(&st).iter().any(|c| c.last_switch.starts_with("incompressible")),
        "no switch for incompressible data: {:#?}",
        out_ipcomp(&st)
    );
    // Text again: compressing again.
    let before: u64 = out_ipcomp(&st).iter().map(|c| c.compressed).sum();
    assert_eq!(tcp_through(hw, he, 5103, text.clone()), text.len());
    let after: u64 = out_ipcomp(&west.status().unwrap())
        .iter()
        .map(|c| c.compressed)
        .sum();
    assert!(
        after > before + 1000,
        "west compressed {} more packets of text after the noise",
        after - before
    );
    drop(west);
    drop(east);
}
