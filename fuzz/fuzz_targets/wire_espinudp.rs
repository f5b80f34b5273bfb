//! Fuzz the RFC 3948 classifier; whatever it recognises re-emits to the
//! same datagram.
#![no_main]

use esparto_wire::esp;
use esparto_wire::espinudp::{Datagram, Kind, MARKER_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(kind) = Datagram::classify(data) else {
        return;
    };
    let mut out = vec![0u8; data.len()];
    match kind {
        Kind::NatKeepalive => {
            assert_eq!(Datagram::emit_keepalive(&mut out), Ok(1));
        }
        Kind::Ike(msg) => {
            assert_eq!(Datagram::emit_marker(&mut out), Ok(MARKER_LEN));
            out[MARKER_LEN..].copy_from_slice(msg);
        }
        Kind::Esp(p) => {
            assert_ne!(p.spi(), 0, "SPI 0 is the non-ESP marker");
            let r = esp::Repr::parse(&p).expect("classified ESP parses");
            out.copy_from_slice(data);
            out[..esp::HEADER_LEN].fill(0);
            r.emit(&mut esp::Packet::new_unchecked(&mut out[..]))
                .expect("emit");
        }
    }
    assert_eq!(out, data);
});
