//! Esparto: a site-to-site IPsec VPN gateway that runs in userspace.
//!
//! This crate is the binary's library: the command line ([`cli`]), the
//! configuration ([`config`]), the daemon, the ESP datapath its workers run
//! ([`datapath`]), the status model ([`status`]) and its Prometheus
//! exposition ([`metrics`]), the in-process
//! data-plane benchmark ([`bench`]), which measures the machine the gateway
//! runs on, the planner that turns saved measurements into calls and
//! cores ([`plan`]), and the benchmarks' SVG charts (`plot`, cargo feature
//! `svg`, on by default). It is the only crate of the gateway that reads files, the
//! environment and flags; the core crates take typed, validated values. The
//! test bed (two gateways in network namespaces, the demo, the end-to-end
//! benchmarks) is the `esparto-testbed` crate, which runs this binary as a
//! separate process.

pub mod bench;
pub mod cli;
pub mod config;
pub mod control;
pub mod daemon;
pub mod datapath;
pub mod metrics;
pub mod plan;
#[cfg(feature = "svg")]
pub mod plot;
pub mod render;
mod selector;
pub mod status;
