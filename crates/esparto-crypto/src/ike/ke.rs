//! Key exchange for IKE_SA_INIT and CREATE_CHILD_SA (RFC 7296 §1.2, §3.4).
//!
//! [`KeGroup::generate`] draws the private value from the injected [`Rng`]
//! (so a seeded test replays the same exchange) and returns a
//! [`KeyExchange`] whose [`KeyExchange::public_value`] is already in the
//! IKEv2 wire encoding of the KE payload's Key Exchange Data:
//!
//! | group | IANA | public value | shared secret |
//! |---|---|---|---|
//! | `modp2048`, `modp3072` | 14, 15 | g^x, big-endian, left-padded to the prime length (RFC 7296 §3.4) | g^xy, same encoding (§2.14) |
//! | `ecp256`, `ecp384` | 19, 20 | x ‖ y, fixed-length, no 0x04 prefix (RFC 5903 §7) | x-coordinate of the shared point |
//! | `curve25519` | 31 | the 32-byte u-coordinate (RFC 8031 §3.1) | X25519 output |
//!
//! `curve448` (group 32, RFC 8031) is absent: aws-lc-rs 1.19 exposes no
//! X448 agreement, and this crate may not call aws-lc's C API directly.
//!
//! [`KeyExchange::agree`] validates the peer's value before using it
//! (RFC 7296 §2.12 via RFC 6989): wrong lengths are rejected; ECP points
//! must lie on the curve (aws-lc checks while decoding; the point at
//! infinity has no x ‖ y encoding); MODP values must satisfy 1 < y < p-1;
//! an all-zero X25519 output is rejected (RFC 7748 §6.1, RFC 8031 §2).
//! ECP private scalars are drawn by rejection sampling — uniform in
//! [1, n-1] — rather than by reducing a longer string modulo n.

use aws_lc_rs::agreement;
use zeroize::Zeroize;

use super::modp::{self, Modp, ModpPrivate};
use crate::{rand::Rng, secret::SecretBytes};

/// Order n of the P-256 base point (SEC 2 §2.4.2, FIPS 186-4 D.1.2.3).
const P256_ORDER: [u8; 32] = [
    0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0xbc, 0xe6, 0xfa, 0xad, 0xa7, 0x17, 0x9e, 0x84, 0xf3, 0xb9, 0xca, 0xc2, 0xfc, 0x63, 0x25, 0x51,
];

/// Order n of the P-384 base point (SEC 2 §2.5.1, FIPS 186-4 D.1.2.4).
const P384_ORDER: [u8; 48] = [
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xc7, 0x63, 0x4d, 0x81, 0xf4, 0x37, 0x2d, 0xdf,
    0x58, 0x1a, 0x0d, 0xb2, 0x48, 0xb0, 0xa7, 0x7a, 0xec, 0xec, 0x19, 0x6a, 0xcc, 0xc5, 0x29, 0x73,
];

/// Draws before a generator that keeps failing is declared broken. For a
/// working RNG the chance of even one rejection is below 2^-32.
const MAX_DRAWS: usize = 64;

/// A Diffie-Hellman / ECDH group (IANA "Transform Type 4 - Key Exchange
/// Method Transform IDs").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KeGroup {
    /// 2048-bit MODP group (RFC 3526 §3), id 14.
    Modp2048,
    /// 3072-bit MODP group (RFC 3526 §4), id 15.
    Modp3072,
    /// 256-bit random ECP group, NIST P-256 (RFC 5903), id 19.
    Ecp256,
    /// 384-bit random ECP group, NIST P-384 (RFC 5903), id 20.
    Ecp384,
    /// Curve25519 / X25519 (RFC 8031), id 31.
    Curve25519,
}

/// Why a key exchange failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeError {
    /// The peer's Key Exchange Data has the wrong length for the group
    /// (peer fault: answer INVALID_SYNTAX).
    PeerPublicLength {
        /// Length the group requires.
        expected: usize,
        /// Length received.
        got: usize,
    },
    /// The peer's value is not a valid group element, or leads to a
    /// degenerate shared secret (peer fault).
    InvalidPeerPublic,
    /// The injected RNG kept returning unusable values (local fault).
    RngFailure,
    /// aws-lc rejected an operation on our own key (local fault).
    Backend,
}

impl core::fmt::Display for KeError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            KeError::PeerPublicLength { expected, got } => write!(
                f,
                "peer key exchange data has {got} bytes, the group needs {expected}"
            ),
            KeError::InvalidPeerPublic => {
                f.write_str("peer key exchange data is not a valid group element")
            }
            KeError::RngFailure => {
                f.write_str("the random number generator produced no usable private value")
            }
            KeError::Backend => f.write_str("the crypto library rejected our private key"),
        }
    }
}

impl std::error::Error for KeError {}

impl KeGroup {
    /// Every group we implement, strongest-first by common preference.
    pub const ALL: [KeGroup; 5] = [
        KeGroup::Curve25519,
        KeGroup::Ecp256,
        KeGroup::Ecp384,
        KeGroup::Modp3072,
        KeGroup::Modp2048,
    ];

    /// IANA transform ID, as carried in the KE payload's group number.
    pub fn iana_id(self) -> u16 {
        match self {
            KeGroup::Modp2048 => 14,
            KeGroup::Modp3072 => 15,
            KeGroup::Ecp256 => 19,
            KeGroup::Ecp384 => 20,
            KeGroup::Curve25519 => 31,
        }
    }

    /// Inverse of [`KeGroup::iana_id`]; `None` for groups we don't do.
    pub fn from_iana(id: u16) -> Option<Self> {
        KeGroup::ALL.into_iter().find(|g| g.iana_id() == id)
    }

    /// strongSwan keyword: `modp2048`, `modp3072`, `ecp256`, `ecp384`,
    /// `curve25519`.
    pub fn name(self) -> &'static str {
        match self {
            KeGroup::Modp2048 => "modp2048",
            KeGroup::Modp3072 => "modp3072",
            KeGroup::Ecp256 => "ecp256",
            KeGroup::Ecp384 => "ecp384",
            KeGroup::Curve25519 => "curve25519",
        }
    }

    /// Parses a strongSwan keyword (`x25519` is accepted for `curve25519`).
    pub fn from_keyword(s: &str) -> Option<Self> {
        if s == "x25519" {
            return Some(KeGroup::Curve25519);
        }
        KeGroup::ALL.into_iter().find(|g| g.name() == s)
    }

    /// Length of the public value in the KE payload.
    pub fn public_len(self) -> usize {
        match self {
            KeGroup::Modp2048 => 256,
            KeGroup::Modp3072 => 384,
            KeGroup::Ecp256 => 64,
            KeGroup::Ecp384 => 96,
            KeGroup::Curve25519 => 32,
        }
    }

    /// Length of the shared secret g^ir.
    pub fn shared_len(self) -> usize {
        match self {
            KeGroup::Modp2048 => 256,
            KeGroup::Modp3072 => 384,
            KeGroup::Ecp256 | KeGroup::Curve25519 => 32,
            KeGroup::Ecp384 => 48,
        }
    }

    /// Generates a fresh private value from `rng.fill_secret` and computes
    /// the public value.
    pub fn generate(self, rng: &mut dyn Rng) -> Result<KeyExchange, KeError> {
        match self {
            KeGroup::Modp2048 => modp_exchange(self, Modp::G2048, rng),
            KeGroup::Modp3072 => modp_exchange(self, Modp::G3072, rng),
            KeGroup::Ecp256 => {
                let mut d = [0u8; 32];
                ecp_exchange(self, &agreement::ECDH_P256, &P256_ORDER, &mut d, rng)
            }
            KeGroup::Ecp384 => {
                let mut d = [0u8; 48];
                ecp_exchange(self, &agreement::ECDH_P384, &P384_ORDER, &mut d, rng)
            }
            KeGroup::Curve25519 => {
                // Every 32-byte string is a valid X25519 private key: the
                // scalar is clamped inside X25519 (RFC 7748 §5).
                let mut d = [0u8; 32];
                rng.fill_secret(&mut d);
                let r = ec_from_scalar(self, &agreement::X25519, &d);
                d.zeroize();
                r
            }
        }
    }

    fn ec_algorithm(self) -> Option<&'static agreement::Algorithm> {
        match self {
            KeGroup::Ecp256 => Some(&agreement::ECDH_P256),
            KeGroup::Ecp384 => Some(&agreement::ECDH_P384),
            KeGroup::Curve25519 => Some(&agreement::X25519),
            KeGroup::Modp2048 | KeGroup::Modp3072 => None,
        }
    }
}

impl core::fmt::Display for KeGroup {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// Our half of one key exchange: the private value (wiped when dropped)
/// and the public value to send.
pub struct KeyExchange {
    group: KeGroup,
    public: Vec<u8>,
    private: Private,
}

enum Private {
    Ec(agreement::PrivateKey),
    Modp(ModpPrivate),
}

impl core::fmt::Debug for KeyExchange {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("KeyExchange")
            .field("group", &self.group)
            .finish_non_exhaustive()
    }
}

impl KeyExchange {
    /// The group this exchange runs in.
    pub fn group(&self) -> KeGroup {
        self.group
    }

    /// Our public value in IKEv2 wire encoding (the KE payload's Key
    /// Exchange Data).
    pub fn public_value(&self) -> &[u8] {
        &self.public
    }

    /// Validates the peer's public value and computes the shared secret
    /// g^ir in IKEv2 encoding. Consumes the private value: a key exchange
    /// is used once (RFC 7296 §2.12 allows reuse, but we never do).
    pub fn agree(self, peer_public: &[u8]) -> Result<SecretBytes, KeError> {
        let expected = self.group.public_len();
        if peer_public.len() != expected {
            return Err(KeError::PeerPublicLength {
                expected,
                got: peer_public.len(),
            });
        }
        match &self.private {
            Private::Modp(k) => modp::agree(k, peer_public),
            Private::Ec(k) => {
                let alg = self.group.ec_algorithm().ok_or(KeError::Backend)?;
                if self.group == KeGroup::Curve25519 {
                    let s = ec_agree(k, alg, peer_public)?;
                    // RFC 8031 §2 / RFC 7748 §6.1: reject an all-zero
                    // output (a low-order peer point). aws-lc already
                    // refuses it; check again, in constant time, since
                    // accepting it would be silent and fatal.
                    let acc = s.as_slice().iter().fold(0u8, |a, &b| a | b);
                    if acc == 0 {
                        return Err(KeError::InvalidPeerPublic);
                    }
                    Ok(s)
                } else {
                    // RFC 5903 §7: the wire value is x ‖ y; aws-lc wants the
                    // SEC 1 uncompressed form 0x04 ‖ x ‖ y.
                    let mut sec1 = [0u8; 1 + 96];
                    sec1[0] = 0x04;
                    sec1[1..=expected].copy_from_slice(peer_public);
                    ec_agree(k, alg, &sec1[..=expected])
                }
            }
        }
    }
}

fn ec_agree(
    k: &agreement::PrivateKey,
    alg: &'static agreement::Algorithm,
    peer: &[u8],
) -> Result<SecretBytes, KeError> {
    agreement::agree(
        k,
        agreement::UnparsedPublicKey::new(alg, peer),
        KeError::InvalidPeerPublic,
        |s| Ok(SecretBytes::from_slice(s)),
    )
}

fn modp_exchange(group: KeGroup, m: Modp, rng: &mut dyn Rng) -> Result<KeyExchange, KeError> {
    let (private, public) = modp::generate(m, rng)?;
    Ok(KeyExchange {
        group,
        public,
        private: Private::Modp(private),
    })
}

/// Rejection sampling: draw until 0 < d < n (FIPS 186-4 B.4.2 "testing
/// candidates"), so the scalar is uniform without modular bias.
fn ecp_exchange(
    group: KeGroup,
    alg: &'static agreement::Algorithm,
    order: &[u8],
    d: &mut [u8],
    rng: &mut dyn Rng,
) -> Result<KeyExchange, KeError> {
    for _ in 0..MAX_DRAWS {
        rng.fill_secret(d);
        if is_valid_scalar(d, order) {
            let r = ec_from_scalar(group, alg, d);
            d.zeroize();
            return r;
        }
    }
    d.zeroize();
    Err(KeError::RngFailure)
}

/// 0 < d < n, both big-endian of equal length.
fn is_valid_scalar(d: &[u8], n: &[u8]) -> bool {
    d.iter().any(|&b| b != 0) && d < n
}

fn ec_from_scalar(
    group: KeGroup,
    alg: &'static agreement::Algorithm,
    d: &[u8],
) -> Result<KeyExchange, KeError> {
    let private = agreement::PrivateKey::from_private_key(alg, d).map_err(|_| KeError::Backend)?;
    let public = private.compute_public_key().map_err(|_| KeError::Backend)?;
    let public = match group {
        // SEC 1 uncompressed 0x04 ‖ x ‖ y → IKEv2's x ‖ y.
        KeGroup::Ecp256 | KeGroup::Ecp384 => match public.as_ref().split_first() {
            Some((0x04, xy)) if xy.len() == group.public_len() => xy.to_vec(),
            _ => return Err(KeError::Backend),
        },
        _ => public.as_ref().to_vec(),
    };
    Ok(KeyExchange {
        group,
        public,
        private: Private::Ec(private),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::rand::DeterministicRng;
    use crate::test_vectors::{Vectors, hex};

    /// Hands out fixed bytes as "randomness": known-answer tests inject the
    /// RFCs' private values through the same path as real keys.
    struct FixedRng(Vec<u8>);
    impl Rng for FixedRng {
        fn fill_public(&mut self, _: &mut [u8]) {
            panic!("key generation must use fill_secret");
        }
        fn fill_secret(&mut self, b: &mut [u8]) {
            assert!(self.0.len() >= b.len(), "FixedRng ran dry");
            let rest = self.0.split_off(b.len());
            b.copy_from_slice(&self.0);
            self.0 = rest;
        }
    }

    fn with_private(group: KeGroup, private: &[u8]) -> KeyExchange {
        group.generate(&mut FixedRng(private.to_vec())).unwrap()
    }

    #[test]
    fn rfc5903_ecp_vectors() {
        let v = Vectors::load(include_str!("../../tests/vectors/ecp.txt"));
        let mut n = 0;
        for c in v.cases() {
            let group = KeGroup::from_iana(c.get("group").parse().unwrap()).unwrap();
            let shared = hex(c.get("shared"));
            let i = with_private(group, &hex(c.get("i")));
            let r = with_private(group, &hex(c.get("r")));
            assert_eq!(i.public_value(), &hex(c.get("gi"))[..], "{}", c.name());
            assert_eq!(r.public_value(), &hex(c.get("gr"))[..], "{}", c.name());
            let gr = r.public_value().to_vec();
            assert_eq!(
                i.agree(&gr).unwrap().as_slice(),
                &shared[..],
                "{}",
                c.name()
            );
            assert_eq!(r.agree(&hex(c.get("gi"))).unwrap().as_slice(), &shared[..]);
            n += 1;
        }
        assert_eq!(n, 2);
    }

    #[test]
    fn rfc7748_and_rfc8031_x25519_vectors() {
        let v = Vectors::load(include_str!("../../tests/vectors/x25519.txt"));
        for c in v.cases().filter(|c| c.has("priv_a")) {
            let a = with_private(KeGroup::Curve25519, &hex(c.get("priv_a")));
            let b = with_private(KeGroup::Curve25519, &hex(c.get("priv_b")));
            assert_eq!(a.public_value(), &hex(c.get("pub_a"))[..], "{}", c.name());
            assert_eq!(b.public_value(), &hex(c.get("pub_b"))[..], "{}", c.name());
            let shared = hex(c.get("shared"));
            assert_eq!(
                a.agree(&hex(c.get("pub_b"))).unwrap().as_slice(),
                &shared[..]
            );
            assert_eq!(
                b.agree(&hex(c.get("pub_a"))).unwrap().as_slice(),
                &shared[..]
            );
        }
        let mut n = 0;
        for c in v.cases().filter(|c| c.has("scalar")) {
            let k = with_private(KeGroup::Curve25519, &hex(c.get("scalar")));
            let out = k.agree(&hex(c.get("u"))).unwrap();
            assert_eq!(out.as_slice(), &hex(c.get("out"))[..], "{}", c.name());
            n += 1;
        }
        assert_eq!(n, 2);
    }

    #[test]
    fn x25519_rejects_low_order_points() {
        // u = 0 and u = 1 have small order; the output would be all zeros.
        for u in [[0u8; 32], {
            let mut one = [0u8; 32];
            one[0] = 1;
            one
        }] {
            let k = KeGroup::Curve25519
                .generate(&mut DeterministicRng::new(1))
                .unwrap();
            assert_eq!(k.agree(&u).unwrap_err(), KeError::InvalidPeerPublic);
        }
    }

    #[test]
    fn ecp_rejects_points_off_the_curve() {
        for group in [KeGroup::Ecp256, KeGroup::Ecp384] {
            let peer = group.generate(&mut DeterministicRng::new(2)).unwrap();
            let mut bad = peer.public_value().to_vec();
            let last = bad.len() - 1;
            bad[last] ^= 1; // y changed: (x, y') is not on the curve
            let k = group.generate(&mut DeterministicRng::new(3)).unwrap();
            assert_eq!(
                k.agree(&bad).unwrap_err(),
                KeError::InvalidPeerPublic,
                "{group}"
            );
            let k = group.generate(&mut DeterministicRng::new(3)).unwrap();
            let zeros = vec![0u8; group.public_len()];
            assert_eq!(
                k.agree(&zeros).unwrap_err(),
                KeError::InvalidPeerPublic,
                "{group}"
            );
        }
    }

    #[test]
    fn ecp_scalars_are_rejection_sampled() {
        // n itself and 0 are rejected; n-1 is accepted.
        let mut n_minus_1 = P256_ORDER;
        n_minus_1[31] -= 1;
        let mut draws = Vec::new();
        draws.extend_from_slice(&[0u8; 32]);
        draws.extend_from_slice(&P256_ORDER);
        draws.extend_from_slice(&[0xff; 32]);
        draws.extend_from_slice(&n_minus_1);
        let k = KeGroup::Ecp256.generate(&mut FixedRng(draws)).unwrap();
        let direct = with_private(KeGroup::Ecp256, &n_minus_1);
        assert_eq!(k.public_value(), direct.public_value());
        // (n-1)·G = -G: same x as the generator.
        let g = with_private(KeGroup::Ecp256, &{
            let mut one = [0u8; 32];
            one[31] = 1;
            one
        });
        assert_eq!(k.public_value()[..32], g.public_value()[..32]);
        assert_ne!(k.public_value()[32..], g.public_value()[32..]);

        let mut all_bad = Vec::new();
        for _ in 0..MAX_DRAWS {
            all_bad.extend_from_slice(&[0xff; 48]);
        }
        assert_eq!(
            KeGroup::Ecp384
                .generate(&mut FixedRng(all_bad))
                .unwrap_err(),
            KeError::RngFailure
        );
    }

    #[test]
    fn two_parties_agree_in_every_group() {
        for group in KeGroup::ALL {
            let a = group.generate(&mut DeterministicRng::new(10)).unwrap();
            let b = group.generate(&mut DeterministicRng::new(11)).unwrap();
            assert_eq!(a.public_value().len(), group.public_len(), "{group}");
            let (pa, pb) = (a.public_value().to_vec(), b.public_value().to_vec());
            assert_ne!(pa, pb);
            let sa = a.agree(&pb).unwrap();
            let sb = b.agree(&pa).unwrap();
            assert_eq!(sa.as_slice(), sb.as_slice(), "{group}");
            assert_eq!(sa.len(), group.shared_len(), "{group}");
        }
    }

    #[test]
    fn generation_is_deterministic_under_a_seeded_rng() {
        for group in KeGroup::ALL {
            let a = group.generate(&mut DeterministicRng::new(77)).unwrap();
            let b = group.generate(&mut DeterministicRng::new(77)).unwrap();
            assert_eq!(a.public_value(), b.public_value(), "{group}");
        }
    }

    #[test]
    fn wrong_length_is_a_syntax_error() {
        for group in KeGroup::ALL {
            let k = group.generate(&mut DeterministicRng::new(4)).unwrap();
            let n = group.public_len();
            assert_eq!(
                k.agree(&vec![1u8; n + 1]).unwrap_err(),
                KeError::PeerPublicLength {
                    expected: n,
                    got: n + 1
                }
            );
        }
    }

    #[test]
    fn ids_and_names() {
        for g in KeGroup::ALL {
            assert_eq!(KeGroup::from_iana(g.iana_id()), Some(g));
            assert_eq!(KeGroup::from_keyword(g.name()), Some(g));
        }
        assert_eq!(KeGroup::from_keyword("x25519"), Some(KeGroup::Curve25519));
        assert_eq!(KeGroup::from_iana(32), None); // curve448: not available
        assert_eq!(KeGroup::from_keyword("x448"), None);
    }
}
