//! Fuzz the IPv6 view, Repr and extension-header walk; on success the fixed
//! header re-emits byte for byte, and the walk stays inside the payload.
#![no_main]

use esparto_wire::ipv6;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some((&nh, rest)) = data.split_first() {
        if let Ok(ul) = ipv6::ext::walk(nh, rest) {
            assert!(ul.offset <= rest.len());
        }
    }
    let Ok(p) = ipv6::Packet::new_checked(data) else {
        return;
    };
    if let Ok(ul) = p.upper_layer() {
        assert!(ul.offset <= p.payload().len());
    }
    let Ok(repr) = ipv6::Repr::parse(&p) else {
        return;
    };
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut ipv6::Packet::new_unchecked(&mut out[..]))
        .expect("emit a parsed repr");
    assert_eq!(&out[..ipv6::HEADER_LEN], &data[..ipv6::HEADER_LEN]);
    let reparsed =
        ipv6::Repr::parse(&ipv6::Packet::new_checked(&out[..]).expect("emitted is valid"));
    assert_eq!(reparsed, Ok(repr));
});
