//! The end-to-end benchmarks: `esparto-testbed bench tunnel` (two gateways
//! in namespaces, Esparto against strongSwan), `bench setup` (IKE
//! tunnels per second, memory per tunnel, config load scaling) and `bench
//! metrics` (a Prometheus scrape of a gateway with 10,000 Child SAs) and
//! `bench voip` (concurrent calls per codec, with delay, jitter and MOS),
//! and `bench ipcomp` (TCP goodput through IPComp on a `tc`-shaped link). The
//! in-process data-plane benchmark is the gateway's own, `esparto bench
//! dataplane`: it measures the machine the gateway runs on.
//!
//! Speed is measured here and not in tests: these machines are shared and
//! noisy, so every benchmark reports ratios measured side by side in one
//! run and medians of several runs.

pub mod callrate;
pub mod ipcomp;
pub mod metrics;
pub mod setup;
pub mod tunnel;
pub mod voip;

pub use esparto_bench::bench::median;

/// Prints a finished run: its tables on stdout, or with `json` the report
/// as JSON on stdout and the tables on stderr beside the progress (one run,
/// both forms). Fails the process if the run recorded errors.
pub(crate) fn finish<R: serde::Serialize>(
    report: &R,
    tables: &str,
    json: bool,
    ok: bool,
) -> anyhow::Result<std::process::ExitCode> {
    if json {
        eprint!("{tables}");
        println!("{}", serde_json::to_string_pretty(report)?);
    } else {
        print!("{tables}");
    }
    Ok(if ok {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    })
}
