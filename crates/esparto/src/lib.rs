//! Esparto: a site-to-site IPsec VPN gateway that runs in userspace.
//!
//! This crate is the binary's library: the command line ([`cli`]), the
//! configuration ([`config`]), the daemon, the ESP datapath its workers run
//! ([`datapath`]), the control socket ([`control`]), the status model
//! ([`status`]), its Prometheus exposition ([`metrics`]) and strongSwan's
//! control protocol for `swanctl` ([`vici`]). It is the only
//! crate of the gateway that reads files, the environment and flags; the
//! core crates take typed, validated values.
//!
//! The binary also carries `esparto bench` and `esparto plan`, which
//! measure the machine the gateway runs on and plan from what was saved;
//! their code is the `esparto-bench` crate, which the command line links
//! and the gateway never calls. The test bed (two gateways in network
//! namespaces, the demo, the end-to-end benchmarks) is the
//! `esparto-testbed` crate, which runs this binary as a separate process.

pub mod cli;
pub mod config;
pub mod control;
pub mod daemon;
pub mod datapath;
pub mod metrics;
pub mod render;
mod selector;
pub mod status;
pub mod vici;
