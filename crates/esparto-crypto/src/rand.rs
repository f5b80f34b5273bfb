//! Injected randomness.
//!
//! Protocol crates never call the OS RNG themselves: they
//! take a `&mut dyn Rng`, so a test or a simulation can seed it and replay a
//! run bit for bit. Following s2n-quic, the trait separates two kinds of
//! output:
//!
//! * [`Rng::fill_public`] for values the peer will see: SPIs, IKE SPIs,
//!   nonces (RFC 7296 §2.10), IVs, padding. An attacker learns them anyway;
//!   what matters is that they are unpredictable before they are sent.
//! * [`Rng::fill_secret`] for values that must never leave the host:
//!   Diffie-Hellman private values, the secret behind COOKIEs
//!   (RFC 7296 §2.6).
//!
//! Keeping the two apart lets an implementation draw them from separate
//! generators, so that a public output can never reveal the state that
//! produced a key (the reason s2n-quic and BoringSSL-based stacks split
//! them). [`SystemRng`] fills both from aws-lc's CSPRNG, which is seeded from
//! the operating system. [`DeterministicRng`] is a seeded SHA-256 counter
//! stream for tests and simulations; it is **not** a source of secrets.
//!
//! A third item, [`Rng::secure_random`], is what aws-lc-rs's own calls that
//! take a generator (signing) are handed, so that protocol code passes the
//! injected source there too and names no generator itself. It cannot make
//! those calls deterministic: aws-lc-rs seals its `SecureRandom` trait, so
//! the only generator it accepts is its own `SystemRandom` (AWS-LC's DRBG),
//! and its 1.19 ECDSA and RSA signing ignore the argument altogether (see
//! [`Rng::secure_random`]).

use aws_lc_rs::digest;
use aws_lc_rs::rand::{SecureRandom, SystemRandom};
use std::sync::LazyLock;
use zeroize::Zeroize;

/// Randomness, injected: protocol code never reads the OS RNG. Public fills
/// are for values the peer sees (SPIs, nonces); secret fills for keys and
/// for the secret behind COOKIEs.
pub trait Rng {
    /// Fill `buf` with unpredictable bytes that will be sent to the peer.
    fn fill_public(&mut self, buf: &mut [u8]);
    /// Fill `buf` with unpredictable bytes that must stay secret (keys).
    fn fill_secret(&mut self, buf: &mut [u8]);

    /// The generator to hand to aws-lc-rs functions that take a
    /// `&dyn SecureRandom` (ECDSA and RSA signing).
    ///
    /// Every implementation gives AWS-LC's own generator, and none can give
    /// another: `SecureRandom` is sealed in aws-lc-rs (outside its
    /// `dev-tests-only` feature, which refuses release builds), so its
    /// `SystemRandom` is the only value that type-checks. Nor would another
    /// one be used: aws-lc-rs 1.19's `EcdsaKeyPair::sign` and
    /// `RsaKeyPair::sign` ignore the argument ("Our implementation ignores
    /// the `SecureRandom` parameter") and AWS-LC draws the ECDSA nonce and
    /// the PSS salt from its internal DRBG. Ed25519 and RSA PKCS#1 v1.5
    /// signatures are deterministic and take none. So a seeded
    /// [`DeterministicRng`] does not make ECDSA or RSA-PSS signatures
    /// repeat; everything else it draws still does.
    fn secure_random(&self) -> &dyn SecureRandom {
        &*AWS_LC_RANDOM
    }
}

/// AWS-LC's generator, for [`Rng::secure_random`].
static AWS_LC_RANDOM: LazyLock<SystemRandom> = LazyLock::new(SystemRandom::new);

impl<R: Rng + ?Sized> Rng for &mut R {
    fn fill_public(&mut self, buf: &mut [u8]) {
        (**self).fill_public(buf);
    }
    fn fill_secret(&mut self, buf: &mut [u8]) {
        (**self).fill_secret(buf);
    }
    fn secure_random(&self) -> &dyn SecureRandom {
        (**self).secure_random()
    }
}

impl<R: Rng + ?Sized> Rng for Box<R> {
    fn fill_public(&mut self, buf: &mut [u8]) {
        (**self).fill_public(buf);
    }
    fn fill_secret(&mut self, buf: &mut [u8]) {
        (**self).fill_secret(buf);
    }
    fn secure_random(&self) -> &dyn SecureRandom {
        (**self).secure_random()
    }
}

/// The operating system's CSPRNG, through `aws_lc_rs::rand::fill` (AWS-LC's
/// DRBG, seeded and reseeded from the OS). Only `esparto-io` and the binary
/// should construct one; protocol crates receive it as `&mut dyn Rng`.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemRng;

impl SystemRng {
    /// A handle on the system generator (it has no state of its own).
    pub fn new() -> Self {
        SystemRng
    }

    fn fill(buf: &mut [u8]) {
        // A failing system RNG leaves no safe way to continue: every key and
        // nonce from here on would be predictable. Refuse loudly rather than
        // hand out zeros. (AWS-LC aborts internally in this case anyway.)
        if aws_lc_rs::rand::fill(buf).is_err() {
            panic!("esparto-crypto: the system CSPRNG failed; refusing to continue");
        }
    }
}

impl Rng for SystemRng {
    fn fill_public(&mut self, buf: &mut [u8]) {
        Self::fill(buf);
    }
    fn fill_secret(&mut self, buf: &mut [u8]) {
        Self::fill(buf);
    }
}

/// Domain separation for the two streams of [`DeterministicRng`].
const PUBLIC_LABEL: &[u8] = b"esparto DeterministicRng public";
const SECRET_LABEL: &[u8] = b"esparto DeterministicRng secret";

/// A seeded, reproducible byte stream for tests and simulations.
///
/// # ☠️ Danger
///
/// **Never use this for real traffic.** Everything it produces is a pure
/// function of a 64-bit seed, so anyone who guesses the seed knows every key
/// it ever generated. It exists so that unit tests, property tests and the
/// two-peer IKE simulation can replay a run exactly.
///
/// Construction: two independent SHA-256 counter streams (public and secret),
/// block `i` of a stream being `SHA-256(label ‖ seed ‖ i)`. Public and secret
/// outputs therefore never share bytes, mirroring the [`SystemRng`] split.
#[derive(Clone)]
pub struct DeterministicRng {
    seed: [u8; 8],
    public: Stream,
    secret: Stream,
}

#[derive(Clone)]
struct Stream {
    label: &'static [u8],
    counter: u64,
    block: [u8; 32],
    used: usize,
}

impl Stream {
    fn new(label: &'static [u8]) -> Self {
        Stream {
            label,
            counter: 0,
            block: [0; 32],
            used: 32,
        }
    }

    fn fill(&mut self, seed: &[u8; 8], buf: &mut [u8]) {
        for byte in buf.iter_mut() {
            if self.used == self.block.len() {
                let mut ctx = digest::Context::new(&digest::SHA256);
                ctx.update(self.label);
                ctx.update(seed);
                ctx.update(&self.counter.to_be_bytes());
                self.block.copy_from_slice(ctx.finish().as_ref());
                self.counter = self.counter.wrapping_add(1);
                self.used = 0;
            }
            *byte = self.block[self.used];
            self.used += 1;
        }
    }
}

impl DeterministicRng {
    /// A generator whose whole output is determined by `seed`.
    /// See the type-level danger notice: tests and simulations only.
    pub fn new(seed: u64) -> Self {
        DeterministicRng {
            seed: seed.to_be_bytes(),
            public: Stream::new(PUBLIC_LABEL),
            secret: Stream::new(SECRET_LABEL),
        }
    }
}

impl core::fmt::Debug for DeterministicRng {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DeterministicRng").finish_non_exhaustive()
    }
}

impl Drop for DeterministicRng {
    fn drop(&mut self) {
        self.secret.block.zeroize();
    }
}

impl Rng for DeterministicRng {
    fn fill_public(&mut self, buf: &mut [u8]) {
        self.public.fill(&self.seed, buf);
    }
    fn fill_secret(&mut self, buf: &mut [u8]) {
        self.secret.fill(&self.seed, buf);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn deterministic_is_reproducible_and_seed_dependent() {
        let mut a = DeterministicRng::new(7);
        let mut b = DeterministicRng::new(7);
        let mut c = DeterministicRng::new(8);
        let (mut x, mut y, mut z) = ([0u8; 100], [0u8; 100], [0u8; 100]);
        a.fill_secret(&mut x);
        b.fill_secret(&mut y);
        c.fill_secret(&mut z);
        assert_eq!(x, y);
        assert_ne!(x, z);
    }

    #[test]
    fn deterministic_stream_is_independent_of_chunking() {
        let mut a = DeterministicRng::new(1);
        let mut b = DeterministicRng::new(1);
        let mut whole = [0u8; 77];
        a.fill_public(&mut whole);
        let mut parts = [0u8; 77];
        let (p1, rest) = parts.split_at_mut(5);
        let (p2, p3) = rest.split_at_mut(40);
        b.fill_public(p1);
        b.fill_public(p2);
        b.fill_public(p3);
        assert_eq!(whole, parts);
    }

    #[test]
    fn deterministic_first_block_is_sha256_of_label_seed_counter() {
        // Computed the straightforward way, independently of `Stream`.
        let mut input = Vec::new();
        input.extend_from_slice(PUBLIC_LABEL);
        input.extend_from_slice(&3u64.to_be_bytes());
        input.extend_from_slice(&0u64.to_be_bytes());
        let want = digest::digest(&digest::SHA256, &input);
        let mut got = [0u8; 32];
        DeterministicRng::new(3).fill_public(&mut got);
        assert_eq!(&got[..], want.as_ref());
    }

    #[test]
    fn public_and_secret_streams_differ() {
        let mut r = DeterministicRng::new(42);
        let (mut p, mut s) = ([0u8; 32], [0u8; 32]);
        r.fill_public(&mut p);
        r.fill_secret(&mut s);
        assert_ne!(p, s);
    }

    #[test]
    fn system_rng_fills() {
        let mut r = SystemRng::new();
        let (mut a, mut b) = ([0u8; 32], [0u8; 32]);
        r.fill_public(&mut a);
        r.fill_secret(&mut b);
        // 2^-256 chance of a false failure each.
        assert_ne!(a, [0u8; 32]);
        assert_ne!(a, b);
    }

    #[test]
    fn works_through_dyn_and_mut_ref() {
        fn take(rng: &mut dyn Rng) -> [u8; 4] {
            let mut b = [0u8; 4];
            rng.fill_public(&mut b);
            b
        }
        let mut r = DeterministicRng::new(9);
        let mut r2 = DeterministicRng::new(9);
        let mut by_ref = &mut r2;
        assert_eq!(take(&mut r), take(&mut by_ref));
    }
}
