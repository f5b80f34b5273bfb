//! Esparto on both gateways of the standard topology with statically keyed
//! SAs: the daemons start in their namespaces, answer `status`, carry pings
//! (IPv4 and IPv6) and TCP between the hosts, count the packets, and stop
//! on SIGTERM with exit 0, leaving neither control socket nor TUN device.
//! Needs root, iproute2, iperf3, ping, ethtool: SKIP otherwise.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use esparto_testbed::esparto::{EspartoConfig, EspartoGateway, Keying, StaticPair};
use esparto_testbed::topology::{Net, Node, Topology};
use esparto_testbed::traffic::{self, Iperf3Server};
use esparto_testbed::{Family, skip};

#[test]
fn esparto_static_keys_both_gateways() {
    if skip("testbed_esparto", false) {
        return;
    }
    let bin = esparto_testbed::esparto_binary(None).unwrap();
    let bin = bin.as_path();
    let topo = Topology::new().unwrap();
    // AES-256-GCM KEYMAT is 36 bytes (key + salt, RFC 4106 §8.1).
    let west_pair = StaticPair {
        in_spi: 0xc000_0101,
        out_spi: 0xc000_0201,
        in_key: "11".repeat(36),
        out_key: "22".repeat(36),
    };
    let west_cfg =
        EspartoConfig::site(Node::GwWest, Keying::Static(vec![west_pair.clone()])).unwrap();
    let east_cfg =
        EspartoConfig::site(Node::GwEast, Keying::Static(vec![west_pair.mirrored()])).unwrap();
    let west = EspartoGateway::start(topo.ns(Node::GwWest), bin, &west_cfg).unwrap();
    let east = EspartoGateway::start(topo.ns(Node::GwEast), bin, &east_cfg).unwrap();
    let st = west.status().unwrap();
    assert_eq!(st.pid, west.pid());
    assert_eq!(st.tun, "esparto0");

    let host = topo.ns(Node::HostWest);
    for fam in [Family::V4, Family::V6] {
        let dst = Topology::addr(Node::HostEast, Net::Lan, fam);
        let r = traffic::ping(host, dst, 5, Duration::from_millis(100)).unwrap();
        assert!(r.received >= 4, "{dst} through Esparto: {r:?}");
    }
    let server = Iperf3Server::start(topo.ns(Node::HostEast), 5201).unwrap();
    let dst = Topology::addr(Node::HostEast, Net::Lan, Family::V4);
    let t = traffic::tcp(host, dst, server.port(), 1, 2).unwrap();
    assert!(t.bytes > 1_000_000, "{t:?}");
    drop(server);

    let st = east.status().unwrap();
    let rx: u64 = st.workers.iter().map(|w| w.rx_packets).sum();
    assert!(rx > 100, "east decapsulated {rx} packets: {st:?}");
    west.stop().unwrap();
    east.stop().unwrap();
}
