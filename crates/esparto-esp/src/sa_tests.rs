//! Tests of one SA pair: round trips for every suite and address family,
//! and every way a received packet can be refused.

#![allow(clippy::unwrap_used)]

use super::*;
use crate::lifetime::Expiry;
use crate::testutil::*;
use esparto_crypto::Integ;

const SUITES: [EspSuite; 7] = [
    EspSuite::Aes128Gcm16,
    EspSuite::Aes256Gcm16,
    EspSuite::ChaCha20Poly1305,
    EspSuite::AesCbc { key_bits: 128, integ: Integ::HmacSha256_128 },
    EspSuite::AesCbc { key_bits: 256, integ: Integ::HmacSha384_192 },
    EspSuite::AesCbc { key_bits: 256, integ: Integ::HmacSha512_256 },
    EspSuite::AesCbc { key_bits: 128, integ: Integ::HmacSha1_96 },
];

/// Encapsulates `inner` on `out`, returns the ESP packet bytes.
fn seal(out: &mut OutboundSa, now: Instant, inner: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; HEADROOM + inner.len() + TAILROOM];
    buf[HEADROOM..HEADROOM + inner.len()].copy_from_slice(inner);
    let nh = next_header_for(inner).unwrap();
    let mut exp = None;
    let r = out.encapsulate(now, &mut buf, HEADROOM..HEADROOM + inner.len(), nh, &mut exp).unwrap();
    buf[r].to_vec()
}

fn open(inb: &mut InboundSa, now: Instant, esp: &[u8]) -> Result<Vec<u8>, DropReason> {
    open_expiring(inb, now, esp).0
}

/// [`open`], and the lifetime limit the packet crossed.
fn open_expiring(inb: &mut InboundSa, now: Instant, esp: &[u8]) -> (Result<Vec<u8>, DropReason>, Option<Expiry>) {
    let mut buf = esp.to_vec();
    let len = buf.len();
    let mut expiry = None;
    let r = inb.decapsulate(now, &mut buf, 0..len, &mut expiry);
    (r.map(|inner| buf[inner].to_vec()), expiry)
}

#[test]
fn round_trip_every_suite_family_and_size() {
    let now = Instant::now();
    for suite in SUITES {
        for esn in [false, true] {
            for (inner_v6, outer_v6) in [(false, false), (false, true), (true, false), (true, true)] {
                let (mut out, mut inb) = pair(suite, esn, outer_v6, now);
                for len in [0usize, 1, 2, 3, 13, 64, 500, 1300] {
                    let inner = if inner_v6 { udp6(len) } else { udp4(len) };
                    let esp = seal(&mut out, now, &inner);
                    // Header, IV, ciphertext aligned to the block size, ICV.
                    let body = esp.len() - 8 - suite.iv_len() - suite.icv_len();
                    assert_eq!(body % suite.block_size().max(4), 0, "{suite:?} len {len}");
                    assert_eq!(&esp[0..4], &0x1000_0001u32.to_be_bytes());
                    let got = open(&mut inb, now, &esp).unwrap_or_else(|e| panic!("{suite:?} esn={esn} len={len}: {e}"));
                    assert_eq!(got, inner);
                }
                assert_eq!(inb.counters().packets, 8);
                assert_eq!(out.counters().packets, 8);
                assert_eq!(out.last_seq(), 8);
            }
        }
    }
}

#[test]
fn any_flipped_bit_is_an_icv_failure() {
    let now = Instant::now();
    for suite in SUITES {
        let (mut out, mut inb) = pair(suite, true, false, now);
        let esp = seal(&mut out, now, &udp4(40));
        // Flipping the SPI makes it another SA's packet; everything else
        // (sequence number, IV, ciphertext, ICV) is authenticated.
        for byte in 4..esp.len() {
            let mut bad = esp.clone();
            bad[byte] ^= 0x01;
            let r = open(&mut inb, now, &bad);
            assert!(
                r == Err(DropReason::IcvFailure) || (byte < 8 && r == Err(DropReason::Replay)),
                "{suite:?} byte {byte}: {r:?}"
            );
        }
        // A failed packet did not move the window: the real one still passes.
        assert!(open(&mut inb, now, &esp).is_ok());
        assert_eq!(inb.counters().drops.total(), (esp.len() - 4) as u64);
    }
}

#[test]
fn replayed_packet_is_dropped_after_first() {
    let now = Instant::now();
    let (mut out, mut inb) = pair(EspSuite::Aes256Gcm16, false, false, now);
    let a = seal(&mut out, now, &udp4(100));
    let b = seal(&mut out, now, &udp4(100));
    assert!(open(&mut inb, now, &b).is_ok());
    assert!(open(&mut inb, now, &a).is_ok(), "reordered within the window");
    assert_eq!(open(&mut inb, now, &a), Err(DropReason::Replay));
    assert_eq!(open(&mut inb, now, &b), Err(DropReason::Replay));
    assert_eq!(inb.counters().drops.get(DropReason::Replay), 2);
}

#[test]
fn esn_high_bits_are_authenticated() {
    // The sender is at 2^32 + 5; a receiver that believes the high half is 0
    // reconstructs the wrong sequence number and the ICV fails.
    let now = Instant::now();
    let (mut out, mut inb) = pair(EspSuite::Aes128Gcm16, true, false, now);
    out.seq = SeqSource::Owned { last: (1 << 32) + 4, bytes: 0 };
    let esp = seal(&mut out, now, &udp4(10));
    assert_eq!(open(&mut inb, now, &esp), Err(DropReason::IcvFailure));
    // Once the receiver's window is in the right subspace it works.
    inb.replay.as_mut().unwrap().commit((1 << 32) + 1).unwrap();
    assert!(open(&mut inb, now, &esp).is_ok());
}

#[test]
fn sequence_numbers_do_not_wrap_without_esn() {
    let now = Instant::now();
    let (mut out, _) = pair(EspSuite::Aes256Gcm16, false, false, now);
    out.seq = SeqSource::Owned { last: u64::from(u32::MAX) - 1, bytes: 0 };
    let inner = udp4(10);
    let mut buf = vec![0u8; HEADROOM + inner.len() + TAILROOM];
    buf[HEADROOM..HEADROOM + 38].copy_from_slice(&inner);
    let mut exp = None;
    // 2^32 - 1 is the last number allowed.
    assert!(out.encapsulate(now, &mut buf, HEADROOM..HEADROOM + 38, 4, &mut exp).is_ok());
    let r = out.encapsulate(now, &mut buf, HEADROOM..HEADROOM + 38, 4, &mut exp);
    assert_eq!(r.unwrap_err().reason, DropReason::LifetimeExpired);
    assert_eq!(exp, Some(Expiry::Hard));
    assert!(out.is_dead());
}

#[test]
fn shared_fallback_never_reuses_a_number() {
    let now = Instant::now();
    let cfg = config(EspSuite::Aes256Gcm16, 0x2000_0002, false, false);
    let seq = SharedSeq::new();
    let mut copies: Vec<OutboundSa> = (0..3).map(|_| OutboundSa::shared(&cfg, seq.clone(), now).unwrap()).collect();
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..30 {
        let esp = seal(&mut copies[i % 3], now, &udp4(20));
        let s = u32::from_be_bytes([esp[4], esp[5], esp[6], esp[7]]);
        assert!(seen.insert(s), "seq {s} used twice");
    }
    assert_eq!(seq.last(), 30);
}

/// Encapsulates one packet; the sequence number used, or why not.
fn try_seal(out: &mut OutboundSa, now: Instant) -> Result<u64, DropReason> {
    let inner = udp4(20);
    let mut buf = vec![0u8; HEADROOM + inner.len() + TAILROOM];
    buf[HEADROOM..HEADROOM + inner.len()].copy_from_slice(&inner);
    let mut exp = None;
    let r = out.encapsulate(now, &mut buf, HEADROOM..HEADROOM + inner.len(), 4, &mut exp).map_err(|d| d.reason)?;
    Ok(u64::from(u32::from_be_bytes(buf[r][4..8].try_into().unwrap())))
}

#[test]
fn a_reserved_sa_continues_after_its_start_and_stops_at_its_limit() {
    let now = Instant::now();
    let (out, mut inb) = pair(EspSuite::Aes256Gcm16, false, false, now);
    let limit = SeqLimit::new(1000);
    let mut out = out.reserved(limit.clone());
    // Nothing is reserved yet: nothing goes out, and no number is spent.
    assert_eq!(try_seal(&mut out, now), Err(DropReason::SeqUnreserved));
    assert_eq!(try_seal(&mut out, now), Err(DropReason::SeqUnreserved));
    assert_eq!(out.counters().drops.get(DropReason::SeqUnreserved), 2);
    assert!(limit.wants_more());
    limit.raise(1010, 1005);
    assert!(!limit.wants_more());
    // The first number after the start, then on without a gap.
    for want in 1001..=1004 {
        assert_eq!(try_seal(&mut out, now), Ok(want));
        assert!(!limit.wants_more(), "below the request mark at {want}");
    }
    // From the mark on, one request; up to the limit, every number is used.
    for want in 1005..=1010 {
        assert_eq!(try_seal(&mut out, now), Ok(want));
        assert!(limit.wants_more());
    }
    assert_eq!(try_seal(&mut out, now), Err(DropReason::SeqUnreserved));
    assert_eq!(out.last_seq(), 1010);
    limit.raise(1020, 1015);
    assert_eq!(try_seal(&mut out, now), Ok(1011), "no number lost to the refused packet");
    assert!(!limit.wants_more());
    // The peer accepts what was sent (the packets are real ESP).
    let esp = seal(&mut out, now, &udp4(30));
    assert_eq!(open(&mut inb, now, &esp).unwrap(), udp4(30));
}

#[test]
fn a_reserved_fallback_never_passes_its_limit_from_any_copy() {
    let now = Instant::now();
    let cfg = config(EspSuite::Aes256Gcm16, 0x2000_0002, false, false);
    let limit = SeqLimit::new(500);
    let seq = SharedSeq::after(limit.start());
    let mut copies: Vec<OutboundSa> =
        (0..3).map(|_| OutboundSa::shared(&cfg, seq.clone(), now).unwrap().reserved(limit.clone())).collect();
    limit.raise(600, 550);
    let mut used = std::collections::BTreeSet::new();
    let mut refused = 0;
    for round in 0..4u64 {
        for i in 0..150 {
            match try_seal(&mut copies[i % 3], now) {
                Ok(s) => assert!(used.insert(s), "seq {s} used twice"),
                Err(r) => {
                    assert_eq!(r, DropReason::SeqUnreserved);
                    refused += 1;
                }
            }
        }
        assert!(limit.wants_more(), "round {round}");
        limit.raise(600 + 100 * (round + 1), 550 + 100 * (round + 1));
    }
    assert!(refused > 0);
    assert!(used.iter().all(|s| (501..=1000).contains(s)), "{used:?}");
    // Numbers refused were skipped, never handed out again.
    assert_eq!(used.len() as u64 + refused, seq.last() - 500);
}

#[test]
fn an_sa_without_a_reservation_never_looks_at_one() {
    let now = Instant::now();
    let (mut out, _) = pair(EspSuite::Aes256Gcm16, true, false, now);
    out.seq = SeqSource::Owned { last: (1 << 40) - 1, bytes: 0 };
    assert_eq!(out.check_at, u64::MAX);
    assert!(try_seal(&mut out, now).is_ok());
    assert_eq!(out.last_seq(), 1 << 40);
}

#[test]
fn bad_padding_is_detected_after_the_icv() {
    // Build a packet by hand whose padding is 1, 2, 9 and seal it properly:
    // the ICV passes, the padding check must not.
    let now = Instant::now();
    let suite = EspSuite::Aes128Gcm16;
    let cfg = config(suite, 0x1000_0001, false, false);
    let (_, mut inb) = pair(suite, false, false, now);
    let cipher = EspCipher::new(suite, cfg.keymat.as_slice()).unwrap();
    let inner = udp4(7); // 35 bytes: with 3 padding bytes and the trailer, 40
    let mut pkt = vec![0u8; 8 + 8 + inner.len() + 3 + 2 + 16];
    pkt[0..4].copy_from_slice(&0x1000_0001u32.to_be_bytes());
    pkt[4..8].copy_from_slice(&1u32.to_be_bytes());
    let p = 16;
    pkt[p..p + inner.len()].copy_from_slice(&inner);
    pkt[p + inner.len()..p + inner.len() + 5].copy_from_slice(&[1, 2, 9, 3, 4]);
    cipher.seal(1, false, &mut pkt).unwrap();
    assert_eq!(open(&mut inb, now, &pkt), Err(DropReason::BadPadding));
    // A pad length longer than the payload.
    let mut pkt2 = pkt.clone();
    pkt2[4..8].copy_from_slice(&2u32.to_be_bytes());
    pkt2[p + inner.len()..p + inner.len() + 5].copy_from_slice(&[1, 2, 3, 200, 4]);
    cipher.seal(2, false, &mut pkt2).unwrap();
    assert_eq!(open(&mut inb, now, &pkt2), Err(DropReason::BadPadding));
}

#[test]
fn inner_packet_outside_the_selectors_is_refused() {
    let now = Instant::now();
    let (mut out, mut inb) = pair(EspSuite::Aes256Gcm16, false, false, now);
    // Source 10.9.0.1 is not in the peer's 10.1.0.0/16.
    let mut inner = udp4(10);
    inner[12..16].copy_from_slice(&[10, 9, 0, 1]);
    let esp = seal(&mut out, now, &inner);
    assert_eq!(open(&mut inb, now, &esp), Err(DropReason::PolicyMismatch));
}

#[test]
fn dummy_packets_and_tfc_padding() {
    let now = Instant::now();
    let (mut out, mut inb) = pair(EspSuite::ChaCha20Poly1305, false, false, now);
    // Next header 59: authenticated, then discarded by the caller.
    let mut buf = vec![0u8; HEADROOM + 16 + TAILROOM];
    let mut exp = None;
    let r = out.encapsulate(now, &mut buf, HEADROOM..HEADROOM + 16, 59, &mut exp).unwrap();
    let esp = buf[r].to_vec();
    assert_eq!(open(&mut inb, now, &esp), Err(DropReason::Dummy));
    // Not delivered, so not a packet: a `dummy` drop of the SA.
    assert_eq!(inb.counters().packets, 0);
    assert_eq!(inb.counters().drops.get(DropReason::Dummy), 1);
    assert_eq!(inb.counters().drops.total(), 1);
    // An inner packet followed by TFC padding (RFC 4303 §2.7): the padding
    // is cut off using the inner IP length.
    let inner = udp4(20);
    let mut padded = inner.clone();
    padded.extend_from_slice(&[0u8; 30]);
    let mut buf = vec![0u8; HEADROOM + padded.len() + TAILROOM];
    buf[HEADROOM..HEADROOM + padded.len()].copy_from_slice(&padded);
    let r = out.encapsulate(now, &mut buf, HEADROOM..HEADROOM + padded.len(), 4, &mut exp).unwrap();
    let esp = buf[r].to_vec();
    assert_eq!(open(&mut inb, now, &esp).unwrap(), inner);
}

#[test]
fn wrong_next_header_or_inner_length_is_malformed() {
    let now = Instant::now();
    let (mut out, mut inb) = pair(EspSuite::Aes256Gcm16, false, false, now);
    let inner = udp4(20);
    for (nh, mutate) in [(41u8, None), (4, Some(2000u16)), (4, Some(10)), (17, None)] {
        let mut pkt = inner.clone();
        if let Some(len) = mutate {
            pkt[2..4].copy_from_slice(&len.to_be_bytes());
        }
        let mut buf = vec![0u8; HEADROOM + pkt.len() + TAILROOM];
        buf[HEADROOM..HEADROOM + pkt.len()].copy_from_slice(&pkt);
        let mut exp = None;
        let r = out.encapsulate(now, &mut buf, HEADROOM..HEADROOM + pkt.len(), nh, &mut exp).unwrap();
        let esp = buf[r].to_vec();
        assert_eq!(open(&mut inb, now, &esp), Err(DropReason::Malformed), "nh {nh} len {mutate:?}");
    }
}

#[test]
fn too_big_reports_the_inner_mtu() {
    let now = Instant::now();
    let suite = EspSuite::Aes256Gcm16;
    let (mut out, _) = pair(suite, false, false, now);
    // 1500 - 20 (IPv4) - 8 (UDP) - 8 (ESP) - 8 (IV) - 16 (ICV) = 1440,
    // aligned to 4 = 1440, minus the two trailer bytes = 1438.
    assert_eq!(out.max_inner(), 1438);
    let fits = udp4(1438 - 28);
    assert_eq!(fits.len(), 1438);
    let esp = seal(&mut out, now, &fits);
    assert_eq!(esp.len() + 28, 1500);
    let big = udp4(1439 - 28);
    let mut buf = vec![0u8; HEADROOM + big.len() + TAILROOM];
    let mut exp = None;
    let r = out.encapsulate(now, &mut buf, HEADROOM..HEADROOM + big.len(), 4, &mut exp);
    assert_eq!(r, Err(Dropped { reason: DropReason::TooBig, mtu: 1438 }));
}

#[test]
fn lifetime_limits_raise_events_and_stop_the_sa() {
    let now = Instant::now();
    let mut cfg = config(EspSuite::Aes256Gcm16, 0x1000_0001, true, false);
    cfg.lifetime = Lifetime { soft_packets: Some(2), hard_packets: Some(3), ..Default::default() };
    let mut out = OutboundSa::owned(&cfg, now).unwrap();
    let inner = udp4(10);
    let mut exps = Vec::new();
    for _ in 0..4 {
        let mut buf = vec![0u8; HEADROOM + inner.len() + TAILROOM];
        buf[HEADROOM..HEADROOM + inner.len()].copy_from_slice(&inner);
        let mut exp = None;
        let r = out.encapsulate(now, &mut buf, HEADROOM..HEADROOM + inner.len(), 4, &mut exp);
        exps.push((r.is_ok(), exp));
    }
    assert_eq!(exps, vec![(true, None), (true, None), (true, Some(Expiry::Soft)), (false, Some(Expiry::Hard))]);
}

#[test]
fn inbound_limits_crossed_by_refused_packets_still_raise_their_events() {
    let now = Instant::now();
    let mut cfg = config(EspSuite::Aes256Gcm16, 0x1000_0001, true, false);
    cfg.lifetime = Lifetime { soft_packets: Some(1), hard_packets: Some(3), ..Default::default() };
    // The sender has no limits: only the receiver's are under test.
    let mut out = OutboundSa::owned(&config(EspSuite::Aes256Gcm16, 0x1000_0001, true, false), now).unwrap();
    let mut inb = InboundSa::new(&cfg, now).unwrap();
    let mut outside = udp4(10);
    outside[12..16].copy_from_slice(&[10, 9, 0, 1]);
    let good = udp4(10);
    // The second packet crosses the soft limit and lies outside the
    // selectors; the fourth would take the SA past its hard limit.
    let sent: Vec<Vec<u8>> = [&good, &outside, &good, &good, &good].iter().map(|p| seal(&mut out, now, p)).collect();
    let got: Vec<_> = sent.iter().map(|esp| open_expiring(&mut inb, now, esp)).collect();
    assert_eq!(
        got,
        vec![
            (Ok(good.clone()), None),
            (Err(DropReason::PolicyMismatch), Some(Expiry::Soft)),
            (Ok(good.clone()), None),
            (Err(DropReason::LifetimeExpired), Some(Expiry::Hard)),
            // Dead: refused before the integrity check, no second event.
            (Err(DropReason::LifetimeExpired), None),
        ]
    );
    let c = inb.counters();
    assert_eq!((c.packets, c.drops.get(DropReason::LifetimeExpired), c.drops.total()), (2, 2, 3));
    // The packet refused at the hard limit was authentic: its number is spent.
    assert_eq!(inb.last_seq(), 4);
}

#[test]
fn inbound_byte_limits_count_every_authentic_packet() {
    let now = Instant::now();
    let mut cfg = config(EspSuite::ChaCha20Poly1305, 0x1000_0001, false, false);
    // 100-byte inner packets: the second crosses the soft limit, the
    // fourth the hard one.
    cfg.lifetime = Lifetime { soft_bytes: Some(150), hard_bytes: Some(300), ..Default::default() };
    let mut out = OutboundSa::owned(&config(EspSuite::ChaCha20Poly1305, 0x1000_0001, false, false), now).unwrap();
    let mut inb = InboundSa::new(&cfg, now).unwrap();
    let good = udp4(72);
    assert_eq!(good.len(), 100);
    // Not IP: next header 4, version nibble 0.
    let mut junk = good.clone();
    junk[0] = 0x05;
    let mut exp = None;
    let mut seal_nh = |inner: &[u8], nh: u8| {
        let mut buf = vec![0u8; HEADROOM + inner.len() + TAILROOM];
        buf[HEADROOM..HEADROOM + inner.len()].copy_from_slice(inner);
        let r = out.encapsulate(now, &mut buf, HEADROOM..HEADROOM + inner.len(), nh, &mut exp).unwrap();
        buf[r].to_vec()
    };
    let sent = [seal_nh(&good, 4), seal_nh(&junk, 4), seal_nh(&good, 59), seal_nh(&junk, 4)];
    let got: Vec<_> = sent.iter().map(|esp| open_expiring(&mut inb, now, esp)).collect();
    assert_eq!(
        got,
        vec![
            (Ok(good.clone()), None),
            (Err(DropReason::Malformed), Some(Expiry::Soft)),
            (Err(DropReason::Dummy), None),
            (Err(DropReason::LifetimeExpired), Some(Expiry::Hard)),
        ]
    );
}

#[test]
fn short_and_garbage_packets_are_malformed_or_fail_icv() {
    let now = Instant::now();
    for suite in SUITES {
        let (_, mut inb) = pair(suite, true, false, now);
        for len in 0..(8 + suite.iv_len() + suite.icv_len() + 2) {
            let mut pkt = vec![0xa5u8; len];
            if len >= 4 {
                pkt[0..4].copy_from_slice(&0x1000_0001u32.to_be_bytes());
            }
            assert_eq!(open(&mut inb, now, &pkt), Err(DropReason::Malformed), "{suite:?} len {len}");
        }
        let mut pkt = vec![0x5au8; 200];
        pkt[0..4].copy_from_slice(&0x1000_0001u32.to_be_bytes());
        let r = open(&mut inb, now, &pkt);
        assert_eq!(r, Err(DropReason::IcvFailure), "{suite:?}");
    }
}

#[test]
fn what_every_packet_touches_lies_in_the_hot_lines() {
    use core::mem::offset_of;
    let hot = HOT_LINES * 64;
    let counted = 2 * size_of::<u64>(); // packets and bytes
    let lifetime = crate::lifetime::HOT_LEN;
    assert_eq!(align_of::<InboundSa>(), 64);
    for end in [
        offset_of!(InboundSa, cipher) + size_of::<EspCipher>(),
        offset_of!(InboundSa, replay) + size_of::<Option<ReplayWindow>>(),
        offset_of!(InboundSa, lifetime_packets) + 8,
        offset_of!(InboundSa, esn) + 1,
        offset_of!(InboundSa, counters) + counted,
        offset_of!(InboundSa, last_used) + size_of::<Stamp>(),
        offset_of!(InboundSa, last_admitted) + size_of::<Option<FlowKey>>(),
        offset_of!(InboundSa, lifetime) + lifetime,
    ] {
        assert!(end <= hot, "inbound: a hot field ends at {end}, past {hot}");
    }
    for end in [
        offset_of!(OutboundSa, cipher) + size_of::<EspCipher>(),
        offset_of!(OutboundSa, seq) + size_of::<SeqSource>(),
        offset_of!(OutboundSa, esn) + 1,
        offset_of!(OutboundSa, peer) + size_of::<SocketAddr>(),
        offset_of!(OutboundSa, counters) + counted,
        offset_of!(OutboundSa, last_used) + size_of::<Stamp>(),
        offset_of!(OutboundSa, lifetime) + lifetime,
    ] {
        assert!(end <= hot, "outbound: a hot field ends at {end}, past {hot}");
    }
}

#[test]
fn a_stamp_keeps_the_time_to_the_nanosecond() {
    let t0 = Instant::now();
    let t1 = t0 + std::time::Duration::from_millis(1500);
    assert_eq!(Stamp::NEVER.get(), None);
    let (a, b) = (Stamp::at(t0), Stamp::at(t1));
    assert_eq!(b.get(), Some(t1));
    // Another test may have taken the epoch after `t0` was made: then `t0`
    // reads as the epoch.
    let epoch = *STAMP_EPOCH.get().unwrap();
    assert_eq!(a.get(), Some(t0.max(epoch)));
    assert_eq!(size_of::<Stamp>(), 8);
}
