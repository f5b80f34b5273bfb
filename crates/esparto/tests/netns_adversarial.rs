//! Bad input against a running `esparto run`: a forged ICV, a replayed
//! packet and an unknown SPI are dropped and counted, and so is an
//! authentic dummy packet (RFC 4303 §2.6, `dummy`); a burst of random UDP
//! garbage on port 4500 neither crashes nor stalls the daemon; an inner packet too big for the tunnel is answered
//! with ICMP "fragmentation needed" / ICMPv6 "packet too big" through the TUN.
//!
//! The forged packets are built in this process with the test's own copy of
//! the static keys, on the fallback SA (pair 0), which the gateways
//! themselves don't send on while every worker has its sub-SA — so the
//! test owns that SA's sequence numbers. Needs root: SKIP otherwise.

#![allow(clippy::unwrap_used)]

use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::time::{Duration, Instant};

use esparto_testbed::esparto::{EspartoConfig, EspartoGateway, Keying, StaticPair};
use esparto_testbed::topology::{Net, Node, Topology};
use esparto_testbed::traffic;
use esparto_testbed::{Family, skip};
use esparto_crypto::{EspSuite, SecretBytes};
use esparto_esp::{HEADROOM, Lifetime, OutboundSa, SaConfig, TAILROOM};

fn pairs() -> Vec<StaticPair> {
    // West's view; pair 0 is the fallback, pairs 1 and 2 the sub-SAs of workers 0 and 1.
    (0..3u32)
        .map(|i| StaticPair {
            in_spi: 0xc000_0200 + i,
            out_spi: 0xc000_0100 + i,
            in_key: format!("{:02x}", 0x30 + i).repeat(36),
            out_key: format!("{:02x}", 0x40 + i).repeat(36),
        })
        .collect()
}

/// An ESP sender for east→west on pair 0, as east would be.
fn forger(pair: &StaticPair) -> OutboundSa {
    let key: Vec<u8> = (0..36).map(|i| u8::from_str_radix(&pair.in_key[2 * i..2 * i + 2], 16).unwrap()).collect();
    let cfg = SaConfig {
        spi: pair.in_spi,
        suite: EspSuite::Aes256Gcm16,
        keymat: SecretBytes::from_slice(&key),
        // `esp_proposals = ["aes256gcm16"]`: no ESN, as strongSwan defaults.
        esn: false,
        replay_window: 64,
        lifetime: Lifetime::default(),
        local_ts: vec![],
        remote_ts: vec![],
        peer: "192.0.2.1:4500".parse().unwrap(),
        path_mtu: 1500,
    };
    OutboundSa::owned(&cfg, Instant::now()).unwrap()
}

/// An IPv4/UDP packet host-east:5000 → host-west:9999.
fn inner(payload: &[u8]) -> Vec<u8> {
    let len = 28 + payload.len();
    let mut p = vec![0u8; len];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
    p[8] = 64;
    p[9] = 17;
    p[12..16].copy_from_slice(&[10, 2, 0, 10]);
    p[16..20].copy_from_slice(&[10, 1, 0, 10]);
    let sum = !esparto_wire::checksum::data(&p[..20]);
    p[10..12].copy_from_slice(&sum.to_be_bytes());
    p[20..22].copy_from_slice(&5000u16.to_be_bytes());
    p[22..24].copy_from_slice(&9999u16.to_be_bytes());
    p[24..26].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    p[28..].copy_from_slice(payload);
    p
}

fn seal(sa: &mut OutboundSa, inner: &[u8]) -> Vec<u8> {
    seal_as(sa, 4, inner)
}

fn seal_as(sa: &mut OutboundSa, next_header: u8, inner: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; HEADROOM + inner.len() + TAILROOM];
    buf[HEADROOM..HEADROOM + inner.len()].copy_from_slice(inner);
    let mut expiry = None;
    let r = sa.encapsulate(Instant::now(), &mut buf, HEADROOM..HEADROOM + inner.len(), next_header, &mut expiry).unwrap();
    buf[r].to_vec()
}

fn drop_count(st: &esparto::status::Status, reason: &str) -> u64 {
    st.drops.get(reason).copied().unwrap_or(0)
}

#[test]
fn forged_replayed_unknown_garbage_and_too_big() {
    if skip("netns_adversarial", false) {
        return;
    }
    let bin = Path::new(env!("CARGO_BIN_EXE_esparto"));
    let topo = Topology::new().unwrap();
    let west_pairs = pairs();
    let mut west_cfg = EspartoConfig::site(Node::GwWest, Keying::Static(west_pairs.clone())).unwrap();
    west_cfg.workers = Some(2);
    let mut east_cfg =
        EspartoConfig::site(Node::GwEast, Keying::Static(west_pairs.iter().map(StaticPair::mirrored).collect())).unwrap();
    east_cfg.workers = Some(2);
    let west = EspartoGateway::start(topo.ns(Node::GwWest), bin, &west_cfg).unwrap();
    let east = EspartoGateway::start(topo.ns(Node::GwEast), bin, &east_cfg).unwrap();

    let wan_west = SocketAddr::new(Topology::addr(Node::GwWest, Net::Transit, Family::V4), 4500);
    let tx = topo.ns(Node::GwEast).run(|| UdpSocket::bind("192.0.2.2:0")).unwrap().unwrap();
    let rx = topo.ns(Node::HostWest).run(|| UdpSocket::bind("10.1.0.10:9999")).unwrap().unwrap();
    rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut buf = [0u8; 2048];

    // A valid packet arrives at host-west.
    let mut sa = forger(&west_pairs[0]);
    let good = seal(&mut sa, &inner(b"hello"));
    tx.send_to(&good, wan_west).unwrap();
    let n = rx.recv(&mut buf).expect("the valid forged-key packet reaches host-west");
    assert_eq!(&buf[..n], b"hello");

    let before = west.status().unwrap();
    // The same packet again: a replay.
    tx.send_to(&good, wan_west).unwrap();
    // A packet with one ciphertext byte flipped: ICV failure.
    let mut bad = seal(&mut sa, &inner(b"tampered"));
    bad[20] ^= 0x01;
    tx.send_to(&bad, wan_west).unwrap();
    // An SPI nobody installed.
    let mut unknown = seal(&mut sa, &inner(b"unknown"));
    unknown[..4].copy_from_slice(&0xdead_beefu32.to_be_bytes());
    tx.send_to(&unknown, wan_west).unwrap();
    // An authentic dummy packet: next header 59, discarded by design.
    tx.send_to(&seal_as(&mut sa, 59, &inner(b"dummy")), wan_west).unwrap();
    assert!(rx.recv(&mut buf).is_err(), "none of them may be delivered");
    let after = west.status().unwrap();
    for reason in ["replay", "icv_failure", "unknown_spi", "dummy"] {
        assert_eq!(drop_count(&after, reason), drop_count(&before, reason) + 1, "{reason}: {:?}", after.drops);
    }
    let fb_in = after.sas.iter().find(|s| s.direction == "in" && s.role == "fallback").unwrap();
    assert_eq!((fb_in.drops.get("replay"), fb_in.drops.get("icv_failure")), (Some(&1), Some(&1)));

    // 20,000 datagrams of garbage, from random-looking SPIs to the IKE
    // marker and keepalive sizes.
    let mut x: u64 = 0x9e37_79b9;
    let mut junk = vec![0u8; 1500];
    for i in 0..20_000u32 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let len = 1 + (x % 1400) as usize;
        for (j, b) in junk[..len].iter_mut().enumerate() {
            *b = (x >> (j % 56)) as u8 ^ j as u8;
        }
        if i % 7 == 0 && len >= 4 {
            junk[..4].copy_from_slice(&west_pairs[1].in_spi.to_be_bytes()); // a real SPI, bad ICV
        }
        let _ = tx.send_to(&junk[..len], wan_west);
    }
    // Still alive, still answering, still forwarding.
    let st = west.status().unwrap();
    let counted = drop_count(&st, "malformed") + drop_count(&st, "unknown_spi") + drop_count(&st, "icv_failure");
    assert!(counted > 1000, "the garbage was counted: {:?}", st.drops);
    let host = topo.ns(Node::HostWest);
    for fam in [Family::V4, Family::V6] {
        let dst = Topology::addr(Node::HostEast, Net::Lan, fam);
        let r = traffic::ping(host, dst, 3, Duration::from_millis(100)).unwrap();
        assert!(r.all_answered(), "{dst} after the garbage: {r:?}");
    }

    // Too big: the TUN MTU (1438 for AES-GCM over IPv4) normally makes the
    // kernel answer; raise it to 1500 so the packet reaches the workers,
    // whose SA knows it cannot carry it.
    topo.ns(Node::GwWest).ip(&["link", "set", "esparto0", "mtu", "1500"]).unwrap();
    // ping exits 1 when it gets an ICMP error instead of a reply: read its
    // output whatever the exit status.
    let ping = |args: &[&str]| {
        let o = std::process::Command::new("ip").args(["netns", "exec", host.name(), "ping"]).args(args).output().unwrap();
        format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
    };
    let text = ping(&["-c", "1", "-W", "1", "-M", "do", "-s", "1472", "10.2.0.10"]);
    assert!(text.contains("mtu = 1438"), "ICMP fragmentation needed with the tunnel MTU: {text}");
    let text = ping(&["-6", "-c", "1", "-W", "1", "-M", "do", "-s", "1452", "fd00:2::10"]);
    assert!(text.contains("mtu=1438"), "ICMPv6 packet too big with the tunnel MTU: {text}");
    assert!(drop_count(&west.status().unwrap(), "too_big") >= 2);

    west.stop().unwrap();
    east.stop().unwrap();
}
