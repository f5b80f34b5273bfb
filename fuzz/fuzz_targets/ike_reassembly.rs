//! Fuzz the reassembly of the peer's IKE fragments (RFC 7383): a stream
//! of authenticated fragments the fuzzer makes up — any message ID,
//! direction, exchange, Fragment Number and Total Fragments (duplicates,
//! overlaps, conflicting totals, fragments of messages that never
//! complete), any length, with time passing — through one
//! `esparto_ike::fragments::Reassembly`.
//!
//! Input: records of 6 octets — flags (bit 0: response, bit 1: exchange
//! CREATE_CHILD_SA instead of IKE_AUTH), message ID, fragment number,
//! total, piece length (× 64 octets, then + the low bits of the flags),
//! seconds to advance. A piece of fragment n is n repeated.
//!
//! Checked on every step: nothing panics; what the endpoint's counter says
//! is held is what the reassembly holds, within two messages of the
//! largest size; a completed message is at most `MAX_MESSAGE_LEN` octets
//! and its pieces come in fragment order, each number at most once and
//! none above the total. At the end, `clear` frees everything.
#![no_main]

use esparto_ike::Stats;
use esparto_ike::fragments::{Reassembly, Step};
use esparto_wire::ike::{ExchangeType, Fragment, HeaderRepr, PayloadType, limits};
use libfuzzer_sys::fuzz_target;
use std::time::{Duration, Instant};

fuzz_target!(|data: &[u8]| {
    let mut r = Reassembly::default();
    let mut stats = Stats::default();
    let mut now = Instant::now();
    for rec in data.chunks_exact(6) {
        let [flags, mid, number, total, len, secs] = [rec[0], rec[1], rec[2], rec[3], rec[4], rec[5]];
        let (number, total) = (u16::from(number), u16::from(total));
        // The parser lets only these through (`Message::parse`).
        if number == 0 || total == 0 || number > total {
            continue;
        }
        now += Duration::from_secs(u64::from(secs % 40));
        let h = HeaderRepr {
            spi_i: 1,
            spi_r: 2,
            next_payload: PayloadType::SKF,
            exchange: if flags & 2 == 0 { ExchangeType::IKE_AUTH } else { ExchangeType::CREATE_CHILD_SA },
            initiator: true,
            response: flags & 1 != 0,
            message_id: u32::from(mid % 4),
            length: 0,
        };
        let piece = vec![number as u8; usize::from(len) * 64 + usize::from(flags >> 2)];
        let first = if number == 1 { PayloadType::IDI } else { PayloadType::NONE };
        match r.add(now, &mut stats, &h, Fragment { number, total }, first, &piece) {
            Step::Complete { first, plain } => {
                assert_eq!(first, PayloadType::IDI, "fragment 1 is in every whole message");
                assert!(plain.len() <= limits::MAX_MESSAGE_LEN);
                // Runs of 1, 2, …: in order, each number once.
                let mut last = 0u8;
                let mut seen = std::collections::HashSet::new();
                for &b in &plain {
                    assert!(b >= last, "pieces out of order");
                    assert!(u16::from(b) <= total);
                    if b != last {
                        assert!(seen.insert(b), "a number twice");
                        last = b;
                    }
                }
            }
            Step::Kept | Step::Dropped(_) => {}
        }
        assert_eq!(r.held(), stats.fragment_bytes_held);
        assert!(r.held() <= 2 * limits::MAX_MESSAGE_LEN);
    }
    r.clear(&mut stats);
    assert_eq!((r.held(), stats.fragment_bytes_held), (0, 0));
});
