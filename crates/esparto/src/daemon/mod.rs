//! The daemon: `esparto run`.
//!
//! [`Gateway`] owns the data plane (TUN, sockets, workers) and the Child SA
//! table ([`table`]), whose transitions say what the workers hold;
//! [`ike`] drives the IKE engine and turns its events into transitions;
//! [`run`] is the control thread's loop; [`reload`] applies a changed
//! configuration file to the running daemon; [`router`] changes the
//! tunnel's routes on a thread of their own.
//! Log lines that traffic can cause are limited ([`log_limit`]); the
//! service manager hears of readiness, reloads and stops through
//! [`notify`].

mod barrier;
mod caps;
pub mod fault;
mod gateway;
pub mod ike;
mod ike_events;
mod local_addrs;
pub mod log_limit;
mod notify;
mod reload;
mod resolver;
mod router;
mod run;
mod sa_events;
mod seqstate;
pub(crate) mod table;
pub mod watch;

pub use caps::{EXIT_REFUSED, Refused};
pub use gateway::{Gateway, Gathered};
pub use run::run;
pub use seqstate::{MAX_SEQ, STATE_FILE, STEP, STEP_ESN};
pub(crate) use seqstate::key_id;
