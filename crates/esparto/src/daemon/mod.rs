//! The daemon: `esparto run`.
//!
//! [`Gateway`] owns the data plane (TUN, sockets, workers) and installs
//! children into it ([`install`]); [`run`] is the control thread's loop.
//! Log lines that traffic can cause are limited ([`log_limit`]).

pub mod fault;
mod gateway;
pub mod ike;
mod ike_events;
pub mod install;
pub mod log_limit;
mod run;
mod seqstate;

pub use gateway::Gateway;
pub use install::{ChildParams, SaPair, Slot};
pub use run::run;
pub use seqstate::{MAX_SEQ, STATE_FILE, STEP, STEP_ESN, check_static_keys};
