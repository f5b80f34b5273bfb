//! Esparto: a site-to-site IPsec VPN gateway that runs in userspace.
//!
//! This crate is the binary's library: the command line ([`cli`]), the
//! configuration ([`config`]), the daemon, the status model ([`status`]) and
//! the benchmarks ([`bench`]). It is the only crate that reads files, the
//! environment and flags; the core crates take typed, validated values.

pub mod bench;
pub mod cli;
pub mod config;
pub mod control;
pub mod daemon;
pub mod demo;
pub mod render;
pub mod status;
pub mod testbed;
