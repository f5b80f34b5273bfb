//! Fuzz `Worker::decapsulate` through all of it: SPI lookup, length,
//! lifetime, replay check, integrity, replay commit, padding and trailer,
//! next header, the inner packet's length and the selector check.
//!
//! Random bytes never pass the integrity check, so the harness holds the
//! receiver's keys and *seals* what the fuzzer gives it: a record's bytes
//! are an ESP plaintext (or an inner packet the harness pads), sealed with
//! a sequence number the record chooses (next, a step back, a jump ahead,
//! an absolute one, ESN subspaces included). Records may also flip a byte
//! of a sealed packet, deliver raw bytes (the pre-ICV path), or resend an
//! earlier packet. Four SAs are installed: AES-256-GCM, ChaCha20-Poly1305,
//! AES-128-CBC with HMAC-SHA-256-128 and AES-256-CBC with HMAC-SHA-512-256.
//! The input format is in fuzz/formats/esp_decapsulate.rs.
//!
//! The harness keeps its own model of each SA (the replay window as RFC
//! 4303 §3.4.3 and Appendix A2.2 describe it, the packet lifetime) and
//! decides independently whether each packet authenticates (opening a copy
//! with its own cipher). Checked for every packet:
//! - nothing panics, and nothing outside the packet's range is written;
//! - a drop is counted exactly once, under the reason returned, in the
//!   worker and (past the SPI lookup) in the SA; a delivery is counted in
//!   the SA and adds no drop;
//! - drops before the integrity check have exactly the reason the model
//!   predicts (malformed, unknown SPI, lifetime expired, replay, ICV
//!   failure); an authentic fresh packet is never called a replay or a
//!   forgery;
//! - the SA's highest sequence number moves only when an authentic packet
//!   is committed, and then to the model's (so no forged, flipped or
//!   replayed packet commits, and every authentic one does, even if its
//!   padding or inner packet is then refused);
//! - a delivered packet is the inner packet of an authentic plaintext with
//!   valid RFC 4303 §2.4 padding: it starts right after the IV, its length
//!   is its IP header's, its bytes are the plaintext's, and its addresses
//!   (and, for the port-restricted selector, protocol and port) are inside
//!   the SA's selectors; an authentic dummy packet (next header 59) is the
//!   counted drop `dummy`, never a delivery;
//! - the lifetime: every authentic packet with valid padding counts
//!   against it, delivered or not; the packet past the hard limit and
//!   every one after it are refused as `lifetime_expired`; the expiry
//!   events come once each, on the packet that crossed the limit, whether
//!   that packet was delivered or refused.
//!
//! New drop reasons after the integrity check are accepted as long as they
//! are counted like the others (the checks never list every reason).
#![no_main]

#[path = "../formats/esp_decapsulate.rs"]
mod input;

use std::collections::BTreeSet;
use std::sync::OnceLock;
use std::time::Instant;

use esparto_crypto::EspCipher;
use esparto_esp::{Command, Direction, DropReason, Event, Expiry, InboundSa, Worker};
use input::{Kind, Record, SLOTS, SPIS, SUITES, Setup};
use libfuzzer_sys::fuzz_target;

/// Bytes around a placed packet, which decapsulation must not touch.
const GUARD: usize = 19;
const GUARD_BYTE: u8 = 0xa5;
/// Earlier packets kept for resending.
const MAX_SENT: usize = 64;

/// Reasons a packet is refused before it is known to be authentic.
const PRE_ICV: [DropReason; 5] = [
    DropReason::Malformed,
    DropReason::UnknownSpi,
    DropReason::LifetimeExpired,
    DropReason::Replay,
    DropReason::IcvFailure,
];

/// Whether ESPARTO_FUZZ_TRACE is set (read once): print every record and its result.
fn trace() -> bool {
    static TRACE: OnceLock<bool> = OnceLock::new();
    *TRACE.get_or_init(|| std::env::var_os("ESPARTO_FUZZ_TRACE").is_some())
}

fn now() -> Instant {
    static T: OnceLock<Instant> = OnceLock::new();
    *T.get_or_init(Instant::now)
}

/// The harness's own ciphers (the same keys as the receiver's SAs).
fn cipher(slot: usize) -> &'static EspCipher {
    static C: OnceLock<Vec<EspCipher>> = OnceLock::new();
    &C.get_or_init(|| {
        (0..SLOTS).map(|s| EspCipher::new(SUITES[s], &input::keymat(s)).expect("test keys fit")).collect()
    })[slot]
}

/// What the harness knows about one SA.
struct Model {
    esn: bool,
    /// Replay window in packets; 0: none.
    window: u64,
    /// Highest committed sequence number.
    top: u64,
    /// Committed numbers still inside the window.
    seen: BTreeSet<u64>,
    /// Highest number the harness used on this SA (the base of `Seq`).
    used: u64,
    /// Packets counted against the lifetime: authentic, with valid padding.
    counted: u64,
    /// The hard limit was crossed: every further packet is refused.
    dead: bool,
    soft_raised: bool,
}

impl Model {
    fn new(setup: &Setup) -> Self {
        Self {
            esn: setup.esn,
            window: u64::from(setup.window),
            top: 0,
            seen: BTreeSet::new(),
            used: 0,
            counted: 0,
            dead: false,
            soft_raised: false,
        }
    }

    /// The full sequence number a receiver reconstructs from the low word
    /// (RFC 4303 Appendix A2.2): the one at or above the window's bottom.
    fn infer(&self, lo: u32) -> u64 {
        if !self.esn {
            return u64::from(lo);
        }
        let bottom = self.top.saturating_sub(self.window - 1);
        bottom.wrapping_add(u64::from(lo.wrapping_sub(bottom as u32)))
    }

    /// RFC 4303 §3.4.3: not zero, and right of the window or inside it and unseen.
    fn fresh(&self, seq: u64) -> bool {
        if self.window == 0 {
            return true;
        }
        seq != 0 && (seq > self.top || (self.top - seq < self.window && !self.seen.contains(&seq)))
    }

    fn commit(&mut self, seq: u64) {
        if self.window == 0 {
            return;
        }
        self.seen.insert(seq);
        self.top = self.top.max(seq);
        let left = self.top.saturating_sub(self.window - 1);
        self.seen = self.seen.split_off(&left);
    }
}

/// The model's verdict on one packet.
enum Expect {
    /// Refused before it is known to be authentic, for this reason.
    Pre(DropReason),
    /// Authentic and fresh, with this decrypted plaintext and sequence number.
    Authentic { plain: Vec<u8>, seq: u64 },
}

/// RFC 4303 §2.4 padding 1, 2, 3, …; returns the payload data and next header.
fn trailer(plain: &[u8]) -> Option<(&[u8], u8)> {
    let n = plain.len();
    let pad = usize::from(*plain.get(n.checked_sub(2)?)?);
    let data_end = n.checked_sub(2 + pad)?;
    let ok = plain[data_end..n - 2].iter().enumerate().all(|(i, &b)| usize::from(b) == i + 1);
    ok.then(|| (&plain[..data_end], plain[n - 1]))
}

/// The inner packet's length from its own header, if it is IP of the
/// family the next header names and fits.
fn inner_len(next_header: u8, data: &[u8]) -> Option<usize> {
    let len = match (next_header, data.first()? >> 4) {
        (4, 4) if data.len() >= 20 => usize::from(u16::from_be_bytes([data[2], data[3]])),
        (41, 6) if data.len() >= 40 => 40 + usize::from(u16::from_be_bytes([data[4], data[5]])),
        _ => return None,
    };
    (20..=data.len()).contains(&len).then_some(len)
}

/// Whether `addr` (network order) lies in `prefix`/`bits`.
fn in_prefix(addr: &[u8], prefix: &[u8], bits: usize) -> bool {
    let whole = bits / 8;
    addr[..whole] == prefix[..whole]
        && (bits % 8 == 0 || (addr[whole] ^ prefix[whole]) >> (8 - bits % 8) == 0)
}

/// The selectors of `input::LOCAL_TS` / `input::REMOTE_TS`, spelled out
/// independently: 10.1.0.0/16 or 192.0.2.0/24 (UDP from port 53) to
/// 10.2.0.0/16, fd00:1::/64 to fd00:2::/64.
fn admitted(p: &[u8]) -> bool {
    if p[0] >> 4 == 4 {
        let (src, dst) = (&p[12..16], &p[16..20]);
        if !in_prefix(dst, &[10, 2], 16) {
            return false;
        }
        if in_prefix(src, &[10, 1], 16) {
            return true;
        }
        let ihl = usize::from(p[0] & 15) * 4;
        let first_fragment = u16::from_be_bytes([p[6], p[7]]) & 0x1fff == 0;
        in_prefix(src, &[192, 0, 2], 24)
            && p[9] == 17
            && (!first_fragment || p.get(ihl..ihl + 2) == Some(&[0, 53][..]))
    } else {
        let fd = |x: u8| [0xfd, 0, 0, x, 0, 0, 0, 0];
        in_prefix(&p[8..24], &fd(1), 64) && in_prefix(&p[24..40], &fd(2), 64)
    }
}

/// The packet a record builds; `sealed`: the number and plaintext the harness sealed it with.
struct Built {
    packet: Vec<u8>,
    sealed: Option<(u64, Vec<u8>)>,
    flipped: bool,
}

fn build(rec: &Record<'_>, models: &mut [Model], sent: &[Vec<u8>]) -> Option<Built> {
    let slot = rec.slot;
    let m = &mut models[slot];
    let mut pick = |s: input::Seq| {
        let base = m.top.max(m.used);
        let mut seq = s.resolve(base);
        if !m.esn {
            seq &= 0xffff_ffff;
        }
        m.used = m.used.max(seq);
        seq
    };
    match &rec.kind {
        Kind::Sealed { seq, fix, bytes } | Kind::Flipped { seq, fix, bytes, .. } => {
            let seq = pick(*seq);
            let plain = input::plaintext(SUITES[slot], *fix, bytes);
            let mut packet = input::layout(slot, seq, &plain);
            cipher(slot).seal(seq, m.esn, &mut packet).expect("laid out for the suite");
            let mut flipped = false;
            if let Kind::Flipped { pos, xor, .. } = rec.kind {
                let at = usize::from(pos) % packet.len();
                packet[at] ^= if xor == 0 { 0x80 } else { xor };
                flipped = true;
            }
            Some(Built { packet, sealed: Some((seq, plain)), flipped })
        }
        Kind::Raw { seq, bytes } => {
            let mut packet = bytes.to_vec();
            if let Some(s) = seq {
                let seq = pick(*s);
                if packet.len() >= 8 {
                    packet[..4].copy_from_slice(&SPIS[slot].to_be_bytes());
                    packet[4..8].copy_from_slice(&(seq as u32).to_be_bytes());
                }
            }
            Some(Built { packet, sealed: None, flipped: false })
        }
        Kind::Resend(k) => {
            let p = sent.get(usize::from(*k) % sent.len().max(1))?;
            Some(Built { packet: p.clone(), sealed: None, flipped: false })
        }
    }
}

/// The model's verdict, without changing the model.
fn expect(packet: &[u8], models: &[Model]) -> (Option<usize>, Expect) {
    if packet.len() < 8 {
        return (None, Expect::Pre(DropReason::Malformed));
    }
    let spi = u32::from_be_bytes([packet[0], packet[1], packet[2], packet[3]]);
    let Some(slot) = SPIS.iter().position(|&s| s == spi) else {
        return (None, Expect::Pre(DropReason::UnknownSpi));
    };
    let suite = SUITES[slot];
    let m = &models[slot];
    if packet.len() < 8 + suite.iv_len() + 2 + suite.icv_len() {
        return (Some(slot), Expect::Pre(DropReason::Malformed));
    }
    if m.dead {
        return (Some(slot), Expect::Pre(DropReason::LifetimeExpired));
    }
    let seq = m.infer(u32::from_be_bytes([packet[4], packet[5], packet[6], packet[7]]));
    if !m.fresh(seq) {
        return (Some(slot), Expect::Pre(DropReason::Replay));
    }
    let mut copy = packet.to_vec();
    match cipher(slot).open(seq, m.esn, &mut copy) {
        Ok(r) => (Some(slot), Expect::Authentic { plain: copy[r].to_vec(), seq }),
        Err(_) => (Some(slot), Expect::Pre(DropReason::IcvFailure)),
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&s, mut rest)) = data.split_first() else { return };
    let setup = Setup::decode(s);
    let t = now();
    let mut w = Worker::new(0);
    let mut models: Vec<Model> = (0..SLOTS).map(|_| Model::new(&setup)).collect();
    for slot in 0..SLOTS {
        let sa = InboundSa::new(&setup.sa_config(slot), t).expect("test keys fit");
        w.apply(Command::AddInbound(Box::new(sa)));
    }
    let mut sent: Vec<Vec<u8>> = Vec::new();

    while let Some(rec) = Record::decode(&mut rest) {
        let Some(built) = build(&rec, &mut models, &sent) else { continue };
        let packet = built.packet;
        let (slot, verdict) = expect(&packet, &models);
        if let Some((seq, plain)) = &built.sealed {
            // What the harness sealed authenticates exactly when the
            // receiver can reconstruct its number, unless a byte was flipped.
            let m = &models[rec.slot];
            let reconstructible = m.infer(*seq as u32) == *seq;
            match &verdict {
                Expect::Authentic { plain: p, seq: s } => {
                    assert!(!built.flipped, "a flipped packet authenticates");
                    assert_eq!((s, p), (seq, plain));
                }
                Expect::Pre(DropReason::IcvFailure) => {
                    assert!(built.flipped || !reconstructible, "a sealed packet does not open");
                }
                Expect::Pre(_) => {}
            }
        }
        if sent.len() < MAX_SENT {
            sent.push(packet.clone());
        }

        let n = packet.len();
        let (mut buf, esp) = if rec.placed {
            let mut b = vec![GUARD_BYTE; GUARD];
            b.extend_from_slice(&packet);
            b.extend_from_slice(&[GUARD_BYTE; GUARD]);
            (b, GUARD..GUARD + n)
        } else {
            (packet.clone(), 0..n)
        };
        let drops = *w.drops();
        let sa_before = slot.and_then(|i| w.sad().get(SPIS[i])).map(|sa| *sa.counters());

        let r = w.decapsulate(t, &mut buf, esp.clone());
        if trace() {
            eprintln!("{rec:?} -> {r:?}");
        }

        // Counted exactly once, under the reason returned.
        let after = *w.drops();
        match &r {
            Ok(_) => assert_eq!(after, drops, "a delivery counted as a drop"),
            Err(reason) => {
                assert_eq!(after.total(), drops.total() + 1, "{reason} counted {} times", after.total() - drops.total());
                assert_eq!(after.get(*reason), drops.get(*reason) + 1, "{reason} not counted under its name");
            }
        }
        if let (Some(i), Some(c0)) = (slot, sa_before) {
            let sa = w.sad().get(SPIS[i]).expect("installed");
            let c = sa.counters();
            match &r {
                Ok(_) => assert_eq!((c.packets, c.drops), (c0.packets + 1, c0.drops)),
                Err(reason) => {
                    assert_eq!(c.packets, c0.packets);
                    assert_eq!(c.drops.total(), c0.drops.total() + 1);
                    assert_eq!(c.drops.get(*reason), c0.drops.get(*reason) + 1);
                }
            }
        }
        // Nothing outside the packet is written.
        assert!(buf[..esp.start].iter().chain(&buf[esp.end..]).all(|&b| b == GUARD_BYTE));

        let mut crossed_soft = false;
        let mut crossed_hard = false;
        match verdict {
            Expect::Pre(reason) => assert_eq!(r.as_ref().map_err(|e| *e), Err(reason), "model: {reason}"),
            Expect::Authentic { plain, seq } => {
                let i = slot.expect("authentic packets have an SA");
                let m = &mut models[i];
                m.commit(seq);
                match trailer(&plain) {
                    None => assert!(r.is_err(), "delivered despite bad padding"),
                    Some((data, next_header)) => {
                        if setup.lifetime {
                            m.counted += 1;
                            if m.counted > input::HARD_PACKETS {
                                crossed_hard = true;
                                m.dead = true;
                            } else if m.counted > input::SOFT_PACKETS && !m.soft_raised {
                                crossed_soft = true;
                                m.soft_raised = true;
                            }
                        }
                        let iv_end = esp.start + 8 + SUITES[i].iv_len();
                        match (&r, next_header) {
                            _ if crossed_hard => {
                                assert_eq!(r, Err(DropReason::LifetimeExpired), "the packet past the hard limit")
                            }
                            (_, 59) => assert_eq!(r, Err(DropReason::Dummy), "a dummy packet"),
                            (Ok(inner), _) => {
                                let len = inner_len(next_header, data).expect("delivered a packet that is not IP");
                                assert_eq!(inner.clone(), iv_end..iv_end + len, "inner packet misplaced");
                                assert_eq!(&buf[inner.clone()], &data[..len], "inner packet altered");
                                assert!(admitted(&data[..len]), "delivered outside the selectors");
                            }
                            (Err(_), _) => {}
                        }
                    }
                }
                if let Err(reason) = &r {
                    assert!(
                        !PRE_ICV[1..].contains(reason) || (crossed_hard && *reason == DropReason::LifetimeExpired),
                        "an authentic fresh packet refused as {reason}"
                    );
                }
            }
        }
        // The window moved exactly as the model's.
        for (i, m) in models.iter().enumerate() {
            let sa = w.sad().get(SPIS[i]).expect("installed");
            assert_eq!(sa.last_seq(), m.top, "SA {i}: replay window top");
        }
        // Expiry events: once each, on the packet that crossed the limit.
        let (mut soft, mut hard) = (0u32, 0u32);
        while let Some(e) = w.poll_event() {
            match e {
                Event::Expire { spi, direction: Direction::Inbound, kind } => {
                    assert_eq!(Some(spi), slot.map(|i| SPIS[i]), "expiry of an SA the packet did not use");
                    match kind {
                        Expiry::Soft => soft += 1,
                        Expiry::Hard => hard += 1,
                    }
                }
                e => panic!("unexpected event {e:?}"),
            }
        }
        // Whether the packet that crossed a limit was delivered or refused
        // (a dummy, not IP, outside the selectors, past the hard limit):
        // the control plane must hear of it, or the SA misses its rekey or
        // dies unannounced.
        assert_eq!(soft, u32::from(crossed_soft), "soft expiry events");
        assert_eq!(hard, u32::from(crossed_hard), "hard expiry events");
    }
});
