//! strongSwan on both gateways of the standard topology (PSK,
//! aes256gcm16-prfsha256-x25519 / ESP aes256gcm16, kernel-libipsec): the
//! CHILD_SA comes up, host-west pings host-east over IPv4 and IPv6 through
//! it, a short iperf3 TCP run passes data, and teardown leaves neither
//! charon, nor its files, nor a namespace of ours.
//! Needs root, iproute2, iperf3, ping, ethtool and strongSwan: SKIP otherwise.
#![allow(clippy::unwrap_used)]

use std::process::Command;
use std::time::Duration;

use esparto_testbed::cpu::Meter;
use esparto_testbed::strongswan::{self, SwanPair};
use esparto_testbed::topology::{Net, Node, Topology};
use esparto_testbed::traffic::{self, Iperf3Server};
use esparto_testbed::{Family, skip};

#[test]
fn strongswan_to_strongswan() {
    if skip("testbed_strongswan", true) {
        return;
    }
    let topo = Topology::new().unwrap();
    let west = topo.ns(Node::HostWest);
    let east4 = Topology::addr(Node::HostEast, Net::Lan, Family::V4);
    let east6 = Topology::addr(Node::HostEast, Net::Lan, Family::V6);
    // No plain route: without the tunnel, east is unreachable.
    assert_eq!(
        traffic::ping(west, east4, 1, Duration::from_millis(100))
            .unwrap()
            .received,
        0
    );

    let pair = SwanPair::up(
        &topo,
        "testbed psk",
        "aes256gcm16-prfsha256-x25519",
        "aes256gcm16",
    )
    .unwrap();
    let sas = pair.west.list_sas().unwrap();
    assert!(sas.contains("ESP:AES_GCM_16-256"), "{sas}");
    assert!(
        sas.contains("TUNNEL-in-UDP"),
        "libipsec always encapsulates: {sas}"
    );
    let dirs = [
        pair.west.dir().path().to_path_buf(),
        pair.east.dir().path().to_path_buf(),
    ];
    let pids = [pair.west.pid(), pair.east.pid()];

    let routes = topo
        .ns(Node::GwWest)
        .ip(&["route", "show", "table", "220"])
        .unwrap();
    let routes = String::from_utf8_lossy(&routes.stdout);
    assert!(
        routes.contains("10.2.0.0/24") && routes.contains("ipsec0"),
        "table 220: {routes}"
    );

    for dst in [east4, east6] {
        // The first packet may race the route; the later ones must all pass.
        let r = traffic::ping(west, dst, 5, Duration::from_millis(100)).unwrap();
        assert!(r.received >= 4, "{dst} through the tunnel: {r:?}");
    }

    let meter = Meter::start(&pair.pids()).unwrap();
    let server = Iperf3Server::start(topo.ns(Node::HostEast), 5201).unwrap();
    let t = traffic::tcp(west, east4, server.port(), 1, 2).unwrap();
    drop(server);
    let usage = meter.stop().unwrap();
    assert!(t.bytes > 1_000_000 && t.received_mbps > 1.0, "{t:?}");
    // Both charons did the ESP work: each spent CPU.
    assert!(
        usage.processes.iter().all(|p| p.user_s + p.system_s > 0.0),
        "{usage:?}"
    );
    eprintln!(
        "strongSwan tunnel: TCP 1 stream {:.0} Mbit/s for 2 s, charons {:.2} CPU-s ({:.1} s/GB)",
        t.received_mbps,
        usage.process_s(),
        usage.process_s_per_gb(t.bytes).unwrap()
    );

    // The SA counters on the receiving side carried what iperf3 counted.
    let sas = pair.east.list_sas().unwrap();
    let (inbound, outbound) = strongswan::child_bytes(&sas).unwrap();
    assert!(inbound >= t.bytes && outbound > 0, "{sas}");

    pair.down().unwrap();
    for pid in pids {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "charon {pid} still running"
        );
    }
    if std::env::var_os("ESPARTO_TESTBED_KEEP").is_none() {
        for d in &dirs {
            assert!(!d.exists(), "{} left behind", d.display());
        }
    }
    // charon removed its TUN device.
    let links = topo.ns(Node::GwWest).ip(&["link", "show"]).unwrap();
    assert!(!String::from_utf8_lossy(&links.stdout).contains("ipsec0"));
    let names = topo.names();
    drop(topo);
    let list = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let list = String::from_utf8_lossy(&list.stdout);
    for n in names {
        assert!(!list.contains(&n), "{n} left behind");
    }
}
