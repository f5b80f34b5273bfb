//! Finite-field Diffie-Hellman over the RFC 3526 MODP groups 14 and 15.
//!
//! aws-lc-rs has no finite-field DH API, and `unsafe` FFI is forbidden in
//! this crate, so the arithmetic is `crypto-bigint`'s constant-time
//! Montgomery exponentiation. The modulus is public (variable-time setup is
//! fine); the exponent is secret, and `pow_bounded_exp` runs in time that
//! depends only on the fixed exponent width, never on its value.
//!
//! Private exponents are 384 bits, the length strongSwan uses for these
//! groups: RFC 3526 §8 estimates 2048-bit MODP at 110-160 bits of strength
//! and asks for exponents of at least twice that (220-320 bits); 3072-bit
//! at 130-210 bits (260-420). 384 bits covers the 2048-bit group fully and
//! the bulk of the 3072-bit range, at a third of the cost of full-length
//! exponents.
//!
//! Peer validation (RFC 7296 §2.12 points to RFC 6989): the public value
//! must be exactly the prime's length (RFC 7296 §3.4) and satisfy
//! 1 < y < p-1 (RFC 6989 §2.1). Both groups use safe primes, whose only
//! small subgroups are {1} and {1, p-1}, so the range check is the whole
//! check RFC 6989 §2.2 requires.

use crypto_bigint::{
    Odd, U384, U2048, U3072, Uint, Word,
    modular::{MontyForm, MontyParams},
};
use zeroize::Zeroize;

use super::KeError;
use super::modp_groups::{MODP_2048_P, MODP_3072_P};
use crate::{rand::Rng, secret::SecretBytes};

/// Width of the private exponent in bits (see the module notes).
const EXP_BITS: u32 = 384;
const EXP_BYTES: usize = (EXP_BITS / 8) as usize;

/// RFC 3526 groups, parsed at compile time (a malformed constant fails
/// the build).
const P2048: Odd<U2048> = Odd::<U2048>::from_be_hex(MODP_2048_P);
const P3072: Odd<U3072> = Odd::<U3072>::from_be_hex(MODP_3072_P);

/// Which MODP group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Modp {
    G2048,
    G3072,
}

impl Modp {
    /// Prime (and so public value and shared secret) length in bytes.
    pub(super) fn len(self) -> usize {
        match self {
            Modp::G2048 => 256,
            Modp::G3072 => 384,
        }
    }
}

/// A private exponent, wiped on drop.
pub(super) struct ModpPrivate {
    group: Modp,
    x: U384,
}

impl Drop for ModpPrivate {
    fn drop(&mut self) {
        self.x.zeroize();
    }
}

/// Draws a private exponent from `rng` and computes the public value
/// g^x mod p, big-endian and left-padded to the prime length.
pub(super) fn generate(group: Modp, rng: &mut dyn Rng) -> Result<(ModpPrivate, Vec<u8>), KeError> {
    let mut bytes = [0u8; EXP_BYTES];
    // x in [2, 2^384): reject only 0 and 1, which a working RNG never
    // produces; a broken one gets a bounded number of tries.
    let mut tries = 0;
    let x = loop {
        rng.fill_secret(&mut bytes);
        let x = U384::from_be_slice(&bytes);
        if x > U384::ONE {
            break x;
        }
        tries += 1;
        if tries == 16 {
            bytes.zeroize();
            return Err(KeError::RngFailure);
        }
    };
    bytes.zeroize();
    let private = ModpPrivate { group, x };
    let public = public_from(&private);
    Ok((private, public))
}

/// Builds a private key from given exponent bytes (known-answer tests).
#[cfg(test)]
pub(super) fn from_exponent(group: Modp, x: &[u8]) -> (ModpPrivate, Vec<u8>) {
    let private = ModpPrivate {
        group,
        x: U384::from_be_slice(x),
    };
    let public = public_from(&private);
    (private, public)
}

fn public_from(k: &ModpPrivate) -> Vec<u8> {
    let mut out = vec![0u8; k.group.len()];
    match k.group {
        Modp::G2048 => {
            let y = pow(&P2048, &Uint::from_u64(2), &k.x);
            write_be(&y, &mut out);
        }
        Modp::G3072 => {
            let y = pow(&P3072, &Uint::from_u64(2), &k.x);
            write_be(&y, &mut out);
        }
    }
    out
}

/// g^ir from the peer's public value: validated, then left-padded to the
/// prime length (RFC 7296 §2.14: "g^ir is represented as a string of
/// octets in big endian order padded with zeros if necessary to make it
/// the length of the modulus").
pub(super) fn agree(k: &ModpPrivate, peer: &[u8]) -> Result<SecretBytes, KeError> {
    let expected = k.group.len();
    if peer.len() != expected {
        return Err(KeError::PeerPublicLength {
            expected,
            got: peer.len(),
        });
    }
    match k.group {
        Modp::G2048 => agree_in(&P2048, &k.x, peer),
        Modp::G3072 => agree_in(&P3072, &k.x, peer),
    }
}

fn agree_in<const L: usize>(
    p: &Odd<Uint<L>>,
    x: &U384,
    peer: &[u8],
) -> Result<SecretBytes, KeError> {
    let y = Uint::<L>::from_be_slice(peer);
    let p_minus_1 = p.as_ref().wrapping_sub(&Uint::ONE);
    // RFC 6989 §2.1: "check that 1 < r < p-1" (the peer's value is public;
    // comparing it in variable time leaks nothing).
    if y <= Uint::ONE || y >= p_minus_1 {
        return Err(KeError::InvalidPeerPublic);
    }
    let mut z = pow(p, &y, x);
    // Unreachable for a valid y and x > 1 in a safe-prime group, but a
    // shared secret of 1 must never be used.
    if z == Uint::ONE {
        z.zeroize();
        return Err(KeError::InvalidPeerPublic);
    }
    let mut out = SecretBytes::zeroed(peer.len());
    write_be(&z, out.as_mut_slice());
    z.zeroize();
    Ok(out)
}

/// base^x mod p in constant time with respect to x.
fn pow<const L: usize>(p: &Odd<Uint<L>>, base: &Uint<L>, x: &U384) -> Uint<L> {
    let params = MontyParams::new_vartime(*p);
    let mut m = MontyForm::new(base, params).pow_bounded_exp(x, EXP_BITS);
    let r = m.retrieve();
    m.zeroize();
    r
}

/// Big-endian encoding of `v` into exactly `L` words' worth of bytes.
fn write_be<const L: usize>(v: &Uint<L>, out: &mut [u8]) {
    const W: usize = core::mem::size_of::<Word>();
    debug_assert_eq!(out.len(), L * W);
    for (i, word) in v.as_words().iter().enumerate() {
        let end = out.len() - i * W;
        out[end - W..end].copy_from_slice(&word.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::rand::DeterministicRng;
    use crate::test_vectors::{Vectors, hex};

    /// 2 generates the subgroup of order q = (p-1)/2 in a safe-prime group:
    /// 2^q = 1 mod p. A mistyped digit in the prime would break this.
    #[test]
    fn primes_have_the_safe_prime_structure() {
        fn check<const L: usize>(p: &Odd<Uint<L>>) {
            let q = p.as_ref().wrapping_sub(&Uint::ONE).shr_vartime(1);
            let params = MontyParams::new_vartime(*p);
            let two = MontyForm::new(&Uint::from_u64(2), params);
            assert_eq!(two.pow(&q).retrieve(), Uint::ONE);
            assert_ne!(two.pow(&q.shr_vartime(1)).retrieve(), Uint::ONE);
        }
        check(&P2048);
        check(&P3072);
        assert_eq!(P2048.as_ref().bits(), 2048);
        assert_eq!(P3072.as_ref().bits(), 3072);
    }

    #[test]
    fn strongswan_known_answers() {
        let v = Vectors::load(include_str!("../../tests/vectors/modp.txt"));
        for (case, group) in [("modp2048", Modp::G2048), ("modp3072", Modp::G3072)] {
            let c = v.case(case);
            let (ki, gi) = from_exponent(group, &hex(c.get("i")));
            let (kr, gr) = from_exponent(group, &hex(c.get("r")));
            assert_eq!(gi, hex(c.get("gi")), "{case} gi");
            assert_eq!(gr, hex(c.get("gr")), "{case} gr");
            let shared = hex(c.get("shared"));
            assert_eq!(agree(&ki, &gr).unwrap().as_slice(), &shared[..], "{case}");
            assert_eq!(agree(&kr, &gi).unwrap().as_slice(), &shared[..], "{case}");
        }
    }

    #[test]
    fn rejects_out_of_range_and_wrong_length_peers() {
        let mut rng = DeterministicRng::new(5);
        let (k, _) = generate(Modp::G2048, &mut rng).unwrap();
        let mut bad = vec![0u8; 256];
        assert_eq!(agree(&k, &bad).unwrap_err(), KeError::InvalidPeerPublic); // 0
        bad[255] = 1;
        assert_eq!(agree(&k, &bad).unwrap_err(), KeError::InvalidPeerPublic); // 1
        let mut pm1 = hex(MODP_2048_P);
        pm1[255] -= 1;
        assert_eq!(agree(&k, &pm1).unwrap_err(), KeError::InvalidPeerPublic); // p-1
        let p = hex(MODP_2048_P);
        assert_eq!(agree(&k, &p).unwrap_err(), KeError::InvalidPeerPublic); // p
        assert_eq!(
            agree(&k, &[0xff; 256]).unwrap_err(),
            KeError::InvalidPeerPublic
        ); // > p
        bad[255] = 2;
        assert!(agree(&k, &bad).is_ok()); // 2 = g is a fine public value
        let mut pm2 = hex(MODP_2048_P);
        pm2[255] -= 2;
        assert!(agree(&k, &pm2).is_ok());
        assert_eq!(
            agree(&k, &[2u8; 255]).unwrap_err(),
            KeError::PeerPublicLength {
                expected: 256,
                got: 255
            }
        );
    }

    #[test]
    fn broken_rng_is_reported() {
        struct Zeros;
        impl Rng for Zeros {
            fn fill_public(&mut self, b: &mut [u8]) {
                b.fill(0);
            }
            fn fill_secret(&mut self, b: &mut [u8]) {
                b.fill(0);
            }
        }
        assert!(matches!(
            generate(Modp::G3072, &mut Zeros),
            Err(KeError::RngFailure)
        ));
    }
}
