//! The endpoint state an IKE SA may touch while it handles one input.
//!
//! An [`crate::Endpoint`] owns every IKE SA plus the shared pieces (clock
//! reading, configuration, randomness, SPI allocator, output queues). While
//! one SA handles a datagram or a timeout it borrows those through a
//! [`Ctx`], so SA code never reaches into the endpoint and two SAs never
//! touch each other. What does concern other SAs — an IKE SA born from a
//! rekey, Child SAs moving to it, INITIAL_CONTACT or the `unique` policy
//! deleting other SAs, a
//! connection to initiate again after its IKE SA died — the
//! SA asks for as an [`Action`], which the endpoint carries out after the
//! step.

use crate::activity::InboundActivity;
use crate::config::EndpointConfig;
use crate::connections::Connections;
use crate::event::{Event, Transmit};
use crate::psk::Psks;
use crate::sa::IkeSa;
use crate::spi::SpiAllocator;
use esparto_crypto::Rng;
use std::collections::{HashSet, VecDeque};
use std::time::Instant;

/// Borrowed endpoint state for one step of one SA.
pub(crate) struct Ctx<'a> {
    /// The time of this input.
    pub(crate) now: Instant,
    /// Endpoint settings.
    pub(crate) config: &'a EndpointConfig,
    /// All connections, indexed (responders search them).
    pub(crate) connections: &'a Connections,
    /// PSKs, indexed by identity.
    pub(crate) psks: &'a Psks,
    /// Injected randomness.
    pub(crate) rng: &'a mut dyn Rng,
    /// Inbound ESP SPI allocation.
    pub(crate) spis: &'a mut dyn SpiAllocator,
    /// When the data plane last accepted ESP on each inbound SA.
    pub(crate) activity: &'a dyn InboundActivity,
    /// Datagrams to send.
    pub(crate) transmits: &'a mut VecDeque<Transmit>,
    /// Events for the driver.
    pub(crate) events: &'a mut VecDeque<Event>,
    /// IKE SPIs in use or reserved (for a rekey under way): new ones must
    /// avoid them (§2.6).
    pub(crate) ike_spis: &'a mut HashSet<u64>,
    /// Work for the endpoint once this step is over.
    pub(crate) actions: &'a mut Vec<Action>,
    /// The endpoint's counters.
    pub(crate) stats: &'a mut crate::endpoint::Stats,
    /// Which IKE SAs are up, by connection and identities (read only: the
    /// endpoint refiles SAs after each step).
    pub(crate) sa_index: &'a crate::endpoint::sa_index::SaIndex,
}

/// Something an SA needs done to other SAs of the endpoint.
pub(crate) enum Action {
    /// Hold this new IKE SA, born from a rekey (§1.3.2).
    Insert(Box<IkeSa>),
    /// The IKE SA `from` was rekeyed into `to` (§2.8: it "inherits all of
    /// the original IKE SA's Child SAs"): move its Child SAs and waiting
    /// tasks, report `IkeSaRekeyed`.
    Inherit {
        /// Our SPI of the old IKE SA.
        from: u64,
        /// Our SPI of the new one.
        to: u64,
    },
    /// `keep` was just authenticated and others with the same identities
    /// may have to go: with INITIAL_CONTACT (§2.4) every other IKE SA
    /// with the same pair of identities, deleted without Delete payloads
    /// (unless the connection's `unique` is `never`); without it, as a
    /// responder with `unique = replace`, the connection's others, with a
    /// Delete.
    Duplicates {
        /// The new SA.
        keep: u64,
        /// The peer sent INITIAL_CONTACT.
        initial_contact: bool,
    },
    /// An IKE SA of this connection ended in a way that calls for
    /// initiating it again ([`crate::lifetime::AfterDeath::Initiate`]):
    /// the endpoint does, with back-off (`endpoint/recovery.rs`).
    Reinitiate {
        /// The connection.
        connection: std::sync::Arc<str>,
        /// The child configurations the dead SA carried, in configuration
        /// order (the first goes into IKE_AUTH).
        children: Vec<std::sync::Arc<str>>,
    },
}

impl Ctx<'_> {
    /// A fresh IKE SPI, reserved until [`Ctx::release_ike_spi`] or until
    /// an SA with it is held by the endpoint.
    pub(crate) fn new_ike_spi(&mut self) -> u64 {
        let taken = &*self.ike_spis;
        let spi = crate::spi::ike_spi(self.rng, |s| taken.contains(&s));
        self.ike_spis.insert(spi);
        spi
    }

    /// Give back a reserved IKE SPI that no SA uses.
    pub(crate) fn release_ike_spi(&mut self, spi: u64) {
        self.ike_spis.remove(&spi);
    }
}
