//! Fuzz the IPv4 view and Repr: arbitrary bytes through `new_checked`, every
//! accessor, and `Repr::parse`; on success, re-emitting gives back the same
//! header bytes (the reserved flag bit, which the Repr drops, excepted).
#![no_main]

use esparto_wire::ipv4;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(p) = ipv4::Packet::new_checked(data) else {
        return;
    };
    let _ = (
        p.options(),
        p.payload(),
        p.packet(),
        p.verify_checksum(),
        p.is_fragment(),
    );
    let Ok(repr) = ipv4::Repr::parse(&p) else {
        return;
    };
    assert_eq!(repr.payload_len, p.payload().len());
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut ipv4::Packet::new_unchecked(&mut out[..]))
        .expect("emit a parsed repr");
    let reparsed =
        ipv4::Repr::parse(&ipv4::Packet::new_checked(&out[..]).expect("emitted is valid"));
    assert_eq!(reparsed, Ok(repr));
    assert!(ipv4::Packet::new_unchecked(&out[..]).verify_checksum());
    // Byte for byte, except the checksum (either ones'-complement zero
    // verifies) and the reserved flag bit.
    let mut want = data[..ipv4::HEADER_LEN].to_vec();
    want[6] &= 0x7f;
    want[10..12].copy_from_slice(&out[10..12]);
    assert_eq!(&out[..ipv4::HEADER_LEN], &want[..]);
});
