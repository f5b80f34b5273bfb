//! Lifetimes, jitter and the other limits of an SA's life (RFC 7296 §2.8,
//! §2.3, §2.4; RFC 9611), as named constants in one place.
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

use crate::config::{ChildConfig, Connection};
use crate::ctx::Ctx;
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

/// What to do when the peer is found dead (swanctl `dpd_action`). Applied
/// by the daemon on `IkeSaDeleted { reason: Timeout }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DpdAction {
    /// Remove the SAs and their policies.
    #[default]
    Clear,
    /// Remove the SAs and initiate the connection again at once.
    Restart,
    /// Remove the SAs and install trap policies: traffic restarts it.
    Trap,
}

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

impl Connection {
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
        let mut k = Connection::new("gw", "aes256gcm16-prfsha256-x25519").unwrap();
        assert_eq!(k.rekey_time, Some(Duration::from_secs(4 * 3600)));
        assert_eq!(k.jitter(), Duration::from_secs(1440));
        assert_eq!(k.dpd_action, DpdAction::Clear);
        k.rekey_time = Some(Duration::ZERO);
        k.children
            .push(ChildConfig::new("n", "10.1.0.0/16", "10.2.0.0/16", "aes256gcm16").unwrap());
        assert!(k.validate().is_err());
    }
}
