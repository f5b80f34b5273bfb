//! Stateless COOKIEs for IKE_SA_INIT (RFC 7296 §2.6).
//!
//! A flood of IKE_SA_INIT requests from forged addresses costs a responder
//! a Diffie-Hellman computation and a half-open IKE SA each. §2.6's answer
//! is a return-routability check that keeps no state: "An expected attack
//! against IKE is state and CPU exhaustion, where the target is flooded
//! with session initiation requests from forged IP addresses. This attack
//! can be made less effective if a responder uses minimal CPU and commits
//! no state to an SA until it knows the initiator can receive packets at
//! the address from which it claims to be sending them." The responder
//! answers with only a COOKIE notify, and the initiator must repeat its
//! request with that cookie as the first payload. The RFC suggests
//!
//! ```text
//! Cookie = <VersionIDofSecret> | Hash(Ni | IPi | SPIi | <secret>)
//! ```
//!
//! "where <secret> is a randomly generated secret known only to the
//! responder and periodically changed". A [`CookieJar`] implements exactly
//! that, with two choices of ours:
//!
//! * The keyed hash is HMAC-SHA-256 with the secret as the HMAC key (RFC
//!   2104), rather than a hash over a secret suffix, truncated to
//!   [`COOKIE_HASH_LEN`] octets (128 bits: forging one means guessing it).
//!   The HMAC key schedule (the inner and outer pad blocks) is computed
//!   once per secret, not per packet: a function that runs for every
//!   packet of a flood must stay cheap. What remains per cookie is
//!   three SHA-256 compressions for a 32-octet Ni; `benches/cookie.rs`
//!   measures it.
//! * `IPi` is always hashed as 16 octets (IPv4 as `::ffff:a.b.c.d`, RFC
//!   4291 §2.5.5.2). With fixed-length IPi and SPIi after it, the
//!   variable-length Ni is delimited by the total length, so no two
//!   (Ni, IPi, SPIi) triples hash the same input — otherwise an attacker
//!   with an IPv6 address could shift octets between Ni and IPi and get a
//!   cookie valid for an IPv4 address it does not own.
//!
//! The secret rotates every `lifetime` (driven by the `now` the caller
//! passes: this crate never reads a clock); the version octet changes with
//! it. §2.6 lets the responder "keep the old value of <secret> around for
//! a short time and accept cookies computed from either one", but "should
//! not accept cookies indefinitely after <secret> is changed": the previous
//! secret is accepted for `grace` after its scheduled retirement, then
//! wiped. Secrets come from [`Rng::fill_secret`] and live only inside
//! aws-lc's HMAC context, which is cleansed when dropped.
//!
//! Verification recomputes the cookie and compares in constant time, so a
//! mismatch reveals nothing about where the two differ. Everything here
//! runs before any state exists and allocates nothing.

use aws_lc_rs::{constant_time, hmac};
use core::net::IpAddr;
use core::time::Duration;
use esparto_crypto::Rng;
use std::time::Instant;
use zeroize::Zeroize;

/// Octets of the HMAC-SHA-256 output a cookie carries.
pub const COOKIE_HASH_LEN: usize = 16;

/// Length of the COOKIE notification data we send: the secret's version
/// octet and the truncated hash. §3.10.1: the data "MUST be between 1 and
/// 64 octets in length (inclusive)".
pub const COOKIE_LEN: usize = 1 + COOKIE_HASH_LEN;

/// Length of a cookie secret: the SHA-256 output length, the key length
/// RFC 2104 §3 recommends.
const SECRET_LEN: usize = 32;

/// One cookie, as it goes into the COOKIE notify.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Cookie([u8; COOKIE_LEN]);

impl Cookie {
    /// The notification data.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The version of the secret that made it.
    pub fn version(&self) -> u8 {
        self.0[0]
    }
}

impl AsRef<[u8]> for Cookie {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl core::fmt::Debug for Cookie {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        for b in &self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// Why a received cookie was not accepted. The responder treats all of
/// them alike (§2.6: it "MUST ignore the cookie and process the message as
/// if no cookie had been included"); the kinds are for tests and counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CookieRejected {
    /// Not [`COOKIE_LEN`] octets: not one of ours.
    Length,
    /// Made with a secret we no longer hold (or never had).
    UnknownVersion,
    /// Our secret, but not for this Ni, IPi and SPIi (forged, or replayed
    /// from another address or for another SPI).
    Mismatch,
}

impl core::fmt::Display for CookieRejected {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            CookieRejected::Length => "cookie of the wrong length",
            CookieRejected::UnknownVersion => "cookie made with an unknown or expired secret",
            CookieRejected::Mismatch => "cookie does not match the request",
        })
    }
}

impl std::error::Error for CookieRejected {}

/// A secret and its version octet.
struct Secret {
    version: u8,
    key: hmac::Key,
}

impl Secret {
    fn draw(rng: &mut dyn Rng, version: u8) -> Self {
        let mut raw = [0u8; SECRET_LEN];
        rng.fill_secret(&mut raw);
        let key = hmac::Key::new(hmac::HMAC_SHA256, &raw);
        raw.zeroize();
        Secret { version, key }
    }

    fn hash(&self, ni: &[u8], ip: IpAddr, spi_i: u64) -> [u8; COOKIE_HASH_LEN] {
        let mut ctx = hmac::Context::with_key(&self.key);
        ctx.update(ni);
        ctx.update(&ip_octets(ip));
        ctx.update(&spi_i.to_be_bytes());
        let tag = ctx.sign();
        let mut out = [0u8; COOKIE_HASH_LEN];
        out.copy_from_slice(&tag.as_ref()[..COOKIE_HASH_LEN]);
        out
    }
}

/// IPi as 16 octets: IPv4 (and IPv4-mapped IPv6, which is the same peer)
/// as `::ffff:a.b.c.d`.
fn ip_octets(ip: IpAddr) -> [u8; 16] {
    match ip.to_canonical() {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    }
}

/// The responder's cookie secrets: the current one and, for a grace
/// period after a rotation, the previous one.
pub struct CookieJar {
    current: Secret,
    /// The previous secret and until when cookies made with it pass.
    previous: Option<(Secret, Instant)>,
    next_rotation: Instant,
    lifetime: Duration,
    grace: Duration,
}

impl core::fmt::Debug for CookieJar {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("CookieJar")
            .field("version", &self.current.version)
            .field("previous", &self.previous.as_ref().map(|(s, _)| s.version))
            .field("next_rotation", &self.next_rotation)
            .finish_non_exhaustive()
    }
}

impl CookieJar {
    /// A jar with a fresh secret (version 0) that rotates every `lifetime`
    /// from `now`, accepting the previous secret for `grace` afterwards.
    pub fn new(rng: &mut dyn Rng, now: Instant, lifetime: Duration, grace: Duration) -> Self {
        CookieJar {
            current: Secret::draw(rng, 0),
            previous: None,
            next_rotation: now + lifetime,
            lifetime,
            grace,
        }
    }

    /// Bring the secrets up to date at `now`: forget the previous secret
    /// once its grace period is over, and draw a new one when the current
    /// has lived `lifetime`. Returns whether a new secret was drawn.
    ///
    /// Cheap when nothing is due (two comparisons), so the responder calls
    /// it before every cookie it makes or checks.
    pub fn rotate(&mut self, now: Instant, rng: &mut dyn Rng) -> bool {
        if self
            .previous
            .as_ref()
            .is_some_and(|(_, until)| *until <= now)
        {
            self.previous = None;
        }
        if now < self.next_rotation {
            return false;
        }
        // The grace period runs from the *scheduled* retirement: a jar that
        // sat idle for an hour must not honour hour-old cookies for another
        // `grace` just because nobody asked in between.
        let until = self.next_rotation + self.grace;
        let fresh = Secret::draw(rng, self.current.version.wrapping_add(1));
        let old = core::mem::replace(&mut self.current, fresh);
        self.previous = (until > now).then_some((old, until));
        self.next_rotation = now + self.lifetime;
        true
    }

    /// The cookie for an IKE_SA_INIT request with nonce `ni` and initiator
    /// SPI `spi_i` from `ip`, under the current secret.
    pub fn make(&self, ni: &[u8], ip: IpAddr, spi_i: u64) -> Cookie {
        let mut c = [0u8; COOKIE_LEN];
        c[0] = self.current.version;
        c[1..].copy_from_slice(&self.current.hash(ni, ip, spi_i));
        Cookie(c)
    }

    /// Whether `cookie` is one we made for this `ni`, `ip` and `spi_i`,
    /// under the current secret or the previous one still in its grace
    /// period (as of the last [`CookieJar::rotate`]).
    pub fn verify(
        &self,
        cookie: &[u8],
        ni: &[u8],
        ip: IpAddr,
        spi_i: u64,
    ) -> Result<(), CookieRejected> {
        let [version, hash @ ..] = cookie else {
            return Err(CookieRejected::Length);
        };
        if hash.len() != COOKIE_HASH_LEN {
            return Err(CookieRejected::Length);
        }
        let secret = if *version == self.current.version {
            &self.current
        } else {
            match &self.previous {
                Some((s, _)) if s.version == *version => s,
                _ => return Err(CookieRejected::UnknownVersion),
            }
        };
        let expected = secret.hash(ni, ip, spi_i);
        // Constant time in the contents (CRYPTO_memcmp): a forger learns
        // nothing from how long a wrong guess took to refuse.
        #[allow(deprecated)]
        let same = constant_time::verify_slices_are_equal(&expected, hash);
        same.map_err(|_| CookieRejected::Mismatch)
    }

    /// Version octet of the current secret.
    pub fn version(&self) -> u8 {
        self.current.version
    }

    /// When the current secret is due to be replaced.
    pub fn next_rotation(&self) -> Instant {
        self.next_rotation
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use esparto_crypto::{DeterministicRng, Rng};
    use proptest::prelude::*;

    const LIFE: Duration = Duration::from_secs(60);
    const GRACE: Duration = Duration::from_secs(10);

    fn jar(seed: u64, now: Instant) -> (CookieJar, DeterministicRng) {
        let mut rng = DeterministicRng::new(seed);
        (CookieJar::new(&mut rng, now, LIFE, GRACE), rng)
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    const NI: &[u8] = &[0x5a; 32];

    #[test]
    fn a_cookie_verifies_for_exactly_its_request() {
        let now = Instant::now();
        let (j, _) = jar(1, now);
        let c = j.make(NI, ip("192.0.2.1"), 0x1122_3344_5566_7788);
        assert_eq!(c.as_bytes().len(), COOKIE_LEN);
        assert_eq!(c.version(), 0);
        j.verify(c.as_bytes(), NI, ip("192.0.2.1"), 0x1122_3344_5566_7788)
            .unwrap();
        // Any other address, SPI or nonce: mismatch.
        let e = Err(CookieRejected::Mismatch);
        assert_eq!(
            j.verify(c.as_bytes(), NI, ip("192.0.2.2"), 0x1122_3344_5566_7788),
            e
        );
        assert_eq!(
            j.verify(c.as_bytes(), NI, ip("192.0.2.1"), 0x1122_3344_5566_7789),
            e
        );
        assert_eq!(
            j.verify(
                c.as_bytes(),
                &NI[1..],
                ip("192.0.2.1"),
                0x1122_3344_5566_7788
            ),
            e
        );
        // Any flipped bit in the hash: mismatch.
        for bit in 8..COOKIE_LEN * 8 {
            let mut bad = *c.as_bytes().first_chunk::<COOKIE_LEN>().unwrap();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert_eq!(
                j.verify(&bad, NI, ip("192.0.2.1"), 0x1122_3344_5566_7788),
                e
            );
        }
    }

    #[test]
    fn wrong_lengths_and_versions_are_rejected() {
        let now = Instant::now();
        let (j, _) = jar(2, now);
        let c = j.make(NI, ip("198.51.100.7"), 9);
        let b = c.as_bytes();
        let v = |x: &[u8]| j.verify(x, NI, ip("198.51.100.7"), 9);
        assert_eq!(v(&[]), Err(CookieRejected::Length));
        assert_eq!(v(&b[..1]), Err(CookieRejected::Length));
        assert_eq!(v(&b[..COOKIE_LEN - 1]), Err(CookieRejected::Length));
        let mut long = b.to_vec();
        long.push(0);
        assert_eq!(v(&long), Err(CookieRejected::Length));
        let mut other = b.to_vec();
        other[0] ^= 0x80;
        assert_eq!(v(&other), Err(CookieRejected::UnknownVersion));
    }

    #[test]
    fn ipv4_and_its_mapped_form_are_one_peer_but_not_ipv6_suffixes() {
        let now = Instant::now();
        let (j, _) = jar(3, now);
        let c = j.make(NI, ip("192.0.2.1"), 1);
        j.verify(c.as_bytes(), NI, ip("::ffff:192.0.2.1"), 1)
            .unwrap();
        // The octet-shifting attack the fixed-length encoding prevents: a
        // cookie for (Ni ‖ 12 octets, 2001:db8::c000:201) must not pass for
        // (Ni, 192.0.2.1), nor the reverse.
        let v6: IpAddr = ip("2001:db8::c000:201");
        let mut longer = NI.to_vec();
        longer.extend_from_slice(&ip_octets(v6)[..12]);
        let c6 = j.make(&longer, v6, 1);
        assert!(j.verify(c6.as_bytes(), NI, ip("192.0.2.1"), 1).is_err());
        assert!(j.verify(c.as_bytes(), &longer, v6, 1).is_err());
    }

    #[test]
    fn rotation_keeps_the_previous_secret_for_the_grace_period_only() {
        let t0 = Instant::now();
        let (mut j, mut rng) = jar(4, t0);
        let (addr, spi) = (ip("192.0.2.9"), 42);
        let old = j.make(NI, addr, spi);
        assert!(!j.rotate(t0 + LIFE - Duration::from_millis(1), &mut rng));
        assert_eq!(j.version(), 0);
        // Rotation: a new secret, new cookies differ, old ones still pass.
        assert!(j.rotate(t0 + LIFE, &mut rng));
        assert_eq!(j.version(), 1);
        let new = j.make(NI, addr, spi);
        assert_ne!(new, old);
        assert_eq!(new.version(), 1);
        j.verify(old.as_bytes(), NI, addr, spi).unwrap();
        j.verify(new.as_bytes(), NI, addr, spi).unwrap();
        // Still inside the grace period.
        j.rotate(t0 + LIFE + GRACE - Duration::from_millis(1), &mut rng);
        j.verify(old.as_bytes(), NI, addr, spi).unwrap();
        // Grace over: the old secret is gone.
        assert!(!j.rotate(t0 + LIFE + GRACE, &mut rng));
        assert_eq!(
            j.verify(old.as_bytes(), NI, addr, spi),
            Err(CookieRejected::UnknownVersion)
        );
        j.verify(new.as_bytes(), NI, addr, spi).unwrap();
        // The next rotation retires `new` the same way and drops nothing else.
        assert!(j.rotate(t0 + LIFE * 2, &mut rng));
        j.verify(new.as_bytes(), NI, addr, spi).unwrap();
        assert!(j.verify(old.as_bytes(), NI, addr, spi).is_err());
    }

    #[test]
    fn a_late_rotation_does_not_extend_the_old_secret() {
        let t0 = Instant::now();
        let (mut j, mut rng) = jar(5, t0);
        let old = j.make(NI, ip("192.0.2.1"), 1);
        // Nobody asked for an hour: the old secret's grace ran out long ago.
        assert!(j.rotate(t0 + Duration::from_secs(3600), &mut rng));
        assert_eq!(
            j.verify(old.as_bytes(), NI, ip("192.0.2.1"), 1),
            Err(CookieRejected::UnknownVersion)
        );
        // And the new secret gets a full lifetime from now.
        assert_eq!(j.next_rotation(), t0 + Duration::from_secs(3600) + LIFE);
    }

    #[test]
    fn versions_wrap_and_secrets_differ_per_jar() {
        let t0 = Instant::now();
        let (mut j, mut rng) = jar(6, t0);
        let mut t = t0;
        for _ in 0..300 {
            t += LIFE;
            j.rotate(t, &mut rng);
        }
        assert_eq!(j.version(), (300 % 256) as u8);
        let (k, _) = jar(7, t0);
        let (l, _) = jar(6, t0);
        let a = k.make(NI, ip("192.0.2.1"), 1);
        assert_ne!(a, l.make(NI, ip("192.0.2.1"), 1), "secrets from the RNG");
        assert_eq!(
            l.make(NI, ip("192.0.2.1"), 1),
            jar(6, t0).0.make(NI, ip("192.0.2.1"), 1),
            "and only from it: same seed, same secret"
        );
    }

    /// The hash is HMAC-SHA-256(secret, Ni | IPi(16) | SPIi) truncated, as
    /// documented: checked against aws-lc's one-shot HMAC with the secret
    /// drawn from the same RNG stream.
    #[test]
    fn cookie_is_truncated_hmac_over_ni_ip_spi() {
        let t0 = Instant::now();
        let (j, _) = jar(8, t0);
        let mut rng = DeterministicRng::new(8);
        let mut secret = [0u8; SECRET_LEN];
        rng.fill_secret(&mut secret);
        let key = hmac::Key::new(hmac::HMAC_SHA256, &secret);
        let mut msg = NI.to_vec();
        msg.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 51, 100, 1]);
        msg.extend_from_slice(&0x0102_0304_0506_0708u64.to_be_bytes());
        let tag = hmac::sign(&key, &msg);
        let c = j.make(NI, ip("198.51.100.1"), 0x0102_0304_0506_0708);
        assert_eq!(&c.as_bytes()[1..], &tag.as_ref()[..COOKIE_HASH_LEN]);
    }

    proptest! {
        /// Arbitrary bytes as a cookie never panic and never pass.
        #[test]
        fn arbitrary_cookies_never_panic_or_pass(
            cookie in proptest::collection::vec(any::<u8>(), 0..80),
            ni in proptest::collection::vec(any::<u8>(), 0..300),
            spi in any::<u64>(),
            v4 in any::<[u8; 4]>(),
        ) {
            let (j, _) = jar(9, Instant::now());
            let ip = IpAddr::from(v4);
            prop_assert!(j.verify(&cookie, &ni, ip, spi).is_err());
            // make ∘ verify = ok for any input.
            let c = j.make(&ni, ip, spi);
            prop_assert!(j.verify(c.as_bytes(), &ni, ip, spi).is_ok());
        }
    }
}
