//! Property tests: for every `Repr`, `parse(emit(x)) == x`, and what is
//! emitted verifies (checksums) and is what the views read back.
#![allow(clippy::unwrap_used, missing_docs)]

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use esparto_wire::espinudp::{Datagram, Kind};
use esparto_wire::ip::{FiveTuple, proto};
use esparto_wire::ipv6::ext;
use esparto_wire::{esp, icmp, ipv4, ipv6, tcp, udp};
use proptest::prelude::*;

fn v4_addr() -> impl Strategy<Value = Ipv4Addr> {
    any::<u32>().prop_map(Ipv4Addr::from)
}

fn v6_addr() -> impl Strategy<Value = Ipv6Addr> {
    any::<u128>().prop_map(Ipv6Addr::from)
}

prop_compose! {
    fn ipv4_repr()(
        src_addr in v4_addr(), dst_addr in v4_addr(), protocol in any::<u8>(),
        payload_len in 0usize..1600, ttl in any::<u8>(), dscp in 0u8..64, ecn in 0u8..4,
        ident in any::<u16>(), dont_frag in any::<bool>(), more_frags in any::<bool>(),
        units in 0u16..8192,
    ) -> ipv4::Repr {
        ipv4::Repr { src_addr, dst_addr, protocol, payload_len, ttl, dscp, ecn, ident,
                     dont_frag, more_frags, frag_offset: units * 8 }
    }
}

prop_compose! {
    fn ipv6_repr()(
        src_addr in v6_addr(), dst_addr in v6_addr(), next_header in any::<u8>(),
        payload_len in 0usize..1600, hop_limit in any::<u8>(), traffic_class in any::<u8>(),
        flow_label in 0u32..=ipv6::MAX_FLOW_LABEL,
    ) -> ipv6::Repr {
        ipv6::Repr { src_addr, dst_addr, next_header, payload_len, hop_limit, traffic_class, flow_label }
    }
}

/// Well-formed TCP option bytes: a list of options padded with NOPs to a
/// multiple of four, at most 40 bytes.
fn tcp_options() -> impl Strategy<Value = Vec<u8>> {
    let one = prop_oneof![
        Just(vec![1u8]),
        any::<u16>().prop_map(|m| {
            let b = m.to_be_bytes();
            vec![2, 4, b[0], b[1]]
        }),
        any::<u8>().prop_map(|s| vec![3, 3, s]),
        Just(vec![4u8, 2]),
        (1usize..=4).prop_map(|n| {
            let mut v = vec![5u8, (2 + 8 * n) as u8];
            v.resize(2 + 8 * n, 0xab);
            v
        }),
        (any::<u32>(), any::<u32>()).prop_map(|(a, b)| {
            let mut v = vec![8u8, 10];
            v.extend(a.to_be_bytes());
            v.extend(b.to_be_bytes());
            v
        }),
        (30u8..=250, proptest::collection::vec(any::<u8>(), 0..6)).prop_map(|(k, d)| {
            let mut v = vec![k, (d.len() + 2) as u8];
            v.extend(d);
            v
        }),
    ];
    proptest::collection::vec(one, 0..6).prop_map(|opts| {
        let mut out = Vec::new();
        for o in opts {
            if out.len() + o.len() <= 40 {
                out.extend(o);
            }
        }
        while out.len() % 4 != 0 {
            out.push(1);
        }
        out
    })
}

proptest! {
    #[test]
    fn ipv4(repr in ipv4_repr()) {
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit(&mut ipv4::Packet::new_unchecked(&mut buf[..])).unwrap();
        let p = ipv4::Packet::new_checked(&buf[..]).unwrap();
        prop_assert!(p.verify_checksum());
        prop_assert_eq!(p.payload().len(), repr.payload_len);
        prop_assert_eq!(ipv4::Repr::parse(&p).unwrap(), repr);
    }

    #[test]
    fn ipv6(repr in ipv6_repr()) {
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit(&mut ipv6::Packet::new_unchecked(&mut buf[..])).unwrap();
        let p = ipv6::Packet::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(p.payload().len(), repr.payload_len);
        prop_assert_eq!(ipv6::Repr::parse(&p).unwrap(), repr);
    }

    #[test]
    fn udp_v4_and_v6(src_port in any::<u16>(), dst_port in any::<u16>(),
                     data in proptest::collection::vec(any::<u8>(), 0..1500),
                     s4 in v4_addr(), d4 in v4_addr(), s6 in v6_addr(), d6 in v6_addr()) {
        let repr = udp::Repr { src_port, dst_port, payload_len: data.len() };
        let mut buf = vec![0u8; repr.buffer_len()];
        let mut p = udp::Packet::new_unchecked(&mut buf[..]);
        repr.emit(&mut p).unwrap();
        p.payload_mut().copy_from_slice(&data);
        p.fill_checksum_v4(s4, d4);
        let p = udp::Packet::new_checked(&buf[..]).unwrap();
        prop_assert!(p.verify_checksum_v4(s4, d4));
        prop_assert_ne!(p.checksum(), 0);
        prop_assert_eq!(p.payload(), &data[..]);
        prop_assert_eq!(udp::Repr::parse(&p).unwrap(), repr);
        let mut p = udp::Packet::new_unchecked(&mut buf[..]);
        p.fill_checksum_v6(s6, d6);
        prop_assert!(p.verify_checksum_v6(s6, d6));
    }

    #[test]
    fn tcp(src_port in any::<u16>(), dst_port in any::<u16>(), seq_number in any::<u32>(),
           ack_number in any::<u32>(), flags in any::<u8>(), window in any::<u16>(),
           urgent_ptr in any::<u16>(), options in tcp_options(),
           data in proptest::collection::vec(any::<u8>(), 0..1500),
           s6 in v6_addr(), d6 in v6_addr()) {
        let repr = tcp::Repr { src_port, dst_port, seq_number, ack_number, flags, window, urgent_ptr,
                               options: &options, payload_len: data.len() };
        let mut buf = vec![0u8; repr.buffer_len()];
        let mut p = tcp::Packet::new_unchecked(&mut buf[..]);
        repr.emit(&mut p).unwrap();
        p.payload_mut().copy_from_slice(&data);
        p.fill_checksum_v6(s6, d6).unwrap();
        let p = tcp::Packet::new_checked(&buf[..]).unwrap();
        prop_assert!(p.verify_checksum_v6(s6, d6));
        prop_assert_eq!(p.payload(), &data[..]);
        prop_assert!(p.options_iter().all(|o| o.is_ok()));
        prop_assert_eq!(tcp::Repr::parse(&p).unwrap(), repr);
    }

    #[test]
    fn tcp_mss_clamp_keeps_checksum(mss in any::<u16>(), max in any::<u16>(), nops in 0usize..3,
                                    s in v4_addr(), d in v4_addr()) {
        let mut options = vec![1u8; nops];
        options.extend([2, 4]);
        options.extend(mss.to_be_bytes());
        while options.len() % 4 != 0 { options.push(1); }
        let repr = tcp::Repr { src_port: 1, dst_port: 2, seq_number: 3, ack_number: 0,
                               flags: tcp::flags::SYN, window: 4, urgent_ptr: 0,
                               options: &options, payload_len: 0 };
        let mut buf = vec![0u8; repr.buffer_len()];
        let mut p = tcp::Packet::new_unchecked(&mut buf[..]);
        repr.emit(&mut p).unwrap();
        p.fill_checksum_v4(s, d).unwrap();
        let changed = p.clamp_mss(max);
        prop_assert_eq!(changed, mss > max);
        prop_assert_eq!(p.mss(), Some(mss.min(max)));
        prop_assert!(p.verify_checksum_v4(s, d));
    }

    #[test]
    fn icmpv4(msg_type in any::<u8>(), code in any::<u8>(), rest_of_header in any::<u32>(),
              data in proptest::collection::vec(any::<u8>(), 0..600)) {
        let repr = icmp::v4::Repr { msg_type, code, rest_of_header, data: &data };
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit(&mut icmp::v4::Packet::new_unchecked(&mut buf[..])).unwrap();
        let p = icmp::v4::Packet::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(icmp::v4::Repr::parse(&p).unwrap(), repr);
    }

    #[test]
    fn icmpv6(msg_type in any::<u8>(), code in any::<u8>(), rest_of_header in any::<u32>(),
              data in proptest::collection::vec(any::<u8>(), 0..1300), s in v6_addr(), d in v6_addr()) {
        let repr = icmp::v6::Repr { msg_type, code, rest_of_header, data: &data };
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit(s, d, &mut icmp::v6::Packet::new_unchecked(&mut buf[..])).unwrap();
        let p = icmp::v6::Packet::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(icmp::v6::Repr::parse(s, d, &p).unwrap(), repr);
    }

    #[test]
    fn esp_header(spi in any::<u32>(), seq in any::<u32>(), tail in proptest::collection::vec(any::<u8>(), 0..64)) {
        let repr = esp::Repr { spi, seq };
        let mut buf = vec![0u8; repr.buffer_len()];
        buf.extend(&tail);
        repr.emit(&mut esp::Packet::new_unchecked(&mut buf[..])).unwrap();
        let p = esp::Packet::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(p.payload(), &tail[..]);
        prop_assert_eq!(esp::Repr::parse(&p).unwrap(), repr);
    }

    #[test]
    fn esp_trailer(data in proptest::collection::vec(any::<u8>(), 0..300), align in prop_oneof![Just(1usize), Just(4), Just(8), Just(16)],
                   next_header in any::<u8>()) {
        let pad = esp::padding_for(data.len(), align);
        let t = esp::Trailer { pad_len: pad as u8, next_header };
        let mut buf = data.clone();
        buf.resize(data.len() + t.buffer_len(), 0);
        t.emit(&mut buf[data.len()..]).unwrap();
        prop_assert_eq!(buf.len() % align.max(4), 0);
        let (d, back) = esp::Trailer::split(&buf).unwrap();
        prop_assert_eq!(d, &data[..]);
        prop_assert_eq!(back, t);
    }

    #[test]
    fn esp_trailer_any_pad_len(pad_len in any::<u8>(), next_header in any::<u8>()) {
        let t = esp::Trailer { pad_len, next_header };
        let mut buf = vec![0u8; t.buffer_len()];
        t.emit(&mut buf).unwrap();
        prop_assert_eq!(esp::Trailer::parse(&buf).unwrap(), t);
    }

    #[test]
    fn espinudp(ike in proptest::collection::vec(any::<u8>(), 0..100), spi in 1u32.., seq in any::<u32>()) {
        let mut b = [0u8; 1];
        let n = Datagram::emit_keepalive(&mut b).unwrap();
        prop_assert_eq!(Datagram::classify(&b[..n]).unwrap(), Kind::NatKeepalive);

        let mut m = vec![0u8; esparto_wire::espinudp::MARKER_LEN + ike.len()];
        let n = Datagram::emit_marker(&mut m).unwrap();
        m[n..].copy_from_slice(&ike);
        prop_assert_eq!(Datagram::classify(&m).unwrap(), Kind::Ike(&ike[..]));

        let mut e = vec![0u8; 8 + ike.len()];
        esp::Repr { spi, seq }.emit(&mut esp::Packet::new_unchecked(&mut e[..])).unwrap();
        match Datagram::classify(&e).unwrap() {
            Kind::Esp(p) => prop_assert_eq!(esp::Repr::parse(&p).unwrap(), esp::Repr { spi, seq }),
            other => prop_assert!(false, "classified as {:?}", other),
        }
    }

    /// Build a packet from a tuple with the emitters; extraction gives it back.
    #[test]
    fn five_tuple(v6 in any::<bool>(), s4 in v4_addr(), d4 in v4_addr(), s6 in v6_addr(), d6 in v6_addr(),
                  which in 0u8..4, a in any::<u16>(), b in any::<u16>(), ty in any::<u8>(), code in any::<u8>(),
                  ext_units in proptest::collection::vec(0u8..4, 0..=ext::MAX_EXT_HEADERS)) {
        let (l4, proto, ports): (Vec<u8>, u8, (u16, u16)) = match which {
            0 => {
                let r = udp::Repr { src_port: a, dst_port: b, payload_len: 3 };
                let mut v = vec![0u8; r.buffer_len()];
                r.emit(&mut udp::Packet::new_unchecked(&mut v[..])).unwrap();
                (v, proto::UDP, (a, b))
            }
            1 => {
                let r = tcp::Repr { src_port: a, dst_port: b, seq_number: 1, ack_number: 2, flags: 0x18,
                                    window: 3, urgent_ptr: 0, options: &[], payload_len: 0 };
                let mut v = vec![0u8; r.buffer_len()];
                r.emit(&mut tcp::Packet::new_unchecked(&mut v[..])).unwrap();
                (v, proto::TCP, (a, b))
            }
            2 => {
                let data = [0u8; 4];
                let r = icmp::v4::Repr { msg_type: ty, code, rest_of_header: 0, data: &data };
                let mut v = vec![0u8; r.buffer_len()];
                r.emit(&mut icmp::v4::Packet::new_unchecked(&mut v[..])).unwrap();
                (v, if v6 { proto::ICMPV6 } else { proto::ICMP }, (u16::from(ty), u16::from(code)))
            }
            _ => (vec![1, 2, 3, 4, 5, 6, 7, 8], proto::ESP, (0, 0)),
        };
        let pkt = if v6 {
            // Destination Options headers of random lengths in front.
            let mut payload = Vec::new();
            let mut first = proto;
            for u in ext_units.iter().rev() {
                let mut h = vec![0u8; (usize::from(*u) + 1) * 8];
                h[0] = first;
                h[1] = *u;
                first = ext::DEST_OPTS;
                payload.splice(0..0, h);
            }
            payload.extend(&l4);
            let r = ipv6::Repr { src_addr: s6, dst_addr: d6, next_header: first, payload_len: payload.len(),
                                 hop_limit: 64, traffic_class: 0, flow_label: 0 };
            let mut v = vec![0u8; r.buffer_len()];
            let mut p = ipv6::Packet::new_unchecked(&mut v[..]);
            r.emit(&mut p).unwrap();
            p.payload_mut().copy_from_slice(&payload);
            v
        } else {
            let r = ipv4::Repr { src_addr: s4, dst_addr: d4, protocol: proto, payload_len: l4.len(), ttl: 64,
                                 dscp: 0, ecn: 0, ident: 0, dont_frag: true, more_frags: false, frag_offset: 0 };
            let mut v = vec![0u8; r.buffer_len()];
            let mut p = ipv4::Packet::new_unchecked(&mut v[..]);
            r.emit(&mut p).unwrap();
            p.payload_mut().copy_from_slice(&l4);
            v
        };
        let (src, dst) = if v6 { (IpAddr::V6(s6), IpAddr::V6(d6)) } else { (IpAddr::V4(s4), IpAddr::V4(d4)) };
        prop_assert_eq!(FiveTuple::extract(&pkt).unwrap(),
                        FiveTuple { src, dst, proto, src_port: ports.0, dst_port: ports.1 });
    }

    /// Any ICMP error the emitters produce parses, verifies and quotes the
    /// start of the offending packet.
    #[test]
    fn too_big_errors(repr4 in ipv4_repr(), repr6 in ipv6_repr(), out_len in 0usize..1600, mtu in any::<u16>()) {
        let mut orig = vec![0u8; repr4.buffer_len()];
        repr4.emit(&mut ipv4::Packet::new_unchecked(&mut orig[..])).unwrap();
        let mut out = vec![0u8; out_len];
        let src = Ipv4Addr::new(192, 0, 2, 1);
        if let Ok(n) = icmp::frag_needed_v4(&orig, mtu, src, &mut out) {
            prop_assert!(n <= icmp::MAX_V4_ERROR_LEN && n <= out_len);
            let ip = ipv4::Packet::new_checked(&out[..n]).unwrap();
            prop_assert!(ipv4::Repr::parse(&ip).is_ok());
            let m = icmp::v4::Packet::new_checked(ip.payload()).unwrap();
            prop_assert!(m.verify_checksum());
            prop_assert_eq!(m.next_hop_mtu(), mtu);
            prop_assert!(orig.starts_with(m.data()));
            prop_assert!(m.data().len() >= (orig.len()).min(28));
        }
        let mut orig = vec![0u8; repr6.buffer_len()];
        repr6.emit(&mut ipv6::Packet::new_unchecked(&mut orig[..])).unwrap();
        let src6 = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
        let mtu6 = u32::from(mtu) + 1280;
        if let Ok(n) = icmp::packet_too_big_v6(&orig, mtu6, src6, &mut out) {
            prop_assert!(n <= icmp::MAX_V6_ERROR_LEN && n <= out_len);
            let ip = ipv6::Packet::new_checked(&out[..n]).unwrap();
            let m = icmp::v6::Packet::new_checked(ip.payload()).unwrap();
            prop_assert!(m.verify_checksum(src6, repr6.src_addr));
            prop_assert_eq!(m.mtu(), mtu6);
            prop_assert!(orig.starts_with(m.data()));
        }
    }
}
