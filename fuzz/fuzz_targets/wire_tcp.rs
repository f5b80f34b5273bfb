//! Fuzz the TCP view, options iterator, MSS clamping and Repr; on success
//! the segment re-emits byte for byte (reserved bits and checksum aside).
#![no_main]

use core::net::Ipv4Addr;

use esparto_wire::tcp;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(p) = tcp::Packet::new_checked(data) else {
        return;
    };
    for o in p.options_iter() {
        let _ = o;
    }
    let _ = p.mss();
    let Ok(repr) = tcp::Repr::parse(&p) else {
        return;
    };
    let mut out = vec![0u8; repr.buffer_len()];
    let mut q = tcp::Packet::new_unchecked(&mut out[..]);
    repr.emit(&mut q).expect("emit a parsed repr");
    q.payload_mut().copy_from_slice(p.payload());
    q.set_checksum(p.checksum());
    let mut want = data.to_vec();
    want[12] &= 0xf0; // reserved bits are not part of the Repr
    assert_eq!(out, want);
    assert_eq!(
        tcp::Repr::parse(&tcp::Packet::new_checked(&out[..]).expect("valid")),
        Ok(repr)
    );

    // Clamping keeps a valid checksum valid.
    let (s, d) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
    let mut q = tcp::Packet::new_unchecked(&mut out[..]);
    if q.fill_checksum_v4(s, d).is_ok() {
        let before = q.mss();
        let changed = q.clamp_mss(1200);
        assert!(q.verify_checksum_v4(s, d));
        if changed {
            assert_eq!(q.mss(), Some(1200));
            assert!(before.is_some_and(|m| m > 1200));
        }
    }
});
