//! The Esparto ESP data plane, sans I/O (RFC 4303, RFC 4301, RFC 9611).
//!
//! This crate turns inner IP packets into ESP packets and back, in the
//! caller's buffers, with no system calls and no allocation per packet; the
//! clock is read only to time adaptive IPComp's compression, on a sample
//! of packets. The I/O crate feeds it batches from TUN queues and UDP
//! sockets; the control plane feeds it SAs and policies.
//!
//! The pieces, as RFC 4301 names them:
//!
//! - [`Spd`]: the policy database, an index changed one policy at a time
//!   so that lookups and changes stay logarithmic with thousands of policies;
//! - [`Sad`]: inbound SAs by SPI;
//! - [`OutboundSa`] / [`InboundSa`]: the two directions of an SA, with
//!   sequence numbers (64-bit ESN), the [`ReplayWindow`] (RFC 6479-style,
//!   checked before decryption, committed after), lifetimes and counters;
//! - [`SeqLimit`]: how far a statically keyed SA may count, so that its
//!   sequence numbers (the AES-GCM nonce) survive restarts;
//! - [`SaGroup`]: a fallback SA plus this worker's own sub-SA — the per-CPU
//!   SAs that let throughput grow with cores;
//! - [`Worker`]: one core's share of all of it, mutated only by its thread
//!   through [`Command`]s, reporting [`Event`]s (acquires, expiries);
//! - [`IpcompSa`] / [`Deflate`]: IP payload compression inside ESP
//!   (RFC 3173, DEFLATE), per SA beside the ESP state, optionally adaptive;
//! - [`Framing`]: the packet-overhead model, the exact outer size of an
//!   inner packet, for capacity planning and the path MTU.
//!
//! Every packet that is not delivered is counted under a [`DropReason`];
//! nothing in here panics on input.

#![forbid(unsafe_code)]

mod counters;
mod group;
mod ipcomp;
mod lifetime;
mod overhead;
mod replay;
mod sa;
mod sad;
mod selector;
mod seqlimit;
mod spd;
#[cfg(test)]
mod testutil;
mod worker;

pub use counters::{DropReason, Drops, SaCounters};
pub use group::{ACQUIRE_RETRY, SaGroup};
pub use ipcomp::{
    ADAPTIVE_MAX_RATIO, BACKOFF_MAX, BACKOFF_MAX_TIME, BACKOFF_MIN, DEFLATE_LEVEL, Deflate, IpcompMode, IpcompParams, IpcompSa, IpcompState,
    IpcompStats, IpcompSwitch, MAX_PACKET, MIN_COMPRESS_LEN, MIN_GAIN, PROBE_PACKETS, PauseReason, TIME_EVERY,
    TRANSFORM_DEFLATE, WindowFigures, decide,
};
pub use lifetime::{Expiry, Lifetime};
pub use overhead::{Framing, Mode, WireSize, ip_header_len};
pub use replay::{DEFAULT_WINDOW, MAX_WINDOW, ReplayError, ReplayWindow};
pub use sa::{
    Dropped, HEADROOM, HOT_LINES, InboundSa, LastPacket, MAX_ICV_LEN, MAX_IV_LEN, OutboundSa, SaConfig, SharedSeq, Spi,
    TAILROOM, max_inner_len, next_header_for, outer_overhead,
};
pub use sad::{Prefetch, Sad, SpiHasher};
pub use selector::{Family, IpRange, Selector, SelectorError, addr_bits};
pub use seqlimit::SeqLimit;
pub use spd::{Action, FlowKey, GroupId, Policy, PolicyId, Spd};
pub use worker::{Command, Direction, Encapsulated, Event, MAX_PENDING_EVENTS, PREFETCH_AHEAD, SaStats, Worker, WorkerStats};

// Re-exported so users of the data plane name one crate for the suite.
pub use esparto_crypto::{EspSuite, SecretBytes};
