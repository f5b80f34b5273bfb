//! Creating a Child SA: the one negotiation that IKE_AUTH and
//! CREATE_CHILD_SA both carry, both roles (RFC 7296 §1.2, §1.3.1, §1.3.3,
//! §2.9, §2.17; RFC 9611), as strongSwan's `child_create` task serves
//! both exchanges.
//!
//! ```text
//! IKE_AUTH          HDR, SK {IDi, …, AUTH, [N(SA_RESOURCE_INFO),] [N(IPCOMP_SUPPORTED),] SAi2, TSi, TSr}  -->
//!                                 <--  HDR, SK {IDr, …, AUTH, [N(SA_RESOURCE_INFO),] [N(IPCOMP_SUPPORTED),] SAr2, TSi, TSr}
//! CREATE_CHILD_SA   HDR, SK {[N(REKEY_SA),] [N(SA_RESOURCE_INFO),] [N(IPCOMP_SUPPORTED),] SA, Ni, [KEi,] TSi, TSr}  -->
//!                                 <--  HDR, SK {[N(SA_RESOURCE_INFO),] [N(IPCOMP_SUPPORTED),] SA, Nr, [KEr,] TSi, TSr}
//! ```
//!
//! The two carriers ([`Carrier`]) differ only in where the Child SA's keys
//! come from (§2.17: "Ni and Nr are the nonces from the IKE_SA_INIT
//! exchange if this request is the first Child SA created or the fresh Ni
//! and Nr from the CREATE_CHILD_SA exchange if this is a subsequent
//! creation"). In IKE_AUTH there is no key exchange of its own either, and
//! its proposals carry no KE transforms (§1.2: "IKE_AUTH messages do not
//! contain KEi/KEr or Ni/Nr payloads"). In CREATE_CHILD_SA it has nonces of its own
//! and, when the child's proposals name a group (PFS), a KE (§1.3.1),
//! whose INVALID_KE_PAYLOAD follow-up is `super::ke`'s. Everything else is
//! here, once:
//!
//! - the payloads of an offer and of an answer (SA, TSi, TSr, Nonce, KE,
//!   REKEY_SA, SA_RESOURCE_INFO, IPCOMP_SUPPORTED), read by
//!   [`ChildPayloads`];
//! - the initiator ([`offer`]): our inbound SPI (steered to the RFC 9611
//!   resource it is for, or where the SA a rekey replaces steers), our
//!   CPI, the selectors, and the answer's check: one of our proposals,
//!   selectors narrowed and never widened (§2.9), IPComp accepted or not
//!   (§2.22), SA_RESOURCE_INFO echoed or not (RFC 9611); then the keys,
//!   the record and the event, or the failure reported, a rekey handed
//!   back to the IKE SA (`sa/children.rs`);
//! - the responder ([`answer`]): the child configuration, proposal and
//!   narrowed selectors chosen for the request, RFC 9611's fallback and
//!   sub-SAs (TS_MAX_QUEUE past `per_cpu_max`), our SPI and CPI, the keys,
//!   the record and the event, and the answer's payloads — or the notify
//!   that refuses it.
//!
//! The exchanges keep only what is theirs: IKE_AUTH authenticates before
//! either role looks at the Child SA part, so an unauthenticated peer never
//! gets one installed; CREATE_CHILD_SA decides what a request is for (a
//! new Child SA, the rekey of one, the rekey of the IKE SA) and refuses
//! what collides with exchanges under way (§2.25). Deriving the keys and
//! making the record is `crate::child`'s [`install`](crate::child::install).

pub(crate) mod answer;
pub(crate) mod offer;

use crate::ipcomp;
use crate::ts::TrafficSelector;
use esparto_wire::ike::{
    KeRepr, NotifyRepr, NotifyType, PayloadRepr, SaRepr, TrafficSelectorRepr, TsRepr,
};

/// Which exchange carries a Child SA negotiation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Carrier {
    /// IKE_AUTH: the first Child SA, keyed from the IKE_SA_INIT exchange
    /// (§1.2, §2.17).
    IkeAuth,
    /// CREATE_CHILD_SA: nonces of its own, a KE with PFS (§1.3.1, §1.3.3).
    CreateChild,
}

impl Carrier {
    /// Do its proposals carry KE transforms? Not in IKE_AUTH, which has no
    /// KE payload, so its SA payloads name no Diffie-Hellman group other
    /// than NONE and should leave the transform out (§1.2); a child's PFS
    /// group applies from its first rekey.
    pub(crate) fn with_ke(self) -> bool {
        self == Carrier::CreateChild
    }
}

/// The Child SA's payloads of an IKE_AUTH or CREATE_CHILD_SA message,
/// request or response (the payload rules have checked which may appear,
/// [`crate::rules`]).
#[derive(Default)]
pub(crate) struct ChildPayloads<'a> {
    pub(crate) sa: Option<&'a SaRepr>,
    pub(crate) tsi: Option<Vec<TrafficSelector>>,
    pub(crate) tsr: Option<Vec<TrafficSelector>>,
    /// CREATE_CHILD_SA's Nonce.
    pub(crate) nonce: Option<&'a [u8]>,
    /// CREATE_CHILD_SA's KE (PFS).
    pub(crate) ke: Option<KeRepr<'a>>,
    /// REKEY_SA (§1.3.3).
    pub(crate) rekey: Option<NotifyRepr<'a>>,
    /// SA_RESOURCE_INFO (RFC 9611).
    pub(crate) resource_info: bool,
    /// The peer's DEFLATE CPI (IPCOMP_SUPPORTED, §2.22).
    pub(crate) ipcomp: Option<u16>,
}

impl<'a> ChildPayloads<'a> {
    /// Read them from a message's payloads.
    pub(crate) fn collect(payloads: &'a [PayloadRepr<'a>]) -> Self {
        let mut m = ChildPayloads {
            ipcomp: ipcomp::peer_cpi(payloads),
            ..ChildPayloads::default()
        };
        for p in payloads {
            match p {
                PayloadRepr::Sa(s) => m.sa = Some(s),
                PayloadRepr::TsI(t) => m.tsi = Some(ts_from(t)),
                PayloadRepr::TsR(t) => m.tsr = Some(ts_from(t)),
                PayloadRepr::Nonce(n) => m.nonce = Some(n.data),
                PayloadRepr::Ke(k) => m.ke = Some(*k),
                PayloadRepr::Notify(n) if n.kind == NotifyType::REKEY_SA => m.rekey = Some(*n),
                PayloadRepr::Notify(n) if n.kind == NotifyType::SA_RESOURCE_INFO => {
                    m.resource_info = true
                }
                _ => {}
            }
        }
        m
    }

    /// The SA payload and both selectors, if all three are there: the
    /// message asks for (or answers with) a Child SA.
    pub(crate) fn child_sa(&self) -> Option<(&'a SaRepr, &[TrafficSelector], &[TrafficSelector])> {
        match (self.sa, &self.tsi, &self.tsr) {
            (Some(sa), Some(tsi), Some(tsr)) => Some((sa, tsi, tsr)),
            _ => None,
        }
    }
}

/// Selectors as TS payload bodies.
fn ts_repr(ts: &[TrafficSelector]) -> TsRepr {
    TsRepr {
        selectors: ts.iter().map(|t| TrafficSelectorRepr::from(*t)).collect(),
    }
}

/// Selectors from a TS payload.
fn ts_from(r: &TsRepr) -> Vec<TrafficSelector> {
    r.selectors
        .iter()
        .map(|s| TrafficSelector::from(*s))
        .collect()
}
