//! Fuzz ICMPv4/ICMPv6 views and Reprs, and the Frag-Needed / Packet-Too-Big
//! emitters (the input as the offending packet). Parsed messages re-emit
//! byte for byte; every emitted error parses, verifies, stays within its
//! RFC size limit and quotes a prefix of the offending packet.
#![no_main]

use core::net::{Ipv4Addr, Ipv6Addr};

use esparto_wire::{icmp, ipv4, ipv6};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = icmp::v4::Packet::new_checked(data) {
        if let Ok(r) = icmp::v4::Repr::parse(&p) {
            let mut out = vec![0u8; r.buffer_len()];
            r.emit(&mut icmp::v4::Packet::new_unchecked(&mut out[..]))
                .expect("emit");
            // The checksum field may hold either ones'-complement zero.
            assert_eq!(&out[..2], &data[..2]);
            assert_eq!(&out[4..], &data[4..]);
        }
    }
    if data.len() >= 32 {
        let src = Ipv6Addr::from(<[u8; 16]>::try_from(&data[..16]).expect("16"));
        let dst = Ipv6Addr::from(<[u8; 16]>::try_from(&data[16..32]).expect("16"));
        if let Ok(p) = icmp::v6::Packet::new_checked(&data[32..]) {
            if let Ok(r) = icmp::v6::Repr::parse(src, dst, &p) {
                let mut out = vec![0u8; r.buffer_len()];
                r.emit(src, dst, &mut icmp::v6::Packet::new_unchecked(&mut out[..]))
                    .expect("emit");
                assert!(
                    icmp::v6::Packet::new_checked(&out[..])
                        .expect("valid")
                        .verify_checksum(src, dst)
                );
                assert_eq!(&out[..2], &data[32..34]);
                assert_eq!(&out[4..], &data[36..]);
            }
        }
    }

    let mut out = [0u8; 1500];
    let gw4 = Ipv4Addr::new(192, 0, 2, 1);
    let mtu = data.first().map_or(1400, |&b| 68 + u16::from(b) * 5);
    if let Ok(n) = icmp::frag_needed_v4(data, mtu, gw4, &mut out) {
        assert!(n <= icmp::MAX_V4_ERROR_LEN);
        let ip = ipv4::Packet::new_checked(&out[..n]).expect("emitted ipv4");
        assert!(ipv4::Repr::parse(&ip).is_ok());
        let m = icmp::v4::Packet::new_checked(ip.payload()).expect("emitted icmp");
        assert!(m.verify_checksum());
        assert_eq!(m.next_hop_mtu(), mtu);
        assert!(data.starts_with(m.data()));
    }
    let gw6 = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
    if let Ok(n) = icmp::packet_too_big_v6(data, 1280 + u32::from(mtu), gw6, &mut out) {
        assert!(n <= icmp::MAX_V6_ERROR_LEN);
        let ip = ipv6::Packet::new_checked(&out[..n]).expect("emitted ipv6");
        let r = ipv6::Repr::parse(&ip).expect("emitted ipv6 repr");
        let m = icmp::v6::Packet::new_checked(ip.payload()).expect("emitted icmpv6");
        assert!(m.verify_checksum(gw6, r.dst_addr));
        assert!(data.starts_with(m.data()));
    }
});
