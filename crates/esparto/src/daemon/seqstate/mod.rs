//! Outbound sequence numbers of statically keyed SAs, kept across restarts.
//!
//! With AES-GCM and ChaCha20-Poly1305 the ESP IV is the sequence number
//! (RFC 4106 §3.1, RFC 7634 §2), so the nonce of every packet is
//! (salt, sequence number) under the SA's key. IKE gives every SA fresh
//! keys, but a static SA has the same key in every run: if its counter
//! started at 1 again after a restart it would repeat nonces, which gives
//! away the GCM authentication key and the XOR of the plaintexts, and the
//! peer would drop everything as replayed until it restarted too.
//!
//! So sequence numbers are **reserved ahead of use** in a state file
//! (`[daemon] state_dir`, file [`STATE_FILE`]). For each static outbound
//! SA the file holds the highest number any run may have used. At start
//! the SA continues after it, but sends nothing until a new reservation
//! (one [step](STEP) further) is durable: written to a temporary file,
//! fsync'd, renamed over the old one, and the directory fsync'd. Only then
//! is the SA's [`SeqLimit`] raised. When a sender reaches half a step
//! before the limit it asks for more (a flag the control thread polls on
//! every turn of its loop, at most 50 ms apart), and the next step is
//! made durable the same way before the limit moves. A crash at any
//! moment — before, during or after a write — leaves a file whose number
//! is at or above every sequence number ever sent, so no (key, sequence
//! number) pair is used twice. Numbers reserved but not used when the
//! process dies are skipped, never reused.
//!
//! **The step.** Without ESN an SA has `2^32 - 1` numbers for its whole
//! life (RFC 4303 §3.3.3), and every crash or restart skips what was
//! reserved but unused: at most 1.5 steps (killed just after an
//! extension: the step just reserved plus the half step left of the one
//! before). With [`STEP`] = 2^20: 100 restarts skip at most 157 million
//! numbers, 3.7 % of the space, and it takes at least 2,730 restarts to
//! use it all up without sending a packet. At 1 Mpps on one SA a step
//! lasts about a second, so it costs about one durable write a second
//! (all SAs due at once share one write), and the request comes half a
//! second before the limit, ten times the control loop's period. ESN SAs
//! have 2^64 numbers, so their step is [`STEP_ESN`] = 2^22: one write a
//! second at 4 Mpps, half a second of warning there.
//!
//! **Identity.** An entry belongs to a *key*, not to a name: reusing a key
//! under another SPI, child or connection must not restart its counter.
//! Entries are looked up by a key id, HMAC-SHA-256 keyed with the KEYMAT
//! over a fixed label ([`key_id`]), which only someone holding the key can
//! compute or check; connection, child and SPI are kept beside it for the
//! operator. Entries are never removed, so going back to an older
//! configuration is safe too. Two SAs sending under one key (or one key
//! used in both directions) would repeat nonces between them from the
//! first packet, and are refused at start.
//!
//! **Failure.** A file that cannot be read or does not check out (format,
//! version, SHA-256 over its entries) stops the daemon with an error naming
//! it: guessing would risk exactly the reuse this prevents. The recovery is
//! new keys for the static SAs (on both gateways), then moving the file
//! away. An SA whose 32-bit space is used up refuses to start, asking for
//! new keys. A write that fails at run time leaves the limit where it is
//! (the SA's packets are counted as `seq_unreserved` once it is reached)
//! and is retried.

mod file;
mod store;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::{Result, anyhow, bail};
use aws_lc_rs::hmac;
use esparto_esp::{SeqLimit, SharedSeq};
use tracing::{info, warn};

use super::table::{Slot, static_slot};
use crate::config::{Config, StaticPair};
pub(crate) use file::Entry;
pub use store::STATE_FILE;
pub(crate) use store::{FsStore, Store};

/// Sequence numbers reserved at a time for an SA without ESN.
pub const STEP: u64 = 1 << 20;
/// Sequence numbers reserved at a time for an SA with ESN.
pub const STEP_ESN: u64 = 1 << 22;
/// Highest sequence number without ESN (RFC 4303 §3.3.3: it must not cycle).
pub const MAX_SEQ: u64 = u32::MAX as u64;
/// Highest sequence number with ESN that a [`SeqLimit`] can express.
pub(crate) const MAX_SEQ_ESN: u64 = u64::MAX - 1;
/// Share of the 32-bit space used beyond which a start is logged as a warning.
const WARN_USED_PERCENT: u64 = 90;

/// The label HMAC'd under a key to identify it in the state file.
const KEY_ID_LABEL: &[u8] = b"esparto: outbound ESP sequence-number state, key id v1";

/// Identifies a key without revealing anything about it:
/// HMAC-SHA-256(key = KEYMAT, message = a fixed label), first 16 bytes.
pub(crate) fn key_id(keymat: &[u8]) -> [u8; 16] {
    let key = hmac::Key::new(hmac::HMAC_SHA256, keymat);
    let tag = hmac::sign(&key, KEY_ID_LABEL);
    let mut id = [0u8; 16];
    id.copy_from_slice(&tag.as_ref()[..16]);
    id
}

/// One static outbound SA to reserve for.
#[derive(Debug, Clone)]
pub(crate) struct StaticOut {
    /// Connection name.
    pub(crate) connection: String,
    /// Child name.
    pub(crate) child: String,
    /// SPI we send on.
    pub(crate) out_spi: u32,
    /// [`key_id`] of its KEYMAT.
    pub(crate) key_id: [u8; 16],
    /// 64-bit sequence numbers.
    pub(crate) esn: bool,
}

/// What an SA continues with: its limit and, for a fallback shared by all
/// workers, the shared counter that starts after the same number.
#[derive(Debug, Clone)]
pub(crate) struct Claimed {
    /// The limit the SA's senders stay within.
    pub(crate) limit: Arc<SeqLimit>,
    /// A counter continuing after [`SeqLimit::start`], for a shared fallback.
    pub(crate) shared: Arc<SharedSeq>,
}

/// One SA this run sends on.
#[derive(Debug)]
struct Live {
    entry: usize,
    step: u64,
    max: u64,
    limit: Arc<SeqLimit>,
    shared: Arc<SharedSeq>,
    /// A limit to raise once the file holding it is durable.
    pending: Option<u64>,
    /// Its space is used up (logged once).
    exhausted: bool,
}

/// The reservations of the running daemon over a [`Store`].
#[derive(Debug)]
pub(crate) struct Reservations<S: Store> {
    store: S,
    entries: Vec<Entry>,
    live: Vec<Live>,
    /// Entries changed since the last durable write.
    dirty: bool,
    /// [`STEP`] and [`STEP_ESN`] (smaller in tests).
    steps: (u64, u64),
}

impl<S: Store> Reservations<S> {
    /// Reads the state (none yet is an empty state); a file that does not
    /// check out is an error naming it.
    pub(crate) fn open(mut store: S) -> Result<Self> {
        let path = store.path().display().to_string();
        let entries = match store.load() {
            Ok(None) => Vec::new(),
            Ok(Some(bytes)) => file::decode(&bytes).map_err(|why| anyhow!("{path}: {why}. {}", recovery()))?,
            Err(e) => bail!("{path}: cannot read: {e}. {}", recovery()),
        };
        Ok(Self { store, entries, live: Vec::new(), dirty: false, steps: (STEP, STEP_ESN) })
    }

    /// Reserves `plain` (without ESN) or `esn` numbers at a time instead.
    #[cfg(test)]
    pub(crate) fn with_steps(mut self, plain: u64, esn: u64) -> Self {
        self.steps = (plain, esn);
        self
    }

    /// The store.
    pub(crate) fn store(&self) -> &S {
        &self.store
    }

    /// The entries, as they will be written.
    #[cfg(test)]
    pub(crate) fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// Claims the next range for `sa`: it continues after what earlier runs
    /// reserved, and may send once [`commit`](Self::commit) made the range
    /// durable. Fails when its sequence space is used up or its key is
    /// already claimed in this run.
    pub(crate) fn claim(&mut self, sa: &StaticOut) -> Result<Claimed> {
        let path = self.store.path().display().to_string();
        let idx = match self.entries.iter().position(|e| e.key_id == sa.key_id) {
            Some(i) => {
                if let Some(other) = self.live.iter().find(|l| l.entry == i) {
                    let e = &self.entries[other.entry];
                    bail!(
                        "{}/{} out_spi 0x{:08x} has the same out_key as {}/{} out_spi 0x{:08x}: two SAs sending under one key repeat AES-GCM nonces; give every SA its own key",
                        sa.connection,
                        sa.child,
                        sa.out_spi,
                        e.connection,
                        e.child,
                        e.out_spi
                    );
                }
                let e = &mut self.entries[i];
                if (e.connection.as_str(), e.child.as_str(), e.out_spi)
                    != (sa.connection.as_str(), sa.child.as_str(), sa.out_spi)
                {
                    info!(
                        connection = %sa.connection, child = %sa.child, spi = %format!("{:08x}", sa.out_spi),
                        was = %format!("{}/{} {:08x}", e.connection, e.child, e.out_spi),
                        "static SA key known under another name: its sequence numbers continue"
                    );
                    (e.connection, e.child, e.out_spi) = (sa.connection.clone(), sa.child.clone(), sa.out_spi);
                    self.dirty = true;
                }
                i
            }
            None => {
                self.entries.push(Entry {
                    key_id: sa.key_id,
                    connection: sa.connection.clone(),
                    child: sa.child.clone(),
                    out_spi: sa.out_spi,
                    reserved: 0,
                });
                self.entries.len() - 1
            }
        };
        let (step, max) = if sa.esn { (self.steps.1, MAX_SEQ_ESN) } else { (self.steps.0, MAX_SEQ) };
        let start = self.entries[idx].reserved;
        if start > max - step {
            bail!(
                "{}/{} out_spi 0x{:08x}: its sequence numbers are used up ({start} of {max} used or skipped by earlier runs, per {path}). \
                 Configure a new out_key for this SA (and the same key as the peer's in_key); `-esn` in esp_proposals gives 64-bit sequence numbers",
                sa.connection,
                sa.child,
                sa.out_spi
            );
        }
        if !sa.esn && start > max / 100 * WARN_USED_PERCENT {
            warn!(
                connection = %sa.connection, child = %sa.child, spi = %format!("{:08x}", sa.out_spi),
                used = start, of = max, "static SA: over {WARN_USED_PERCENT}% of its 32-bit sequence numbers used; configure new keys soon"
            );
        }
        let limit = SeqLimit::new(start);
        let shared = SharedSeq::after(start);
        let next = start + step;
        self.entries[idx].reserved = next;
        self.dirty = true;
        self.live.push(Live {
            entry: idx,
            step,
            max,
            limit: limit.clone(),
            shared: shared.clone(),
            pending: Some(next),
            exhausted: false,
        });
        Ok(Claimed { limit, shared })
    }

    /// Whether [`claim`](Self::claim) would take `sa` once the SAs sending
    /// under the keys `released` have stopped: its key is no other live
    /// SA's, and its sequence space is not used up. Changes nothing.
    pub(crate) fn check_claim(&self, sa: &StaticOut, released: &[[u8; 16]]) -> Result<()> {
        let Some(i) = self.entries.iter().position(|e| e.key_id == sa.key_id) else {
            return Ok(());
        };
        let e = &self.entries[i];
        if self.live.iter().any(|l| l.entry == i) && !released.contains(&sa.key_id) {
            bail!(
                "{}/{} out_spi 0x{:08x} has the same out_key as {}/{} out_spi 0x{:08x}, which is running: two SAs sending under one key repeat AES-GCM nonces; give every SA its own key",
                sa.connection,
                sa.child,
                sa.out_spi,
                e.connection,
                e.child,
                e.out_spi
            );
        }
        let (step, max) = if sa.esn { (self.steps.1, MAX_SEQ_ESN) } else { (self.steps.0, MAX_SEQ) };
        if e.reserved > max - step {
            bail!(
                "{}/{} out_spi 0x{:08x}: its sequence numbers are used up ({} of {max} used or skipped by earlier runs, per {}). \
                 Configure a new out_key for this SA (and the same key as the peer's in_key)",
                sa.connection,
                sa.child,
                sa.out_spi,
                e.reserved,
                self.store.path().display()
            );
        }
        Ok(())
    }

    /// Stops extending the reservation of the SA sending under `key_id`
    /// (its child is going); whether one was live. What it reserved stays
    /// in the file: a later claim of the same key continues after it.
    pub(crate) fn release(&mut self, key_id: &[u8; 16]) -> bool {
        let Some(i) = self.entries.iter().position(|e| e.key_id == *key_id) else {
            return false;
        };
        let before = self.live.len();
        self.live.retain(|l| l.entry != i);
        self.live.len() < before
    }

    /// Writes the state durably if it changed, then raises the limits the
    /// write covers. On error nothing is raised (and the next call retries).
    pub(crate) fn commit(&mut self) -> std::io::Result<()> {
        if self.dirty {
            self.store.save(&file::encode(&self.entries))?;
            self.dirty = false;
        }
        for l in &mut self.live {
            if let Some(limit) = l.pending.take() {
                l.limit.raise(limit, limit.saturating_sub(l.step / 2));
            }
        }
        Ok(())
    }

    /// Extends every reservation a sender asked more of, durably, then
    /// raises those limits. Returns how many were extended.
    pub(crate) fn poll(&mut self) -> std::io::Result<usize> {
        let mut n = 0;
        for l in &mut self.live {
            if l.pending.is_some() || !l.limit.wants_more() {
                continue;
            }
            let cur = l.limit.limit();
            // A shared counter keeps counting while its packets are refused.
            let next = cur.max(l.shared.last()).saturating_add(l.step).min(l.max);
            if next <= cur {
                if !l.exhausted {
                    l.exhausted = true;
                    let e = &self.entries[l.entry];
                    warn!(
                        connection = %e.connection, child = %e.child, spi = %format!("{:08x}", e.out_spi),
                        "static SA: sequence numbers used up; it sends no more until configured with new keys"
                    );
                }
                continue;
            }
            let e = &mut self.entries[l.entry];
            e.reserved = e.reserved.max(next);
            l.pending = Some(next);
            self.dirty = true;
            n += 1;
        }
        // Also retries a write that failed before.
        if self.dirty || self.live.iter().any(|l| l.pending.is_some()) {
            self.commit()?;
        }
        Ok(n)
    }
}

/// What to do about a state file that cannot be trusted.
fn recovery() -> &'static str {
    "Esparto will not guess where the sequence numbers of its statically keyed SAs stopped: \
     counting from 1 again would repeat AES-GCM nonces under the same keys. \
     Configure new keys for every static SA (on both gateways), then move this file away"
}

/// A static SA pair: (connection, child, index in `static_sas`).
pub(crate) type PairAt = (String, String, usize);

/// What each static outbound SA continues with.
pub(crate) type Claims = HashMap<PairAt, Claimed>;

/// Opens the state directory and reserves for every static SA this
/// gateway sends on (with `workers` workers); `None` without static
/// children (nothing is touched then).
pub(crate) fn reserve_static(cfg: &Config, workers: usize) -> Result<Option<(Reservations<FsStore>, Claims)>> {
    let outs = static_outbound(cfg, workers)?;
    if outs.is_empty() {
        return Ok(None);
    }
    let mut r = Reservations::open(FsStore::open(&cfg.daemon.state_dir)?)?;
    let mut claims = Claims::new();
    for (at, sa) in outs {
        claims.insert(at, r.claim(&sa)?);
    }
    r.commit().map_err(|e| anyhow!("{}: cannot write: {e}", r.store().path().display()))?;
    Ok(Some((r, claims)))
}

/// Every static SA pair this gateway sends on, with its key id. The
/// configuration has no key twice among its static SAs (`config::check`
/// refuses that, where it is written), so no two of them share a
/// sequence-number reservation.
pub(crate) fn static_outbound(cfg: &Config, workers: usize) -> Result<Vec<(PairAt, StaticOut)>> {
    let mut outs = Vec::new();
    for conn in &cfg.connections {
        for child in &conn.children {
            let Some(st) = &child.static_sas else { continue };
            for (i, StaticPair { out_spi, out_key, .. }) in st.pairs.iter().enumerate() {
                let out_id = key_id(out_key.as_slice());
                if matches!(static_slot(i, workers), Slot::InboundOnly) {
                    continue;
                }
                outs.push((
                    (conn.name.clone(), child.name.clone(), i),
                    StaticOut {
                        connection: conn.name.clone(),
                        child: child.name.clone(),
                        out_spi: *out_spi,
                        key_id: out_id,
                        esn: st.esn,
                    },
                ));
            }
        }
    }
    Ok(outs)
}
