//! Esparto's IKEv2 control plane (RFC 7296), sans-IO.
#![forbid(unsafe_code)]

pub mod config;
pub mod identity;
pub mod keys;
pub mod nat;
pub mod proposal;
pub mod rules;
pub mod spi;
pub mod ts;
