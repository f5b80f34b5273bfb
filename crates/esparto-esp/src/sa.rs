//! Security Associations: one direction of ESP, tunnel mode (RFC 4303, RFC 4301).
//!
//! An [`OutboundSa`] turns an inner IP packet into an ESP packet, an
//! [`InboundSa`] does the reverse; both work in place in a caller's buffer
//! and never allocate. The ESP packet produced is what goes in the UDP
//! payload of ESP-in-UDP (RFC 3948): the kernel's UDP socket adds the outer
//! IP and UDP headers, so "tunnel mode with IPv4 or IPv6 outer headers" is a
//! matter of the socket family the peer address has, independent of the inner
//! packet's family (next header 4 or 41).
//!
//! ```text
//!          headroom          inner packet (from TUN)         tailroom
//!   |<- 8 + iv_len ->|<------------------------------>|<- pad + 2 + icv ->|
//!   [ SPI | Seq | IV ][ inner IP packet ............. ][ pad | pl | nh | ICV]
//!                     '---------------- encrypted ---------------'
//! ```
//!
//! Sequence numbers: a sub-SA belongs to one worker and counts in a plain
//! integer; a fallback SA is used by every worker and counts in a shared
//! atomic ([`SharedSeq`]). Either way a number is never used twice, and
//! without ESN the counter stops at `2^32 - 1` (RFC 4303 §3.3.3). A
//! statically keyed SA also continues after its earlier runs and stays
//! within what is reserved for it ([`SeqLimit`], [`OutboundSa::reserved`]).
//!
//! Inbound processing follows RFC 4303 §3.4 in the order that keeps forged
//! packets cheap and harmless: SPI lookup, replay check, integrity check
//! and decryption, *then* commit the sequence number to the window, then
//! padding, the lifetime, and the selector check of the inner packet
//! (RFC 4301 §5.2).
//!
//! A crossed lifetime limit is news for the control plane (rekey now, or
//! the SA is dead), whatever becomes of the packet that crossed it: in
//! both directions it is reported through an `expiry` argument beside the
//! packet's result, not inside it, so a refused packet still reports it.
//! A packet that would take an SA past a hard limit is refused
//! (`lifetime_expired`), and so is everything after it.

use core::ops::Range;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use esparto_crypto::{EspCipher, EspSuite, KeyLengthError, SecretBytes};
use esparto_wire::esp::{self as wesp, Trailer};
use esparto_wire::ip::{self, FlowKey, IpVersion};

use crate::counters::{DropReason, SaCounters};
use crate::lifetime::{Expiry, Lifetime, LifetimeState, Verdict};
use crate::overhead::{Framing, ip_header_len};
use crate::replay::{ReplayError, ReplayWindow};
use crate::selector::{Family, Selector};
use crate::seqlimit::SeqLimit;

/// An SPI (RFC 4303 §2.1).
pub type Spi = u32;

/// Largest IV any suite uses (AES-CBC).
pub const MAX_IV_LEN: usize = 16;
/// Largest ICV any suite uses (HMAC-SHA-512-256).
pub const MAX_ICV_LEN: usize = 32;
/// Largest cipher block any suite pads to (AES-CBC).
const MAX_BLOCK_LEN: usize = 16;
/// Bytes a caller must leave in front of an inner packet for the ESP header and IV.
pub const HEADROOM: usize = wesp::HEADER_LEN + MAX_IV_LEN;
/// Bytes a caller must leave after an inner packet for padding (at most a
/// block less one byte), trailer and ICV.
pub const TAILROOM: usize = (MAX_BLOCK_LEN - 1) + wesp::TRAILER_LEN + MAX_ICV_LEN;

/// Outer header bytes of ESP-in-UDP besides ESP itself: UDP and IPv4 or IPv6.
pub fn outer_overhead(peer: &SocketAddr) -> usize {
    let family = if peer.is_ipv4() { Family::V4 } else { Family::V6 };
    ip_header_len(family) + esparto_wire::udp::HEADER_LEN
}

/// Everything needed to install one SA (one direction).
#[derive(Debug)]
pub struct SaConfig {
    /// The SPI the receiver of this SA chose.
    pub spi: Spi,
    /// Encryption and integrity algorithms.
    pub suite: EspSuite,
    /// KEYMAT for this direction (RFC 7296 §2.17), zeroized on drop.
    pub keymat: SecretBytes,
    /// 64-bit extended sequence numbers (RFC 4303 §2.2.1).
    pub esn: bool,
    /// Anti-replay window in packets (inbound only; 0 disables replay
    /// protection, which RFC 4303 §3.4.3 allows only by local choice).
    pub replay_window: u32,
    /// Lifetime limits.
    pub lifetime: Lifetime,
    /// Our side's selectors: the packet source outbound, destination inbound.
    pub local_ts: Vec<Selector>,
    /// The peer's side: destination outbound, source inbound.
    pub remote_ts: Vec<Selector>,
    /// The peer's UDP endpoint (destination of outbound ESP-in-UDP).
    pub peer: SocketAddr,
    /// Path MTU towards the peer (outer packet size limit).
    pub path_mtu: u16,
}

/// A counter of sequence numbers shared by every worker's copy of a fallback SA.
#[derive(Debug, Default)]
pub struct SharedSeq {
    last: AtomicU64,
    bytes: AtomicU64,
}

impl SharedSeq {
    /// A new counter; the first number handed out is 1.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// A counter that continues after `last` (used by an earlier run).
    pub fn after(last: u64) -> Arc<Self> {
        Arc::new(Self { last: AtomicU64::new(last), bytes: AtomicU64::new(0) })
    }

    /// Highest sequence number handed out so far.
    pub fn last(&self) -> u64 {
        self.last.load(Ordering::Relaxed)
    }
}

#[derive(Debug)]
enum SeqSource {
    /// A sub-SA: one worker, plain integers.
    Owned { last: u64, bytes: u64 },
    /// A fallback SA: every worker, atomics.
    Shared(Arc<SharedSeq>),
}

/// Why an outbound packet was not encapsulated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dropped {
    /// The reason it is counted under.
    pub reason: DropReason,
    /// For [`DropReason::TooBig`]: the largest inner packet that fits, for the
    /// ICMP "fragmentation needed" / "packet too big" message.
    pub mtu: u16,
}

impl From<DropReason> for Dropped {
    fn from(reason: DropReason) -> Self {
        Self { reason, mtu: 0 }
    }
}

/// The sending half of an SA.
///
/// `repr(C)` to keep the fields every packet reads or writes together at
/// the front (the first [`HOT_LINES`] cache lines, which
/// [`Worker::prefetch_outbound`](crate::Worker::prefetch_outbound) asks
/// for ahead of use), and what only the control plane reads behind them.
#[derive(Debug)]
#[repr(C)]
pub struct OutboundSa {
    cipher: EspCipher,
    seq: SeqSource,
    /// Sequence numbers below this need no look at `limit` (`u64::MAX`
    /// without one): the packet path's only cost of a reservation.
    check_at: u64,
    /// Largest inner packet that fits the path MTU.
    max_inner: usize,
    /// ESP header + IV, ICV and padding alignment of the suite, looked up once.
    hdr_len: usize,
    icv_len: usize,
    block: usize,
    spi: Spi,
    esn: bool,
    peer: SocketAddr,
    counters: SaCounters,
    /// The time of the last batch that carried a packet on it: the
    /// caller's per-batch `now`, one store per packet, no clock read.
    last_used: Stamp,
    lifetime: LifetimeState,
    installed: Instant,
    limit: Option<Arc<SeqLimit>>,
}

/// Cache lines at the front of an SA that every packet touches (the cipher
/// handle, sequence or replay state, lifetime marks, counters); see the
/// layout of [`OutboundSa`] and [`InboundSa`].
pub const HOT_LINES: usize = 5;

/// A point in time in 8 bytes (an `Option<Instant>` takes 16), so that the
/// per-packet "last used" store stays in an SA's hot lines: nanoseconds
/// since a process-wide epoch, 0 for never.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp(u64);

/// The epoch [`Stamp`]s count from: the first time one is taken.
static STAMP_EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

impl Stamp {
    const NEVER: Self = Self(0);

    /// `now` as a stamp; a time before the epoch (an `Instant` made before
    /// the first stamp) counts as the epoch itself.
    fn at(now: Instant) -> Self {
        let epoch = *STAMP_EPOCH.get_or_init(|| now);
        // +1 keeps 0 for "never"; 2^64 ns is 584 years of uptime.
        Self((now.saturating_duration_since(epoch).as_nanos() as u64).saturating_add(1))
    }

    fn get(self) -> Option<Instant> {
        let epoch = STAMP_EPOCH.get()?;
        (self.0 != 0).then(|| *epoch + core::time::Duration::from_nanos(self.0 - 1))
    }
}

/// A cache line, for prefetching.
const LINE: usize = 64;

/// Asks `prefetch` for the first [`HOT_LINES`] lines of `value`.
#[inline]
fn prefetch_hot<T>(value: &T, prefetch: crate::sad::Prefetch) {
    let base = (value as *const T).cast::<u8>();
    for line in 0..HOT_LINES.min(size_of::<T>().div_ceil(LINE)) {
        prefetch(base.wrapping_add(line * LINE));
    }
}

/// The largest inner packet whose ESP-in-UDP encapsulation fits `path_mtu`
/// (the packet-overhead model's answer for the data plane's framing).
pub fn max_inner_len(suite: EspSuite, peer: &SocketAddr, path_mtu: u16) -> usize {
    Framing::data_plane(suite, peer).max_inner(usize::from(path_mtu))
}

impl OutboundSa {
    /// An SA owned by one worker (a sub-SA, or the only SA of a group).
    pub fn owned(cfg: &SaConfig, now: Instant) -> Result<Self, KeyLengthError> {
        Self::build(cfg, SeqSource::Owned { last: 0, bytes: 0 }, now)
    }

    /// One worker's copy of an SA shared by all workers (a fallback SA);
    /// every copy must get the same `seq`.
    pub fn shared(cfg: &SaConfig, seq: Arc<SharedSeq>, now: Instant) -> Result<Self, KeyLengthError> {
        Self::build(cfg, SeqSource::Shared(seq), now)
    }

    fn build(cfg: &SaConfig, seq: SeqSource, now: Instant) -> Result<Self, KeyLengthError> {
        Ok(Self {
            spi: cfg.spi,
            cipher: EspCipher::new(cfg.suite, cfg.keymat.as_slice())?,
            esn: cfg.esn,
            peer: cfg.peer,
            seq,
            lifetime: LifetimeState::new(cfg.lifetime, cfg.esn, now),
            max_inner: max_inner_len(cfg.suite, &cfg.peer, cfg.path_mtu),
            hdr_len: wesp::HEADER_LEN + cfg.suite.iv_len(),
            icv_len: cfg.suite.icv_len(),
            block: cfg.suite.block_size(),
            installed: now,
            last_used: Stamp::NEVER,
            counters: SaCounters::default(),
            check_at: u64::MAX,
            limit: None,
        })
    }

    /// Continues after the sequence numbers of earlier runs and never goes
    /// past `limit` (see [`SeqLimit`]). An owned counter starts at
    /// [`SeqLimit::start`]; a shared one must have been made by
    /// [`SharedSeq::after`] with the same start.
    pub fn reserved(mut self, limit: Arc<SeqLimit>) -> Self {
        if let SeqSource::Owned { last, .. } = &mut self.seq {
            *last = limit.start();
        }
        let (_, request_at) = limit.load();
        self.check_at = request_at;
        self.limit = Some(limit);
        self
    }

    /// The SPI.
    pub fn spi(&self) -> Spi {
        self.spi
    }

    /// Asks `prefetch` for the cache lines the next packet will touch in
    /// the SA (not the cipher's key schedule, which lives inside the crypto
    /// library, nor a fallback SA's shared counter).
    #[inline]
    pub fn prefetch(&self, prefetch: crate::sad::Prefetch) {
        prefetch_hot(self, prefetch);
    }

    /// The peer's UDP endpoint.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// Sends to `peer` from now on (the peer's NAT mapping changed, RFC
    /// 7296 §2.23). Only within the address family, whose overhead the
    /// SA's inner-packet limit was made for; false (nothing changed) for
    /// another.
    pub fn set_peer(&mut self, peer: SocketAddr) -> bool {
        if peer.is_ipv4() != self.peer.is_ipv4() {
            return false;
        }
        self.peer = peer;
        true
    }

    /// The suite.
    pub fn suite(&self) -> EspSuite {
        self.cipher.suite()
    }

    /// When it last carried a packet (the `now` of that packet's batch;
    /// `None`: never).
    pub fn last_used(&self) -> Option<Instant> {
        self.last_used.get()
    }

    /// When it was installed.
    pub fn installed(&self) -> Instant {
        self.installed
    }

    /// This worker's counters for the SA.
    pub fn counters(&self) -> &SaCounters {
        &self.counters
    }

    /// The largest inner packet that fits the path MTU.
    pub fn max_inner(&self) -> usize {
        self.max_inner
    }

    /// Whether this is a fallback SA's shared copy.
    pub fn is_shared(&self) -> bool {
        matches!(self.seq, SeqSource::Shared(_))
    }

    /// Whether a hard limit was reached.
    pub fn is_dead(&self) -> bool {
        self.lifetime.is_dead()
    }

    /// Highest sequence number used.
    pub fn last_seq(&self) -> u64 {
        match &self.seq {
            SeqSource::Owned { last, .. } => *last,
            SeqSource::Shared(s) => s.last(),
        }
    }

    /// Time-based lifetime check for an idle SA.
    pub(crate) fn check_time(&mut self, now: Instant) -> Option<Expiry> {
        self.lifetime.check_time(now)
    }

    /// Encapsulates the inner packet at `buf[inner]` in place, returning the
    /// range of the ESP packet in `buf` and whether a soft limit was crossed
    /// by this packet (raise a rekey event) or a hard one was first reached.
    ///
    /// `buf` must have [`HEADROOM`] bytes before `inner.start` and
    /// [`TAILROOM`] bytes after `inner.end`; otherwise the packet is dropped
    /// as `Malformed` (a caller bug, counted like anything else).
    #[inline]
    pub fn encapsulate(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        inner: Range<usize>,
        next_header: u8,
        expiry: &mut Option<Expiry>,
    ) -> Result<Range<usize>, Dropped> {
        let inner_len = inner.len();
        if inner_len > self.max_inner {
            // RFC 4301 §8.2.1 / RFC 1191: the sender learns the tunnel MTU.
            // The caller decides whether to answer with ICMP or let the
            // outer packet be fragmented (IPv4 without DF).
            return Err(Dropped { reason: DropReason::TooBig, mtu: self.max_inner.min(usize::from(u16::MAX)) as u16 });
        }
        let pad = wesp::padding_for(inner_len, self.block);
        let end = inner.end + pad + wesp::TRAILER_LEN + self.icv_len;
        let Some(start) = inner.start.checked_sub(self.hdr_len) else {
            return Err(DropReason::Malformed.into());
        };
        if end > buf.len() {
            return Err(DropReason::Malformed.into());
        }

        // Take a sequence number (an owned one only once it may be used),
        // and check lifetimes against the totals including this packet.
        let (seq, bytes) = match &mut self.seq {
            SeqSource::Owned { last, bytes } => {
                let seq = *last + 1;
                if seq >= self.check_at {
                    check_reservation(&mut self.check_at, self.limit.as_deref(), self.esn, &mut self.counters, seq)?;
                }
                *last = seq;
                *bytes += inner_len as u64;
                (seq, *bytes)
            }
            SeqSource::Shared(s) => {
                let seq = s.last.fetch_add(1, Ordering::Relaxed) + 1;
                if seq >= self.check_at {
                    check_reservation(&mut self.check_at, self.limit.as_deref(), self.esn, &mut self.counters, seq)?;
                }
                (seq, s.bytes.fetch_add(inner_len as u64, Ordering::Relaxed) + inner_len as u64)
            }
        };
        match self.lifetime.check(now, bytes, seq) {
            Verdict::Ok => {}
            Verdict::SoftNow => *expiry = Some(Expiry::Soft),
            Verdict::Hard { first } => {
                if first {
                    *expiry = Some(Expiry::Hard);
                }
                self.counters.drops.count(DropReason::LifetimeExpired);
                return Err(DropReason::LifetimeExpired.into());
            }
        }

        let trailer = Trailer { pad_len: pad as u8, next_header };
        // Cannot fail: `end` was checked against the buffer above.
        if trailer.emit(&mut buf[inner.end..]).is_err() {
            return Err(DropReason::Malformed.into());
        }
        let packet = &mut buf[start..end];
        // Unchecked: `packet` begins `hdr_len` (the ESP header and the IV)
        // before the inner packet, so it holds the header.
        debug_assert!(packet.len() >= wesp::HEADER_LEN);
        let mut esp = wesp::Packet::new_unchecked(&mut *packet);
        esp.set_spi(self.spi);
        // RFC 4303 §2.2.1: only the low 32 bits are sent (with ESN the
        // high half is authenticated, never sent).
        esp.set_seq(seq as u32);
        if self.cipher.seal(seq, self.esn, packet).is_err() {
            return Err(DropReason::Malformed.into());
        }
        self.counters.packets += 1;
        self.counters.bytes += inner_len as u64;
        self.last_used = Stamp::at(now);
        Ok(start..end)
    }
}

/// `seq` of an outbound SA reached the request mark or the limit of its
/// reservation: ask for more (once per limit), and refuse a number past
/// the limit. `check_at` is the SA's next sequence number to look again at.
#[cold]
fn check_reservation(
    check_at: &mut u64,
    limit: Option<&SeqLimit>,
    esn: bool,
    counters: &mut SaCounters,
    seq: u64,
) -> Result<(), Dropped> {
    let Some(l) = limit else { return Ok(()) };
    if !esn && seq > u64::from(u32::MAX) {
        // The end of the 32-bit space: the hard lifetime limit refuses it
        // (and says so once).
        return Ok(());
    }
    let (limit, request_at) = l.load();
    if seq < request_at {
        // Raised since we last looked.
        *check_at = request_at;
        return Ok(());
    }
    l.ask(limit);
    if seq > limit {
        // Every packet looks again until the limit moves.
        *check_at = seq;
        counters.drops.count(DropReason::SeqUnreserved);
        return Err(DropReason::SeqUnreserved.into());
    }
    // Asked: nothing to look at until the limit itself.
    *check_at = limit.saturating_add(1);
    Ok(())
}

/// The receiving half of an SA.
///
/// `repr(C)` and aligned to a cache line: the fields every packet reads or
/// writes come first and fill the first [`HOT_LINES`] lines, which
/// [`Sad::prefetch`](crate::Sad::prefetch) asks for ahead of use; the
/// selectors, the peer and the drop counters come after.
#[derive(Debug)]
#[repr(C, align(64))]
pub struct InboundSa {
    cipher: EspCipher,
    replay: Option<ReplayWindow>,
    /// Inner bytes and packets counted against the lifetime: every packet
    /// that authenticated with a well-formed trailer, delivered or not
    /// (the counters count only what was delivered).
    lifetime_bytes: u64,
    lifetime_packets: u64,
    spi: Spi,
    /// Shortest packet the suite can produce: header, IV, trailer, ICV
    /// (at most a few dozen bytes; 16 bits keep it in the SPI's word).
    min_len: u16,
    esn: bool,
    /// The time of the last batch that delivered a packet of it (see
    /// [`OutboundSa`]'s).
    last_used: Stamp,
    counters: SaCounters,
    /// The last inner flow that passed the selector check: a run of one
    /// flow is checked once (the selectors of an SA never change).
    last_admitted: Option<FlowKey>,
    lifetime: LifetimeState,
    local_ts: Vec<Selector>,
    remote_ts: Vec<Selector>,
    peer: SocketAddr,
    installed: Instant,
    /// `last_used`, also where another thread can read it
    /// ([`InboundSa::share_last_used`]); stored once a batch, not per
    /// packet.
    shared_last_used: Option<Arc<AtomicU64>>,
}

/// An inbound SA's last-packet time, readable from another thread while
/// the SA's worker goes on (the control thread's liveness checks: ESP
/// from the peer shows it is alive). Written by the worker once per batch
/// that carried a packet of the SA.
#[derive(Debug, Clone)]
pub struct LastPacket(Arc<AtomicU64>);

impl LastPacket {
    /// The time of the last batch that delivered a packet of the SA
    /// (`None`: none yet).
    pub fn get(&self) -> Option<Instant> {
        Stamp(self.0.load(Ordering::Relaxed)).get()
    }
}

impl InboundSa {
    /// Builds the SA.
    pub fn new(cfg: &SaConfig, now: Instant) -> Result<Self, KeyLengthError> {
        Ok(Self {
            spi: cfg.spi,
            cipher: EspCipher::new(cfg.suite, cfg.keymat.as_slice())?,
            esn: cfg.esn,
            replay: (cfg.replay_window > 0).then(|| ReplayWindow::new(cfg.replay_window, cfg.esn)),
            lifetime: LifetimeState::new(cfg.lifetime, true, now),
            lifetime_bytes: 0,
            lifetime_packets: 0,
            local_ts: cfg.local_ts.clone(),
            remote_ts: cfg.remote_ts.clone(),
            peer: cfg.peer,
            min_len: (wesp::HEADER_LEN + cfg.suite.iv_len() + wesp::TRAILER_LEN + cfg.suite.icv_len()) as u16,
            last_admitted: None,
            installed: now,
            last_used: Stamp::NEVER,
            counters: SaCounters::default(),
            shared_last_used: None,
        })
    }

    /// The SPI.
    pub fn spi(&self) -> Spi {
        self.spi
    }

    /// The suite.
    pub fn suite(&self) -> EspSuite {
        self.cipher.suite()
    }

    /// Asks `prefetch` for the cache lines the next packet will touch in
    /// the SA: its hot fields and the replay window's word for the next
    /// number in order (not the cipher's key schedule, which lives inside
    /// the crypto library).
    #[inline]
    pub fn prefetch(&self, prefetch: crate::sad::Prefetch) {
        prefetch_hot(self, prefetch);
        if let Some(w) = &self.replay {
            w.prefetch(prefetch);
        }
    }

    /// The peer's endpoint as configured.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// When it last carried a packet (the `now` of that packet's batch;
    /// `None`: never).
    pub fn last_used(&self) -> Option<Instant> {
        self.last_used.get()
    }

    /// A handle another thread reads [`InboundSa::last_used`] through,
    /// whichever worker the SA is installed in.
    pub fn share_last_used(&mut self) -> LastPacket {
        let shared = self.shared_last_used.get_or_insert_with(|| Arc::new(AtomicU64::new(self.last_used.0)));
        LastPacket(shared.clone())
    }

    /// When it was installed.
    pub fn installed(&self) -> Instant {
        self.installed
    }

    /// Counters of the SA.
    pub fn counters(&self) -> &SaCounters {
        &self.counters
    }

    /// Highest sequence number received.
    pub fn last_seq(&self) -> u64 {
        self.replay.as_ref().map_or(0, |r| r.top())
    }

    pub(crate) fn check_time(&mut self, now: Instant) -> Option<Expiry> {
        self.lifetime.check_time(now)
    }

    /// Decapsulates the ESP packet at `buf[esp]` in place (the SPI has
    /// already been looked up and is this SA's), returning the range of the
    /// inner IP packet in `buf` (TFC padding removed). On error the reason
    /// is also counted in the SA's drop counters; an authentic dummy packet
    /// (RFC 4303 §2.6) is the drop [`DropReason::Dummy`].
    ///
    /// `expiry` is set when this packet crossed a soft lifetime limit or
    /// first reached a hard one, whatever became of the packet: a packet
    /// can cross a limit and still be refused (a dummy, not IP, outside
    /// the selectors, or the hard limit itself), and the control plane
    /// hears of each limit only this once.
    #[inline]
    pub fn decapsulate(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        esp: Range<usize>,
        expiry: &mut Option<Expiry>,
    ) -> Result<Range<usize>, DropReason> {
        let r = self.decapsulate_inner(now, buf, esp, expiry);
        if let Err(reason) = r {
            self.counters.drops.count(reason);
        }
        r
    }

    fn decapsulate_inner(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        esp: Range<usize>,
        expiry: &mut Option<Expiry>,
    ) -> Result<Range<usize>, DropReason> {
        let (data, next_header) = self.open(now, buf, esp, expiry)?;
        if next_header == wesp::NEXT_HEADER_IPCOMP {
            // IPComp is the worker's (it holds the SA's IPComp state);
            // without it, the payload is not what this SA carries.
            return Err(DropReason::Malformed);
        }
        let inner_len = self.admit(now, next_header, &buf[data.clone()])?;
        Ok(data.start..data.start + inner_len)
    }

    /// Counts a drop of this SA found outside [`InboundSa::decapsulate`].
    pub(crate) fn count_drop(&mut self, reason: DropReason) {
        self.counters.drops.count(reason);
    }

    /// Checks, authenticates and decrypts the ESP packet at `buf[esp]`,
    /// counts it against the lifetime and refuses a dummy; returns the
    /// range in `buf` of the payload (trailer removed, TFC padding still
    /// there) and the trailer's Next Header.
    pub(crate) fn open(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        esp: Range<usize>,
        expiry: &mut Option<Expiry>,
    ) -> Result<(Range<usize>, u8), DropReason> {
        let packet = buf.get_mut(esp.clone()).ok_or(DropReason::Malformed)?;
        // Header, IV, at least the two trailer bytes, ICV.
        if packet.len() < usize::from(self.min_len) {
            return Err(DropReason::Malformed);
        }
        if self.lifetime.is_dead() {
            return Err(DropReason::LifetimeExpired);
        }
        // Unchecked: `min_len` (checked above) covers the ESP header.
        let seq_lo = wesp::Packet::new_unchecked(&*packet).seq();
        // RFC 4303 §3.4.3: check before the (expensive) integrity check…
        let seq = match &self.replay {
            Some(w) => w.check(seq_lo).map_err(|_| DropReason::Replay)?,
            // Without a window the high bits can't be inferred; ESN then
            // requires one (enforced at install by the control plane).
            None => u64::from(seq_lo),
        };
        let plain = self.cipher.open(seq, self.esn, packet).map_err(|_| DropReason::IcvFailure)?;
        // …and commit only once the packet is authentic.
        if let Some(w) = &mut self.replay {
            w.commit(seq).map_err(|e| match e {
                ReplayError::Duplicate | ReplayError::TooOld | ReplayError::Zero => DropReason::Replay,
            })?;
        }
        let plaintext = &packet[plain.clone()];
        let (data, trailer) = Trailer::split(plaintext).map_err(|_| DropReason::BadPadding)?;

        // RFC 4301 §4.4.2.1: the lifetime measures what the SA's keys
        // protected, so an authentic packet counts whether it is then
        // delivered or not (the checks below may still refuse it).
        self.lifetime_bytes += data.len() as u64;
        self.lifetime_packets += 1;
        match self.lifetime.check(now, self.lifetime_bytes, self.lifetime_packets) {
            Verdict::Ok => {}
            Verdict::SoftNow => *expiry = Some(Expiry::Soft),
            Verdict::Hard { first } => {
                // Past the hard limit nothing more is accepted, this packet
                // included (as outbound, where it is not sent).
                if first {
                    *expiry = Some(Expiry::Hard);
                }
                return Err(DropReason::LifetimeExpired);
            }
        }

        if trailer.is_dummy() {
            // RFC 4303 §2.6: authentic (its sequence number is spent), but
            // the receiver MUST discard it.
            return Err(DropReason::Dummy);
        }
        let start = esp.start + plain.start;
        Ok((start..start + data.len(), trailer.next_header))
    }

    /// Admits the payload `data` (an IP packet of the version `next_header`
    /// names, maybe followed by TFC padding): the selector check, then the
    /// counters. Returns the inner packet's length.
    pub(crate) fn admit(&mut self, now: Instant, next_header: u8, data: &[u8]) -> Result<usize, DropReason> {
        let inner_len = inner_ip_len(next_header, data)?;
        let inner = &data[..inner_len];
        if !self.selectors_admit(inner)? {
            // RFC 4301 §5.2 step 4: the decrypted packet must match the
            // SA's selectors, or a peer could inject traffic for subnets
            // it was never granted.
            return Err(DropReason::PolicyMismatch);
        }
        self.counters.packets += 1;
        self.counters.bytes += inner_len as u64;
        let stamp = Stamp::at(now);
        if stamp != self.last_used {
            // Once a batch: what the control thread reads (`LastPacket`).
            if let Some(shared) = &self.shared_last_used {
                shared.store(stamp.0, Ordering::Relaxed);
            }
            self.last_used = stamp;
        }
        Ok(inner_len)
    }

    /// Whether the inner packet's source is in the peer's selectors and its
    /// destination in ours.
    #[inline]
    fn selectors_admit(&mut self, inner: &[u8]) -> Result<bool, DropReason> {
        let k = FlowKey::extract(inner).map_err(|_| DropReason::Malformed)?;
        if self.last_admitted == Some(k) {
            return Ok(true);
        }
        let family = if k.v6 { Family::V6 } else { Family::V4 };
        let ok = any_match(&self.remote_ts, family, k.src, k.proto, k.src_port)
            && any_match(&self.local_ts, family, k.dst, k.proto, k.dst_port);
        if ok {
            self.last_admitted = Some(k);
        }
        Ok(ok)
    }
}

#[inline]
fn any_match(ts: &[Selector], family: Family, addr: u128, proto: u8, port: u16) -> bool {
    ts.iter().any(|s| s.matches(family, addr, proto, port))
}

/// The length of the inner IP packet at the start of `data`, from its own
/// header; anything after it is TFC padding (RFC 4303 §2.7). Its version
/// must be the one the Next Header field announced.
#[inline]
fn inner_ip_len(next_header: u8, data: &[u8]) -> Result<usize, DropReason> {
    if next_header_for(data) != Some(next_header) {
        return Err(DropReason::Malformed);
    }
    ip::packet_len(data).map_err(|_| DropReason::Malformed)
}

/// The ESP next-header value for an inner packet, from its version nibble.
#[inline]
pub fn next_header_for(inner: &[u8]) -> Option<u8> {
    match IpVersion::of(inner).ok()? {
        IpVersion::V4 => Some(wesp::NEXT_HEADER_IPV4),
        IpVersion::V6 => Some(wesp::NEXT_HEADER_IPV6),
    }
}

#[cfg(test)]
#[path = "sa_tests.rs"]
mod tests;
