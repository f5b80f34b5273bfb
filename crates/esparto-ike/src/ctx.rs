//! The endpoint state an IKE SA may touch while it handles one input.
//!
//! An [`crate::Endpoint`] owns every IKE SA plus the shared pieces (clock
//! reading, configuration, randomness, SPI allocator, output queues). While
//! one SA handles a datagram or a timeout it borrows those through a
//! [`Ctx`], so SA code never reaches into the endpoint and two SAs never
//! touch each other.

use crate::config::{Connection, EndpointConfig, Secrets};
use crate::event::{Event, Transmit};
use crate::spi::SpiAllocator;
use esparto_crypto::Rng;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

/// Borrowed endpoint state for one step of one SA.
pub(crate) struct Ctx<'a> {
    /// The time of this input.
    pub(crate) now: Instant,
    /// Endpoint settings.
    pub(crate) config: &'a EndpointConfig,
    /// All connections (responders search them).
    pub(crate) connections: &'a [Arc<Connection>],
    /// PSKs.
    pub(crate) secrets: &'a Secrets,
    /// Injected randomness.
    pub(crate) rng: &'a mut dyn Rng,
    /// Inbound ESP SPI allocation.
    pub(crate) spis: &'a mut dyn SpiAllocator,
    /// Datagrams to send.
    pub(crate) transmits: &'a mut VecDeque<Transmit>,
    /// Events for the driver.
    pub(crate) events: &'a mut VecDeque<Event>,
}
