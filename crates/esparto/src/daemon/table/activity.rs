//! The workers' last-packet times of every inbound SA, for the IKE
//! engine's liveness checks: authenticated ESP from the peer shows it is
//! alive (RFC 7296 §2.4), so `dpd_delay` asks for a check only after that
//! long without ESP too ([`esparto_ike::activity`]).
//!
//! Each inbound SA the table installs shares its last-packet time
//! (`esparto_esp::InboundSa::share_last_used`, an atomic its worker writes
//! once per batch); the table files the handle here by SPI and takes it
//! out with the SA. The engine asks only when a liveness check is due, for
//! that IKE SA's Child SAs: nothing is read per packet, nothing walks all
//! SAs.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use esparto_esp::{LastPacket, SpiHasher};

type Map = HashMap<u32, LastPacket, BuildHasherDefault<SpiHasher>>;

/// The last-packet times by inbound SPI, shared between the table (which
/// files them) and the IKE engine (which reads them); both live on the
/// control thread, so the lock is never contended.
#[derive(Debug, Clone, Default)]
pub(crate) struct LastPackets(Arc<Mutex<Map>>);

impl LastPackets {
    pub(super) fn insert(&self, spi: u32, p: LastPacket) {
        if let Ok(mut m) = self.0.lock() {
            m.insert(spi, p);
        }
    }

    pub(super) fn remove(&self, spi: u32) {
        if let Ok(mut m) = self.0.lock() {
            m.remove(&spi);
        }
    }

    /// How many SAs it holds.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.0.lock().map_or(0, |m| m.len())
    }
}

impl esparto_ike::InboundActivity for LastPackets {
    fn last_inbound(&self, spi: u32) -> Option<Instant> {
        self.0.lock().ok()?.get(&spi)?.get()
    }
}
