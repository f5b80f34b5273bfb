//! Esparto's self-measurement: what this machine's data plane does, what
//! that means for an operator, and the charts that show it.
//!
//! - [`bench`](mod@bench): `esparto bench dataplane` and `esparto bench ipcomp`, the
//!   ESP data plane and IPComp's DEFLATE measured in process, through the
//!   same `esparto-esp` code the gateway's workers run;
//! - [`results`]: what a benchmark keeps with `--save` (the saved JSON
//!   types) and the store that writes them and reads back this machine's
//!   newest;
//! - [`plan`]: `esparto plan voip` and `esparto plan capacity`, the saved
//!   figures turned into calls per codec and cores per link;
//! - `plot`: SVG charts of the benchmarks (cargo feature `svg`, on by
//!   default);
//! - [`args`]: the flags every Esparto command line shares (`--json`,
//!   `--save`, `--results`, `--workers`).
//!
//! The `esparto` binary carries these commands, so that a gateway's own
//! machine can be measured and planned for; the gateway library never calls
//! them, and nothing here reads a gateway's configuration (what `plan voip
//! --config` needs of one, the command line hands in). The end-to-end
//! benchmarks, which need two gateways in network namespaces, are the test
//! bed's (`esparto-testbed`), which saves into the same store and draws
//! with the same charts.

pub mod args;
pub mod bench;
pub mod plan;
#[cfg(feature = "svg")]
pub mod plot;
pub mod results;
