//! Micro-measurements that put the tunnel rate in context: what an
//! unpredictable SPI costs, and the X25519 ceiling.
//!
//! **SPIs**: unpredictable numbers must stay cheap at tens of thousands of
//! tunnels per second (as TCP's keyed-hash initial sequence numbers must
//! at tens of thousands of connections per second). Each side of a tunnel draws one
//! IKE SPI — eight bytes from the system CSPRNG, redrawn while zero or
//! taken (RFC 7296 §2.6, the engine's `spi::ike_spi`, repeated here because
//! it is crate-private) — and one inbound ESP SPI from the allocator the
//! daemon uses, [`SteeringSpiAllocator`] with the data plane's steering
//! rule: random in every bit the cBPF steering rule leaves free, unique
//! among the live SAs. Both are timed filling a table of `live`
//! entries, as a run of that many tunnels does, next to the bare CSPRNG
//! draw and the engine's non-steering [`RandomSpiAllocator`].
//!
//! **X25519**: one tunnel costs each side one key generation and one
//! agreement, so keygen+agree per CPU-second on this core, measured in the
//! same run, is the ceiling for tunnels per CPU-second per process.
//!
//! Both are timed in CPU time of the measuring thread (`CLOCK_THREAD_CPUTIME_ID`), not
//! wall-clock time, so that other processes competing for the core do not
//! count against them (they still cost caches and frequency).

use std::collections::HashSet;
use std::hint::black_box;
use std::time::Duration;

use anyhow::{Context, Result};
use esparto_crypto::ike::KeGroup;
use esparto_crypto::{Rng, SystemRng};
use esparto_ike::{RandomSpiAllocator, SpiAllocator, SteeringSpiAllocator};
use serde::Serialize;

use super::procfs::thread_cpu_seconds;
use crate::bench::median;

/// What SPIs cost (nanoseconds per SPI, medians of `runs`).
#[derive(Debug, Clone, Serialize)]
pub struct SpiCost {
    /// SPIs drawn per measurement (the table grows to this size).
    pub live: usize,
    /// Workers the steering allocator spreads over.
    pub workers: usize,
    /// 8 bytes from the system CSPRNG alone.
    pub csprng_8_bytes_ns: f64,
    /// An IKE SPI: CSPRNG draw plus uniqueness check and insertion.
    pub ike_spi_ns: f64,
    /// An inbound ESP SPI from the daemon's steering allocator.
    pub esp_spi_steering_ns: f64,
    /// An inbound ESP SPI from `RandomSpiAllocator` (no steering), for comparison.
    pub esp_spi_random_ns: f64,
    /// One IKE SPI and one ESP SPI (steering): what one side pays per tunnel.
    pub per_tunnel_per_side_ns: f64,
}

/// X25519 key generation + agreement per CPU-second on one core.
#[derive(Debug, Clone, Serialize)]
pub struct X25519Rate {
    /// Keygen + agreement pairs per CPU-second (median of the runs).
    pub per_second: f64,
}

/// Time `f` drawing `n` values; CPU nanoseconds per value.
fn per_item(n: usize, mut f: impl FnMut()) -> f64 {
    let t = thread_cpu_seconds();
    for _ in 0..n {
        f();
    }
    (thread_cpu_seconds() - t) * 1e9 / n.max(1) as f64
}

/// Measure SPI costs with tables of `live` entries.
pub fn spi_cost(live: usize, workers: usize, runs: usize) -> SpiCost {
    let live = live.max(1000);
    let (mut raw, mut ike, mut steer, mut random) = (vec![], vec![], vec![], vec![]);
    for _ in 0..runs.max(1) {
        let mut rng = SystemRng;
        raw.push(per_item(live, || {
            let mut b = [0u8; 8];
            rng.fill_public(&mut b);
            black_box(b);
        }));
        // The engine keys IKE SAs by our SPI in a HashMap; a set is the same work.
        let mut sas: HashSet<u64> = HashSet::new();
        ike.push(per_item(live, || {
            loop {
                let mut b = [0u8; 8];
                rng.fill_public(&mut b);
                let spi = u64::from_be_bytes(b);
                if spi != 0 && sas.insert(spi) {
                    break;
                }
            }
        }));
        let mut a = SteeringSpiAllocator::new(workers, ::esparto::datapath::spi_for_worker, ::esparto::datapath::spi_to_worker);
        steer.push(per_item(live, || {
            black_box(a.allocate(&mut rng, None));
        }));
        let mut a = RandomSpiAllocator::new();
        random.push(per_item(live, || {
            black_box(a.allocate(&mut rng, None));
        }));
    }
    let (ike_spi_ns, esp_spi_steering_ns) = (median(&ike), median(&steer));
    SpiCost {
        live,
        workers,
        csprng_8_bytes_ns: median(&raw),
        ike_spi_ns,
        esp_spi_steering_ns,
        esp_spi_random_ns: median(&random),
        per_tunnel_per_side_ns: ike_spi_ns + esp_spi_steering_ns,
    }
}

/// X25519 keygen + agreement per CPU-second, `runs` measurements of `each`
/// CPU time.
pub fn x25519_rate(each: Duration, runs: usize) -> Result<X25519Rate> {
    let mut rng = SystemRng;
    let peer = KeGroup::Curve25519
        .generate(&mut rng)
        .context("X25519 key generation")?;
    let peer_public = peer.public_value().to_vec();
    let mut rates = Vec::new();
    for _ in 0..runs.max(1) {
        let t = thread_cpu_seconds();
        let mut n = 0u64;
        let mut spent = 0.0;
        while spent < each.as_secs_f64() {
            for _ in 0..64 {
                let ours = KeGroup::Curve25519
                    .generate(&mut rng)
                    .context("X25519 key generation")?;
                black_box(ours.public_value());
                black_box(ours.agree(&peer_public).context("X25519 agreement")?);
            }
            n += 64;
            spent = thread_cpu_seconds() - t;
        }
        rates.push(n as f64 / spent);
    }
    Ok(X25519Rate {
        per_second: median(&rates),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn spi_costs_are_measured() {
        let c = spi_cost(1000, 2, 1);
        assert_eq!(c.live, 1000);
        for v in [
            c.csprng_8_bytes_ns,
            c.ike_spi_ns,
            c.esp_spi_steering_ns,
            c.esp_spi_random_ns,
        ] {
            assert!(v > 0.0 && v.is_finite(), "{c:?}");
        }
        assert_eq!(
            c.per_tunnel_per_side_ns,
            c.ike_spi_ns + c.esp_spi_steering_ns
        );
    }

    #[test]
    fn x25519_rate_is_positive() {
        let r = x25519_rate(Duration::from_millis(20), 1).map_err(|e| e.to_string());
        assert!(r.is_ok_and(|r| r.per_second > 0.0));
    }
}
