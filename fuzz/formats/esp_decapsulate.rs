//! The input format of the `esp_decapsulate` fuzz target, and the SAs it
//! installs. One file, included by the target and by the seed generator
//! (crates/esparto/examples/fuzz_seeds.rs), so the two cannot drift apart;
//! each uses one half (decode or encode), hence the `dead_code` allowance.
//!
//! The receiver installs four inbound SAs, one per slot, all with the same
//! setup (ESN, replay window, lifetime) and published test keys. The input
//! is a setup byte, then records until the input ends (a record cut short
//! ends the input):
//!
//! ```text
//! setup   bit 0     ESN
//!         bits 1-2  replay window: 64, 128, 1024, none (none needs no ESN; with ESN it is 64)
//!         bit 3     packet lifetime: soft after SOFT_PACKETS, hard after HARD_PACKETS delivered
//! record  op        bits 0-1  SA slot (see SUITES)
//!                   bits 2-3  kind: 0 sealed, 1 sealed then one byte flipped, 2 raw, 3 resend
//!                   bits 4-5  sequence number (see Seq), for sealed, flipped and raw
//!                   bit 6     sealed/flipped: the bytes are the inner packet, the harness adds
//!                             RFC 4303 padding and the next header (4 or 41 from the version
//!                             nibble, else 59); clear: the bytes are the whole plaintext
//!                             (inner ‖ padding ‖ pad length ‖ next header)
//!                             raw: keep the bytes' SPI and sequence number (clear: write the
//!                             slot's SPI and the chosen number over the first 8 bytes)
//!                   bit 7     place the packet inside a larger buffer, between guard bytes
//!         seq       Next: nothing; Back: 1 byte; Ahead: 4 bytes BE; At: 8 bytes BE
//!         flip      flipped only: position (1 byte, modulo the packet length), xor mask (1 byte, 0 = 0x80)
//!         len       2 bytes BE (sealed, flipped, raw), then that many bytes
//!         k         resend only: 1 byte, which earlier packet (modulo their number)
//! ```
//!
//! A whole plaintext whose length is not a multiple of the suite's block is
//! aligned by inserting zero bytes in front of its last two (the pad length
//! and next header), so a pad length of 0 still describes it.
#![allow(dead_code)]

use esparto_crypto::{EspSuite, Integ, SecretBytes};
use esparto_esp::{Lifetime, SaConfig};

/// SAs the receiver holds.
pub(crate) const SLOTS: usize = 4;

/// Their SPIs.
pub(crate) const SPIS: [u32; SLOTS] = [0x1000_0001, 0x1000_0002, 0x1000_0003, 0x1000_0004];

/// Their suites: both AEADs, and AES-CBC with the shortest and the longest ICV.
pub(crate) const SUITES: [EspSuite; SLOTS] = [
    EspSuite::Aes256Gcm16,
    EspSuite::ChaCha20Poly1305,
    EspSuite::AesCbc { key_bits: 128, integ: Integ::HmacSha256_128 },
    EspSuite::AesCbc { key_bits: 256, integ: Integ::HmacSha512_256 },
];

/// Our selectors (destination of inbound packets).
pub(crate) const LOCAL_TS: [&str; 2] = ["10.2.0.0/16", "fd00:2::/64"];
/// The peer's selectors (source of inbound packets); one restricted to a
/// protocol and port.
pub(crate) const REMOTE_TS: [&str; 3] = ["10.1.0.0/16", "fd00:1::/64", "192.0.2.0/24[udp/53]"];

/// With the lifetime bit: the soft limit is crossed by the packet after this many.
pub(crate) const SOFT_PACKETS: u64 = 2;
/// With the lifetime bit: the hard limit is crossed by the packet after this many.
pub(crate) const HARD_PACKETS: u64 = 4;

/// Most bytes one record carries.
pub(crate) const MAX_RECORD: usize = 4096;

/// The published test KEYMAT of a slot.
pub(crate) fn keymat(slot: usize) -> Vec<u8> {
    (0..SUITES[slot].keymat_len()).map(|i| (slot * 0x40 + i) as u8 ^ 0x5a).collect()
}

/// The per-input configuration of every SA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Setup {
    /// Extended sequence numbers.
    pub(crate) esn: bool,
    /// Replay window in packets; 0: none.
    pub(crate) window: u32,
    /// Packet limits SOFT_PACKETS / HARD_PACKETS.
    pub(crate) lifetime: bool,
}

const WINDOWS: [u32; 4] = [64, 128, 1024, 0];

impl Setup {
    pub(crate) fn decode(b: u8) -> Self {
        let esn = b & 1 != 0;
        let mut window = WINDOWS[usize::from(b >> 1 & 3)];
        if esn && window == 0 {
            window = 64;
        }
        Self { esn, window, lifetime: b & 8 != 0 }
    }

    pub(crate) fn encode(&self) -> u8 {
        let w = WINDOWS.iter().position(|&w| w == self.window).unwrap_or(0) as u8;
        u8::from(self.esn) | w << 1 | u8::from(self.lifetime) << 3
    }

    /// The SA of `slot` as this setup configures it (both directions use
    /// the same SPI and keys, so the generator can send on it).
    pub(crate) fn sa_config(&self, slot: usize) -> SaConfig {
        let ts = |v: &[&str]| v.iter().map(|s| s.parse().expect("valid selector")).collect();
        let lifetime = if self.lifetime {
            Lifetime { soft_packets: Some(SOFT_PACKETS), hard_packets: Some(HARD_PACKETS), ..Lifetime::default() }
        } else {
            Lifetime::default()
        };
        SaConfig {
            spi: SPIS[slot],
            suite: SUITES[slot],
            keymat: SecretBytes::from_slice(&keymat(slot)),
            esn: self.esn,
            replay_window: self.window,
            lifetime,
            local_ts: ts(&LOCAL_TS),
            remote_ts: ts(&REMOTE_TS),
            peer: "192.0.2.2:4500".parse().expect("valid address"),
            path_mtu: 1500,
        }
    }
}

/// How a record picks its sequence number, relative to `base`: the highest
/// number the receiver committed or the harness used on that SA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seq {
    /// `base + 1`.
    Next,
    /// `base - d` (a duplicate, a reordered packet, or one left of the window).
    Back(u8),
    /// `base + d`.
    Ahead(u32),
    /// Exactly this number.
    At(u64),
}

impl Seq {
    /// The full 64-bit number (the caller keeps the low word without ESN).
    pub(crate) fn resolve(self, base: u64) -> u64 {
        match self {
            Seq::Next => base.wrapping_add(1),
            Seq::Back(d) => base.wrapping_sub(u64::from(d)),
            Seq::Ahead(d) => base.wrapping_add(u64::from(d)),
            Seq::At(s) => s,
        }
    }

    fn code(self) -> u8 {
        match self {
            Seq::Next => 0,
            Seq::Back(_) => 1,
            Seq::Ahead(_) => 2,
            Seq::At(_) => 3,
        }
    }

    fn encode(self, out: &mut Vec<u8>) {
        match self {
            Seq::Next => {}
            Seq::Back(d) => out.push(d),
            Seq::Ahead(d) => out.extend_from_slice(&d.to_be_bytes()),
            Seq::At(s) => out.extend_from_slice(&s.to_be_bytes()),
        }
    }
}

/// What one record asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Kind<'a> {
    /// Seal the plaintext with the slot's keys and deliver it.
    Sealed { seq: Seq, fix: bool, bytes: &'a [u8] },
    /// The same, with `packet[pos % len] ^= xor` after sealing.
    Flipped { seq: Seq, fix: bool, pos: u8, xor: u8, bytes: &'a [u8] },
    /// Deliver the bytes (with the slot's SPI and `seq` written over the
    /// header unless `seq` is `None`).
    Raw { seq: Option<Seq>, bytes: &'a [u8] },
    /// Deliver an earlier packet again.
    Resend(u8),
}

/// One record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record<'a> {
    pub(crate) slot: usize,
    /// Place the packet between guard bytes.
    pub(crate) placed: bool,
    pub(crate) kind: Kind<'a>,
}

fn take<'a>(data: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    if data.len() < n {
        return None;
    }
    let (a, b) = data.split_at(n);
    *data = b;
    Some(a)
}

fn seq(data: &mut &[u8], code: u8) -> Option<Seq> {
    Some(match code {
        0 => Seq::Next,
        1 => Seq::Back(take(data, 1)?[0]),
        2 => Seq::Ahead(u32::from_be_bytes(take(data, 4)?.try_into().ok()?)),
        _ => Seq::At(u64::from_be_bytes(take(data, 8)?.try_into().ok()?)),
    })
}

fn bytes<'a>(data: &mut &'a [u8]) -> Option<&'a [u8]> {
    let len = take(data, 2)?;
    let len = usize::from(u16::from_be_bytes([len[0], len[1]])).min(MAX_RECORD).min(data.len());
    take(data, len)
}

impl<'a> Record<'a> {
    /// Reads the next record, advancing `data`; `None` at the end.
    pub(crate) fn decode(data: &mut &'a [u8]) -> Option<Self> {
        let op = take(data, 1)?[0];
        let slot = usize::from(op & 3);
        let placed = op & 0x80 != 0;
        let bit6 = op & 0x40 != 0;
        let code = op >> 4 & 3;
        let kind = match op >> 2 & 3 {
            0 => Kind::Sealed { seq: seq(data, code)?, fix: bit6, bytes: bytes(data)? },
            1 => {
                let s = seq(data, code)?;
                let f = take(data, 2)?;
                Kind::Flipped { seq: s, fix: bit6, pos: f[0], xor: f[1], bytes: bytes(data)? }
            }
            2 => {
                let s = if bit6 { None } else { Some(seq(data, code)?) };
                Kind::Raw { seq: s, bytes: bytes(data)? }
            }
            _ => Kind::Resend(take(data, 1)?[0]),
        };
        Some(Self { slot, placed, kind })
    }

    /// Appends the record's encoding to `out`.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        let mut op = self.slot as u8 & 3 | u8::from(self.placed) << 7;
        let len = |out: &mut Vec<u8>, b: &[u8]| {
            let n = b.len().min(MAX_RECORD);
            out.extend_from_slice(&(n as u16).to_be_bytes());
            out.extend_from_slice(&b[..n]);
        };
        match &self.kind {
            Kind::Sealed { seq, fix, bytes } => {
                op |= u8::from(*fix) << 6 | seq.code() << 4;
                out.push(op);
                seq.encode(out);
                len(out, bytes);
            }
            Kind::Flipped { seq, fix, pos, xor, bytes } => {
                op |= 1 << 2 | u8::from(*fix) << 6 | seq.code() << 4;
                out.push(op);
                seq.encode(out);
                out.extend_from_slice(&[*pos, *xor]);
                len(out, bytes);
            }
            Kind::Raw { seq, bytes } => {
                op |= 2 << 2;
                match seq {
                    None => {
                        out.push(op | 1 << 6);
                    }
                    Some(s) => {
                        out.push(op | s.code() << 4);
                        s.encode(out);
                    }
                }
                len(out, bytes);
            }
            Kind::Resend(k) => {
                out.push(op | 3 << 2);
                out.push(*k);
            }
        }
    }
}

/// The ESP plaintext a sealed record carries, aligned to the suite.
pub(crate) fn plaintext(suite: EspSuite, fix: bool, bytes: &[u8]) -> Vec<u8> {
    let block = suite.block_size().max(4);
    let mut p = bytes.to_vec();
    if fix {
        let pad = (block - (p.len() + 2) % block) % block;
        let next_header = match p.first().map(|b| b >> 4) {
            Some(4) => 4,
            Some(6) => 41,
            _ => 59,
        };
        p.extend((1..=pad).map(|i| i as u8));
        p.extend_from_slice(&[pad as u8, next_header]);
    } else {
        let want = p.len().next_multiple_of(block).max(block);
        let at = p.len() - p.len().min(2);
        p.splice(at..at, core::iter::repeat_n(0u8, want - p.len()));
    }
    p
}

/// Lays out an ESP packet around `plain` for `slot`: SPI, the low word of
/// `seq`, room for the IV, the plaintext, room for the ICV. Seal it with
/// `EspCipher::seal(seq, esn, …)`.
pub(crate) fn layout(slot: usize, seq: u64, plain: &[u8]) -> Vec<u8> {
    let suite = SUITES[slot];
    let mut p = Vec::with_capacity(8 + suite.iv_len() + plain.len() + suite.icv_len());
    p.extend_from_slice(&SPIS[slot].to_be_bytes());
    p.extend_from_slice(&(seq as u32).to_be_bytes());
    p.resize(8 + suite.iv_len(), 0);
    p.extend_from_slice(plain);
    p.resize(p.len() + suite.icv_len(), 0);
    p
}
