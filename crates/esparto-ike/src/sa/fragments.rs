//! IKE fragmentation (RFC 7383): the peer's fragmented messages put back
//! together, and ours cut when they would not fit a datagram.
//!
//! Both sides announce IKEV2_FRAGMENTATION_SUPPORTED in IKE_SA_INIT
//! (`exchange::ike_init`); from IKE_AUTH on, a message of ours whose
//! datagram would exceed `fragment_size` goes out as SKF fragments if the
//! peer announced support and the connection's `fragmentation` is `yes`
//! (`IkeSa::encode`). The fragments travel as one packet, back to back
//! (`esparto_wire::ike::messages` walks them), so retransmission resends
//! all of them (§2.6.1) and a cached response answers a retransmitted
//! request whole.
//!
//! Reassembly keeps one message per direction (a request of the peer, a
//! response to one of ours). Every fragment is authenticated and decrypted
//! before it is kept (§2.6: "each fragment MUST be verified"); what is
//! kept is its plaintext. A reassembly is bounded: at most
//! [`limits::MAX_FRAGMENTS`] fragments and [`limits::MAX_MESSAGE_LEN`]
//! octets of plaintext per message, [`MAX_FRAGMENT_BYTES`] over all IKE
//! SAs of the endpoint, and [`REASSEMBLY_TIMEOUT`] from its first
//! fragment; one that breaks a bound is dropped whole and counted.
//! §2.6.3's rules for retransmissions with another fragment size: a
//! fragment with a larger Total Fragments starts the message anew, one
//! with a smaller is dropped.

use crate::endpoint::Stats;
use esparto_wire::ike::{ExchangeType, Fragment, HeaderRepr, PayloadType, limits};
use std::time::{Duration, Instant};

/// Plaintext of partial messages all IKE SAs of an endpoint may hold: a
/// thousand half-open SAs each holding a message of the largest size.
pub const MAX_FRAGMENT_BYTES: usize = 1_000 * limits::MAX_MESSAGE_LEN;
/// How long after its first fragment a message may take to complete
/// (strongSwan's reassembly timeout is 30 s too).
pub const REASSEMBLY_TIMEOUT: Duration = Duration::from_secs(30);

/// One message being put back together.
#[derive(Debug)]
struct Partial {
    mid: u32,
    exchange: ExchangeType,
    total: u16,
    /// The first inner payload's type, from fragment 1.
    first: PayloadType,
    /// Plaintext by fragment number - 1.
    parts: Vec<Option<Box<[u8]>>>,
    have: u16,
    bytes: usize,
    started: Instant,
}

/// The peer's fragmented messages in progress: `[request, response]`.
#[derive(Debug, Default)]
pub struct Reassembly {
    slots: [Option<Box<Partial>>; 2],
}

/// What one authenticated fragment led to.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Kept; more are needed.
    Kept,
    /// The last one: the whole message's inner payloads (plaintext) and
    /// the type of the first.
    Complete {
        /// From fragment 1's Next Payload.
        first: PayloadType,
        /// The fragments' plaintexts in order.
        plain: Vec<u8>,
    },
    /// Not kept (a duplicate, a smaller Total Fragments, a bound broken).
    Dropped(&'static str),
}

impl Reassembly {
    /// Add fragment `f` of the message with header `h`, its plaintext
    /// `plain` (padding stripped) and, for fragment 1, `first`.
    pub fn add(
        &mut self,
        now: Instant,
        stats: &mut Stats,
        h: &HeaderRepr,
        f: Fragment,
        first: PayloadType,
        plain: &[u8],
    ) -> Step {
        let slot = &mut self.slots[usize::from(h.response)];
        if usize::from(f.total) > limits::MAX_FRAGMENTS {
            return drop_fragment(stats, "more fragments than MAX_FRAGMENTS");
        }
        let restart = match slot.as_deref() {
            None => true,
            Some(p) if p.mid != h.message_id || p.exchange != h.exchange => true,
            Some(p) if now.saturating_duration_since(p.started) > REASSEMBLY_TIMEOUT => true,
            Some(p) if f.total > p.total => true,
            Some(p) if f.total < p.total => {
                return drop_fragment(stats, "Total Fragments smaller than before");
            }
            Some(_) => false,
        };
        if restart {
            release(stats, slot);
            *slot = Some(Box::new(Partial {
                mid: h.message_id,
                exchange: h.exchange,
                total: f.total,
                first: PayloadType::NONE,
                parts: vec![None; usize::from(f.total)],
                have: 0,
                bytes: 0,
                started: now,
            }));
        }
        let Some(p) = slot.as_deref_mut() else {
            return Step::Kept;
        };
        let i = usize::from(f.number - 1);
        if p.parts[i].is_some() {
            return drop_fragment(stats, "duplicate fragment");
        }
        if p.bytes + plain.len() > limits::MAX_MESSAGE_LEN {
            release(stats, slot);
            return drop_fragment(stats, "reassembled message longer than MAX_MESSAGE_LEN");
        }
        if stats.fragment_bytes_held + plain.len() > MAX_FRAGMENT_BYTES {
            return drop_fragment(stats, "fragments held by all IKE SAs at their bound");
        }
        if f.number == 1 {
            p.first = first;
        }
        p.parts[i] = Some(plain.into());
        p.have += 1;
        p.bytes += plain.len();
        stats.fragment_bytes_held += plain.len();
        stats.fragments_received += 1;
        if p.have < p.total {
            return Step::Kept;
        }
        let mut buf = Vec::with_capacity(p.bytes);
        for part in p.parts.iter().flatten() {
            buf.extend_from_slice(part);
        }
        let first = p.first;
        release(stats, slot);
        stats.messages_reassembled += 1;
        Step::Complete { first, plain: buf }
    }

    /// Drop whatever is held (the SA ends).
    pub fn clear(&mut self, stats: &mut Stats) {
        for slot in &mut self.slots {
            release(stats, slot);
        }
    }

    /// Plaintext octets held.
    pub fn held(&self) -> usize {
        self.slots.iter().flatten().map(|p| p.bytes).sum()
    }
}

fn release(stats: &mut Stats, slot: &mut Option<Box<Partial>>) {
    if let Some(p) = slot.take() {
        stats.fragment_bytes_held = stats.fragment_bytes_held.saturating_sub(p.bytes);
    }
}

fn drop_fragment(stats: &mut Stats, why: &'static str) -> Step {
    stats.fragments_dropped += 1;
    Step::Dropped(why)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn header(mid: u32) -> HeaderRepr {
        HeaderRepr {
            spi_i: 1,
            spi_r: 2,
            next_payload: PayloadType::SKF,
            exchange: ExchangeType::IKE_AUTH,
            initiator: true,
            response: false,
            message_id: mid,
            length: 0,
        }
    }

    fn frag(number: u16, total: u16) -> Fragment {
        Fragment { number, total }
    }

    #[test]
    fn any_order_completes_once_and_frees_what_it_held() {
        let (mut r, mut s, now) = (Reassembly::default(), Stats::default(), Instant::now());
        let h = header(1);
        assert!(matches!(r.add(now, &mut s, &h, frag(3, 3), PayloadType::NONE, b"ef"), Step::Kept));
        assert!(matches!(r.add(now, &mut s, &h, frag(1, 3), PayloadType::IDI, b"ab"), Step::Kept));
        assert!(matches!(r.add(now, &mut s, &h, frag(1, 3), PayloadType::IDI, b"ab"), Step::Dropped("duplicate fragment")));
        assert_eq!(s.fragment_bytes_held, 4);
        let step = r.add(now, &mut s, &h, frag(2, 3), PayloadType::NONE, b"cd");
        assert_eq!(step, Step::Complete { first: PayloadType::IDI, plain: b"abcdef".to_vec() });
        assert_eq!((s.fragment_bytes_held, r.held()), (0, 0));
        assert_eq!((s.fragments_received, s.fragments_dropped, s.messages_reassembled), (3, 1, 1));
    }

    #[test]
    fn a_larger_total_restarts_a_smaller_is_dropped() {
        let (mut r, mut s, now) = (Reassembly::default(), Stats::default(), Instant::now());
        let h = header(1);
        r.add(now, &mut s, &h, frag(1, 2), PayloadType::IDI, b"xxxx");
        // Retransmitted with a smaller fragment size: more fragments.
        assert!(matches!(r.add(now, &mut s, &h, frag(1, 3), PayloadType::IDI, b"ab"), Step::Kept));
        assert_eq!(s.fragment_bytes_held, 2, "the old fragments went");
        assert!(matches!(r.add(now, &mut s, &h, frag(2, 2), PayloadType::NONE, b"cd"), Step::Dropped(_)));
        r.add(now, &mut s, &h, frag(2, 3), PayloadType::NONE, b"cd");
        assert!(matches!(r.add(now, &mut s, &h, frag(3, 3), PayloadType::NONE, b"e"), Step::Complete { .. }));
    }

    #[test]
    fn bounds_drop_the_message_and_time_ends_it() {
        let (mut r, mut s, now) = (Reassembly::default(), Stats::default(), Instant::now());
        let h = header(1);
        let big = vec![0u8; limits::MAX_MESSAGE_LEN / 2 + 1];
        r.add(now, &mut s, &h, frag(1, 3), PayloadType::IDI, &big);
        assert!(matches!(r.add(now, &mut s, &h, frag(2, 3), PayloadType::NONE, &big), Step::Dropped(_)));
        assert_eq!((s.fragment_bytes_held, r.held()), (0, 0), "dropped whole");
        assert!(matches!(r.add(now, &mut s, &h, frag(1, 9999), PayloadType::IDI, b"a"), Step::Dropped(_)));
        // A message that never completes is replaced after the timeout, and by a newer one.
        r.add(now, &mut s, &h, frag(1, 2), PayloadType::IDI, b"a");
        let later = now + REASSEMBLY_TIMEOUT + Duration::from_secs(1);
        r.add(later, &mut s, &h, frag(2, 2), PayloadType::NONE, b"b");
        assert_eq!(r.held(), 1, "fragment 1 was too old");
        r.add(later, &mut s, &header(2), frag(1, 2), PayloadType::IDI, b"cc");
        assert_eq!((r.held(), s.fragment_bytes_held), (2, 2));
        // Requests and responses apart; clear frees all.
        let mut resp = header(7);
        resp.response = true;
        r.add(later, &mut s, &resp, frag(1, 2), PayloadType::IDR, b"ddd");
        assert_eq!(r.held(), 5);
        r.clear(&mut s);
        assert_eq!((r.held(), s.fragment_bytes_held), (0, 0));
    }

    #[test]
    fn the_global_bound_holds() {
        let (mut r, mut s, now) = (Reassembly::default(), Stats::default(), Instant::now());
        s.fragment_bytes_held = MAX_FRAGMENT_BYTES - 1;
        assert!(matches!(r.add(now, &mut s, &header(1), frag(1, 2), PayloadType::IDI, b"ab"), Step::Dropped(_)));
        assert_eq!(s.fragment_bytes_held, MAX_FRAGMENT_BYTES - 1);
    }
}
