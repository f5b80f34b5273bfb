//! Esparto's IKEv2 control plane (RFC 7296), sans-IO.
#![forbid(unsafe_code)]

pub mod config;
pub mod identity;
pub mod proposal;
pub mod ts;
