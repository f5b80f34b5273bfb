//! Lifetimes, jitter and the other limits of an SA's life (RFC 7296 §2.8,
//! §2.3, §2.4; RFC 9611), and of its after-life — what a dead IKE SA leads
//! to, the re-initiation back-off, the rate limits on unprotected answers
//! (§2.21.4, see `endpoint/recovery.rs`) — as named constants in one place.
//!
//! IKEv2 does not negotiate lifetimes: "each end of the SA is responsible
//! for enforcing its own lifetime policy on the SA and rekeying the SA when
//! necessary" (§2.8). Each Child SA and IKE SA therefore carries its own
//! soft deadline (rekey) and, for Child SAs, a hard one (delete). The
//! defaults are swanctl's: Child SAs rekey after an hour and die at 110 %,
//! IKE SAs rekey after four hours.
//!
//! Jitter: "If the two ends have the same lifetime policies, it is possible
//! that both will initiate a rekeying at the same time (which will result
//! in redundant SAs). To reduce the probability of this happening, the
//! timing of rekeying requests SHOULD be jittered" (§2.8). Like strongSwan
//! we *subtract* a random part of up to `rand_time` from the rekey time, so
//! a gateway that set up thousands of tunnels at once rekeys them spread
//! over a window instead of in one burst, and never later than configured.

use crate::config::{ChildConfig, ConnectionConfig};
use crate::ctx::Ctx;
use crate::event::Reason;
use core::time::Duration;
use std::time::Instant;

/// swanctl's default Child SA `rekey_time`.
pub const CHILD_REKEY_TIME: Duration = Duration::from_secs(3600);
/// swanctl's default IKE SA `rekey_time`.
pub const IKE_REKEY_TIME: Duration = Duration::from_secs(4 * 3600);
/// Default `per_cpu_max`: per-resource Child SAs per group.
pub const PER_CPU_MAX: u16 = 16;
/// Largest window (§2.3) we use, whatever the peer or the configuration
/// says: bounds the requests in flight and the responses kept per SA.
pub const MAX_WINDOW: u32 = 64;
/// Child SAs per IKE SA beyond which a request for another is refused with
/// NO_ADDITIONAL_SAS (RFC 7296 §3.10.1), so a peer cannot make us hold an
/// unbounded number of SAs.
pub const MAX_CHILD_SAS: usize = 1024;
/// After TEMPORARY_FAILURE, "it MUST NOT immediately retry the operation;
/// it MUST wait so that the sender may complete whatever operation caused
/// the temporary condition" (§2.25): we retry after this, minus up to
/// [`RETRY_JITTER`] (strongSwan's 15 s and 10 s).
pub const RETRY_INTERVAL: Duration = Duration::from_secs(15);
/// Random part subtracted from [`RETRY_INTERVAL`].
pub const RETRY_JITTER: Duration = Duration::from_secs(10);
/// How long a redundant SA the peer should delete (a lost collision, an
/// IKE SA it rekeyed) may linger before we delete it ourselves.
pub const RETIRE_AFTER: Duration = Duration::from_secs(30);

/// RFC 9611 per-resource Child SAs for a child (`per_cpu_sas`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PerCpuSas {
    /// One Child SA (pair) for the child; peers' extra SAs are plain
    /// duplicates (RFC 7296 allows them) and no SA_RESOURCE_INFO is sent.
    #[default]
    No,
    /// Right after the IKE SA and its fallback Child SA are up, negotiate
    /// one per-resource Child SA for each worker, in parallel as far as
    /// the peer's window allows.
    Eager,
    /// Negotiate a worker's per-resource Child SA when the data plane asks
    /// ([`crate::Endpoint::acquire`] with `Some(worker)`).
    OnDemand,
}

/// What to do when the peer is found dead (swanctl `dpd_action`): no
/// answer within `dpd_timeout` or the retransmission give-up
/// ([`Reason::Timeout`]), or an INVALID_IKE_SPI answer to one of our
/// requests ([`Reason::InvalidIkeSpi`]). See [`after_death`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DpdAction {
    /// Remove the SAs and their policies.
    #[default]
    Clear,
    /// Remove the SAs and initiate the connection again (the endpoint
    /// does, with back-off: [`REINITIATE_DELAY`]).
    Restart,
    /// Remove the SAs and install trap policies: traffic restarts it (the
    /// daemon's job).
    Trap,
}

/// What to do when the peer deletes the IKE SA and with it its Child SAs
/// (swanctl `close_action`; [`Reason::DeletedByPeer`]). See [`after_death`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CloseAction {
    /// Nothing: the SAs are gone.
    #[default]
    None,
    /// Install trap policies: traffic restarts it (the daemon's job).
    Trap,
    /// Initiate the connection again (the endpoint does, with back-off).
    Start,
}

/// What to do with ESP from a connection's peer for an SPI we do not
/// know while we hold no IKE SA with it: we restarted and lost the SAs
/// the peer still sends on (connection key `recover`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Recover {
    /// Tell the peer with an unprotected INVALID_SPI (RFC 7296 §1.5), and
    /// leave finding out to it: a peer that ignores the hint (strongSwan
    /// does) recovers only when its DPD gives up.
    #[default]
    Notify,
    /// Also initiate the connection (with INITIAL_CONTACT, so the peer
    /// drops the IKE SA we lost), with the re-initiation back-off
    /// ([`REINITIATE_DELAY`] for the first).
    Initiate,
}

/// What a new IKE SA with the same pair of identities, authenticated as
/// responder, does to the connection's IKE SAs already up (swanctl
/// `unique`, decided as charon decides it). INITIAL_CONTACT (RFC 7296
/// §2.4) replaces them under every policy but `Never`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Unique {
    /// Several may coexist; INITIAL_CONTACT deletes the others.
    #[default]
    No,
    /// Several may coexist, and INITIAL_CONTACT is ignored.
    Never,
    /// The first one stays: a new one from another address is refused
    /// (AUTHENTICATION_FAILED); one from the same address is taken for a
    /// reauthentication and allowed.
    Keep,
    /// The new one wins: the others are deleted with a Delete, or, from
    /// the same address (a reauthentication), [`REPLACE_DELAY`] later so
    /// that the new Child SAs carry traffic first.
    Replace,
}

impl Unique {
    /// swanctl's names.
    pub const NAMES: [(&'static str, Unique); 4] = [
        ("no", Unique::No),
        ("never", Unique::Never),
        ("keep", Unique::Keep),
        ("replace", Unique::Replace),
    ];

    /// The swanctl name.
    pub fn name(self) -> &'static str {
        Self::NAMES.iter().find(|(_, u)| *u == self).map_or("no", |(n, _)| n)
    }

    /// charon's name (`list-conns`: `UNIQUE_NO`, …).
    pub fn charon_name(self) -> &'static str {
        match self {
            Unique::No => "UNIQUE_NO",
            Unique::Never => "UNIQUE_NEVER",
            Unique::Keep => "UNIQUE_KEEP",
            Unique::Replace => "UNIQUE_REPLACE",
        }
    }
}

/// How long an IKE SA replaced by a reauthentication from the same peer
/// address (`unique = replace`) lives on (charon's delay).
pub const REPLACE_DELAY: Duration = Duration::from_secs(10);

/// What follows the end of an IKE SA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterDeath {
    /// Nothing.
    Nothing,
    /// Install the children's trap policies (the daemon).
    Trap,
    /// Initiate the connection again (the endpoint, with back-off).
    Initiate,
}

/// The end of an IKE SA for `reason`, under a connection's `dpd_action`
/// and `close_action` (strongSwan's table: a dead peer applies the DPD
/// action, a peer's Delete the close action; an SA we deleted, one the
/// peer replaced (INITIAL_CONTACT, a rekey) or one that never
/// authenticated calls for nothing).
pub fn after_death(dpd: DpdAction, close: CloseAction, reason: Reason) -> AfterDeath {
    match reason {
        Reason::Timeout | Reason::InvalidIkeSpi | Reason::LocalAddressGone | Reason::Unresolved => match dpd {
            DpdAction::Clear => AfterDeath::Nothing,
            DpdAction::Restart => AfterDeath::Initiate,
            DpdAction::Trap => AfterDeath::Trap,
        },
        Reason::DeletedByPeer => match close {
            CloseAction::None => AfterDeath::Nothing,
            CloseAction::Start => AfterDeath::Initiate,
            CloseAction::Trap => AfterDeath::Trap,
        },
        _ => AfterDeath::Nothing,
    }
}

/// How long an initiation waits for the driver's answer about the peer's
/// host names before it goes ahead with what it has (the last answers,
/// the literal addresses), or fails with [`Reason::Unresolved`]. Longer
/// than one round of a stub resolver's retries (glibc: 5 s per server).
pub const RESOLVE_PATIENCE: Duration = Duration::from_secs(12);
/// How often an IKE_SA_INIT that matches no connection may make every
/// peer host name be resolved again (it may be a peer whose name moved).
pub const REFRESH_ON_MISS: Duration = Duration::from_secs(10);

/// The first re-initiation of a connection whose IKE SA died
/// ([`AfterDeath::Initiate`]) waits this long (minus up to a tenth, so
/// that the tunnels of a hub whose peer came back do not all start in
/// one burst); each further one without a stable IKE SA in between
/// waits twice as long as the one before, up to [`REINITIATE_MAX_DELAY`].
/// A second is enough for the peer's Delete exchange (or our own) to end
/// first, and short against the outage a restarted peer causes anyway.
pub const REINITIATE_DELAY: Duration = Duration::from_secs(1);
/// The longest wait between re-initiations: a peer that stays away gets
/// an IKE_SA_INIT (and its retransmissions) every five minutes, not
/// every second.
pub const REINITIATE_MAX_DELAY: Duration = Duration::from_secs(300);
/// An IKE SA that stayed up this long resets the back-off: the next
/// death is a new incident, not another failure of the same one. A peer
/// that accepts each new IKE SA and deletes it at once is thus backed off
/// like one that does not answer.
pub const REINITIATE_STABLE: Duration = Duration::from_secs(60);

/// The wait before re-initiation number `attempt` (0 = the first after a
/// stable IKE SA): [`REINITIATE_DELAY`] doubled per attempt, capped at
/// [`REINITIATE_MAX_DELAY`], before jitter.
pub fn reinitiate_delay(attempt: u32) -> Duration {
    REINITIATE_DELAY
        .saturating_mul(1u32.checked_shl(attempt.min(31)).unwrap_or(u32::MAX))
        .min(REINITIATE_MAX_DELAY)
}

/// Unprotected answers (RFC 7296 §2.21.4: "A node needs to limit the rate
/// at which it will send messages in response to unprotected messages"):
/// INVALID_IKE_SPI responses to requests for an IKE SA we do not know, in
/// all per second.
pub const INVALID_IKE_SPI_PER_SEC: u32 = 100;
/// The same, per source address per second: a restarted peer's stale IKE
/// SAs each get their answer within a second or two, a flood from one
/// address gets almost nothing.
pub const INVALID_IKE_SPI_PER_SOURCE: u32 = 4;
/// Unprotected INVALID_SPI notifications (§1.5) we send about ESP with an
/// unknown SPI, in all per second.
pub const INVALID_SPI_HINTS_PER_SEC: u32 = 100;
/// The same, per peer address per second: the peer's stale Child SAs are
/// all on one IKE SA usually, and one hint a second is enough to make it
/// check that.
pub const INVALID_SPI_HINTS_PER_PEER: u32 = 1;
/// Liveness checks started on an INVALID_SPI hint received (it is
/// unauthenticated, so it only makes us ask the peer, §2.21.4), in all
/// per second.
pub const HINT_CHECKS_PER_SEC: u32 = 100;
/// The same, per peer address per second.
pub const HINT_CHECKS_PER_PEER: u32 = 1;
/// Sources the rate limiters above remember at once; when full, older
/// entries are forgotten, and a new source is refused if none is old
/// enough (silence is the safe failure).
pub const RATE_LIMIT_SOURCES: usize = 4096;

/// A uniformly random duration in `[0, max]` from the public RNG stream.
pub(crate) fn random_up_to(ctx: &mut Ctx<'_>, max: Duration) -> Duration {
    let nanos = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
    if nanos == 0 {
        return Duration::ZERO;
    }
    let mut b = [0u8; 8];
    ctx.rng.fill_public(&mut b);
    // Modulo bias is below 2^-20 for any duration under 2^44 ns (≈ 5 h).
    Duration::from_nanos(u64::from_be_bytes(b) % (nanos.saturating_add(1)).max(1))
}

/// `now + soft - random(0..=jitter)`, or `None` without a soft lifetime.
pub(crate) fn rekey_deadline(
    ctx: &mut Ctx<'_>,
    soft: Option<Duration>,
    jitter: Duration,
) -> Option<Instant> {
    let soft = soft?;
    let j = random_up_to(ctx, jitter.min(soft));
    Some(ctx.now + (soft - j))
}

/// When to retry after TEMPORARY_FAILURE.
pub(crate) fn retry_deadline(ctx: &mut Ctx<'_>) -> Instant {
    let j = random_up_to(ctx, RETRY_JITTER);
    ctx.now + (RETRY_INTERVAL - j)
}

impl ChildConfig {
    /// The hard lifetime: `life_time`, or `rekey_time` + 10 %.
    pub fn hard_lifetime(&self) -> Option<Duration> {
        self.life_time
            .or_else(|| self.rekey_time.map(|r| r + r / 10))
    }

    /// The most the rekey time is moved forward at random.
    pub fn jitter(&self) -> Duration {
        let Some(rekey) = self.rekey_time else {
            return Duration::ZERO;
        };
        let j = self.rand_time.unwrap_or_else(|| {
            self.hard_lifetime()
                .map_or(Duration::ZERO, |l| l.saturating_sub(rekey))
        });
        j.min(rekey)
    }
}

impl ConnectionConfig {
    /// The most the IKE rekey time is moved forward at random.
    pub fn jitter(&self) -> Duration {
        let Some(rekey) = self.rekey_time else {
            return Duration::ZERO;
        };
        self.rand_time.unwrap_or(rekey / 10).min(rekey)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn lifetimes_default_like_swanctl_and_validate() {
        let mut c = ChildConfig::new("net", "10.1.0.0/16", "10.2.0.0/16", "aes256gcm16").unwrap();
        // 1 h, hard at 110 %, jitter up to the difference.
        assert_eq!(c.rekey_time, Some(Duration::from_secs(3600)));
        assert_eq!(c.hard_lifetime(), Some(Duration::from_secs(3960)));
        assert_eq!(c.jitter(), Duration::from_secs(360));
        c.life_time = Some(Duration::from_secs(4000));
        assert_eq!(c.jitter(), Duration::from_secs(400));
        c.rand_time = Some(Duration::from_secs(10));
        assert_eq!(c.jitter(), Duration::from_secs(10));
        c.rand_time = Some(Duration::from_secs(99_999));
        assert_eq!(c.jitter(), Duration::from_secs(3600), "never below zero");
        c.life_time = Some(Duration::from_secs(3600));
        assert!(c.validate().is_err(), "life_time must exceed rekey_time");
        c.life_time = None;
        c.rekey_time = None;
        assert_eq!((c.hard_lifetime(), c.jitter()), (None, Duration::ZERO));
        c.validate().unwrap();
        c.per_cpu_sas = PerCpuSas::Eager;
        c.per_cpu_max = 0;
        assert!(c.validate().is_err());
        let mut k = ConnectionConfig::new("gw", "aes256gcm16-prfsha256-x25519").unwrap();
        assert_eq!(k.rekey_time, Some(Duration::from_secs(4 * 3600)));
        assert_eq!(k.jitter(), Duration::from_secs(1440));
        assert_eq!(k.dpd_action, DpdAction::Clear);
        k.rekey_time = Some(Duration::ZERO);
        k.children
            .push(ChildConfig::new("n", "10.1.0.0/16", "10.2.0.0/16", "aes256gcm16").unwrap());
        assert!(k.validate().is_err());
    }

    #[test]
    fn what_follows_an_ike_sa_death() {
        use AfterDeath::*;
        let dead = [Reason::Timeout, Reason::InvalidIkeSpi];
        for r in dead {
            assert_eq!(
                after_death(DpdAction::Clear, CloseAction::Start, r),
                Nothing
            );
            assert_eq!(
                after_death(DpdAction::Restart, CloseAction::None, r),
                Initiate
            );
            assert_eq!(after_death(DpdAction::Trap, CloseAction::Start, r), Trap);
        }
        let r = Reason::DeletedByPeer;
        assert_eq!(
            after_death(DpdAction::Restart, CloseAction::None, r),
            Nothing
        );
        assert_eq!(
            after_death(DpdAction::Clear, CloseAction::Start, r),
            Initiate
        );
        assert_eq!(after_death(DpdAction::Clear, CloseAction::Trap, r), Trap);
        for r in [
            Reason::Terminated,
            Reason::PeerRestarted,
            Reason::Rekeyed,
            Reason::AuthenticationFailed,
            Reason::HalfOpenExpired,
        ] {
            assert_eq!(
                after_death(DpdAction::Restart, CloseAction::Start, r),
                Nothing,
                "{r:?}"
            );
        }
    }

    #[test]
    fn reinitiation_delay_doubles_up_to_the_cap() {
        assert_eq!(reinitiate_delay(0), REINITIATE_DELAY);
        assert_eq!(reinitiate_delay(1), 2 * REINITIATE_DELAY);
        assert_eq!(reinitiate_delay(3), 8 * REINITIATE_DELAY);
        assert_eq!(reinitiate_delay(20), REINITIATE_MAX_DELAY);
        assert_eq!(reinitiate_delay(u32::MAX), REINITIATE_MAX_DELAY);
    }
}
