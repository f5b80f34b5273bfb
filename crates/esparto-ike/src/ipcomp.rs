//! IPComp negotiation for Child SAs (RFC 7296 §2.22, §3.10.1).
//!
//! The initiator of a Child SA that wants IPComp sends
//! `N(IPCOMP_SUPPORTED)` with its CPI (two octets) and a transform ID (one
//! octet); we offer only DEFLATE (transform 2, RFC 2394). A responder that
//! accepts answers with one such notify carrying its own CPI; each side
//! then puts the *other's* CPI in the IPComp headers it sends (RFC 3173
//! §3.3: the CPI is chosen by the decompressing node). A notify naming
//! another transform, a CPI outside the negotiable range (RFC 3173 §3.3:
//! 256–61439), or an answer without the notify means a Child SA without
//! IPComp, never a failure.

use esparto_crypto::rand::Rng;
use esparto_wire::ike::{NotifyRepr, NotifyType, PayloadRepr};
use esparto_wire::ipcomp::{CpiClass, cpi};

/// The IPCOMP transform ID of DEFLATE (RFC 7296 §3.10.1).
pub const TRANSFORM_DEFLATE: u8 = cpi::DEFLATE as u8;

/// The CPIs of a Child SA with IPComp.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpcompCpis {
    /// Ours: expected in the IPComp headers we receive.
    pub inbound: u16,
    /// The peer's: written in the IPComp headers we send.
    pub outbound: u16,
}

/// A fresh CPI from the negotiable range (random, like SPIs).
pub(crate) fn allocate(rng: &mut dyn Rng) -> u16 {
    let mut b = [0u8; 2];
    rng.fill_public(&mut b);
    let span = 61_439 - 256 + 1;
    256 + (u16::from_be_bytes(b) % span)
}

/// The notify data: CPI, transform ID.
pub(crate) fn data(cpi: u16) -> [u8; 3] {
    let c = cpi.to_be_bytes();
    [c[0], c[1], TRANSFORM_DEFLATE]
}

/// The peer's DEFLATE CPI among its IPCOMP_SUPPORTED notifies, if any
/// offers DEFLATE with a negotiable CPI.
pub(crate) fn peer_cpi(payloads: &[PayloadRepr<'_>]) -> Option<u16> {
    payloads.iter().find_map(|p| match p {
        PayloadRepr::Notify(n) if n.kind == NotifyType::IPCOMP_SUPPORTED => deflate_cpi(n),
        _ => None,
    })
}

/// The CPI of one IPCOMP_SUPPORTED notify, if it is DEFLATE with a
/// negotiable CPI.
fn deflate_cpi(n: &NotifyRepr<'_>) -> Option<u16> {
    match n.data {
        [a, b, t] if *t == TRANSFORM_DEFLATE => {
            let c = u16::from_be_bytes([*a, *b]);
            (CpiClass::of(c) == CpiClass::Negotiated).then_some(c)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use esparto_crypto::DeterministicRng;

    #[test]
    fn only_deflate_with_a_negotiable_cpi() {
        let ok = [0x12, 0x34, 2];
        let lzs = [0x12, 0x34, 3];
        let reserved = [0x00, 0x40, 2];
        let wellknown = [0x00, 0x02, 2];
        let short = [0x12, 0x34];
        fn n(d: &[u8]) -> PayloadRepr<'_> {
            PayloadRepr::Notify(NotifyRepr::new(NotifyType::IPCOMP_SUPPORTED, d))
        }
        assert_eq!(peer_cpi(&[n(&ok)]), Some(0x1234));
        for bad in [&lzs[..], &reserved, &wellknown, &short] {
            assert_eq!(peer_cpi(&[n(bad)]), None, "{bad:?}");
        }
        // The first DEFLATE offer among several.
        assert_eq!(peer_cpi(&[n(&lzs), n(&ok)]), Some(0x1234));
        assert_eq!(peer_cpi(&[]), None);
    }

    #[test]
    fn allocated_cpis_are_negotiable() {
        let mut rng = DeterministicRng::new(3);
        for _ in 0..1000 {
            let c = allocate(&mut rng);
            assert_eq!(CpiClass::of(c), CpiClass::Negotiated);
            assert_eq!(
                peer_cpi(&[PayloadRepr::Notify(NotifyRepr::new(
                    NotifyType::IPCOMP_SUPPORTED,
                    &data(c)
                ))]),
                Some(c)
            );
        }
    }
}
