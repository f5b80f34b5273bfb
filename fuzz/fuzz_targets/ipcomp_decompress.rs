//! Fuzz IPComp decompression (RFC 3173, DEFLATE): the input's first two
//! bytes are the SA's largest inner packet (big-endian, at most the
//! worker's buffer), the rest the IPComp payload as it arrives inside ESP
//! (header, then DEFLATE data) on an SA whose CPI is the header's own.
//! Nothing panics; output never exceeds the bound; a payload that
//! decompresses compresses again to something that decompresses to the
//! same bytes.
#![no_main]

use esparto_esp::{Deflate, DropReason, IpcompMode, IpcompParams, IpcompSa};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let [a, b, payload @ ..] = data else { return };
    let max_inner = usize::from(u16::from_be_bytes([*a, *b]));
    let cpi = payload.get(2..4).map_or(0x1234, |c| u16::from_be_bytes([c[0], c[1]]));
    let mut sa = IpcompSa::new(IpcompParams { cpi, mode: IpcompMode::Always, max_inner, link_mbps: None });
    let mut d = Deflate::new();
    match d.decompress_packet(&mut sa, payload) {
        Ok((_, n)) => {
            assert!(n <= max_inner, "{n} bytes past the bound {max_inner}");
            let out = d.scratch()[..n].to_vec();
            if let Some(m) = d.compress(&out) {
                let again = d.scratch()[..m].to_vec();
                assert_eq!(d.decompress(&again, out.len()), Ok(out.len()));
                assert_eq!(&d.scratch()[..out.len()], &out[..]);
            }
        }
        Err(DropReason::Malformed | DropReason::TooBig) => {}
        Err(other) => panic!("unexpected drop reason {other}"),
    }
});
