//! What `esparto sas` shows of an IKE SA that only the engine knows: the
//! negotiated IKE proposal, what NAT detection found (RFC 7296 §2.23),
//! when the IKE SA and each Child SA will be rekeyed, and when a Child
//! SA's hard lifetime ends. A read-only copy, built on request (one map
//! look-up and a walk over the SA's children), never on the packet path.

use std::sync::Arc;
use std::time::Instant;

use esparto_wire::ike::Spi;

use super::Endpoint;
use crate::diag;
use crate::event::IkeSaId;
use crate::nat::NatState;
use crate::proposal::Protocol;

/// One IKE SA as the engine holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IkeSaInfo {
    /// The chosen IKE proposal in strongSwan's syntax
    /// (`IKE:AES_GCM_16_256/PRF_HMAC_SHA2_256/CURVE_25519`); empty before
    /// IKE_SA_INIT completed.
    pub proposal: String,
    /// The IKE SA's SPIs (initiator's, responder's; 0 until the responder
    /// answered IKE_SA_INIT).
    pub spis: (u64, u64),
    /// What NAT detection found.
    pub nat: NatState,
    /// The connection forces UDP encapsulation (`encap`): our NAT
    /// detection hash is faked, so the peer believes we are behind a NAT.
    pub encap_forced: bool,
    /// When the IKE SA is rekeyed (`None`: never).
    pub rekey_at: Option<Instant>,
    /// Its Child SAs.
    pub children: Vec<ChildSaInfo>,
    /// It is being deleted (a Delete of it is queued or in flight), or a
    /// rekey replaced it.
    pub closing: bool,
    /// The connection's host name that the peer's address came from (its
    /// last answer holds the address), if the peer was named.
    pub remote_host: Option<Arc<str>>,
}

/// One Child SA's timers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChildSaInfo {
    /// Our inbound SPI (what the daemon knows it by).
    pub inbound_spi: u32,
    /// When it is rekeyed: its soft lifetime (`None`: never, or a rekey
    /// is under way).
    pub rekey_at: Option<Instant>,
    /// When it is deleted: its hard lifetime (`None`: never).
    pub expire_at: Option<Instant>,
}

impl Endpoint {
    /// The engine's view of `ike_sa` (or of the SA that replaced it by a
    /// rekey), `None` if it is gone.
    pub fn ike_sa_info(&self, ike_sa: IkeSaId) -> Option<IkeSaInfo> {
        self.ike_sa_info_exact(IkeSaId(self.resolve(ike_sa).ok()?))
    }

    /// [`ike_sa_info`](Self::ike_sa_info) of `ike_sa` itself, not of its
    /// successor if it was rekeyed (while the engine still holds it: an
    /// `IkeSaRekeyed` event describes the old IKE SA so).
    pub fn ike_sa_info_exact(&self, ike_sa: IkeSaId) -> Option<IkeSaInfo> {
        let sa = self.sas.get(&ike_sa.0)?;
        let proposal = sa.suite.as_ref().map_or_else(String::new, |s| {
            diag::OneProposal(&s.to_wire(Protocol::Ike, Spi::None)).to_string()
        });
        Some(IkeSaInfo {
            proposal,
            spis: (sa.spi_i, sa.spi_r),
            nat: sa.nat,
            encap_forced: sa.conn.encap,
            rekey_at: sa.rekey_at,
            children: sa
                .children
                .iter()
                .map(|c| ChildSaInfo {
                    inbound_spi: c.inbound_spi,
                    rekey_at: c.rekey_at,
                    expire_at: c.expire_at,
                })
                .collect(),
            closing: sa.closing(),
            remote_host: sa
                .conn
                .remote_hosts
                .iter()
                .find(|h| self.connections.answer(&h.name).contains(&sa.remote.ip()))
                .map(|h| h.name.clone()),
        })
    }
}
