//! SPI allocation (IKE and ESP).
//!
//! Both kinds of SPI must be unique among the SAs we hold (RFC 7296 §2.6:
//! each endpoint "MUST choose them so as to be unique identifiers of an
//! IKE SA") and should be unpredictable, so that an off-path attacker
//! cannot aim forged packets at an SA by guessing its SPI. They come from
//! the injected [`Rng`]'s public stream.
//!
//! Inbound ESP SPIs have a second job: the data plane steers each inbound
//! packet to the worker that owns its SA *by its SPI* (a cBPF program on
//! the reuseport group reads it). So ESP SPI allocation is a
//! trait: the daemon uses [`SteeringSpiAllocator`] with its data plane's
//! steering function, and tells it which SPIs are released from the SAD.
//! [`RandomSpiAllocator`] is the default for
//! tests and for daemons without steering: random, never 0–255 (RFC 4303
//! §2.1 reserves 1–255; 0 is "no SA"), never a value still allocated.

use esparto_crypto::Rng;
use std::collections::HashSet;

/// First SPI value that is not reserved (RFC 4303 §2.1: the values 1
/// through 255 are reserved by IANA, and 0 means no SA).
pub const MIN_ESP_SPI: u32 = 256;

/// Allocates inbound ESP SPIs. Implemented by the daemon so SPIs steer to
/// the chosen resource (its worker).
pub trait SpiAllocator {
    /// A fresh inbound SPI ≥ [`MIN_ESP_SPI`], unique among live SAs,
    /// steering to `resource` if given (RFC 9611 per-resource SAs; `None`
    /// for the fallback SA). Randomness comes from `rng`.
    fn allocate(&mut self, rng: &mut dyn Rng, resource: Option<u16>) -> u32;
    /// A fresh inbound SPI that steers where `spi` would steer here: an
    /// SA's replacement on its predecessor's resource, or a peer's
    /// per-resource SA on the resource its own inbound SPI names on a
    /// peer steering alike. The default knows no steering: any SPI.
    fn allocate_like(&mut self, rng: &mut dyn Rng, spi: u32) -> u32 {
        let _ = spi;
        self.allocate(rng, None)
    }
    /// The SA with this inbound SPI is gone; the value may be reused.
    fn release(&mut self, spi: u32);
}

/// Random SPIs, unique among those allocated and not yet released.
#[derive(Debug, Default)]
pub struct RandomSpiAllocator {
    live: HashSet<u32>,
}

impl RandomSpiAllocator {
    /// An empty allocator.
    pub fn new() -> Self {
        Self::default()
    }
}

impl SpiAllocator for RandomSpiAllocator {
    fn allocate(&mut self, rng: &mut dyn Rng, _resource: Option<u16>) -> u32 {
        loop {
            let mut b = [0u8; 4];
            rng.fill_public(&mut b);
            let spi = u32::from_be_bytes(b);
            if spi >= MIN_ESP_SPI && self.live.insert(spi) {
                return spi;
            }
        }
    }

    fn release(&mut self, spi: u32) {
        self.live.remove(&spi);
    }
}

/// How a data plane that steers inbound ESP by SPI maps a random value to
/// an SPI its steering rule sends to `resource` of `resources`, keeping
/// the value's other bits (`None` if `resource` is out of range).
pub type SteerFn = fn(random: u32, resource: usize, resources: usize) -> Option<u32>;

/// The inverse of a [`SteerFn`]: the resource (of `resources`) an SPI
/// steers to.
pub type SteeredFn = fn(spi: u32, resources: usize) -> usize;

/// Inbound SPIs that steer to a chosen resource: random in every bit the
/// steering rule (`steer`) leaves free, so each SA is processed by the
/// worker asked for (or, for `None`, the next one round-robin, spreading
/// tunnels over cores) yet stays unpredictable; unique among those
/// allocated and not yet released, never below [`MIN_ESP_SPI`].
#[derive(Debug)]
pub struct SteeringSpiAllocator {
    resources: usize,
    next: usize,
    steer: SteerFn,
    steered: SteeredFn,
    live: HashSet<u32>,
}

impl SteeringSpiAllocator {
    /// An allocator for `resources` resources (the data plane's workers)
    /// and the data plane's steering rule, both ways.
    pub fn new(resources: usize, steer: SteerFn, steered: SteeredFn) -> Self {
        Self { resources: resources.max(1), next: 0, steer, steered, live: HashSet::new() }
    }
}

impl SpiAllocator for SteeringSpiAllocator {
    fn allocate(&mut self, rng: &mut dyn Rng, resource: Option<u16>) -> u32 {
        let r = match resource {
            Some(k) => usize::from(k) % self.resources,
            None => {
                self.next = (self.next + 1) % self.resources;
                self.next
            }
        };
        loop {
            let mut b = [0u8; 4];
            rng.fill_public(&mut b);
            if let Some(spi) = (self.steer)(u32::from_be_bytes(b), r, self.resources) {
                if spi >= MIN_ESP_SPI && self.live.insert(spi) {
                    return spi;
                }
            }
        }
    }

    fn allocate_like(&mut self, rng: &mut dyn Rng, spi: u32) -> u32 {
        let r = (self.steered)(spi, self.resources) % self.resources;
        self.allocate(rng, u16::try_from(r).ok())
    }

    fn release(&mut self, spi: u32) {
        self.live.remove(&spi);
    }
}

/// A fresh, non-zero IKE SPI not in use (`in_use` says whether it is).
pub(crate) fn ike_spi(rng: &mut dyn Rng, in_use: impl Fn(u64) -> bool) -> u64 {
    loop {
        let mut b = [0u8; 8];
        rng.fill_public(&mut b);
        let spi = u64::from_be_bytes(b);
        // RFC 7296 §3.1: the responder's SPI is zero only in the first
        // IKE_SA_INIT request, so zero can never be a real SPI.
        if spi != 0 && !in_use(spi) {
            return spi;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An RNG that replays a script, to force the corner cases.
    struct Script(Vec<u8>);
    impl Rng for Script {
        fn fill_public(&mut self, buf: &mut [u8]) {
            for b in buf {
                *b = self.0.remove(0);
            }
        }
        fn fill_secret(&mut self, buf: &mut [u8]) {
            self.fill_public(buf);
        }
    }

    #[test]
    fn esp_spis_skip_reserved_and_collisions() {
        let mut rng = Script(vec![0, 0, 0, 7, 0, 0, 1, 0, 0, 0, 1, 0, 0xc0, 0, 0, 1]);
        let mut a = RandomSpiAllocator::new();
        assert_eq!(a.allocate(&mut rng, None), 256, "0x00000007 is reserved");
        assert_eq!(a.allocate(&mut rng, None), 0xc000_0001, "256 is taken");
        a.release(256);
        let mut rng = Script(vec![0, 0, 1, 0]);
        assert_eq!(
            a.allocate(&mut rng, Some(3)),
            256,
            "released SPIs may come back"
        );
    }

    /// A steering rule by residue, as the data plane's: `spi % workers`.
    fn by_residue(random: u32, resource: usize, resources: usize) -> Option<u32> {
        let n = u32::try_from(resources).ok()?;
        let k = u32::try_from(resource).ok()?;
        (k < n).then(|| random - random % n + k)
    }

    fn residue(spi: u32, resources: usize) -> usize {
        (spi % u32::try_from(resources).unwrap_or(1)) as usize
    }

    #[test]
    fn spis_like_another_steer_alike() {
        let mut rng = esparto_crypto::SystemRng;
        let mut a = SteeringSpiAllocator::new(4, by_residue, residue);
        for spi in [0x1000_0000u32, 0x1000_0001, 0x1234_5677, 0xffff_fffe] {
            let got = a.allocate_like(&mut rng, spi);
            assert_eq!(got % 4, spi % 4, "{got:#x} like {spi:#x}");
            assert_ne!(got, spi);
        }
        // Without steering, any fresh SPI.
        let mut r = RandomSpiAllocator::new();
        assert!(r.allocate_like(&mut rng, 0x1234) >= MIN_ESP_SPI);
    }

    #[test]
    fn steering_spis_reach_the_worker_asked_for() {
        let mut rng = esparto_crypto::SystemRng;
        let mut a = SteeringSpiAllocator::new(4, by_residue, residue);
        let mut seen = HashSet::new();
        for k in 0..64u16 {
            let spi = a.allocate(&mut rng, Some(k));
            assert_eq!(spi % 4, u32::from(k % 4), "{spi:#x} for worker {k}");
            assert!(spi >= MIN_ESP_SPI);
            assert!(seen.insert(spi), "{spi:#x} twice");
        }
        // Without a worker: round-robin over all of them.
        let rr: Vec<u32> = (0..8).map(|_| a.allocate(&mut rng, None) % 4).collect();
        assert_eq!(rr, [1, 2, 3, 0, 1, 2, 3, 0]);
    }

    #[test]
    fn steering_spis_redraw_reserved_and_taken_values() {
        // 0x00000007 steers to worker 3 of 4 but is reserved; then 0x104
        // (worker 0) twice: the second draw is taken, so the third is used.
        let mut rng = Script(vec![0, 0, 0, 7, 0, 0, 1, 3, 0, 0, 1, 4, 0, 0, 1, 4, 0, 0, 2, 4]);
        let mut a = SteeringSpiAllocator::new(4, by_residue, residue);
        assert_eq!(a.allocate(&mut rng, Some(3)), 0x103);
        assert_eq!(a.allocate(&mut rng, Some(0)), 0x104);
        assert_eq!(a.allocate(&mut rng, Some(0)), 0x204);
        a.release(0x104);
        let mut rng = Script(vec![0, 0, 1, 4]);
        assert_eq!(a.allocate(&mut rng, Some(0)), 0x104, "released SPIs may come back");
    }

    #[test]
    fn ike_spis_are_nonzero_and_unique() {
        let mut rng = Script(
            vec![0; 8]
                .into_iter()
                .chain([0, 0, 0, 0, 0, 0, 0, 5])
                .chain([0, 0, 0, 0, 0, 0, 0, 6])
                .collect(),
        );
        assert_eq!(ike_spi(&mut rng, |s| s == 5), 6);
    }
}
