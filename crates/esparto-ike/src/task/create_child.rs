//! CREATE_CHILD_SA for an additional Child SA, as initiator (RFC 7296 §1.3.1).
//!
//! ```text
//! HDR, SK {SA, Ni, [KEi], TSi, TSr}  -->
//!                 <--  HDR, SK {SA, Nr, [KEr], TSi, TSr}
//! ```
//!
//! With a key exchange group in the child's ESP proposals (PFS), KEi is
//! sent for the first group of the first such proposal; INVALID_KE_PAYLOAD
//! retries with the group the responder names, if we offer it (§1.3).
//! KEYMAT = prf+(SK_d, [g^ir (new) |] Ni | Nr) with this exchange's nonces
//! (§2.17). The task carries the RFC 9611 resource (worker) the Child SA is
//! for, which selects the inbound SPI so that it steers to that worker.

use super::{Outcome, Received, Task, reason_for};
use crate::child::{Install, check_answer, install, offer, ts_from, ts_repr};
use crate::ctx::Ctx;
use crate::event::{Event, Reason};
use crate::sa::IkeSa;
use crate::ts::TrafficSelector;
use esparto_crypto::ike::{KeGroup, KeyExchange};
use esparto_wire::ike::{
    ExchangeType, KeRepr, NonceRepr, NotifyRepr, NotifyType, PayloadRepr, SaRepr, Spi,
};
use std::sync::Arc;

const MAX_KE_RETRIES: u8 = 2;

/// The CREATE_CHILD_SA task.
pub(crate) struct CreateChild {
    pub(crate) name: Arc<str>,
    resource: Option<u16>,
    inbound_spi: Option<u32>,
    nonce: Vec<u8>,
    group: Option<KeGroup>,
    ke: Option<KeyExchange>,
    tsi: Vec<TrafficSelector>,
    tsr: Vec<TrafficSelector>,
    retries: u8,
}

impl CreateChild {
    /// Create the child configuration `name`, for `resource` if given.
    pub(crate) fn new(name: Arc<str>, resource: Option<u16>) -> Self {
        CreateChild {
            name,
            resource,
            inbound_spi: None,
            nonce: Vec::new(),
            group: None,
            ke: None,
            tsi: Vec::new(),
            tsr: Vec::new(),
            retries: 0,
        }
    }

    pub(super) fn release(self, ctx: &mut Ctx<'_>) {
        if let Some(spi) = self.inbound_spi {
            ctx.spis.release(spi);
        }
    }

    pub(super) fn build(
        &mut self,
        sa: &mut IkeSa,
        ctx: &mut Ctx<'_>,
        mid: u32,
    ) -> Result<Vec<u8>, Reason> {
        let conn = sa.conn.clone();
        let cfg = conn
            .child(&self.name)
            .ok_or(Reason::Local("unknown child"))?;
        let spi = *self
            .inbound_spi
            .get_or_insert_with(|| ctx.spis.allocate(ctx.rng, self.resource));
        if self.group.is_none() {
            self.group = cfg.esp_proposals.iter().find_map(|p| p.ke.first().copied());
        }
        if let (Some(g), None) = (self.group, &self.ke) {
            self.ke = Some(
                g.generate(ctx.rng)
                    .map_err(|_| Reason::Local("key exchange"))?,
            );
        }
        self.nonce = vec![0; ctx.config.nonce_len];
        ctx.rng.fill_public(&mut self.nonce);
        self.tsi = cfg.local_selectors(sa.local.ip());
        self.tsr = cfg.remote_selectors(sa.remote.ip());
        let mut payloads = vec![
            PayloadRepr::Sa(SaRepr {
                proposals: offer(&cfg.esp_proposals, spi, true),
            }),
            PayloadRepr::Nonce(NonceRepr { data: &self.nonce }),
        ];
        if let (Some(g), Some(ke)) = (self.group, &self.ke) {
            payloads.push(PayloadRepr::Ke(KeRepr {
                group: g.iana_id(),
                data: ke.public_value(),
            }));
        }
        payloads.push(PayloadRepr::TsI(ts_repr(&self.tsi)));
        payloads.push(PayloadRepr::TsR(ts_repr(&self.tsr)));
        sa.encode(ExchangeType::CREATE_CHILD_SA, false, mid, &payloads)
    }

    fn failed(self, sa: &IkeSa, ctx: &mut Ctx<'_>, reason: Reason) -> Outcome {
        tracing::info!(ike_sa = %sa.id, child = %self.name, ?reason, "CHILD_SA not created");
        ctx.events.push_back(Event::ChildSaFailed {
            ike_sa: sa.id,
            connection: sa.conn.name.clone(),
            child: Some(self.name.clone()),
            reason,
        });
        self.release(ctx);
        Outcome::Done
    }

    pub(super) fn process(
        mut self,
        sa: &mut IkeSa,
        ctx: &mut Ctx<'_>,
        rx: &Received<'_>,
    ) -> Outcome {
        if let Some((kind, data)) = rx.error() {
            if kind == NotifyType::INVALID_KE_PAYLOAD && self.retries < MAX_KE_RETRIES {
                let wanted = NotifyRepr::new(kind, data)
                    .u16_data()
                    .and_then(KeGroup::from_iana);
                let offered = sa.conn.child(&self.name).is_some_and(|c| {
                    c.esp_proposals
                        .iter()
                        .any(|p| wanted.is_some_and(|g| p.ke.contains(&g)))
                });
                if offered && wanted != self.group {
                    self.retries += 1;
                    self.group = wanted;
                    self.ke = None;
                    return Outcome::Then(Task::CreateChild(self));
                }
            }
            return self.failed(sa, ctx, reason_for(kind));
        }
        let mut sa_p = None;
        let mut nonce = None;
        let mut ke_p = None;
        let mut tsi = None;
        let mut tsr = None;
        for p in &rx.payloads {
            match p {
                PayloadRepr::Sa(s) => sa_p = Some(s),
                PayloadRepr::Nonce(n) => nonce = Some(n.data),
                PayloadRepr::Ke(k) => ke_p = Some(*k),
                PayloadRepr::TsI(t) => tsi = Some(ts_from(t)),
                PayloadRepr::TsR(t) => tsr = Some(ts_from(t)),
                _ => {}
            }
        }
        let (Some(sa_p), Some(nonce), Some(tsi), Some(tsr)) = (sa_p, nonce, tsi, tsr) else {
            return self.failed(
                sa,
                ctx,
                Reason::ProtocolError("CREATE_CHILD_SA response incomplete"),
            );
        };
        let Some(cfg) = sa.conn.child(&self.name).cloned() else {
            return self.failed(sa, ctx, Reason::Local("child configuration vanished"));
        };
        let (selected, suite) = match check_answer(
            &cfg.esp_proposals,
            &sa_p.proposals,
            false,
            &self.tsi,
            &self.tsr,
            &tsi,
            &tsr,
        ) {
            Ok(x) => x,
            Err(reason) => {
                if let Some(spi) = self.inbound_spi {
                    sa.queue.push_back(Task::DeleteChild(vec![spi]));
                }
                return self.failed(sa, ctx, reason);
            }
        };
        if selected.ke != self.group {
            return self.failed(
                sa,
                ctx,
                Reason::ProtocolError("responder changed the key exchange group"),
            );
        }
        let g_ir = match (self.ke.take(), ke_p) {
            (None, _) => None,
            (Some(ke), Some(k)) if Some(k.group) == self.group.map(|g| g.iana_id()) => {
                match ke.agree(k.data) {
                    Ok(g) => Some(g),
                    Err(_) => {
                        return self.failed(
                            sa,
                            ctx,
                            Reason::ProtocolError("invalid key exchange value"),
                        );
                    }
                }
            }
            (Some(_), _) => {
                return self.failed(sa, ctx, Reason::ProtocolError("missing or wrong KEr"));
            }
        };
        let (Spi::U32(outbound_spi), Some(inbound_spi)) = (selected.spi, self.inbound_spi) else {
            return self.failed(sa, ctx, Reason::ProtocolError("no SPI"));
        };
        let Some(keys) = sa.keys.as_ref() else {
            return self.failed(sa, ctx, Reason::Local("no keys"));
        };
        let installed = install(
            ctx,
            Install {
                ike_sa: sa.id,
                connection: sa.conn.name.clone(),
                child: self.name.clone(),
                initiator: true,
                inbound_spi,
                outbound_spi,
                suite,
                esn: selected.esn,
                prf: keys.prf,
                sk_d: keys.sk_d.as_slice(),
                g_ir: g_ir.as_ref().map(|g| g.as_slice()),
                ni: &self.nonce,
                nr: nonce,
                local_ts: tsi,
                remote_ts: tsr,
                local: sa.local,
                remote: sa.remote,
                encap: sa.encap(),
                resource: self.resource,
                rekeys: None,
            },
        );
        match installed {
            Ok(c) => {
                sa.children.push(c);
                Outcome::Done
            }
            Err(reason) => self.failed(sa, ctx, reason),
        }
    }
}
