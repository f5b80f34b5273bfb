//! Sequence-number limits: how far an outbound SA may count.
//!
//! With AES-GCM and ChaCha20-Poly1305 the ESP IV is the sequence number
//! (RFC 4106 §3.1, RFC 7634 §2), so a (key, sequence number) pair used
//! twice is a repeated nonce, which gives away the authentication key and
//! the XOR of two plaintexts. A negotiated SA gets fresh keys every time;
//! a statically keyed one keeps its keys across restarts, so its counter
//! must continue where the last run stopped, also after a crash. The
//! control plane therefore *reserves* sequence numbers ahead of use in a
//! durable file and hands the workers a [`SeqLimit`]: the highest number
//! reserved so far. A sender never goes past it.
//!
//! On the packet path this is one compare against a number the SA keeps
//! in its own fields: only a packet at or past the *request mark* (half a
//! reservation before the limit) reads the shared atomics, raises a
//! one-shot request (a store the control thread polls, so it can neither
//! be lost to a full queue nor block the worker), and from then on the SA
//! looks again only when it reaches the limit. The control thread extends
//! the reservation durably, then raises the limit with
//! [`SeqLimit::raise`]. A packet past the limit is dropped and counted as
//! [`DropReason::SeqUnreserved`](crate::DropReason::SeqUnreserved), which a
//! control thread that keeps up never lets happen.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The highest sequence number an outbound SA may use, raised by the
/// control plane once more numbers are reserved durably; shared by every
/// copy of the SA (a fallback SA has one per worker).
#[derive(Debug)]
pub struct SeqLimit {
    /// The last sequence number used before this run: the SA continues
    /// after it.
    start: u64,
    /// Highest sequence number that may be used.
    limit: AtomicU64,
    /// From this sequence number on, the senders want more.
    request_at: AtomicU64,
    /// The limit for which a sender asked for more (one request per limit).
    asked: AtomicU64,
}

/// No request raised yet (limits never reach `u64::MAX`: see [`SeqLimit::new`]).
const NOT_ASKED: u64 = u64::MAX;

impl SeqLimit {
    /// An SA that continues after `start` and may not send until
    /// [`raise`](Self::raise)d: its limit is `start` itself.
    pub fn new(start: u64) -> Arc<Self> {
        let start = start.min(u64::MAX - 1);
        Arc::new(Self {
            start,
            limit: AtomicU64::new(start),
            request_at: AtomicU64::new(start),
            asked: AtomicU64::new(NOT_ASKED),
        })
    }

    /// The last sequence number of earlier runs; this run's first is one more.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// The highest sequence number that may be used now.
    pub fn limit(&self) -> u64 {
        self.limit.load(Ordering::Acquire)
    }

    /// Lets the senders count up to `limit`, asking for more from
    /// `request_at` on. Call only once every number up to `limit` is
    /// reserved durably. `request_at` is stored first: a sender that reads
    /// the new limit also reads the new mark, and one that reads a newer
    /// mark than limit sends no further than a limit already reserved.
    /// A limit never goes down; one control thread raises it.
    pub fn raise(&self, limit: u64, request_at: u64) {
        let limit = limit.min(u64::MAX - 1);
        if limit <= self.limit() {
            return;
        }
        self.request_at.store(request_at.min(limit), Ordering::Relaxed);
        self.limit.store(limit, Ordering::Release);
    }

    /// Whether a sender asked for more since the limit was last raised.
    pub fn wants_more(&self) -> bool {
        self.asked.load(Ordering::Acquire) == self.limit()
    }

    /// `(limit, request_at)`, for a sender.
    #[inline]
    pub(crate) fn load(&self) -> (u64, u64) {
        let limit = self.limit.load(Ordering::Acquire);
        (limit, self.request_at.load(Ordering::Relaxed))
    }

    /// Asks for more than `limit` (once per limit: the store is skipped
    /// when another copy of the SA asked already).
    #[inline]
    pub(crate) fn ask(&self, limit: u64) {
        if self.asked.load(Ordering::Relaxed) != limit {
            self.asked.store(limit, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_usable_until_raised_and_one_request_per_limit() {
        let l = SeqLimit::new(100);
        assert_eq!((l.start(), l.limit()), (100, 100));
        assert!(!l.wants_more());
        l.ask(100);
        assert!(l.wants_more());
        l.raise(200, 150);
        assert_eq!(l.load(), (200, 150));
        assert!(!l.wants_more(), "a raise answers the request");
        l.ask(200);
        l.ask(200);
        assert!(l.wants_more());
        // A limit never goes down.
        l.raise(150, 120);
        assert_eq!(l.load(), (200, 150));
        // The mark is never above the limit.
        l.raise(300, 400);
        assert_eq!(l.load(), (300, 300));
    }
}
