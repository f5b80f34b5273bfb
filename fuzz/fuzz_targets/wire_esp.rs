//! Fuzz the ESP header view/Repr and the trailer parser; both re-emit to the
//! same bytes.
#![no_main]

use esparto_wire::esp;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = esp::Packet::new_checked(data) {
        let r = esp::Repr::parse(&p).expect("a checked view parses");
        let mut out = data.to_vec();
        out[..esp::HEADER_LEN].fill(0);
        r.emit(&mut esp::Packet::new_unchecked(&mut out[..]))
            .expect("emit");
        assert_eq!(out, data);
    }
    if let Ok((payload, t)) = esp::Trailer::split(data) {
        assert_eq!(payload.len() + t.buffer_len(), data.len());
        let mut out = vec![0u8; t.buffer_len()];
        t.emit(&mut out).expect("emit");
        assert_eq!(&out[..], &data[payload.len()..]);
    }
});
