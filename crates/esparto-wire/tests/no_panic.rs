//! Property tests: arbitrary bytes never panic any `new_checked`, accessor,
//! `parse`, walker or classifier — both fully random input and valid
//! packets with random corruption (which gets past the first length checks
//! far more often).
#![allow(clippy::unwrap_used, missing_docs)]

use core::net::{Ipv4Addr, Ipv6Addr};

use esparto_wire::espinudp::Datagram;
use esparto_wire::ip::{FiveTuple, IpVersion};
use esparto_wire::ipv6::ext;
use esparto_wire::{esp, icmp, ipv4, ipv6, tcp, udp};
use proptest::prelude::*;

/// Runs every reader in the crate over `b`; each must return, not panic.
fn exercise(b: &[u8]) {
    if let Ok(p) = ipv4::Packet::new_checked(b) {
        let _ = (
            p.version(),
            p.dscp(),
            p.ecn(),
            p.ident(),
            p.dont_frag(),
            p.more_frags(),
            p.frag_offset(),
        );
        let _ = (
            p.ttl(),
            p.protocol(),
            p.checksum(),
            p.src_addr(),
            p.dst_addr(),
            p.verify_checksum(),
        );
        let _ = (p.options(), p.payload(), p.packet(), p.is_fragment());
        let _ = ipv4::Repr::parse(&p);
    }
    if let Ok(p) = ipv6::Packet::new_checked(b) {
        let _ = (
            p.version(),
            p.traffic_class(),
            p.flow_label(),
            p.payload_len(),
            p.hop_limit(),
        );
        let _ = (p.src_addr(), p.dst_addr(), p.payload(), p.packet());
        let _ = ipv6::Repr::parse(&p);
        let _ = p.upper_layer();
    }
    if let Some((&nh, rest)) = b.split_first() {
        let _ = ext::walk(nh, rest);
    }
    if let Ok(p) = udp::Packet::new_checked(b) {
        let _ = (p.src_port(), p.dst_port(), p.payload(), p.is_empty());
        let _ = p.verify_checksum_v4(Ipv4Addr::LOCALHOST, Ipv4Addr::BROADCAST);
        let _ = p.verify_checksum_v6(Ipv6Addr::LOCALHOST, Ipv6Addr::UNSPECIFIED);
        let _ = udp::Repr::parse(&p);
    }
    if let Ok(p) = tcp::Packet::new_checked(b) {
        let _ = (
            p.seq_number(),
            p.ack_number(),
            p.flags(),
            p.window(),
            p.urgent_ptr(),
            p.mss(),
        );
        let _ = (
            p.options(),
            p.payload(),
            p.verify_checksum_v4(Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST),
        );
        for o in p.options_iter() {
            let _ = o;
        }
        let _ = tcp::Repr::parse(&p);
        let mut copy = b.to_vec();
        let mut m = tcp::Packet::new_checked(&mut copy[..]).unwrap();
        let _ = m.clamp_mss(536);
    }
    if let Ok(p) = icmp::v4::Packet::new_checked(b) {
        let _ = (
            p.msg_type(),
            p.code(),
            p.rest_of_header(),
            p.next_hop_mtu(),
            p.data(),
            p.is_error(),
        );
        let _ = icmp::v4::Repr::parse(&p);
    }
    if let Ok(p) = icmp::v6::Packet::new_checked(b) {
        let _ = (p.mtu(), p.echo_ident(), p.echo_seq(), p.data());
        let _ = icmp::v6::Repr::parse(Ipv6Addr::LOCALHOST, Ipv6Addr::LOCALHOST, &p);
    }
    if let Ok(p) = esp::Packet::new_checked(b) {
        let _ = (p.spi(), p.seq(), p.payload(), p.is_reserved_spi());
        let _ = esp::Repr::parse(&p);
    }
    let _ = esp::Trailer::split(b);
    let _ = Datagram::classify(b);
    let _ = IpVersion::of(b);
    let _ = FiveTuple::extract(b);
    let mut out = [0u8; 1400];
    let _ = icmp::frag_needed_v4(b, 1400, Ipv4Addr::new(192, 0, 2, 1), &mut out);
    let _ = icmp::packet_too_big_v6(b, 1400, Ipv6Addr::LOCALHOST, &mut out);
    let _ = icmp::frag_needed_v4(b, 1400, Ipv4Addr::new(192, 0, 2, 1), &mut out[..60]);
}

/// Valid-looking packets to corrupt.
fn seed() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(ipv4_udp()),
        Just(ipv6_chain()),
        Just(vec![0u8, 0, 0, 0, 0x21, 0x20, 0x22, 0x08]),
    ]
}

fn ipv4_udp() -> Vec<u8> {
    let mut v = vec![0u8; 60];
    ipv4::Repr {
        src_addr: Ipv4Addr::new(10, 0, 0, 1),
        dst_addr: Ipv4Addr::new(10, 0, 0, 2),
        protocol: 17,
        payload_len: 40,
        ttl: 64,
        dscp: 0,
        ecn: 0,
        ident: 1,
        dont_frag: true,
        more_frags: false,
        frag_offset: 0,
    }
    .emit(&mut ipv4::Packet::new_unchecked(&mut v[..]))
    .unwrap();
    udp::Repr {
        src_port: 1,
        dst_port: 2,
        payload_len: 32,
    }
    .emit(&mut udp::Packet::new_unchecked(&mut v[20..]))
    .unwrap();
    v
}

fn ipv6_chain() -> Vec<u8> {
    let mut v = vec![0u8; 40];
    v[0] = 0x60;
    v[6] = ext::HOP_BY_HOP;
    let chain = [
        ext::ROUTING,
        0,
        1,
        4,
        0,
        0,
        0,
        0, // HBH
        ext::FRAGMENT,
        0,
        0,
        0,
        0,
        0,
        0,
        0, // Routing
        ext::AH,
        0,
        0,
        0,
        0,
        0,
        0,
        0, // Fragment
        6,
        1,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0, // AH, 12 bytes
        0,
        1,
        0,
        2,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0x50,
        2,
        0,
        0,
        0,
        0,
        0,
        0, // TCP SYN
    ];
    v.extend(chain);
    let len = (v.len() - 40) as u16;
    v[4..6].copy_from_slice(&len.to_be_bytes());
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes(b in proptest::collection::vec(any::<u8>(), 0..200)) {
        exercise(&b);
    }

    #[test]
    fn random_bytes_with_ip_version(b in proptest::collection::vec(any::<u8>(), 0..200), v6 in any::<bool>()) {
        let mut b = b;
        if let Some(first) = b.first_mut() {
            *first = if v6 { 0x60 | (*first & 0x0f) } else { 0x45 };
        }
        exercise(&b);
    }

    #[test]
    fn corrupted_valid_packets(base in seed(), edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
                               cut in any::<prop::sample::Index>()) {
        let mut b = base;
        for (i, v) in edits {
            let at = i.index(b.len());
            b[at] = v;
        }
        exercise(&b);
        let n = cut.index(b.len() + 1);
        exercise(&b[..n]);
    }
}

#[test]
fn seeds_are_valid() {
    // The seeds must parse, or corrupting them tests nothing deeper.
    let t = FiveTuple::extract(&ipv4_udp()).unwrap();
    assert_eq!((t.proto, t.src_port, t.dst_port), (17, 1, 2));
    let t = FiveTuple::extract(&ipv6_chain()).unwrap();
    assert_eq!((t.proto, t.src_port, t.dst_port), (6, 1, 2));
}

/// The fast flow-key parse and the checked IPv4 view agree on every input:
/// same acceptance, same addresses and protocol, same errors.
fn flow_key_matches_view(b: &[u8]) {
    use esparto_wire::ip::{FlowKey, proto};
    use esparto_wire::ipv4;
    let fast = FlowKey::extract_v4(b);
    match ipv4::Packet::new_checked(b) {
        Err(e) => assert_eq!(fast, Err(e), "{b:02x?}"),
        Ok(p) => {
            let has_ports = p.frag_offset() == 0
                && matches!(p.protocol(), proto::TCP | proto::UDP | proto::SCTP | proto::ICMP | proto::ICMPV6);
            match fast {
                Ok(k) => {
                    assert_eq!(k.src, u128::from(u32::from(p.src_addr())));
                    assert_eq!(k.dst, u128::from(u32::from(p.dst_addr())));
                    assert_eq!(k.proto, p.protocol());
                    assert!(!k.v6);
                }
                // Only a port-bearing header too short for its ports fails after the view accepted.
                Err(e) => assert!(has_ports && e == esparto_wire::Error::Truncated, "{e:?} on {b:02x?}"),
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4000, ..ProptestConfig::default() })]

    #[test]
    fn flow_key_agrees_with_the_ipv4_view(base in seed(), edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6), cut in any::<prop::sample::Index>()) {
        let mut b = base.clone();
        for (i, v) in &edits {
            let n = b.len();
            b[i.index(n)] = *v;
        }
        let keep = cut.index(b.len() + 1);
        flow_key_matches_view(&b[..keep]);
        flow_key_matches_view(&b);
    }
}
