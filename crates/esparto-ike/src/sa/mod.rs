//! One IKE SA: its identity, keys, message-ID windows, retransmission
//! state, Child SAs and timers (RFC 7296 §2.1–§2.4).
//!
//! The IKE SA is the unit of state in the endpoint. It is created by
//! [`crate::Endpoint::initiate`] (original initiator) or by an IKE_SA_INIT
//! request that the responder accepts, and from then on every datagram
//! with its SPI and every timer that fires for it comes here.
//!
//! Messages we *send* as requests are driven by tasks
//! ([`crate::exchange::Task`]): one exchange per task, strongSwan style,
//! with a queue for what waits its turn; the peer's requests are answered
//! by the same exchange's responder half (`requests.rs` dispatches). Message IDs and the window are kept as §2.3 says: requests
//! carry consecutive IDs from 0, responses echo the request's ID, and a
//! peer's request whose ID we already answered gets the cached response
//! again (§2.1: the responder retransmits its response when the request
//! is retransmitted, and never on a timer of its own). Windows (§2.3)
//! are one until IKE_AUTH completes; then ours is the configured
//! `window_size` (announced with SET_WINDOW_SIZE) and the peer's whatever
//! it announced: "An IKE endpoint MUST NOT exceed the peer's stated window
//! size for transmitted IKE requests." Each request in flight has its own
//! retransmission timer (`timers.rs`).
//!
//! Messages we *receive* are decrypted in a private copy ([`IkeSa::open`]):
//! the SK payload is opened in place, so the caller's datagram stays
//! untouched, and nothing is processed before the ICV has verified.

mod children;
pub mod fragments;
mod requests;
mod resources;
mod timers;

pub(crate) use requests::{Dropped, Refusal, notify};

use crate::child::ChildSa;
use crate::config::{ConnectionConfig, EndpointConfig};
use crate::ctx::Ctx;
use crate::event::{Event, IkeSaId, Reason};
use crate::exchange::Task;
use crate::identity::Identity;
use crate::keys::IkeKeys;
use crate::lifetime::MAX_WINDOW;
use crate::nat::NatState;
use crate::proposal::Selected;
use core::net::SocketAddr;
use core::ops::Range;
use esparto_crypto::ike::IkeCipher;
use esparto_wire::espinudp::NON_ESP_MARKER;
use crate::config::Fragmentation;
use esparto_wire::ike::{
    ExchangeType, GENERIC_HEADER_LEN, HEADER_LEN, HeaderRepr, Message, PayloadRepr, PayloadType,
    SkLayout, emit_encrypted, emit_fragments, emit_message, parse_payloads, payloads_len,
    strip_padding,
};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

/// Which end of the IKE SA we are (the *original* initiator keeps the I
/// flag for the life of the SA, §3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// We sent the first IKE_SA_INIT.
    Initiator,
    /// We answered it.
    Responder,
}

/// Where the IKE SA is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// IKE_SA_INIT in progress (initiator) — no keys yet.
    Init,
    /// Keys derived, IKE_AUTH in progress.
    Auth,
    /// Authenticated.
    Established,
    /// Authentication failed on the responder: kept only to answer
    /// retransmissions of the failed IKE_AUTH until the half-open timer.
    Failed,
    /// Gone: the endpoint removes it.
    Dead,
}

/// Our request in flight.
pub(crate) struct Pending {
    /// Its message ID.
    pub(crate) mid: u32,
    /// Its exchange type.
    pub(crate) exchange: ExchangeType,
    /// The task that built it and processes the response.
    pub(crate) task: Task,
    /// The datagram, for retransmission.
    pub(crate) packet: Vec<u8>,
    /// How many times it has been sent.
    pub(crate) sent: u32,
    /// When to retransmit next (or give up).
    pub(crate) deadline: Instant,
    /// When it was first sent (for `dpd_timeout`).
    pub(crate) first_sent: Instant,
}

/// What this IKE SA knows about RFC 9611 for one child configuration.
#[derive(Debug, Clone)]
pub(crate) struct ResourceGroup {
    /// The child configuration.
    pub(crate) child: std::sync::Arc<str>,
    /// The peer answered (or sent) SA_RESOURCE_INFO for it.
    pub(crate) supported: bool,
    /// No more per-resource SAs: unsupported, TS_MAX_QUEUE, or our maximum.
    pub(crate) closed: bool,
    /// Resources (workers) whose sub-SA waits for the fallback SA.
    pub(crate) wanted: Vec<u16>,
}

/// One IKE SA.
pub(crate) struct IkeSa {
    pub(crate) id: IkeSaId,
    pub(crate) role: Role,
    pub(crate) spi_i: u64,
    pub(crate) spi_r: u64,
    /// The connection (initiator: from the start; responder: the best
    /// candidate after IKE_SA_INIT, final after IKE_AUTH).
    pub(crate) conn: Arc<ConnectionConfig>,
    pub(crate) local: SocketAddr,
    pub(crate) remote: SocketAddr,
    pub(crate) state: State,
    pub(crate) suite: Option<Selected>,
    pub(crate) keys: Option<IkeKeys>,
    /// What only the initial exchanges need; `None` once established.
    pub(crate) handshake: Option<Box<Handshake>>,
    pub(crate) nat: NatState,
    pub(crate) local_id: Option<Identity>,
    pub(crate) remote_id: Option<Identity>,
    /// We reported this SA to the driver (established or failed auth).
    pub(crate) announced: bool,
    pub(crate) next_mid: u32,
    pub(crate) pending: VecDeque<Pending>,
    pub(crate) queue: VecDeque<Task>,
    /// The lowest message ID of a peer request not answered yet.
    pub(crate) expected_mid: u32,
    /// Requests above `expected_mid` answered already, out of order: bit
    /// `i` is message ID `expected_mid + 1 + i` (§2.3, window ≤ 64).
    pub(crate) answered: u64,
    /// Responses kept for retransmitted requests (§2.1, §2.3).
    pub(crate) responses: VecDeque<(u32, Vec<u8>)>,
    /// Our window for the peer's requests (1 until IKE_AUTH completes).
    pub(crate) window: u32,
    /// The peer's window for our requests (SET_WINDOW_SIZE, else 1).
    pub(crate) peer_window: u32,
    /// When to rekey the IKE SA (jittered, §2.8).
    pub(crate) rekey_at: Option<Instant>,
    /// A rekey replaced this SA: it dies without telling the driver, and
    /// calls naming it go to `successor`.
    pub(crate) superseded: bool,
    /// The SA that replaced it.
    pub(crate) successor: Option<u64>,
    /// Delete this (superseded or redundant) SA ourselves if the peer has
    /// not by then.
    pub(crate) retire_at: Option<Instant>,
    /// A peer's rekey of this IKE SA answered while ours was under way
    /// (§2.8.2): our SPI of the SA it made, and the lowest nonce of its
    /// exchange.
    pub(crate) peer_rekey: Option<(u64, Box<[u8]>)>,
    /// RFC 9611 state per child configuration.
    pub(crate) resources: Vec<ResourceGroup>,
    /// Send INITIAL_CONTACT in IKE_AUTH (we hold no other SA with the peer).
    pub(crate) initial_contact: bool,
    /// Both sides announced MOBIKE in IKE_AUTH (RFC 4555).
    pub(crate) mobike: bool,
    /// A return routability check under way (RFC 4555 §3.5): the
    /// addresses before the peer's UPDATE_SA_ADDRESSES, put back if the
    /// check fails.
    pub(crate) mobike_check: Option<(SocketAddr, SocketAddr)>,
    /// IV seed for our SK payloads: a per-SA message counter (never repeats).
    pub(crate) iv_seed: u64,
    pub(crate) children: Vec<ChildSa>,
    pub(crate) last_heard: Instant,
    pub(crate) next_keepalive: Option<Instant>,
    /// When this SA's live entry on the endpoint's timer heap fires: at or
    /// before [`IkeSa::next_deadline`] (the endpoint pushes a new entry
    /// only when the deadline moves earlier).
    pub(crate) scheduled: Option<Instant>,
    /// Where the endpoint's SA index has it filed.
    pub(crate) filed: crate::endpoint::sa_index::Filed,
    /// Waiting for the endpoint's initiator pacing to let its IKE_SA_INIT
    /// go: tasks queue, nothing is sent.
    pub(crate) waiting: bool,
    /// The peer address whose pacing slot this SA holds while being set up.
    pub(crate) pace_slot: Option<core::net::IpAddr>,
    /// Both sides announced IKE fragmentation in IKE_SA_INIT (RFC 7383):
    /// the largest datagram before ours are fragmented (`fragment_size`).
    /// A rekeyed IKE SA keeps its predecessor's.
    pub(crate) fragmentation: Option<usize>,
    /// The peer's fragmented messages in progress.
    pub(crate) reassembly: fragments::Reassembly,
}

/// The part of an IKE SA that only IKE_SA_INIT and IKE_AUTH need (RFC
/// 7296 §1.2, §2.15), boxed apart and freed by the endpoint once the SA is
/// established: after IKE_AUTH, nothing reads the nonces of IKE_SA_INIT
/// (Child SAs and rekeys bring their own, §2.17, §2.18) or its messages
/// (they are signed only by the AUTH payloads), and the responder no
/// longer answers retransmitted IKE_SA_INIT requests.
#[derive(Default)]
pub(crate) struct Handshake {
    /// Ni and Nr: AUTH (§2.15) and the first Child SA's KEYMAT (§2.17).
    pub(crate) ni: Vec<u8>,
    pub(crate) nr: Vec<u8>,
    /// RealMessage1 and RealMessage2, signed by the AUTH payloads (§2.15).
    pub(crate) init_request: Vec<u8>,
    pub(crate) init_response: Vec<u8>,
    /// IntAuth_i and IntAuth_r so far (RFC 9242 §3.3.2; empty without
    /// IKE_INTERMEDIATE).
    pub(crate) int_auth_i: Vec<u8>,
    pub(crate) int_auth_r: Vec<u8>,
    /// What the AUTH payloads append: IntAuth_i | IntAuth_r | the
    /// IKE_AUTH message ID, once IKE_AUTH starts after IKE_INTERMEDIATE
    /// exchanges; empty otherwise.
    pub(crate) int_auth: Vec<u8>,
    /// Responder: the additional key exchanges still expected, in slot
    /// order (RFC 9370).
    pub(crate) ake_pending: Vec<esparto_crypto::ike::MlKem>,
    /// Responder: drop the SA if IKE_AUTH has not completed by then.
    pub(crate) half_open_deadline: Option<Instant>,
    /// Responder: the `(peer, SPIi)` key under which retransmitted
    /// IKE_SA_INIT requests find this SA until it is established.
    pub(crate) half_open_key: Option<(SocketAddr, u64)>,
}

impl Handshake {
    /// IntAuth for the AUTH payloads of IKE_AUTH message `mid` (nothing
    /// if no IKE_INTERMEDIATE exchange ran).
    pub(crate) fn seal_int_auth(&mut self, mid: u32) {
        self.int_auth.clear();
        if self.int_auth_i.is_empty() && self.int_auth_r.is_empty() {
            return;
        }
        self.int_auth.extend_from_slice(&self.int_auth_i);
        self.int_auth.extend_from_slice(&self.int_auth_r);
        self.int_auth.extend_from_slice(&mid.to_be_bytes());
    }
}

/// Why a received message was dropped before processing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Drop {
    /// No keys yet or no SK payload.
    NotProtected,
    /// The ICV did not verify (or the framing was wrong).
    Integrity,
}

/// A decrypted SK payload: our copy of the message and where the inner
/// payloads sit in it.
pub(crate) struct Opened {
    pub(crate) buf: Vec<u8>,
    pub(crate) inner: Range<usize>,
    pub(crate) first: PayloadType,
}

impl Opened {
    /// Parse the inner payload chain.
    pub(crate) fn payloads(&self) -> esparto_wire::ike::Result<Vec<PayloadRepr<'_>>> {
        parse_payloads(self.first, &self.buf[self.inner.clone()])
    }
}

fn layout(c: &IkeCipher) -> SkLayout {
    SkLayout {
        iv_len: c.iv_len(),
        icv_len: c.icv_len(),
        block_size: c.block_size(),
    }
}

impl IkeSa {
    /// A fresh SA in state [`State::Init`].
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        id: IkeSaId,
        role: Role,
        spi_i: u64,
        spi_r: u64,
        conn: Arc<ConnectionConfig>,
        local: SocketAddr,
        remote: SocketAddr,
        now: Instant,
    ) -> Self {
        IkeSa {
            id,
            role,
            spi_i,
            spi_r,
            conn,
            local,
            remote,
            state: State::Init,
            suite: None,
            keys: None,
            handshake: None,
            nat: NatState::default(),
            local_id: None,
            remote_id: None,
            announced: false,
            next_mid: 0,
            pending: VecDeque::new(),
            queue: VecDeque::new(),
            expected_mid: 0,
            answered: 0,
            responses: VecDeque::new(),
            window: 1,
            peer_window: 1,
            rekey_at: None,
            superseded: false,
            successor: None,
            retire_at: None,
            peer_rekey: None,
            resources: Vec::new(),
            initial_contact: false,
            mobike: false,
            mobike_check: None,
            iv_seed: 1,
            children: Vec::new(),
            last_heard: now,
            next_keepalive: None,
            scheduled: None,
            filed: Default::default(),
            waiting: false,
            pace_slot: None,
            fragmentation: None,
            reassembly: fragments::Reassembly::default(),
        }
    }

    /// The handshake state, created empty if there is none yet.
    pub(crate) fn handshake_mut(&mut self) -> &mut Handshake {
        self.handshake.get_or_insert_with(Box::default)
    }

    /// The responder's half-open deadline, if any.
    pub(crate) fn half_open_deadline(&self) -> Option<Instant> {
        self.handshake.as_ref()?.half_open_deadline
    }

    /// The responder's half-open key, if any.
    pub(crate) fn half_open_key(&self) -> Option<(SocketAddr, u64)> {
        self.handshake.as_ref()?.half_open_key
    }

    /// Replaced by a rekey, or being deleted.
    pub(crate) fn closing(&self) -> bool {
        self.superseded
            || self.pending.iter().any(|p| matches!(p.task, Task::DeleteIke))
            || self.queue.iter().any(|t| matches!(t, Task::DeleteIke))
    }

    /// Are we the original initiator?
    pub(crate) fn is_initiator(&self) -> bool {
        self.role == Role::Initiator
    }

    /// The header for a message of ours.
    pub(crate) fn header(&self, exchange: ExchangeType, response: bool, mid: u32) -> HeaderRepr {
        HeaderRepr {
            spi_i: self.spi_i,
            spi_r: self.spi_r,
            next_payload: PayloadType::NONE,
            exchange,
            initiator: self.is_initiator(),
            response,
            message_id: mid,
            length: 0,
        }
    }

    /// The cipher for what we send, built for this message (see
    /// [`IkeKeys`] on why ciphers are not kept).
    fn out_cipher(&self) -> Option<IkeCipher> {
        let k = self.keys.as_ref()?;
        let c = if self.is_initiator() {
            k.cipher_i()
        } else {
            k.cipher_r()
        };
        c.ok()
    }

    /// The cipher for what the peer sends, built for this message.
    fn in_cipher(&self) -> Option<IkeCipher> {
        let k = self.keys.as_ref()?;
        let c = if self.is_initiator() {
            k.cipher_r()
        } else {
            k.cipher_i()
        };
        c.ok()
    }

    /// Build a message: cleartext for IKE_SA_INIT, SK-protected otherwise.
    pub(crate) fn encode(
        &mut self,
        exchange: ExchangeType,
        response: bool,
        mid: u32,
        payloads: &[PayloadRepr<'_>],
    ) -> Result<Vec<u8>, Reason> {
        let h = self.header(exchange, response, mid);
        let mut out = Vec::new();
        if exchange == ExchangeType::IKE_SA_INIT {
            emit_message(&h, payloads, &mut out).map_err(|_| Reason::Local("message too large"))?;
            return Ok(out);
        }
        let cipher = self
            .out_cipher()
            .ok_or(Reason::Local("no keys to protect a message"))?;
        let layout = layout(&cipher);
        if let Some(max) = self.fragment_len() {
            let whole = HEADER_LEN + GENERIC_HEADER_LEN + layout.body_len(payloads_len(payloads));
            if whole > max {
                let frags = emit_fragments(&h, payloads, &layout, max, &mut out)
                    .map_err(|_| Reason::Local("message too large"))?;
                for (range, off) in frags {
                    cipher
                        .seal_sk(&mut out[range], off, self.iv_seed)
                        .map_err(|_| Reason::Local("sealing failed"))?;
                    self.iv_seed += 1;
                }
                return Ok(out);
            }
        }
        let off = emit_encrypted(&h, payloads, &layout, &mut out)
            .map_err(|_| Reason::Local("message too large"))?;
        cipher
            .seal_sk(&mut out, off, self.iv_seed)
            .map_err(|_| Reason::Local("sealing failed"))?;
        self.iv_seed += 1;
        Ok(out)
    }

    /// The longest IKE message of ours that goes out whole, if the peer
    /// takes fragments and the connection sends them: `fragment_size`
    /// less the IP and UDP headers and the non-ESP marker (RFC 7383
    /// §2.5.1; the marker is counted on port 500 too, where it is not
    /// sent: four octets of slack).
    fn fragment_len(&self) -> Option<usize> {
        let size = self.fragmentation?;
        if self.conn.fragmentation != Fragmentation::Yes {
            return None;
        }
        let ip = if self.remote.is_ipv6() { 40 } else { 20 };
        Some(size.saturating_sub(ip + 8 + NON_ESP_MARKER.len()))
    }

    /// Verify and decrypt a received message's SK payload in a private
    /// copy. A fragment (SKF) is kept until its message is whole: `None`
    /// until then.
    pub(crate) fn open(
        &mut self,
        ctx: &mut Ctx<'_>,
        data: &[u8],
        msg: &Message<'_>,
    ) -> Result<Option<Opened>, Drop> {
        let o = self.decrypt(data, msg)?;
        let Some(f) = msg.sk.and_then(|s| s.fragment) else {
            return Ok(Some(o));
        };
        match self
            .reassembly
            .add(ctx.now, ctx.stats, &msg.header, f, o.first, &o.buf[o.inner.clone()])
        {
            fragments::Step::Kept => Ok(None),
            fragments::Step::Complete { first, plain } => Ok(Some(Opened {
                inner: 0..plain.len(),
                buf: plain,
                first,
            })),
            fragments::Step::Dropped(why) => {
                tracing::debug!(ike_sa = %self.id, mid = msg.header.message_id,
                    fragment = f.number, total = f.total, "IKE fragment dropped: {why}");
                Ok(None)
            }
        }
    }

    /// Verify and decrypt one datagram's SK payload, or SKF fragment, in a
    /// private copy.
    pub(crate) fn decrypt(&self, data: &[u8], msg: &Message<'_>) -> Result<Opened, Drop> {
        let sk = msg.sk.ok_or(Drop::NotProtected)?;
        let cipher = self.in_cipher().ok_or(Drop::NotProtected)?;
        sk.check(&layout(&cipher)).map_err(|_| Drop::Integrity)?;
        let mut buf = data.to_vec();
        let plain = cipher
            .open_sk(&mut buf, sk.offset)
            .map_err(|_| Drop::Integrity)?;
        let inner_len = strip_padding(&buf[plain.clone()])
            .map_err(|_| Drop::Integrity)?
            .len();
        Ok(Opened {
            buf,
            inner: plain.start..plain.start + inner_len,
            first: sk.first_inner,
        })
    }

    /// Queue a packet to the peer — one message, or a fragmented one's
    /// fragments, a datagram each — with the non-ESP marker on the NAT-T port.
    pub(crate) fn transmit(&self, ctx: &mut Ctx<'_>, packet: &[u8]) {
        self.transmit_to(ctx, self.local, self.remote, packet);
    }

    /// Move IKE to the NAT-T port: once NAT detection finds a NAT (or we
    /// force encapsulation), the initiator continues on UDP 4500 from
    /// IKE_AUTH on (RFC 7296 §2.23, RFC 3948).
    pub(crate) fn float(&mut self, ctx: &Ctx<'_>) {
        let p = ctx.config.natt_port;
        if self.local.port() != p {
            self.local.set_port(p);
            self.remote.set_port(p);
        }
    }

    /// UDP encapsulation for ESP: a NAT on the path or forced.
    pub(crate) fn encap(&self) -> bool {
        self.nat.any() || self.conn.encap
    }

    /// Delete the SA: report every Child SA gone, release their SPIs, report
    /// the IKE SA gone (if the driver ever heard of it), mark it dead.
    pub(crate) fn die(&mut self, ctx: &mut Ctx<'_>, reason: Reason) {
        if self.state == State::Dead {
            return;
        }
        self.reassembly.clear(ctx.stats);
        self.after_death(ctx, reason);
        if self.successor.is_some() {
            // Rekeyed: the successor inherits the Child SAs and the tasks
            // waiting for them (`Action::Inherit`), not the grave.
            let (keep, drop): (VecDeque<Task>, VecDeque<Task>) =
                self.queue.drain(..).partition(|t| !t.is_exclusive());
            self.queue = keep;
            for t in drop {
                t.release(ctx);
            }
        } else {
            self.drop_children(ctx, reason);
        }
        // Tasks waiting with an inbound SPI allocated give it back.
        for p in self.pending.drain(..) {
            p.task.release(ctx);
        }
        if self.successor.is_none() {
            for t in self.queue.drain(..) {
                t.release(ctx);
            }
        }
        // A peer's crossed rekey (§2.8.2) now has nothing to inherit; its
        // SA retires on its own timer unless the peer deletes it.
        self.peer_rekey = None;
        if self.superseded {
            tracing::debug!(ike_sa = %self.id, ?reason, "replaced IKE_SA gone");
        } else if self.is_initiator() || self.announced {
            ctx.events.push_back(Event::IkeSaDeleted {
                ike_sa: self.id,
                connection: Some(self.conn.name.clone()),
                reason,
            });
        }
        tracing::info!(ike_sa = %self.id, peer = %self.remote, ?reason, "IKE_SA deleted");
        self.state = State::Dead;
    }

    /// Ask the endpoint to initiate the connection again if its
    /// `dpd_action` / `close_action` say so for `reason`
    /// ([`crate::lifetime::after_death`]). Not for an SA a rekey replaced
    /// (its successor lives on), and a peer's Delete counts only on an
    /// established SA: one that never authenticated was refused, not
    /// closed, and retrying it at once would not change the answer. Nor
    /// for an SA of a connection a reconfiguration retired (the one held
    /// under its name now, if any, is not the one it ran).
    fn after_death(&self, ctx: &mut Ctx<'_>, reason: Reason) {
        let retired = ctx
            .connections
            .get(&self.conn.name)
            .is_none_or(|c| !Arc::ptr_eq(c, &self.conn));
        if retired
            || self.superseded
            || self.successor.is_some()
            || self.conn.after_death(reason) != crate::lifetime::AfterDeath::Initiate
            || (reason == Reason::DeletedByPeer && self.state != State::Established)
        {
            return;
        }
        let children = self
            .conn
            .children
            .iter()
            .filter(|c| {
                c.start_action == crate::config::StartAction::Start
                    || self.children.iter().any(|k| k.name == c.name)
                    || self
                        .queue
                        .iter()
                        .chain(self.pending.iter().map(|p| &p.task))
                        .any(|t| t.creates_child(&c.name))
            })
            .map(|c| c.name.clone())
            .collect();
        ctx.actions.push(crate::ctx::Action::Reinitiate {
            connection: self.conn.name.clone(),
            children,
        });
    }

    /// Report every Child SA gone and release their SPIs.
    pub(crate) fn drop_children(&mut self, ctx: &mut Ctx<'_>, reason: Reason) {
        for c in std::mem::take(&mut self.children) {
            ctx.spis.release(c.inbound_spi);
            self.announce_deleted(ctx, c, reason);
        }
    }

    /// Queue a task and send it if the window allows.
    pub(crate) fn start_task(&mut self, ctx: &mut Ctx<'_>, task: Task) {
        self.queue.push_back(task);
        self.send_next(ctx);
    }

    /// May a request with message ID `next_mid` go out now? §2.3: "if the
    /// responder stated its window size is N, then when the initiator
    /// needs to make a request X, it MUST wait until it has received
    /// responses to all requests up through request X-N."
    fn window_open(&self) -> bool {
        let window = self.peer_window.clamp(1, crate::lifetime::MAX_WINDOW);
        self.pending
            .iter()
            .map(|p| p.mid)
            .min()
            .is_none_or(|oldest| self.next_mid < oldest.saturating_add(window))
    }

    /// Send queued tasks while the window has room. An IKE SA rekey or
    /// delete goes alone: §1.3.2 ("it SHOULD NOT start any new
    /// CREATE_CHILD_SA exchanges on the IKE SA that is being rekeyed"),
    /// §2.25.1 (a rekey request meeting a Child SA exchange gets
    /// TEMPORARY_FAILURE), §2.8 (the delete "MUST be the last request").
    pub(crate) fn send_next(&mut self, ctx: &mut Ctx<'_>) {
        while self.state != State::Dead && !self.waiting {
            let Some(next) = self.queue.front() else {
                return;
            };
            if self.pending.iter().any(|p| p.task.is_exclusive())
                || (next.is_exclusive() && !self.pending.is_empty())
                || !self.window_open()
            {
                return;
            }
            let Some(task) = self.queue.pop_front() else {
                return;
            };
            crate::exchange::send(self, ctx, task);
        }
    }

    /// Free the request queues once idle: an established IKE SA spends
    /// nearly all its life without a request in flight, and a `VecDeque`
    /// keeps its first allocation (four tasks) for good otherwise — a
    /// kilobyte and a half per tunnel.
    pub(crate) fn shrink_idle(&mut self) {
        if self.pending.is_empty() && self.pending.capacity() > 0 {
            self.pending = VecDeque::new();
        }
        if self.queue.is_empty() && self.queue.capacity() > 0 {
            self.queue = VecDeque::new();
        }
    }

    /// Hold a new Child SA. Most IKE SAs hold one or two for life, so the
    /// vector grows one slot at a time at first instead of Vec's four
    /// (half a kilobyte per tunnel).
    pub(crate) fn add_child(&mut self, child: ChildSa) {
        if self.children.len() < 4 {
            self.children.reserve_exact(1);
        }
        self.children.push(child);
    }

    /// The child with our inbound SPI `spi`.
    pub(crate) fn child_by_inbound(&self, spi: u32) -> Option<usize> {
        self.children.iter().position(|c| c.inbound_spi == spi)
    }

    /// Is a task about Child SAs in flight (§2.25.1)?
    pub(crate) fn child_exchange_pending(&self) -> bool {
        self.pending.iter().any(|p| p.task.is_child_exchange())
    }

    /// Is an IKE SA rekey or delete of ours in flight?
    pub(crate) fn ike_exchange_pending(&self) -> bool {
        self.pending.iter().any(|p| p.task.is_exclusive())
    }

    /// The RFC 9611 record for a child configuration.
    pub(crate) fn resource_group(&mut self, child: &std::sync::Arc<str>) -> &mut ResourceGroup {
        let i = match self.resources.iter().position(|g| g.child == *child) {
            Some(i) => i,
            None => {
                self.resources.push(ResourceGroup {
                    child: child.clone(),
                    supported: false,
                    closed: false,
                    wanted: Vec::new(),
                });
                self.resources.len() - 1
            }
        };
        &mut self.resources[i]
    }
}

/// SET_WINDOW_SIZE's data for our window, if above one (§2.3: "The data
/// associated with a SET_WINDOW_SIZE notification MUST be 4 octets long
/// and contain the big endian representation of the number of messages the
/// sender promises to keep").
pub(crate) fn window_notify(config: &EndpointConfig) -> Option<[u8; 4]> {
    let w = config.window_size.clamp(1, MAX_WINDOW);
    (w > 1).then(|| w.to_be_bytes())
}

/// The peer's window from its SET_WINDOW_SIZE (1 without one).
pub(crate) fn peer_window(announced: Option<u32>) -> u32 {
    announced.unwrap_or(1).clamp(1, MAX_WINDOW)
}
