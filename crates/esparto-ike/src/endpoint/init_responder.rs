//! The responder side of IKE_SA_INIT (RFC 7296 §1.2), where an IKE SA is
//! born on this end.
//!
//! Everything here runs on an unauthenticated datagram, so refusals keep
//! no state: NO_PROPOSAL_CHOSEN and INVALID_KE_PAYLOAD (naming the group
//! we want, §1.2) are answered statelessly with SPIr zero, an unknown
//! critical payload gets UNSUPPORTED_CRITICAL_PAYLOAD (§2.5), and a
//! malformed request is dropped. Only an acceptable request costs a key
//! exchange and a half-open IKE SA, which expires unless IKE_AUTH
//! completes within `half_open_timeout`. A retransmitted request finds
//! the half-open SA by `(peer, SPIi)` and gets the same response.
//! (The COOKIE defence of §2.6 against floods of such requests is the next
//! issue's work; `max_ike_sas` bounds the state meanwhile.)

use super::Endpoint;
use crate::ctx::Ctx;
use crate::event::{IkeSaId, Transmit};
use crate::nat::{NatState, fake_nat_hash, nat_hash};
use crate::proposal::{Proposal, Protocol};
use crate::rules;
use crate::sa::{IkeSa, Role, State};
use crate::spi::ike_spi;
use core::net::SocketAddr;
use esparto_crypto::ike::KeGroup;
use esparto_wire::ike::{
    ExchangeType, Header, HeaderRepr, KeRepr, Message, NonceRepr, NotifyRepr, NotifyType,
    PayloadRepr, PayloadType, SaRepr, Spi, emit_message,
};
use std::time::Instant;

impl Endpoint {
    fn stateless_reply(
        &mut self,
        local: SocketAddr,
        remote: SocketAddr,
        spi_i: u64,
        payloads: &[PayloadRepr<'_>],
    ) {
        let h = HeaderRepr {
            spi_i,
            spi_r: 0,
            next_payload: PayloadType::NONE,
            exchange: ExchangeType::IKE_SA_INIT,
            initiator: false,
            response: true,
            message_id: 0,
            length: 0,
        };
        let mut out = Vec::new();
        if emit_message(&h, payloads, &mut out).is_ok() {
            let mut data = Vec::with_capacity(out.len() + 4);
            if local.port() == self.config.natt_port {
                data.extend_from_slice(&[0; 4]);
            }
            data.extend_from_slice(&out);
            self.transmits.push_back(Transmit {
                local,
                remote,
                data,
            });
        }
    }

    /// §2.5: an IKE_SA_INIT request with an unknown critical payload gets
    /// UNSUPPORTED_CRITICAL_PAYLOAD naming it.
    pub(super) fn refuse_critical(
        &mut self,
        local: SocketAddr,
        remote: SocketAddr,
        data: &[u8],
        t: u8,
    ) {
        let Ok(view) = Header::new_checked(data) else {
            return;
        };
        let Ok(h) = HeaderRepr::parse(&view) else {
            return;
        };
        if h.exchange == ExchangeType::IKE_SA_INIT && !h.response && h.spi_r == 0 {
            let d = [t];
            let n = PayloadRepr::Notify(NotifyRepr::new(
                NotifyType::UNSUPPORTED_CRITICAL_PAYLOAD,
                &d,
            ));
            self.stateless_reply(local, remote, h.spi_i, &[n]);
        }
    }

    /// Responder side of IKE_SA_INIT (§1.2): stateless refusals, or a new
    /// half-open IKE SA with keys.
    pub(super) fn respond_init(
        &mut self,
        now: Instant,
        local: SocketAddr,
        remote: SocketAddr,
        data: &[u8],
        msg: &Message<'_>,
    ) {
        let spi_i = msg.header.spi_i;
        if let Some(&id) = self.half_open.get(&(remote, spi_i)) {
            let mut ctx = ctx!(self, now);
            if let Some(sa) = self.sas.get(&id) {
                sa.retransmit_init_response(&mut ctx, data, remote, local);
            }
            return;
        }
        if rules::check(ExchangeType::IKE_SA_INIT, false, &msg.payloads, false, &[]).is_err() {
            // Unauthenticated and malformed: drop; INVALID_SYNTAX is only for
            // messages whose checksum verified (§3.10.1).
            self.stats.malformed += 1;
            return;
        }
        if self.sas.len() >= self.config.max_ike_sas {
            self.stats.init_refused += 1;
            return;
        }
        let (mut offered, mut ke, mut ni, mut src, mut dst) = (None, None, None, Vec::new(), None);
        for p in &msg.payloads {
            match p {
                PayloadRepr::Sa(s) => offered = Some(s),
                PayloadRepr::Ke(k) => ke = Some(*k),
                PayloadRepr::Nonce(n) => ni = Some(n.data),
                PayloadRepr::Notify(n) if n.kind == NotifyType::NAT_DETECTION_SOURCE_IP => {
                    src.push(n.data)
                }
                PayloadRepr::Notify(n) if n.kind == NotifyType::NAT_DETECTION_DESTINATION_IP => {
                    dst = Some(n.data)
                }
                _ => {}
            }
        }
        let (Some(offered), Some(ke), Some(ni)) = (offered, ke, ni) else {
            return;
        };
        let ke_group = KeGroup::from_iana(ke.group);
        let chosen = self
            .connections
            .iter()
            .filter(|c| c.matches_addrs(local.ip(), remote.ip()))
            .find_map(|c| {
                Proposal::select(&c.proposals, &offered.proposals, false, ke_group)
                    .map(|s| (c.clone(), s))
            });
        let Some((conn, selected)) = chosen else {
            self.stats.init_refused += 1;
            tracing::info!(peer = %remote, "IKE_SA_INIT: no proposal chosen");
            let n = PayloadRepr::Notify(NotifyRepr::new(NotifyType::NO_PROPOSAL_CHOSEN, &[]));
            return self.stateless_reply(local, remote, spi_i, &[n]);
        };
        let Some(group) = selected.ke else { return };
        if ke_group != Some(group) {
            // §1.2: tell the initiator which group we want, keep no state.
            self.stats.init_refused += 1;
            tracing::debug!(peer = %remote, %group, "IKE_SA_INIT: asking for another group");
            let d = group.iana_id().to_be_bytes();
            let n = PayloadRepr::Notify(NotifyRepr::new(NotifyType::INVALID_KE_PAYLOAD, &d));
            return self.stateless_reply(local, remote, spi_i, &[n]);
        }
        let Ok(ours) = group.generate(&mut *self.rng) else {
            return;
        };
        let public = ours.public_value().to_vec();
        let Ok(g_ir) = ours.agree(ke.data) else {
            self.stats.malformed += 1;
            return;
        };
        let sas = &self.sas;
        let spi_r = ike_spi(&mut *self.rng, |s| sas.contains_key(&s));
        let mut nr = vec![0u8; self.config.nonce_len];
        self.rng.fill_public(&mut nr);
        let Ok(keys) =
            crate::keys::IkeKeys::derive(&selected, ni, &nr, g_ir.as_slice(), spi_i, spi_r)
        else {
            return;
        };
        let nat = NatState::detect(spi_i, 0, &src, dst, remote, local);
        let id = IkeSaId(spi_r);
        let mut sa = IkeSa::new(
            id,
            Role::Responder,
            spi_i,
            spi_r,
            conn.clone(),
            local,
            remote,
            now,
        );
        sa.state = State::Auth;
        sa.suite = Some(selected);
        sa.keys = Some(keys);
        sa.ni = ni.to_vec();
        sa.nr = nr;
        sa.nat = nat;
        sa.init_request = data.to_vec();
        sa.expected_mid = 1;
        sa.half_open_deadline = Some(now + self.config.half_open_timeout);
        sa.half_open_key = Some((remote, spi_i));

        let answer = SaRepr {
            proposals: vec![selected.to_wire(Protocol::Ike, Spi::None)],
        };
        let nr_copy = sa.nr.clone();
        let src_hash = if conn.encap {
            fake_nat_hash(&mut *self.rng)
        } else {
            nat_hash(spi_i, spi_r, local)
        };
        let dst_hash = nat_hash(spi_i, spi_r, remote);
        let mut payloads = vec![
            PayloadRepr::Sa(answer),
            PayloadRepr::Ke(KeRepr {
                group: group.iana_id(),
                data: &public,
            }),
            PayloadRepr::Nonce(NonceRepr { data: &nr_copy }),
        ];
        // §2.23: NAT detection only if the initiator started it.
        if nat.supported {
            payloads.push(PayloadRepr::Notify(NotifyRepr::new(
                NotifyType::NAT_DETECTION_SOURCE_IP,
                &src_hash,
            )));
            payloads.push(PayloadRepr::Notify(NotifyRepr::new(
                NotifyType::NAT_DETECTION_DESTINATION_IP,
                &dst_hash,
            )));
        }
        let Ok(packet) = sa.encode(ExchangeType::IKE_SA_INIT, true, 0, &payloads) else {
            return;
        };
        sa.init_response = packet.clone();
        let mut ctx = ctx!(self, now);
        sa.transmit(&mut ctx, &packet);
        sa.responses.push_back((0, packet));
        self.stats.responder_sas += 1;
        tracing::debug!(ike_sa = %id, peer = %remote, nat = ?nat, "IKE_SA_INIT answered");
        self.sas.insert(spi_r, sa);
        self.half_open.insert((remote, spi_i), spi_r);
        self.after(spi_r);
    }
}
