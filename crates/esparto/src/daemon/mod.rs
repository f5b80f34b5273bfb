//! The daemon: `esparto run`.

mod gateway;

pub use gateway::Gateway;
