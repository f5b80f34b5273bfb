//! One IKE SA: its identity, keys, message-ID windows, retransmission
//! state, Child SAs and timers (RFC 7296 §2.1–§2.4).
//!
//! The IKE SA is the unit of state in the endpoint. It is created by
//! [`crate::Endpoint::initiate`] (original initiator) or by an IKE_SA_INIT
//! request that the responder accepts, and from then on every datagram
//! with its SPI and every timer that fires for it comes here.
//!
//! Messages we *send* as requests are driven by tasks ([`crate::task`]):
//! one exchange per task, strongSwan style, with a queue for what waits
//! its turn. Message IDs and the window are kept as §2.3 says: requests
//! carry consecutive IDs from 0, responses echo the request's ID, and a
//! peer's request whose ID we already answered gets the cached response
//! again (§2.1: the responder retransmits its response when the request
//! is retransmitted, and never on a timer of its own). The
//! window is one today, but outstanding requests and cached responses are
//! kept in queues sized by the window so SET_WINDOW_SIZE (§2.3) only has
//! to change a number.
//!
//! Messages we *receive* are decrypted in a private copy ([`IkeSa::open`]):
//! the SK payload is opened in place, so the caller's datagram stays
//! untouched, and nothing is processed before the ICV has verified.

mod auth_responder;
mod child_responder;
mod requests;

pub(crate) use requests::Dropped;

use crate::child::ChildSa;
use crate::config::Connection;
use crate::ctx::Ctx;
use crate::event::{Event, IkeSaId, Reason, Transmit};
use crate::identity::Identity;
use crate::keys::IkeKeys;
use crate::nat::NatState;
use crate::proposal::Selected;
use crate::task::Task;
use core::net::SocketAddr;
use core::ops::Range;
use esparto_crypto::ike::IkeCipher;
use esparto_wire::ike::{
    ExchangeType, HeaderRepr, Message, PayloadRepr, PayloadType, SkLayout, emit_encrypted,
    emit_message, parse_payloads, strip_padding,
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
}

/// How many requests we keep in flight and responses we cache (§2.3).
pub(crate) const WINDOW: usize = 1;

/// One IKE SA.
pub(crate) struct IkeSa {
    pub(crate) id: IkeSaId,
    pub(crate) role: Role,
    pub(crate) spi_i: u64,
    pub(crate) spi_r: u64,
    /// The connection (initiator: from the start; responder: the best
    /// candidate after IKE_SA_INIT, final after IKE_AUTH).
    pub(crate) conn: Arc<Connection>,
    pub(crate) local: SocketAddr,
    pub(crate) remote: SocketAddr,
    pub(crate) state: State,
    pub(crate) suite: Option<Selected>,
    pub(crate) keys: Option<IkeKeys>,
    pub(crate) ni: Vec<u8>,
    pub(crate) nr: Vec<u8>,
    /// RealMessage1 and RealMessage2 for AUTH (§2.15), dropped after IKE_AUTH.
    pub(crate) init_request: Vec<u8>,
    pub(crate) init_response: Vec<u8>,
    pub(crate) nat: NatState,
    pub(crate) local_id: Option<Identity>,
    pub(crate) remote_id: Option<Identity>,
    /// We reported this SA to the driver (established or failed auth).
    pub(crate) announced: bool,
    pub(crate) next_mid: u32,
    pub(crate) pending: VecDeque<Pending>,
    pub(crate) queue: VecDeque<Task>,
    pub(crate) expected_mid: u32,
    pub(crate) responses: VecDeque<(u32, Vec<u8>)>,
    /// IV seed for our SK payloads: a per-SA message counter (never repeats).
    pub(crate) iv_seed: u64,
    pub(crate) children: Vec<ChildSa>,
    pub(crate) last_heard: Instant,
    pub(crate) half_open_deadline: Option<Instant>,
    pub(crate) next_keepalive: Option<Instant>,
    /// The deadline last pushed onto the endpoint's timer heap.
    pub(crate) scheduled: Option<Instant>,
    /// Responder: the `(peer, SPIi)` key under which retransmitted
    /// IKE_SA_INIT requests find this SA until it is established.
    pub(crate) half_open_key: Option<(SocketAddr, u64)>,
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
        conn: Arc<Connection>,
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
            ni: Vec::new(),
            nr: Vec::new(),
            init_request: Vec::new(),
            init_response: Vec::new(),
            nat: NatState::default(),
            local_id: None,
            remote_id: None,
            announced: false,
            next_mid: 0,
            pending: VecDeque::with_capacity(WINDOW),
            queue: VecDeque::new(),
            expected_mid: 0,
            responses: VecDeque::with_capacity(WINDOW),
            iv_seed: 1,
            children: Vec::new(),
            last_heard: now,
            half_open_deadline: None,
            next_keepalive: None,
            scheduled: None,
            half_open_key: None,
        }
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

    fn out_cipher(&self) -> Option<&IkeCipher> {
        let k = self.keys.as_ref()?;
        Some(if self.is_initiator() {
            &k.cipher_i
        } else {
            &k.cipher_r
        })
    }

    fn in_cipher(&self) -> Option<&IkeCipher> {
        let k = self.keys.as_ref()?;
        Some(if self.is_initiator() {
            &k.cipher_r
        } else {
            &k.cipher_i
        })
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
        let seed = self.iv_seed;
        let cipher = self
            .out_cipher()
            .ok_or(Reason::Local("no keys to protect a message"))?;
        let off = emit_encrypted(&h, payloads, &layout(cipher), &mut out)
            .map_err(|_| Reason::Local("message too large"))?;
        cipher
            .seal_sk(&mut out, off, seed)
            .map_err(|_| Reason::Local("sealing failed"))?;
        self.iv_seed += 1;
        Ok(out)
    }

    /// Verify and decrypt a received message's SK payload in a private copy.
    pub(crate) fn open(&self, data: &[u8], msg: &Message<'_>) -> Result<Opened, Drop> {
        let sk = msg.sk.ok_or(Drop::NotProtected)?;
        let cipher = self.in_cipher().ok_or(Drop::NotProtected)?;
        sk.check(&layout(cipher)).map_err(|_| Drop::Integrity)?;
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

    /// Queue a datagram to the peer, with the non-ESP marker on the NAT-T port.
    pub(crate) fn transmit(&self, ctx: &mut Ctx<'_>, packet: &[u8]) {
        let mut data = Vec::with_capacity(packet.len() + 4);
        if self.local.port() == ctx.config.natt_port {
            // RFC 3948 §2.2: IKE on the NAT-T port starts with four zero octets.
            data.extend_from_slice(&[0; 4]);
        }
        data.extend_from_slice(packet);
        ctx.transmits.push_back(Transmit {
            local: self.local,
            remote: self.remote,
            data,
        });
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
        for c in self.children.drain(..) {
            ctx.spis.release(c.inbound_spi);
            ctx.events.push_back(Event::ChildSaDeleted {
                ike_sa: self.id,
                connection: self.conn.name.clone(),
                child: c.name,
                inbound_spi: c.inbound_spi,
                outbound_spi: c.outbound_spi,
                reason,
            });
        }
        // Tasks waiting with an inbound SPI allocated give it back.
        for p in self.pending.drain(..) {
            p.task.release(ctx);
        }
        for t in self.queue.drain(..) {
            t.release(ctx);
        }
        if self.is_initiator() || self.announced {
            ctx.events.push_back(Event::IkeSaDeleted {
                ike_sa: self.id,
                connection: Some(self.conn.name.clone()),
                reason,
            });
        }
        tracing::info!(ike_sa = %self.id, peer = %self.remote, ?reason, "IKE_SA deleted");
        self.state = State::Dead;
    }

    /// The earliest time this SA needs `on_timeout`.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        let mut t = self.pending.front().map(|p| p.deadline);
        for d in [
            self.half_open_deadline,
            self.next_keepalive,
            self.dpd_deadline(),
        ] {
            t = match (t, d) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        t
    }

    fn dpd_deadline(&self) -> Option<Instant> {
        if self.state != State::Established || !self.pending.is_empty() || !self.queue.is_empty() {
            return None;
        }
        self.conn.dpd_delay.map(|d| self.last_heard + d)
    }

    /// Timers: retransmission and give-up (§2.1, §2.4), half-open expiry,
    /// NAT keepalives (RFC 3948 §2.3), liveness checks.
    pub(crate) fn on_timeout(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now;
        if self.half_open_deadline.is_some_and(|d| d <= now) {
            self.half_open_deadline = None;
            if self.state != State::Established {
                tracing::debug!(ike_sa = %self.id, peer = %self.remote, "half-open IKE_SA expired");
                self.die(ctx, Reason::HalfOpenExpired);
                return;
            }
        }
        if let Some(front) = self.pending.front_mut() {
            if front.deadline <= now {
                if front.sent > ctx.config.retransmit.tries {
                    tracing::info!(ike_sa = %self.id, peer = %self.remote, mid = front.mid,
                        "giving up after {} retransmissions", front.sent - 1);
                    self.die(ctx, Reason::Timeout);
                    return;
                }
                front.deadline = now + ctx.config.retransmit.timeout_after(front.sent);
                front.sent += 1;
                tracing::debug!(ike_sa = %self.id, mid = front.mid, sent = front.sent, "retransmit");
                let packet = front.packet.clone();
                self.transmit(ctx, &packet);
            }
        }
        if let Some(k) = self.next_keepalive {
            if k <= now {
                if self.nat.local_behind_nat && self.state == State::Established {
                    // RFC 3948 §2.3: a single 0xFF octet, no marker.
                    let remote = self.remote;
                    ctx.transmits.push_back(Transmit {
                        local: self.local,
                        remote,
                        data: vec![0xff],
                    });
                }
                self.next_keepalive = Some(now + ctx.config.keepalive_interval);
            }
        }
        if self.dpd_deadline().is_some_and(|d| d <= now) {
            // Restart the idle clock so a liveness check that cannot even
            // be built does not fire again at once.
            self.last_heard = now;
            self.start_task(ctx, Task::Liveness);
        }
    }

    /// Queue a task and send it if the window allows.
    pub(crate) fn start_task(&mut self, ctx: &mut Ctx<'_>, task: Task) {
        self.queue.push_back(task);
        self.send_next(ctx);
    }

    /// Send queued tasks while the window has room.
    pub(crate) fn send_next(&mut self, ctx: &mut Ctx<'_>) {
        while self.pending.len() < WINDOW && self.state != State::Dead {
            let Some(task) = self.queue.pop_front() else {
                return;
            };
            crate::task::send(self, ctx, task);
        }
    }

    /// The child with our inbound SPI `spi`.
    pub(crate) fn child_by_inbound(&self, spi: u32) -> Option<usize> {
        self.children.iter().position(|c| c.inbound_spi == spi)
    }

    /// Remove children by index set, reporting and releasing each.
    pub(crate) fn remove_child(&mut self, ctx: &mut Ctx<'_>, idx: usize, reason: Reason) {
        let c = self.children.remove(idx);
        ctx.spis.release(c.inbound_spi);
        tracing::info!(ike_sa = %self.id, child = %c.name,
            inbound_spi = format_args!("{:08x}", c.inbound_spi), ?reason, "CHILD_SA deleted");
        ctx.events.push_back(Event::ChildSaDeleted {
            ike_sa: self.id,
            connection: self.conn.name.clone(),
            child: c.name,
            inbound_spi: c.inbound_spi,
            outbound_spi: c.outbound_spi,
            reason,
        });
    }
}
