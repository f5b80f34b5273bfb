//! The standard topology builds, the hosts reach each other over plain
//! routes (no tunnel), iperf3 and the UDP generator carry traffic across
//! both gateways, and dropping the topology leaves no namespace of ours.
//! Needs root, iproute2, iperf3, ping and ethtool: prints SKIP otherwise.
#![allow(clippy::unwrap_used)]

use std::process::Command;
use std::time::Duration;

use esparto_testbed::topology::{Net, Node, Offloads, Topology};
use esparto_testbed::traffic::{self, Iperf3Server};
use esparto_testbed::udpgen::UdpGen;
use esparto_testbed::{Family, skip};

fn our_namespaces() -> Vec<String> {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let prefix = esparto_netns::own_prefix();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(&prefix))
        .map(String::from)
        .collect()
}

/// Packets a veth end has received (`ip -s`), in its namespace.
fn rx_packets(topo: &Topology, node: Node, dev: &str) -> u64 {
    let out = topo.ns(node).exec("ip", &["-s", "-j", "link", "show", "dev", dev]).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v[0]["stats64"]["rx"]["packets"].as_u64().unwrap()
}

#[test]
fn topology_routes_plain_and_tears_down() {
    if skip("testbed_topology", false) {
        return;
    }
    let names;
    {
        let topo = Topology::new().unwrap();
        names = topo.names();
        assert!(
            names
                .iter()
                .all(|n| n.starts_with(&esparto_netns::own_prefix()))
        );
        assert_eq!(our_namespaces().len(), 4);
        let west = topo.ns(Node::HostWest);
        let east4 = Topology::addr(Node::HostEast, Net::Lan, Family::V4);
        let east6 = Topology::addr(Node::HostEast, Net::Lan, Family::V6);

        // Each host reaches its own gateway; nothing crosses without a route.
        for fam in [Family::V4, Family::V6] {
            let gw = Topology::addr(Node::GwWest, Net::Lan, fam);
            assert!(
                traffic::ping(west, gw, 1, Duration::from_millis(100))
                    .unwrap()
                    .all_answered(),
                "{gw}"
            );
        }
        let before = traffic::ping(west, east4, 2, Duration::from_millis(100)).unwrap();
        assert_eq!(
            before.received, 0,
            "east reachable before any route: {before:?}"
        );

        topo.route_lans_directly().unwrap();
        for dst in [east4, east6] {
            let r = traffic::ping(west, dst, 3, Duration::from_millis(100)).unwrap();
            assert!(r.all_answered(), "{dst}: {r:?}");
            assert!(r.rtt_ms.is_some());
        }

        // TCP through both gateways.
        let server = Iperf3Server::start(topo.ns(Node::HostEast), 5201).unwrap();
        let t = traffic::tcp(west, east4, server.port(), 2, 1).unwrap();
        assert!(t.received_mbps > 10.0 && t.bytes > 0, "{t:?}");
        // iperf3 UDP: 2000 pps of 512-byte packets for a second.
        let u = traffic::udp(west, east4, server.port(), 512, 2_000.0, 1).unwrap();
        assert!(u.sent >= 1_900 && u.received > u.sent * 9 / 10, "{u:?}");
        drop(server);

        // Our generator, over IPv6 this time: a gentle rate arrives whole.
        let west6 = Topology::addr(Node::HostWest, Net::Lan, Family::V6);
        let mut g = UdpGen::new(west, west6, topo.ns(Node::HostEast), east6).unwrap();
        let rx_before = rx_packets(&topo, Node::GwWest, "lan0");
        let (trial, _) = g.trial(128, 10_000.0, Duration::from_millis(500)).unwrap();
        assert_eq!(trial.sent, 5_000);
        assert_eq!(trial.received, trial.sent, "{trial:?}");
        // The generator sent its bursts as GSO messages, and the gateway
        // still received one packet per datagram (the host segments).
        let (msgs, datagrams) = g.sender_messages();
        assert_eq!(datagrams, 5_000);
        assert!(msgs * 2 < datagrams, "bursts not sent as GSO messages: {msgs} for {datagrams}");
        let arrived = rx_packets(&topo, Node::GwWest, "lan0") - rx_before;
        assert!(
            (5_000..5_050).contains(&arrived),
            "gw-west's lan0 received {arrived} packets for 5000 datagrams (a GSO super-packet counts once)"
        );

        // GRO can be switched on the veths, and off again.
        topo.set_offloads(Offloads {
            gro: true,
            udp_gro_forwarding: true,
        })
        .unwrap();
        let rep = topo.offload_report(Node::GwWest, "lan0").unwrap();
        assert!(rep.contains("generic-receive-offload: on"), "{rep}");
        assert!(rep.contains("rx-udp-gro-forwarding: on"), "{rep}");
        assert!(
            traffic::ping(west, east4, 1, Duration::from_millis(100))
                .unwrap()
                .all_answered()
        );
        topo.set_offloads(Offloads::default()).unwrap();
        let rep = topo.offload_report(Node::GwWest, "lan0").unwrap();
        assert!(rep.contains("generic-receive-offload: off"), "{rep}");

        // LAN GRO (`esparto-testbed bench tunnel --lan-gro`): GRO, UDP GRO
        // forwarding and one queue per CPU on the LAN links; and back.
        let cpus = esparto_io::cpu::allowed_cpus().unwrap().len();
        let channels = |node| {
            let out = topo.ns(node).exec("ethtool", &["-l", "lan0"]).unwrap();
            let text = String::from_utf8_lossy(&out.stdout).to_string();
            let current = text.split("Current hardware settings:").nth(1).unwrap_or_default().to_string();
            current.lines().find(|l| l.starts_with("RX:")).map(|l| l.split_whitespace().nth(1).unwrap_or_default().to_string()).unwrap_or_default()
        };
        topo.set_lan_gro(true).unwrap();
        let rep = topo.offload_report(Node::GwEast, "lan0").unwrap();
        assert!(rep.contains("generic-receive-offload: on") && rep.contains("rx-udp-gro-forwarding: on"), "{rep}");
        assert_eq!(channels(Node::HostWest), cpus.to_string());
        assert_eq!(channels(Node::GwWest), cpus.to_string());
        // Each CPU transmits on its own queue (XPS), in every namespace.
        let allowed = esparto_io::cpu::allowed_cpus().unwrap();
        for node in [Node::HostWest, Node::GwWest, Node::GwEast, Node::HostEast] {
            for (q, cpu) in allowed.iter().enumerate() {
                let path = format!("/sys/class/net/lan0/queues/tx-{q}/xps_cpus");
                let out = topo.ns(node).exec("cat", &[&path]).unwrap();
                let mask = String::from_utf8_lossy(&out.stdout).trim().replace(',', "");
                let bits = u128::from_str_radix(&mask, 16).unwrap_or_else(|e| panic!("{path}: {mask:?}: {e}"));
                assert_eq!(bits, 1u128 << cpu, "{node:?} {path}");
            }
        }
        assert!(traffic::ping(west, east4, 1, Duration::from_millis(100)).unwrap().all_answered());
        topo.set_lan_gro(false).unwrap();
        let rep = topo.offload_report(Node::GwEast, "lan0").unwrap();
        assert!(rep.contains("generic-receive-offload: off"), "{rep}");
        assert_eq!(channels(Node::GwWest), "1");

        topo.unroute_lans().unwrap();
        assert_eq!(
            traffic::ping(west, east4, 1, Duration::from_millis(100))
                .unwrap()
                .received,
            0
        );
    }
    let left = our_namespaces();
    for n in &names {
        assert!(!left.contains(n), "namespace {n} left behind");
    }
}
