//! Measurements kept: benchmark results saved as JSON files in a results
//! directory (default [`DEFAULT_DIR`]), each with the machine, the commit
//! and the date, for `esparto plan` to read back.
//!
//! Two kinds are written: `esparto bench dataplane --save` (the data plane
//! in process: cycles per byte by packet size, [`DataplaneData`]) and the
//! test bed's `esparto-testbed bench tunnel --save` (end to end: the RFC 2544
//! zero-loss packet rate by inner packet size and the gateways' CPU per GB,
//! [`TunnelData`], with the test bed's whole report kept beside it).
//! The test bed's `bench voip --save` ([`Kind::Voip`], calls measured end
//! to end) is kept for the operator and for charts; no plan reads it, nor
//! the IPComp benchmarks' (`esparto bench ipcomp --save`, [`Kind::Ipcomp`];
//! the test bed's `bench ipcomp --save`, [`Kind::IpcompTunnel`]).
//! Its rate search, `bench voip --rates SIZES --save` ([`Kind::CallRate`],
//! [`CallRateData`]), is what `plan voip` prefers: the zero-loss packet
//! rate by IP size of call-like traffic (hundreds of 5-tuples, both
//! directions, paced), a packet rate the plan turns into calls itself.
//!
//! Two parts: [`schema`], the types a file holds (the envelope
//! [`Saved`] with its [`Machine`], and each benchmark's figures), which
//! are the file format; and [`store`], which writes them and reads a
//! directory back, keeping this machine's plausible files and naming every
//! other one with the reason it was set aside. Everything of both is
//! re-exported here.

pub mod schema;
pub mod store;
#[cfg(test)]
pub(crate) mod fixtures;

pub use schema::*;
pub use store::*;
