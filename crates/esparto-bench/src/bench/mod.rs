//! `esparto bench dataplane` and `esparto bench ipcomp`: the data plane
//! and IPComp's DEFLATE measured in process, on the machine the gateway
//! runs on. (The end-to-end benchmarks through two
//! gateways are the test bed's: `esparto-testbed bench tunnel|setup`.)
//!
//! Speed is measured here and not in tests: these machines are shared and
//! noisy, so every benchmark reports ratios measured side by side in one
//! run and medians of several runs.
//!
//! [`dataplane`] and [`ipcomp`] measure, [`command`] is their command
//! lines; [`corpus`] is the traffic IPComp is measured on (the test bed's
//! `bench ipcomp` sends the same bytes), [`packet`] the inner packets of
//! the data-plane benchmark, [`tsc`] the cycle counter's rate.

pub mod command;
pub mod corpus;
pub mod dataplane;
pub mod ipcomp;
pub mod packet;
pub mod tsc;

pub use command::BenchCmd;

/// The median of `xs` (0 for none).
pub fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_even_and_empty() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
    }
}
