//! (b) A GSO batch sent from one namespace arrives GRO'd in the other and is
//! split back into the very same datagrams, in order — over IPv4 and IPv6.

#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use esparto_netns::Pair;
use esparto_io::udp::{GRO_SLOT_LEN, UdpConfig, UdpSocket};
use esparto_io::{RxBatch, TxBatch};

fn round_trip(pair: &Pair, src: SocketAddr, dst: SocketAddr) {
    let cfg = UdpConfig::default();
    let mut rx = pair
        .b
        .run(|| UdpSocket::bind(dst, &cfg, true))
        .unwrap()
        .unwrap();
    let mut tx = pair
        .a
        .run(|| UdpSocket::bind(src, &cfg, false))
        .unwrap()
        .unwrap();
    assert!(rx.gro_enabled());

    // 150 datagrams: runs of 1400 bytes (64 per GSO send at most), a short
    // one in the middle, and a tail of small ones.
    let mut sent = Vec::new();
    let mut batch = TxBatch::new(256, 0, 1500);
    for i in 0..150u32 {
        let len = match i {
            70 => 333,
            140.. => 100,
            _ => 1400,
        };
        let mut d = common::pattern(len, i);
        d[..4].copy_from_slice(&0x0001_0203u32.to_be_bytes()); // one SPI
        batch.push(Some(rx.local_addr()), &d).unwrap();
        sent.push(d);
    }
    assert_eq!(tx.send_batch(&batch).unwrap(), 150);
    let st = tx.stats();
    assert_eq!(st.tx_calls, 1, "one sendmmsg");
    assert!(
        st.tx_msgs <= 6,
        "GSO folded 150 datagrams into few sends: {st:?}"
    );

    let mut rxb = RxBatch::new(16, 0, GRO_SLOT_LEN, 1024);
    let mut got = Vec::new();
    common::wait_until(Duration::from_secs(5), || {
        rx.recv_batch(&mut rxb).unwrap();
        for (p, peer) in rxb.iter() {
            assert_eq!(peer, Some(tx.local_addr()));
            got.push(p.to_vec());
        }
        got.len() >= 150
    });
    assert_eq!(got.len(), 150);
    assert!(got == sent, "datagrams differ after GSO → GRO → split");
    let rs = rx.stats();
    assert!(
        rs.rx_msgs < 150 / 10,
        "arrived GRO'd, not one by one: {rs:?}"
    );
    assert_eq!(rs.rx_datagrams, 150);
}

#[test]
fn gso_to_gro_ipv4() {
    require_netns!("gso_to_gro_ipv4");
    let pair = Pair::new("gro4", "10.203.0.1/24", "10.203.0.2/24").unwrap();
    round_trip(
        &pair,
        "10.203.0.1:0".parse().unwrap(),
        "10.203.0.2:4500".parse().unwrap(),
    );
}

#[test]
fn gso_to_gro_ipv6() {
    require_netns!("gso_to_gro_ipv6");
    let pair = Pair::new("gro6", "10.204.0.1/24", "10.204.0.2/24").unwrap();
    pair.a
        .ip(&[
            "-6",
            "addr",
            "add",
            "fd00:204::1/64",
            "dev",
            "veth0",
            "nodad",
        ])
        .unwrap();
    pair.b
        .ip(&[
            "-6",
            "addr",
            "add",
            "fd00:204::2/64",
            "dev",
            "veth1",
            "nodad",
        ])
        .unwrap();
    round_trip(
        &pair,
        "[fd00:204::1]:0".parse().unwrap(),
        "[fd00:204::2]:4500".parse().unwrap(),
    );
}

/// Equal datagrams larger than the path MTU (an IKE_AUTH with a large
/// certificate chain, several tunnels to one peer) cannot go as one GSO
/// send: the kernel refuses segments above the MTU. They must still leave,
/// as plain datagrams the IP layer fragments, and arrive whole.
#[test]
fn datagrams_above_the_mtu_still_leave() {
    require_netns!("datagrams_above_the_mtu_still_leave");
    let pair = Pair::new("gsomtu", "10.204.0.1/24", "10.204.0.2/24").unwrap();
    let cfg = UdpConfig::default();
    let dst: SocketAddr = "10.204.0.2:500".parse().unwrap();
    let mut rx = pair.b.run(|| UdpSocket::bind(dst, &cfg, true)).unwrap().unwrap();
    let mut tx = pair
        .a
        .run(|| UdpSocket::bind("10.204.0.1:0".parse().unwrap(), &cfg, false))
        .unwrap()
        .unwrap();
    let mut batch = TxBatch::new(8, 0, 4000);
    let mut sent = Vec::new();
    for i in 0..5u32 {
        let d = common::pattern(3000, i);
        batch.push(Some(rx.local_addr()), &d).unwrap();
        sent.push(d);
    }
    assert_eq!(tx.send_batch(&batch).unwrap(), 5);
    let st = tx.stats();
    assert_eq!(st.tx_errors, 0, "{st:?}");
    let mut rxb = RxBatch::new(16, 0, GRO_SLOT_LEN, 1024);
    let mut got = Vec::new();
    common::wait_until(Duration::from_secs(5), || {
        rx.recv_batch(&mut rxb).unwrap();
        got.extend(rxb.iter().map(|(p, _)| p.to_vec()));
        got.len() >= 5
    });
    assert!(got == sent, "{} of 5 arrived whole: {st:?}", got.len());
}
