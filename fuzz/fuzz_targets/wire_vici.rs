//! Fuzz the VICI codec: one packet (without its length header); a packet
//! that parses re-emits to the same bytes, its message is accepted by the
//! element reader exactly when the tree parser accepts it, and a parsed
//! tree builds back to the same message.
#![no_main]

use esparto_wire::vici::{self, Builder, Packet, Section};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() >= vici::HEADER_LEN {
        let header: [u8; vici::HEADER_LEN] = data[..vici::HEADER_LEN].try_into().expect("4 bytes");
        if let Ok(n) = vici::segment_len(header) {
            assert!(n > 0 && n <= vici::MAX_SEGMENT);
        }
    }
    let Ok(p) = Packet::parse(data) else {
        return;
    };
    let mut out = Vec::new();
    p.emit(&mut out).expect("a parsed packet emits");
    assert_eq!(&out[vici::HEADER_LEN..], data);
    let checked = vici::check_message(p.message);
    let tree = Section::parse(p.message);
    assert_eq!(checked.is_ok(), tree.is_ok(), "{checked:?} {tree:?}");
    if let Ok(tree) = tree {
        let mut b = Builder::new();
        tree.emit(&mut b);
        assert_eq!(b.finish().expect("a parsed tree builds"), p.message);
    }
});
