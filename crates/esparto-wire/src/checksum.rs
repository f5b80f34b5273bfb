//! The Internet checksum (RFC 1071), fast and incremental.
//!
//! IPv4, UDP, TCP, ICMP and ICMPv6 all protect their bytes with the 16-bit
//! ones'-complement sum of RFC 1071. The data plane computes it when it
//! segments a TSO super-packet, fills a UDP checksum or builds an ICMP error,
//! so it has to be quick on 1400-byte buffers, not just correct.
//!
//! Three properties of the ones'-complement sum (RFC 1071 §2) make that easy:
//!
//! - (B) *byte-order independence*: summing 16-bit words in native byte order
//!   and swapping the folded result once gives the same answer as summing them
//!   in network order. So we never swap per word.
//! - (C) *parallel summation*: 2^64 ≡ 1 (mod 2^16 − 1), so we can add eight
//!   bytes at a time into a `u64` with end-around carry and fold to 16 bits at
//!   the end. Two independent accumulators let the CPU overlap the carry
//!   chains.
//! - (A) *commutative and associative*: partial sums of pieces (a pseudo
//!   header, a UDP header, a payload) [`combine`] into the sum of the whole,
//!   as long as a piece that starts at an odd offset is byte-swapped — which
//!   [`Checksum`] tracks for you.
//!
//! Vocabulary used throughout the crate: a *sum* is the folded, **not**
//! complemented value ([`data`], [`combine`], [`pseudo_header_v4`]); the
//! *checksum* written into a header is its complement (`!sum`, see
//! [`Checksum::finish`]). A header verifies when the sum over it, checksum
//! field included, is `0xffff`.
//!
//! RFC 1624 incremental update (change one 16-bit word without re-summing the
//! packet, e.g. a TTL decrement) is [`update`].

use core::net::{Ipv4Addr, Ipv6Addr};

/// Ones'-complement sum of `bytes` (RFC 1071), folded to 16 bits, not
/// complemented. An odd trailing byte is padded with a zero octet on the
/// right, as RFC 1071 §4.1 does.
#[inline]
pub fn data(bytes: &[u8]) -> u16 {
    u16::from_be(fold(sum_native(bytes)))
}

/// Folds partial sums (each from [`data`], a pseudo header, or [`combine`])
/// into one folded sum. Each piece must cover an even number of bytes, or be
/// the last piece (see [`Checksum`] for pieces of any length).
#[inline]
pub fn combine(sums: &[u16]) -> u16 {
    // At most 2^48 u16 values fit in a u64 before it could overflow: no slice
    // is that long.
    fold(sums.iter().map(|&s| u64::from(s)).sum())
}

/// Sum of the IPv4 pseudo header of RFC 768 (UDP) / RFC 9293 §3.1 (TCP):
/// source, destination, zero, protocol, and `len`, the upper-layer length
/// (UDP length field, or TCP header + data).
#[inline]
pub fn pseudo_header_v4(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, len: u16) -> u16 {
    let s = u32::from(src);
    let d = u32::from(dst);
    fold(
        u64::from(s >> 16)
            + u64::from(s & 0xffff)
            + u64::from(d >> 16)
            + u64::from(d & 0xffff)
            + u64::from(proto)
            + u64::from(len),
    )
}

/// Sum of the IPv6 pseudo header of RFC 8200 §8.1: source, destination,
/// 32-bit upper-layer packet length, three zero octets, next header.
///
/// `len` is the length of the upper-layer header plus data, which for UDP is
/// the UDP length field; `next_header` is the upper-layer protocol (17, 6,
/// 58), not whatever extension header followed the fixed header.
#[inline]
pub fn pseudo_header_v6(src: Ipv6Addr, dst: Ipv6Addr, next_header: u8, len: u32) -> u16 {
    let s = u128::from(src);
    let d = u128::from(dst);
    let mut sum = u64::from(len >> 16) + u64::from(len & 0xffff) + u64::from(next_header);
    for shift in (0..128).step_by(32) {
        let sw = (s >> shift) as u32;
        let dw = (d >> shift) as u32;
        sum += u64::from(sw >> 16)
            + u64::from(sw & 0xffff)
            + u64::from(dw >> 16)
            + u64::from(dw & 0xffff);
    }
    fold(sum)
}

/// RFC 1624 §3, eqn. 3: the new checksum field after one 16-bit word of the
/// covered data changes from `old` to `new`, given the current checksum field
/// `checksum` (`HC' = ~(~HC + ~m + m')`). Avoids re-summing the packet, e.g.
/// when decrementing the IPv4 TTL.
#[inline]
pub fn update(checksum: u16, old: u16, new: u16) -> u16 {
    !fold(u64::from(!checksum) + u64::from(!old) + u64::from(new))
}

/// An incremental checksum over pieces of any length, in order.
///
/// ```
/// # use esparto_wire::checksum::{self, Checksum};
/// let whole = [1u8, 2, 3, 4, 5, 6, 7];
/// let mut c = Checksum::new();
/// c.add(&whole[..3]).add(&whole[3..]);
/// assert_eq!(c.sum(), checksum::data(&whole));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Checksum {
    sum: u64,
    /// An odd number of bytes has been added: the next byte lands in the low
    /// half of a 16-bit word, so the next piece's sum must be byte-swapped.
    odd: bool,
}

impl Checksum {
    /// An empty sum.
    #[inline]
    pub const fn new() -> Self {
        Checksum { sum: 0, odd: false }
    }

    /// Adds the next `bytes` of the covered data.
    #[inline]
    pub fn add(&mut self, bytes: &[u8]) -> &mut Self {
        let mut s = data(bytes);
        if self.odd {
            s = s.swap_bytes();
        }
        self.sum += u64::from(s);
        self.odd ^= bytes.len() % 2 == 1;
        self
    }

    /// Adds an already-folded sum (e.g. [`pseudo_header_v4`]). A sum is
    /// position-independent as long as it covers whole 16-bit words, which a
    /// pseudo header does.
    #[inline]
    pub fn add_sum(&mut self, sum: u16) -> &mut Self {
        self.sum += u64::from(sum);
        self
    }

    /// The folded, uncomplemented sum so far.
    #[inline]
    pub fn sum(&self) -> u16 {
        fold(self.sum)
    }

    /// The value for a checksum field: the complement of the sum.
    #[inline]
    pub fn finish(&self) -> u16 {
        !self.sum()
    }
}

/// End-around-carry addition: the ones'-complement sum in 64-bit lanes.
#[inline(always)]
fn add_carry(a: u64, b: u64) -> u64 {
    let (s, carry) = a.overflowing_add(b);
    // If it overflowed, s <= 2^64 - 2, so adding the carry cannot overflow.
    s + u64::from(carry)
}

#[inline(always)]
fn word(eight: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(eight);
    u64::from_ne_bytes(w)
}

/// Sum in native byte order, eight bytes at a time, two chains in parallel.
#[inline]
fn sum_native(bytes: &[u8]) -> u64 {
    let mut a = 0u64;
    let mut b = 0u64;
    let mut chunks = bytes.chunks_exact(32);
    for c in &mut chunks {
        a = add_carry(a, word(&c[0..8]));
        b = add_carry(b, word(&c[8..16]));
        a = add_carry(a, word(&c[16..24]));
        b = add_carry(b, word(&c[24..32]));
    }
    let mut rest = chunks.remainder();
    while rest.len() >= 8 {
        a = add_carry(a, word(&rest[..8]));
        rest = &rest[8..];
    }
    if !rest.is_empty() {
        // Zero-pad on the right: in memory order that is the same padding
        // RFC 1071 applies to an odd final octet.
        let mut tail = [0u8; 8];
        tail[..rest.len()].copy_from_slice(rest);
        b = add_carry(b, u64::from_ne_bytes(tail));
    }
    add_carry(a, b)
}

/// Folds a 64-bit ones'-complement sum to 16 bits.
#[inline(always)]
fn fold(s: u64) -> u16 {
    let s = (s & 0xffff_ffff) + (s >> 32); // <= 0x1_ffff_fffe
    let s = (s & 0xffff_ffff) + (s >> 32); // <= 0xffff_ffff
    let s = (s & 0xffff) + (s >> 16); // <= 0x1_fffe
    let s = (s & 0xffff) + (s >> 16); // <= 0xffff
    s as u16
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    /// The textbook RFC 1071 §4.1 loop, 16 bits at a time, as a reference.
    fn reference(bytes: &[u8]) -> u16 {
        let mut sum: u32 = 0;
        let mut i = 0;
        while i + 1 < bytes.len() {
            sum += u32::from(u16::from_be_bytes([bytes[i], bytes[i + 1]]));
            i += 2;
        }
        if i < bytes.len() {
            sum += u32::from(bytes[i]) << 8;
        }
        while sum >> 16 != 0 {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        sum as u16
    }

    #[test]
    fn rfc1071_numerical_example() {
        // RFC 1071 §3: bytes 00 01 f2 03 f4 f5 f6 f7 sum to ddf2.
        assert_eq!(
            data(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]),
            0xddf2
        );
    }

    #[test]
    fn empty_and_odd_lengths() {
        assert_eq!(data(&[]), 0);
        assert_eq!(data(&[0xab]), 0xab00);
        // 0xabcd + 0xef00 = 0x1_9acd, end-around carry: 0x9ace.
        assert_eq!(data(&[0xab, 0xcd, 0xef]), 0x9ace);
    }

    #[test]
    fn end_around_carry_in_every_lane() {
        let ones = [0xffu8; 1500];
        for len in 0..ones.len() {
            assert_eq!(data(&ones[..len]), reference(&ones[..len]), "len {len}");
        }
    }

    #[test]
    fn ipv4_header_from_rfc_example_verifies() {
        // A real IPv4 header (Wikipedia's worked example): checksum b861.
        let h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(data(&h), 0xffff);
        let mut z = h;
        z[10] = 0;
        z[11] = 0;
        assert_eq!(!data(&z), 0xb861);
    }

    #[test]
    fn pseudo_headers_match_byte_layout() {
        let src = Ipv4Addr::new(192, 0, 2, 1);
        let dst = Ipv4Addr::new(198, 51, 100, 7);
        let mut ph = [0u8; 12];
        ph[0..4].copy_from_slice(&src.octets());
        ph[4..8].copy_from_slice(&dst.octets());
        ph[9] = 17;
        ph[10..12].copy_from_slice(&1234u16.to_be_bytes());
        assert_eq!(pseudo_header_v4(src, dst, 17, 1234), data(&ph));

        let src6: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let dst6: Ipv6Addr = "2001:db8:ffff::abcd:2".parse().unwrap();
        let mut ph6 = [0u8; 40];
        ph6[0..16].copy_from_slice(&src6.octets());
        ph6[16..32].copy_from_slice(&dst6.octets());
        ph6[32..36].copy_from_slice(&70000u32.to_be_bytes());
        ph6[39] = 58;
        assert_eq!(pseudo_header_v6(src6, dst6, 58, 70000), data(&ph6));
    }

    proptest! {
        #[test]
        fn matches_reference(bytes in proptest::collection::vec(any::<u8>(), 0..3000)) {
            prop_assert_eq!(data(&bytes), reference(&bytes));
        }

        #[test]
        fn incremental_equals_whole(
            bytes in proptest::collection::vec(any::<u8>(), 0..600),
            cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..6),
        ) {
            let mut cuts: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
            cuts.sort_unstable();
            let mut c = Checksum::new();
            let mut at = 0;
            for cut in cuts {
                c.add(&bytes[at..cut]);
                at = cut;
            }
            c.add(&bytes[at..]);
            prop_assert_eq!(c.sum(), reference(&bytes));
        }

        #[test]
        fn combine_of_even_pieces(a in proptest::collection::vec(any::<u16>(), 0..100),
                                  b in proptest::collection::vec(any::<u8>(), 0..100)) {
            let a: Vec<u8> = a.iter().flat_map(|w| w.to_be_bytes()).collect();
            let whole: Vec<u8> = a.iter().chain(b.iter()).copied().collect();
            prop_assert_eq!(combine(&[data(&a), data(&b)]), reference(&whole));
        }

        #[test]
        fn rfc1624_update_matches_recompute(
            words in proptest::collection::vec(any::<u16>(), 1..40),
            idx in any::<prop::sample::Index>(),
            new in any::<u16>(),
        ) {
            let bytes = |w: &[u16]| -> Vec<u8> { w.iter().flat_map(|x| x.to_be_bytes()).collect() };
            let i = idx.index(words.len());
            let before = !data(&bytes(&words));
            let mut changed = words.clone();
            changed[i] = new;
            let after = !data(&bytes(&changed));
            let updated = update(before, words[i], new);
            // Eqn. 3 is exact except that it may give the other ones'-complement
            // zero (0x0000 vs 0xffff) — both verify identically.
            prop_assert!(updated == after || (updated ^ after == 0xffff && (after == 0 || after == 0xffff)),
                "updated {:04x} recomputed {:04x}", updated, after);
            // What matters: the updated field verifies over the new data.
            let mut with_field = bytes(&changed);
            with_field.extend_from_slice(&updated.to_be_bytes());
            prop_assert_eq!(data(&with_field), 0xffff);
        }
    }
}
