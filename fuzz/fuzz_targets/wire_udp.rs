//! Fuzz the UDP view and Repr; on success the header re-emits (checksum
//! aside), and a filled checksum verifies for both IP versions.
#![no_main]

use core::net::{Ipv4Addr, Ipv6Addr};

use esparto_wire::udp;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(p) = udp::Packet::new_checked(data) else {
        return;
    };
    let _ = p.verify_checksum_v4(Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST);
    let _ = p.verify_checksum_v6(Ipv6Addr::LOCALHOST, Ipv6Addr::LOCALHOST);
    let repr = udp::Repr::parse(&p).expect("a checked view parses");
    let mut out = vec![0u8; repr.buffer_len()];
    let mut q = udp::Packet::new_unchecked(&mut out[..]);
    repr.emit(&mut q).expect("emit a parsed repr");
    q.payload_mut().copy_from_slice(p.payload());
    assert_eq!(&out[..6], &data[..6]);
    let mut q = udp::Packet::new_unchecked(&mut out[..]);
    q.fill_checksum_v4(Ipv4Addr::new(192, 0, 2, 1), Ipv4Addr::new(198, 51, 100, 2));
    assert!(q.verify_checksum_v4(Ipv4Addr::new(192, 0, 2, 1), Ipv4Addr::new(198, 51, 100, 2)));
    q.fill_checksum_v6(Ipv6Addr::LOCALHOST, Ipv6Addr::UNSPECIFIED);
    assert!(q.verify_checksum_v6(Ipv6Addr::LOCALHOST, Ipv6Addr::UNSPECIFIED));
    assert_eq!(
        udp::Repr::parse(&udp::Packet::new_checked(&out[..]).expect("valid")),
        Ok(repr)
    );
});
