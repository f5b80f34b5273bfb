//! The daemon: `esparto run`.

mod gateway;
mod run;

pub use gateway::Gateway;
pub use run::run;
