//! The IKE exchanges, one module each with both roles (strongSwan's
//! libcharon tasks: `build_i`, `process_r`, `build_r`, `process_i`).
//!
//! | module | exchange | initiator | responder | RFC 7296 |
//! | --- | --- | --- | --- | --- |
//! | [`ike_init`] | IKE_SA_INIT | [`ike_init::IkeInit`] | `Endpoint::respond_init` with [`ike_init::choose`], [`ike_init::response`] | §1.2, §2.6, §2.23 |
//! | [`intermediate`] | IKE_INTERMEDIATE | [`intermediate::Intermediate`] | `IkeSa::respond_intermediate` | RFC 9242, RFC 9370 |
//! | [`ike_auth`] (the exchange; the proofs in `ike_auth/proof.rs`) | IKE_AUTH | [`ike_auth::IkeAuth`] | `IkeSa::respond_ike_auth` | §1.2, §2.15 |
//! | [`create_child`] | CREATE_CHILD_SA | `Task::CreateChild`, [`create_child::request`] | `IkeSa::respond_create_child` | §1.3.1, §1.3.3 (rekey), RFC 9611 |
//! | [`rekey_ike`] | CREATE_CHILD_SA | [`rekey_ike::RekeyIke`] | `IkeSa::respond_rekey_ike` | §1.3.2, §2.18, §2.8.2 |
//! | `informational` | INFORMATIONAL | `DeleteChild`, `DeleteIke`, `Liveness` | `IkeSa::respond_informational` | §1.4 |
//! | `mobike` | INFORMATIONAL | `UpdateAddresses`, `CheckAddress` | `IkeSa::peer_update` | RFC 4555 |
//!
//! Two parts serve more than one exchange. [`child_sa`] negotiates a
//! Child SA, both roles, for IKE_AUTH (the first one) and CREATE_CHILD_SA
//! alike: [`child_sa::offer::ChildOffer`] and `IkeSa::answer_child`. [`ke`]
//! is the key exchange of CREATE_CHILD_SA, with its INVALID_KE_PAYLOAD
//! follow-up, for a Child SA with PFS and for the IKE SA rekey.
//!
//! Initiator. A [`Task`] owns everything one request/response exchange
//! needs: it builds the request (`build`), and when the matching response
//! arrives it processes it (`process`) and says what happens next
//! ([`Outcome`]): nothing, another task first (IKE_AUTH after IKE_SA_INIT,
//! a retry after INVALID_KE_PAYLOAD or COOKIE), or the end of the IKE SA.
//! The IKE SA keeps a queue of tasks and sends them as its window allows,
//! assigns message IDs, retransmits (see [`crate::sa::IkeSa::on_timeout`])
//! and matches responses by message ID ([`on_response`]). Several tasks
//! may be in flight at once, up to the peer's window (§2.3); an IKE SA
//! rekey or delete is *exclusive*: it waits for the window to drain and
//! nothing follows it until it is answered.
//!
//! Responder. A request that passed the IKE SA's message-ID window, its
//! integrity check and the payload rules (`sa/requests.rs`) goes to the
//! exchange's `respond_*`, which checks it step by step — each step
//! returns the notify that refuses it ([`crate::sa::Refusal`]) — and
//! answers once. The first IKE_SA_INIT request has no IKE SA yet: the
//! endpoint admits it (`endpoint/init_responder.rs`) before the exchange
//! code chooses and answers.

pub(crate) mod child_sa;
pub(crate) mod create_child;
pub(crate) mod ike_auth;
pub(crate) mod ike_init;
mod informational;
pub(crate) mod intermediate;
pub(crate) mod ke;
mod mobike;
pub(crate) use mobike::CHECK_TRIES;
pub(crate) mod rekey_ike;

use crate::ctx::Ctx;
use crate::event::{Event, Reason};
use crate::rules;
use crate::sa::{IkeSa, Pending, State};
use core::net::SocketAddr;
use pki_types::UnixTime;
use esparto_wire::ike::{ExchangeType, HeaderRepr, Message, NotifyType, PayloadRepr};

/// One exchange we initiate.
pub(crate) enum Task {
    /// IKE_SA_INIT.
    IkeInit(ike_init::IkeInit),
    /// IKE_AUTH with the first Child SA.
    IkeAuth(ike_auth::IkeAuth),
    /// IKE_INTERMEDIATE with the next additional key exchange (RFC
    /// 9370), before IKE_AUTH.
    Intermediate(intermediate::Intermediate),
    /// CREATE_CHILD_SA for an additional Child SA, an RFC 9611 sub-SA, or
    /// a Child SA rekey.
    CreateChild(child_sa::offer::ChildOffer),
    /// CREATE_CHILD_SA rekeying the IKE SA.
    RekeyIke(rekey_ike::RekeyIke),
    /// INFORMATIONAL deleting Child SAs (our inbound SPIs).
    DeleteChild(Vec<u32>),
    /// INFORMATIONAL deleting the IKE SA.
    DeleteIke,
    /// Empty INFORMATIONAL: liveness check (§1.4).
    Liveness,
    /// INFORMATIONAL with UPDATE_SA_ADDRESSES from our new address
    /// (RFC 4555 §3.5), with this COOKIE2.
    UpdateAddresses([u8; mobike::COOKIE2_LEN]),
    /// INFORMATIONAL with COOKIE2 to the peer's new address: the return
    /// routability check (RFC 4555 §3.5).
    CheckAddress([u8; mobike::COOKIE2_LEN]),
}

/// What a processed response leads to.
pub(crate) enum Outcome {
    /// The exchange is over.
    Done,
    /// Run this task before anything queued.
    Then(Box<Task>),
    /// The IKE SA is finished.
    Fail(Reason),
}

/// A received response, parsed and (if protected) decrypted.
pub(crate) struct Received<'a> {
    pub(crate) header: HeaderRepr,
    /// The datagram as received (RealMessage2 for IKE_SA_INIT).
    pub(crate) raw: &'a [u8],
    pub(crate) payloads: Vec<PayloadRepr<'a>>,
    pub(crate) from: SocketAddr,
    pub(crate) to: SocketAddr,
    /// The calendar time it arrived at, for the peer's certificates.
    pub(crate) wall_clock: UnixTime,
}

impl Received<'_> {
    /// The first error notify, if any (§3.10.1: types below 16384).
    pub(crate) fn error(&self) -> Option<(NotifyType, &[u8])> {
        self.payloads.iter().find_map(|p| match p {
            PayloadRepr::Notify(n) if n.kind.is_error() => Some((n.kind, n.data)),
            _ => None,
        })
    }

    /// Data of the first notify of type `kind`.
    pub(crate) fn notify(&self, kind: NotifyType) -> Option<&[u8]> {
        self.payloads.iter().find_map(|p| match p {
            PayloadRepr::Notify(n) if n.kind == kind => Some(n.data),
            _ => None,
        })
    }
}

/// Map an error notify to a reason.
pub(crate) fn reason_for(kind: NotifyType) -> Reason {
    match kind {
        NotifyType::NO_PROPOSAL_CHOSEN => Reason::NoProposalChosen,
        NotifyType::INVALID_KE_PAYLOAD => Reason::InvalidKePayload,
        NotifyType::AUTHENTICATION_FAILED => Reason::AuthenticationFailed,
        NotifyType::TS_UNACCEPTABLE => Reason::TsUnacceptable,
        other => Reason::PeerError(other),
    }
}

impl Task {
    fn exchange(&self) -> ExchangeType {
        match self {
            Task::IkeInit(_) => ExchangeType::IKE_SA_INIT,
            Task::IkeAuth(_) => ExchangeType::IKE_AUTH,
            Task::Intermediate(_) => ExchangeType::IKE_INTERMEDIATE,
            Task::CreateChild(_) | Task::RekeyIke(_) => ExchangeType::CREATE_CHILD_SA,
            Task::DeleteChild(_)
            | Task::DeleteIke
            | Task::Liveness
            | Task::UpdateAddresses(_)
            | Task::CheckAddress(_) => ExchangeType::INFORMATIONAL,
        }
    }

    /// Sent alone, and nothing after it until it is answered.
    pub(crate) fn is_exclusive(&self) -> bool {
        matches!(self, Task::RekeyIke(_) | Task::DeleteIke)
    }

    /// Creates (or will create) a Child SA of configuration `name`.
    pub(crate) fn creates_child(&self, name: &str) -> bool {
        match self {
            Task::IkeInit(t) => t.child_name().is_some_and(|n| &**n == name),
            Task::IkeAuth(t) => t.child_name().is_some_and(|n| &**n == name),
            Task::Intermediate(t) => t.child_name().is_some_and(|n| &**n == name),
            Task::CreateChild(t) => &*t.name == name,
            _ => false,
        }
    }

    /// Creates, rekeys or deletes Child SAs (§2.25.1).
    pub(crate) fn is_child_exchange(&self) -> bool {
        matches!(self, Task::CreateChild(_) | Task::DeleteChild(_))
    }

    fn build(&mut self, sa: &mut IkeSa, ctx: &mut Ctx<'_>, mid: u32) -> Result<Vec<u8>, Reason> {
        match self {
            Task::IkeInit(t) => t.build(sa, ctx),
            Task::IkeAuth(t) => t.build(sa, ctx, mid),
            Task::Intermediate(t) => t.build(sa, mid),
            Task::CreateChild(t) => create_child::request(t, sa, ctx, mid),
            Task::RekeyIke(t) => t.build(sa, ctx, mid),
            Task::DeleteChild(spis) => informational::build_delete_child(sa, mid, spis),
            Task::DeleteIke => informational::build_delete_ike(sa, mid),
            Task::Liveness => sa.encode(ExchangeType::INFORMATIONAL, false, mid, &[]),
            Task::UpdateAddresses(c) => mobike::build_update(sa, ctx, mid, c),
            Task::CheckAddress(c) => mobike::build_check(sa, mid, c),
        }
    }

    fn process(self, sa: &mut IkeSa, ctx: &mut Ctx<'_>, rx: &Received<'_>) -> Outcome {
        match self {
            Task::IkeInit(t) => t.process(sa, ctx, rx),
            Task::IkeAuth(t) => t.process(sa, ctx, rx),
            Task::Intermediate(t) => t.process(sa, ctx, rx),
            Task::CreateChild(t) => {
                let m = child_sa::ChildPayloads::collect(&rx.payloads);
                t.process(sa, ctx, rx.error(), &m)
            }
            Task::RekeyIke(t) => t.process(sa, ctx, rx),
            Task::DeleteChild(spis) => informational::process_delete_child(sa, ctx, rx, &spis),
            Task::DeleteIke => Outcome::Fail(Reason::Terminated),
            Task::Liveness => Outcome::Done,
            Task::UpdateAddresses(c) => mobike::process_update(sa, ctx, rx, &c),
            Task::CheckAddress(c) => mobike::process_check(sa, ctx, rx, &c),
        }
    }

    /// Give back what the task holds (allocated inbound SPIs) when it is
    /// dropped without completing.
    pub(crate) fn release(self, ctx: &mut Ctx<'_>) {
        match self {
            Task::IkeInit(t) => t.release(ctx),
            Task::IkeAuth(t) => t.release(ctx),
            Task::Intermediate(t) => t.release(ctx),
            Task::CreateChild(t) => t.release(ctx),
            Task::RekeyIke(t) => t.release(ctx),
            Task::DeleteChild(_)
            | Task::DeleteIke
            | Task::Liveness
            | Task::UpdateAddresses(_)
            | Task::CheckAddress(_) => {}
        }
    }

    /// A failure to even build the request: what it means for the SA.
    fn fail_to_build(self, sa: &mut IkeSa, ctx: &mut Ctx<'_>, reason: Reason) {
        tracing::warn!(ike_sa = %sa.id, ?reason, "cannot build request");
        match self {
            Task::CreateChild(t) => {
                ctx.events.push_back(Event::ChildSaFailed {
                    ike_sa: sa.id,
                    connection: sa.conn.name.clone(),
                    child: Some(t.name.clone()),
                    reason,
                });
                let rekey = t.rekey.as_ref().map(|r| r.inbound);
                let (resource, per_resource) = (t.resource, t.per_resource);
                t.release(ctx);
                if let Some(old) = rekey {
                    sa.rekey_failed(ctx, old, None, resource, per_resource);
                }
            }
            Task::RekeyIke(t) => {
                t.release(ctx);
                sa.rekey_at = Some(crate::lifetime::retry_deadline(ctx));
            }
            Task::DeleteChild(_) | Task::Liveness | Task::UpdateAddresses(_) => {}
            Task::CheckAddress(_) => sa.check_failed(ctx),
            other => {
                other.release(ctx);
                sa.die(ctx, reason);
            }
        }
    }
}

/// Build and send a task's request, or fail it.
pub(crate) fn send(sa: &mut IkeSa, ctx: &mut Ctx<'_>, mut task: Task) {
    // IKE_SA_INIT always has message ID 0, retries included (§2.2).
    let mid = if matches!(task, Task::IkeInit(_)) {
        0
    } else {
        sa.next_mid
    };
    if mid == u32::MAX {
        // §2.2: message IDs must not wrap; the IKE SA should have been
        // rekeyed long before. Give up rather than reuse an ID.
        task.release(ctx);
        sa.die(ctx, Reason::Local("message IDs exhausted"));
        return;
    }
    match task.build(sa, ctx, mid) {
        Ok(packet) => {
            sa.next_mid = mid + 1;
            sa.transmit(ctx, &packet);
            sa.pending.push_back(Pending {
                mid,
                exchange: task.exchange(),
                task,
                packet,
                sent: 1,
                deadline: ctx.now + ctx.config.retransmit.timeout_after(0),
                first_sent: ctx.now,
            });
        }
        Err(reason) => task.fail_to_build(sa, ctx, reason),
    }
}

/// Why a response was not processed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ignored {
    /// No request of ours has this message ID and exchange.
    Unexpected,
    /// It did not decrypt or verify.
    Integrity,
    /// Unauthenticated and malformed (IKE_SA_INIT): dropped.
    Malformed,
}

/// A response to one of our requests arrived.
pub(crate) fn on_response(
    sa: &mut IkeSa,
    ctx: &mut Ctx<'_>,
    data: &[u8],
    msg: &Message<'_>,
    (from, to): (SocketAddr, SocketAddr),
    wall_clock: UnixTime,
) -> Result<(), Ignored> {
    let h = msg.header;
    let idx = sa
        .pending
        .iter()
        .position(|p| p.mid == h.message_id && p.exchange == h.exchange)
        .ok_or(Ignored::Unexpected)?;
    if h.exchange != ExchangeType::IKE_SA_INIT && msg.sk.is_none() {
        return unprotected_response(sa, ctx, msg, idx);
    }
    let opened;
    let payloads = if h.exchange == ExchangeType::IKE_SA_INIT {
        msg.payloads.clone()
    } else {
        opened = match sa.open(ctx, data, msg).map_err(|_| Ignored::Integrity)? {
            Some(o) => o,
            // A fragment kept: the response is not whole yet.
            None => return Ok(()),
        };
        match opened.payloads() {
            Ok(p) => p,
            Err(e) => {
                // Authenticated but unparseable: the peer is broken.
                tracing::warn!(ike_sa = %sa.id, error = %e, "malformed response");
                let p = sa.pending.remove(idx);
                if let Some(p) = p {
                    p.task.release(ctx);
                }
                sa.die(ctx, Reason::ProtocolError("malformed response"));
                return Ok(());
            }
        }
    };
    let has_sk = msg.sk.is_some();
    let (outer, inner): (&[PayloadRepr<'_>], &[PayloadRepr<'_>]) = if has_sk {
        (&msg.payloads, &payloads)
    } else {
        (&payloads, &[])
    };
    if let Err(v) = rules::check(h.exchange, true, outer, has_sk, inner) {
        tracing::warn!(ike_sa = %sa.id, violation = ?v, "response breaks the payload rules");
        if !has_sk {
            return Err(Ignored::Malformed);
        }
        if let Some(p) = sa.pending.remove(idx) {
            p.task.release(ctx);
        }
        sa.die(
            ctx,
            Reason::ProtocolError("response breaks the payload rules"),
        );
        return Ok(());
    }
    let Some(p) = sa.pending.remove(idx) else {
        return Err(Ignored::Unexpected);
    };
    sa.last_heard = ctx.now;
    let rx = Received {
        header: h,
        raw: data,
        payloads,
        from,
        to,
        wall_clock,
    };
    match p.task.process(sa, ctx, &rx) {
        Outcome::Done => {}
        Outcome::Then(t) => sa.queue.push_front(*t),
        Outcome::Fail(r) => sa.die(ctx, r),
    }
    if sa.state != State::Dead {
        sa.send_next(ctx);
    }
    sa.shrink_idle();
    Ok(())
}

/// An unprotected response (past IKE_SA_INIT every message must be
/// protected) with the SPIs of this IKE SA and the message ID and exchange
/// of a request of ours in flight. Only INVALID_IKE_SPI means anything
/// here: §2.21.4, the peer's answer to a request for an IKE SA it does not
/// know, "this usually indicates that the recipient has rebooted and
/// forgotten the existence of an IKE SA". §2.21.4 would have it taken as a
/// hint only; matching our own outstanding request (64-bit SPIs that only
/// the path sees) we take it as the end of the IKE SA, as a DPD failure
/// would be, so that `dpd_action` applies now rather than minutes later
/// (see `endpoint/recovery.rs` on why this is safe). Anything else is
/// dropped like a message that fails its integrity check.
fn unprotected_response(
    sa: &mut IkeSa,
    ctx: &mut Ctx<'_>,
    msg: &Message<'_>,
    idx: usize,
) -> Result<(), Ignored> {
    let invalid_ike_spi = msg
        .payloads
        .iter()
        .any(|p| matches!(p, PayloadRepr::Notify(n) if n.kind == NotifyType::INVALID_IKE_SPI));
    if !invalid_ike_spi {
        return Err(Ignored::Integrity);
    }
    let h = msg.header;
    tracing::info!(ike_sa = %sa.id, peer = %sa.remote, mid = h.message_id, exchange = %h.exchange,
        "peer answered our request with INVALID_IKE_SPI: it no longer knows this IKE_SA (restarted?); deleting it as dead");
    if let Some(p) = sa.pending.remove(idx) {
        p.task.release(ctx);
    }
    sa.die(ctx, Reason::InvalidIkeSpi);
    Ok(())
}

/// Send an INFORMATIONAL carrying one notify, once, without waiting for
/// the answer (used right before giving up an SA, §2.21.2).
pub(crate) fn informational_notify(sa: &mut IkeSa, ctx: &mut Ctx<'_>, kind: NotifyType) {
    let mid = sa.next_mid;
    if mid == u32::MAX {
        return;
    }
    let n = PayloadRepr::Notify(esparto_wire::ike::NotifyRepr::new(kind, &[]));
    if let Ok(packet) = sa.encode(ExchangeType::INFORMATIONAL, false, mid, &[n]) {
        sa.next_mid += 1;
        sa.transmit(ctx, &packet);
    }
}
