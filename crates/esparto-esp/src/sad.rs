//! The Security Association Database for inbound SAs (RFC 4301 §4.4.2),
//! keyed by SPI.
//!
//! Each worker has its own `Sad` holding exactly the inbound SAs whose SPIs
//! steer to it, so lookups take no lock. SPIs are random 32-bit numbers, so
//! the hash is a single multiplication (Fibonacci hashing) that spreads them
//! over all 64 bits — the default SipHash would cost more than the lookup
//! is worth, and an identity hash would leave the high bits hashbrown uses
//! for its control bytes all zero.
//!
//! The table holds boxes, not the SAs themselves: a slot is 16 bytes, so
//! the table of 100,000 SAs is 2 MB that stays in the last-level cache
//! (inline, each slot would be a whole SA and the table 70 MB, up to half
//! of it spare capacity after a resize), and each SA is allocated at its
//! exact size, aligned to a cache line with its hot fields first. The
//! pointer chase this adds is hidden by [`Sad::prefetch`]: a worker looks
//! up the SAs of a whole batch before it decrypts the first packet.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::sa::{InboundSa, Spi};

/// A function that asks the CPU to fetch the cache line at an address
/// ahead of use (a hint: it must accept any address and never fault).
pub type Prefetch = fn(*const u8);

/// A hasher for SPIs: multiply by 2^64 / φ.
#[derive(Default, Clone, Copy)]
pub struct SpiHasher(u64);

impl Hasher for SpiHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only used through `write_u32`; keep a correct fallback anyway.
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u32(&mut self, i: u32) {
        self.0 = u64::from(i).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// Inbound SAs by SPI.
#[derive(Debug, Default)]
pub struct Sad {
    map: HashMap<Spi, Box<InboundSa>, BuildHasherDefault<SpiHasher>>,
}

impl Sad {
    /// An empty database.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) an SA; returns the one it replaced.
    pub fn insert(&mut self, sa: Box<InboundSa>) -> Option<Box<InboundSa>> {
        self.map.insert(sa.spi(), sa)
    }

    /// Removes an SA.
    pub fn remove(&mut self, spi: Spi) -> Option<Box<InboundSa>> {
        self.map.remove(&spi)
    }

    /// The SA for `spi`.
    #[inline]
    pub fn get_mut(&mut self, spi: Spi) -> Option<&mut InboundSa> {
        self.map.get_mut(&spi).map(|b| &mut **b)
    }

    /// The SA for `spi`.
    pub fn get(&self, spi: Spi) -> Option<&InboundSa> {
        self.map.get(&spi).map(|b| &**b)
    }

    /// Asks `prefetch` for the cache lines the next packet for `spi` will
    /// touch in the SA (its hot fields and the word of the replay window at
    /// the top); the cipher's key schedule lives inside the crypto library,
    /// out of reach. Does nothing for an unknown SPI.
    #[inline]
    pub fn prefetch(&self, spi: Spi, prefetch: Prefetch) {
        if let Some(sa) = self.map.get(&spi) {
            sa.prefetch(prefetch);
        }
    }

    /// Number of SAs.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// All SAs (unordered).
    pub fn iter(&self) -> impl Iterator<Item = &InboundSa> {
        self.map.values().map(|b| &**b)
    }

    /// All SAs, mutably (unordered).
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut InboundSa> {
        self.map.values_mut().map(|b| &mut **b)
    }
}
