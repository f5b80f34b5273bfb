//! VICI, strongSwan's control protocol, so that `swanctl` and the `vici`
//! client libraries (Python `vici`, Go `govici`, exporters and web UIs
//! built on them) drive Esparto unchanged.
//!
//! The socket is `[daemon] vici` (by default `charon.vici` beside the
//! control socket: `/run/esparto/charon.vici`), mode 0600 like the
//! control socket; `swanctl --uri unix:///run/esparto/charon.vici …`
//! talks to it.
//!
//! # How it runs
//!
//! A thread of its own (`esparto-vici`) accepts clients, and each client
//! gets a thread ([`MAX_CLIENTS`] at most; more are closed at once, the
//! protocol having no way to say why). A client thread reads one segment
//! at a time, answers it, and only then reads the next, so one command is
//! active per connection, as the protocol requires, and a client that
//! does not read what it is sent blocks only its own thread — and is
//! dropped after [`WRITE_TIMEOUT`]. Memory per client is bounded by one
//! segment ([`MAX_SEGMENT`]) and the answer being written.
//!
//! Commands reach the daemon through its control socket ([`control`]):
//! a client thread is one more control client, so everything the control
//! socket promises the control loop (non-blocking, bounded buffers, a
//! limit on clients) holds for VICI too, and the control loop never waits
//! for a VICI client. [`commands`] maps each VICI command to control
//! requests and their answers back to the keys strongSwan documents.
//!
//! # Events
//!
//! The list events and `control-log` answer a command and go out before
//! its answer. `ike-updown`, `child-updown`, `ike-rekey`, `child-rekey`
//! and `log` come from the daemon at any time: a client registered for
//! one of them opens the daemon's event stream (a control request,
//! `events`), and its thread waits for either the client or that stream
//! (`poll(2)`), forwarding the events between commands. The daemon keeps
//! at most a bounded queue per stream and counts what a slow client lost.
//!
//! # Timeouts
//!
//! A client must send its first packet within [`FIRST_PACKET_TIMEOUT`],
//! and finish a segment it started within [`SEGMENT_TIMEOUT`]. Between
//! packets it may stay idle as long as it likes (`swanctl --log` and
//! exporters keep connections open): an idle client costs a thread and
//! a socket, and there are at most [`MAX_CLIENTS`].
//!
//! [`control`]: crate::control
//! [`MAX_SEGMENT`]: esparto_wire::vici::MAX_SEGMENT

pub mod commands;
mod creds;
mod load;
mod server;

pub use creds::authority_value;
pub use load::{conn_tree, shared_value};

pub use server::{
    FIRST_PACKET_TIMEOUT, MAX_CLIENTS, SEGMENT_TIMEOUT, ViciServer, WRITE_TIMEOUT,
};
