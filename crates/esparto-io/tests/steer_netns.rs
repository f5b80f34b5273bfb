//! (a) The cBPF program steers datagrams by SPI to the intended socket of the
//! reuseport group, and IKE (non-ESP marker) and NAT keepalives to the control
//! socket — in a real kernel, between two namespaces. Also documents the GRO
//! caveat: a GSO super-packet is steered as a whole by its first datagram.

#![allow(clippy::unwrap_used, clippy::needless_range_loop)]

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use esparto_netns::Pair;
use esparto_io::udp::{UdpConfig, UdpGroup, UdpSocket};
use esparto_io::{TxBatch, worker_for_key};

/// Drain every socket of the group until `done` says so (or 5 s pass);
/// returns the messages per socket index.
fn drain_until(group: &UdpGroup, done: impl Fn(&[Vec<Vec<u8>>]) -> bool) -> Vec<Vec<Vec<u8>>> {
    let n = group.workers.len();
    let mut got: Vec<Vec<Vec<u8>>> = vec![Vec::new(); n + 1];
    let mut buf = vec![0u8; 65536];
    common::wait_until(Duration::from_secs(5), || {
        for (i, s) in group
            .workers
            .iter()
            .chain(std::iter::once(&group.control))
            .enumerate()
        {
            while let Some((len, _)) = s.recv_from(&mut buf).unwrap() {
                got[i].push(buf[..len].to_vec());
            }
        }
        done(&got)
    });
    got
}

fn drain(group: &UdpGroup, want: usize) -> Vec<Vec<Vec<u8>>> {
    drain_until(group, |g| g.iter().map(Vec::len).sum::<usize>() >= want)
}

fn bytes(msgs: &[Vec<u8>]) -> usize {
    msgs.iter().map(Vec::len).sum()
}

fn esp(spi: u32, seq: u32, len: usize) -> Vec<u8> {
    let mut d = common::pattern(len, seq);
    d[..4].copy_from_slice(&spi.to_be_bytes());
    d[4..8].copy_from_slice(&seq.to_be_bytes());
    d
}

#[test]
fn spi_steering_in_kernel() {
    require_netns!("spi_steering_in_kernel");
    let pair = Pair::new("steer", "10.201.0.1/24", "10.201.0.2/24").unwrap();
    pair.a
        .ip(&[
            "-6",
            "addr",
            "add",
            "fd00:201::1/64",
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
            "fd00:201::2/64",
            "dev",
            "veth1",
            "nodad",
        ])
        .unwrap();
    let cases = [
        (1usize, false),
        (2, false),
        (3, false),
        (4, false),
        (3, true),
    ];
    for (workers, v6) in cases {
        let port = 4500 + workers as u16;
        let (dst, src) = if v6 {
            ("[fd00:201::2]", "[fd00:201::1]:0")
        } else {
            ("10.201.0.2", "10.201.0.1:0")
        };
        let bind: SocketAddr = format!("{dst}:{port}").parse().unwrap();
        let group = pair
            .b
            .run(|| UdpGroup::bind(bind, workers, &common::steered()))
            .unwrap()
            .unwrap();
        let tx = pair
            .a
            .run(|| std::net::UdpSocket::bind(src))
            .unwrap()
            .unwrap();

        // expected[i] = payloads that must land on socket i.
        let mut expected: Vec<Vec<Vec<u8>>> = vec![Vec::new(); workers + 1];
        let mut seq = 0;
        for k in 0..workers {
            for r in [
                0x1234_5678u32,
                0xdead_beef,
                0x0000_0300,
                0xffff_ffff,
                0x8000_0001,
            ] {
                let spi = common::key_for_worker(r, k, workers).unwrap();
                assert_eq!(worker_for_key(spi, workers), k);
                seq += 1;
                expected[k].push(esp(spi, seq, 60 + seq as usize));
            }
        }
        // RFC 3948 §2.2: IKE behind the 4-byte non-ESP marker.
        let mut ike = vec![0u8; 4];
        ike.extend(common::pattern(40, 7));
        expected[workers].push(ike);
        // RFC 3948 §2.3: NAT keepalive, one 0xFF octet.
        expected[workers].push(vec![0xff]);
        // Too short to be ESP.
        expected[workers].push(vec![1, 2, 3, 4, 5]);

        let total: usize = expected.iter().map(Vec::len).sum();
        for list in &expected {
            for d in list {
                tx.send_to(d, bind).unwrap();
            }
        }
        let got = drain(&group, total);
        for i in 0..=workers {
            let mut g = got[i].clone();
            let mut e = expected[i].clone();
            g.sort();
            e.sort();
            assert_eq!(
                g, e,
                "workers={workers} v6={v6}: socket {i} got the wrong datagrams"
            );
        }
    }
}

/// UDP GRO/GSO merge datagrams of one 4-tuple without looking at the payload,
/// and the steering program runs once per skb: a GSO super-packet mixing SPIs
/// lands whole on the socket of its *first* SPI. Splitting runs on the
/// steering key, the sender never builds such a super-packet.
#[test]
fn gso_super_packet_is_steered_by_its_first_datagram() {
    require_netns!("gso_super_packet_is_steered_by_its_first_datagram");
    let pair = Pair::new("steergso", "10.202.0.1/24", "10.202.0.2/24").unwrap();
    let bind: SocketAddr = "10.202.0.2:4500".parse().unwrap();
    let group = pair
        .b
        .run(|| UdpGroup::bind(bind, 2, &common::steered()))
        .unwrap()
        .unwrap();
    let spi0 = common::key_for_worker(0x5555_0000, 0, 2).unwrap();
    let spi1 = common::key_for_worker(0x7777_0000, 1, 2).unwrap();

    for split in [false, true] {
        let cfg = UdpConfig {
            steering: split.then_some(common::KEY),
            ..UdpConfig::default()
        };
        let mut tx = pair
            .a
            .run(|| UdpSocket::bind("10.202.0.1:0".parse().unwrap(), &cfg, false))
            .unwrap()
            .unwrap();
        let mut batch = TxBatch::new(16, 0, 1500);
        for seq in 0..10u32 {
            let spi = if seq < 5 { spi0 } else { spi1 };
            batch.push(Some(bind), &esp(spi, seq, 1000)).unwrap();
        }
        assert_eq!(tx.send_batch(&batch).unwrap(), 10);
        assert_eq!(tx.stats().tx_msgs, if split { 2 } else { 1 });
        // recv_from does not split GRO buffers: count bytes.
        let got = drain_until(&group, |g| {
            g.iter().map(|m| bytes(m)).sum::<usize>() >= 10_000
        });
        if split {
            assert_eq!(
                (bytes(&got[0]), bytes(&got[1])),
                (5000, 5000),
                "split runs steer per SPI"
            );
        } else {
            // One skb, steered by the first SPI: all ten at worker 0.
            assert_eq!(
                (bytes(&got[0]), bytes(&got[1])),
                (10_000, 0),
                "whole super-packet at worker 0"
            );
            assert_eq!(got[0].len(), 1, "delivered as one GRO buffer");
        }
    }
}
