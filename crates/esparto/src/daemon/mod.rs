//! The daemon: `esparto run`.
//!
//! [`Gateway`] owns the data plane (TUN, sockets, workers) and installs
//! children into it ([`install`]); [`run`] is the control thread's loop.

pub mod fault;
mod gateway;
pub mod ike;
mod ike_events;
pub mod install;
mod run;
mod seqstate;

pub use gateway::Gateway;
pub use install::{ChildParams, SaPair, Slot};
pub use run::run;
pub use seqstate::{MAX_SEQ, STATE_FILE, STEP, STEP_ESN, check_static_keys};
