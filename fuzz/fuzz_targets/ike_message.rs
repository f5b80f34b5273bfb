//! Fuzz the IKE message parser: arbitrary bytes through `Message::parse`,
//! then every SK layout's framing checks and the inner-chain parser on
//! whatever follows the header. Must never panic; on success, emitting is
//! a fixed point: emit(parse(emit(m))) == emit(m) (the first emit may drop
//! what the parser skips: unknown attributes and selector types).
#![no_main]

use esparto_wire::ike::{
    Message, PayloadType, SkLayout, emit_message, parse_payloads, strip_padding,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = Message::parse(data) {
        if let Some(sk) = m.sk {
            for layout in [
                SkLayout { iv_len: 8, icv_len: 16, block_size: 1 },
                SkLayout { iv_len: 16, icv_len: 16, block_size: 16 },
            ] {
                if sk.check(&layout).is_ok() {
                    let start = sk.iv_offset() + layout.iv_len;
                    let end = sk.offset + 4 + sk.body_len - layout.icv_len;
                    if let Some(plain) = data.get(start..end) {
                        if let Ok(inner) = strip_padding(plain) {
                            let _ = parse_payloads(sk.first_inner, inner);
                        }
                    }
                }
            }
        } else {
            let mut out = Vec::new();
            if emit_message(&m.header, &m.payloads, &mut out).is_ok() {
                let again = Message::parse(&out).expect("re-emitted message parses");
                let mut out2 = Vec::new();
                emit_message(&again.header, &again.payloads, &mut out2).expect("emits again");
                assert_eq!(out, out2);
            }
        }
    }
    if data.len() > 1 {
        let _ = parse_payloads(PayloadType(data[0]), &data[1..]);
    }
});
