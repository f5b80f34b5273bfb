//! The key exchange of a CREATE_CHILD_SA exchange, both roles: a Child SA
//! with PFS (RFC 7296 §1.3.1) and the rekey of an IKE SA, which always has
//! one (§1.3.2, §2.18).
//!
//! Initiator ([`KeOffer`]). The request carries a KE payload for one group,
//! which must be the first group of a proposal that has it (§1.2: "the
//! proposal [...] SHOULD have the same Diffie-Hellman group as the KE
//! payload"). "If the responder selects a proposal using a different
//! Diffie-Hellman group (other than NONE), the responder will reject the
//! request and indicate its preferred Diffie-Hellman group in the
//! INVALID_KE_PAYLOAD Notify payload. [...] The initiator then restarts
//! the exchange" (§1.3, §1.2): we do, with the group asked for, if we offer
//! it, at most [`MAX_KE_RETRIES`] times. The Child SA negotiation
//! (`child_sa/offer.rs`) and the IKE SA rekey (`rekey_ike.rs`) keep one
//! `KeOffer` each; they differ only in which group they start with.
//!
//! Responder ([`answer`]): a KEi of the group the chosen proposal needs
//! gets our KEr and g^ir; one of another group gets INVALID_KE_PAYLOAD
//! naming ours.

use crate::event::Reason;
use crate::sa::Refusal;
use esparto_crypto::ike::{KeGroup, KeyExchange};
use esparto_crypto::{Rng, SecretBytes};
use esparto_wire::ike::{KeRepr, NotifyRepr, NotifyType};

/// How often the initiator follows INVALID_KE_PAYLOAD before giving up.
pub(crate) const MAX_KE_RETRIES: u8 = 2;

/// The initiator's side of one exchange's key exchange: the group it
/// offers, its KE for that group (the private value kept until the answer,
/// zeroized on drop by `KeyExchange`), and the INVALID_KE_PAYLOAD retries
/// so far.
#[derive(Default)]
pub(crate) struct KeOffer {
    group: Option<KeGroup>,
    ke: Option<KeyExchange>,
    retries: u8,
}

impl KeOffer {
    /// Start with `group` (a rekey: the group the old SA used).
    pub(crate) fn new(group: Option<KeGroup>) -> Self {
        KeOffer {
            group,
            ke: None,
            retries: 0,
        }
    }

    /// The group offered (none: no KE payload).
    pub(crate) fn group(&self) -> Option<KeGroup> {
        self.group
    }

    /// Before each request: keep the group while `offered` accepts it (the
    /// one INVALID_KE_PAYLOAD asked for, or the one we started with), else
    /// take `first`; then make our KE for it, unless we hold one of that
    /// group already (a retransmission of the same request needs no new
    /// one, a retry with another group does).
    pub(crate) fn prepare(
        &mut self,
        rng: &mut dyn Rng,
        offered: impl Fn(&KeGroup) -> bool,
        first: impl FnOnce() -> Option<KeGroup>,
    ) -> Result<(), Reason> {
        if !self.group.as_ref().is_some_and(&offered) {
            self.group = first();
        }
        if let Some(g) = self.group {
            if self.ke.as_ref().is_none_or(|k| k.group() != g) {
                let ke = g.generate(rng).map_err(|_| Reason::Local("key exchange"))?;
                self.ke = Some(ke);
            }
        }
        Ok(())
    }

    /// Our KE payload, if we offer a group.
    pub(crate) fn payload(&self) -> Option<KeRepr<'_>> {
        match (self.group, &self.ke) {
            (Some(g), Some(ke)) => Some(KeRepr {
                group: g.iana_id(),
                data: ke.public_value(),
            }),
            _ => None,
        }
    }

    /// §1.3: the responder refused the request with `kind` (and `data`).
    /// True, and the next [`prepare`](Self::prepare) makes a KE of the
    /// group it names, if that is INVALID_KE_PAYLOAD for a group `offered`
    /// accepts, other than the one we sent, with retries left.
    pub(crate) fn follow_invalid_ke(
        &mut self,
        kind: NotifyType,
        data: &[u8],
        offered: impl Fn(&KeGroup) -> bool,
    ) -> bool {
        if kind != NotifyType::INVALID_KE_PAYLOAD || self.retries >= MAX_KE_RETRIES {
            return false;
        }
        let wanted = NotifyRepr::new(kind, data)
            .u16_data()
            .and_then(KeGroup::from_iana);
        let Some(g) = wanted.filter(|g| Some(*g) != self.group && offered(g)) else {
            return false;
        };
        self.retries += 1;
        self.group = Some(g);
        self.ke = None;
        true
    }

    /// Our KE, for the agreement with the answer's (it is used once).
    pub(crate) fn take(&mut self) -> Option<KeyExchange> {
        self.ke.take()
    }
}

/// The responder's half of a key exchange.
pub(crate) struct KeAnswer {
    /// The group.
    pub(crate) group: KeGroup,
    /// Our KEr.
    pub(crate) public: Vec<u8>,
    /// g^ir (zeroized on drop).
    pub(crate) shared: SecretBytes,
}

/// The responder's KE of `group`, the one the chosen proposal needs, and
/// g^ir with the initiator's `kei`. §1.3: a KEi of another group (or none)
/// is refused with INVALID_KE_PAYLOAD naming `group`.
pub(crate) fn answer(
    rng: &mut dyn Rng,
    group: KeGroup,
    kei: Option<KeRepr<'_>>,
) -> Result<KeAnswer, Refusal> {
    let Some(kei) = kei.filter(|k| k.group == group.iana_id()) else {
        return Err(Refusal::InvalidKe(group));
    };
    let Ok(ours) = group.generate(rng) else {
        return Err(NotifyType::NO_PROPOSAL_CHOSEN.into());
    };
    let public = ours.public_value().to_vec();
    let Ok(shared) = ours.agree(kei.data) else {
        return Err(NotifyType::INVALID_SYNTAX.into());
    };
    Ok(KeAnswer {
        group,
        public,
        shared,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use esparto_crypto::DeterministicRng;

    fn invalid_ke(g: KeGroup) -> [u8; 2] {
        g.iana_id().to_be_bytes()
    }

    #[test]
    fn invalid_ke_is_followed_to_an_offered_group_a_bounded_number_of_times() {
        let mut rng = DeterministicRng::new(1);
        let offered = |g: &KeGroup| matches!(g, KeGroup::Curve25519 | KeGroup::Ecp256 | KeGroup::Modp2048);
        let mut o = KeOffer::new(Some(KeGroup::Curve25519));
        o.prepare(&mut rng, offered, || None).unwrap();
        assert_eq!(o.payload().unwrap().group, KeGroup::Curve25519.iana_id());
        let kind = NotifyType::INVALID_KE_PAYLOAD;
        // Not another error, not a group we do not offer, not ours again.
        assert!(!o.follow_invalid_ke(NotifyType::NO_PROPOSAL_CHOSEN, &invalid_ke(KeGroup::Ecp256), offered));
        assert!(!o.follow_invalid_ke(kind, &invalid_ke(KeGroup::Ecp384), offered));
        assert!(!o.follow_invalid_ke(kind, &invalid_ke(KeGroup::Curve25519), offered));
        assert!(!o.follow_invalid_ke(kind, &[0], offered));
        // The group asked for, with a KE of it at the next request.
        assert!(o.follow_invalid_ke(kind, &invalid_ke(KeGroup::Ecp256), offered));
        assert!(o.payload().is_none());
        o.prepare(&mut rng, offered, || None).unwrap();
        assert_eq!(o.payload().unwrap().group, KeGroup::Ecp256.iana_id());
        assert!(o.follow_invalid_ke(kind, &invalid_ke(KeGroup::Modp2048), offered));
        // At most MAX_KE_RETRIES.
        assert!(!o.follow_invalid_ke(kind, &invalid_ke(KeGroup::Curve25519), offered));
    }

    #[test]
    fn a_group_no_longer_offered_gives_way_to_the_first() {
        let mut rng = DeterministicRng::new(2);
        let mut o = KeOffer::new(Some(KeGroup::Ecp384));
        o.prepare(&mut rng, |g| *g == KeGroup::Curve25519, || Some(KeGroup::Curve25519)).unwrap();
        assert_eq!(o.group(), Some(KeGroup::Curve25519));
        let ours = o.payload().unwrap().data.to_vec();
        // A second request for the same group keeps our KE.
        o.prepare(&mut rng, |g| *g == KeGroup::Curve25519, || None).unwrap();
        assert_eq!(o.payload().unwrap().data, &ours[..]);
        // No group at all: no KE payload.
        let mut none = KeOffer::default();
        none.prepare(&mut rng, |_| false, || None).unwrap();
        assert!(none.payload().is_none() && none.take().is_none());
    }

    #[test]
    fn the_responder_answers_a_kei_of_its_group_only() {
        let mut rng = DeterministicRng::new(3);
        let theirs = KeGroup::Curve25519.generate(&mut rng).unwrap();
        let kei = KeRepr { group: KeGroup::Curve25519.iana_id(), data: theirs.public_value() };
        assert!(matches!(
            answer(&mut rng, KeGroup::Ecp256, Some(kei)),
            Err(Refusal::InvalidKe(KeGroup::Ecp256))
        ));
        assert!(matches!(answer(&mut rng, KeGroup::Ecp256, None), Err(Refusal::InvalidKe(_))));
        let a = answer(&mut rng, KeGroup::Curve25519, Some(kei)).unwrap();
        assert_eq!(theirs.agree(&a.public).unwrap().as_slice(), a.shared.as_slice());
    }
}
