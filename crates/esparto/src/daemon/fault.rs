//! Fault injection for tests: makes a real worker panic, so that a test
//! can check that the daemon stops, names the worker and the panic, and
//! exits non-zero.
//!
//! Compiled only with the cargo feature `fault-injection` (the test suite
//! turns it on; a release build has no trace of it), and then armed only
//! by the environment variable [`ENV`] — never by the configuration file
//! or anything from the network. `ESPARTO_FAULT_PANIC_WORKER=K@MS` makes
//! worker `K` panic at its first tick `MS` milliseconds or more after
//! start (`K` alone: at its first tick).

use crate::datapath::EspDatapath;

/// The environment variable that arms the fault.
#[cfg_attr(not(feature = "fault-injection"), allow(dead_code))]
pub const ENV: &str = "ESPARTO_FAULT_PANIC_WORKER";

/// Without the feature: the datapaths as they are.
#[cfg(not(feature = "fault-injection"))]
pub(super) fn inject(datapaths: Vec<EspDatapath>) -> Vec<EspDatapath> {
    datapaths
}

/// With the feature: every datapath wrapped, the one named by [`ENV`]
/// armed.
#[cfg(feature = "fault-injection")]
pub(super) fn inject(datapaths: Vec<EspDatapath>) -> Vec<imp::Faulty> {
    imp::wrap(datapaths, std::env::var(ENV).ok().as_deref())
}

#[cfg(feature = "fault-injection")]
mod imp {
    use std::time::{Duration, Instant};

    use esparto_io::worker::IoStats;
    use esparto_io::{Datapath, RxBatch, TxBatch};

    use crate::datapath::{EspCommand, EspDatapath};

    /// An [`EspDatapath`] that may be armed to panic.
    pub(crate) struct Faulty {
        inner: EspDatapath,
        index: usize,
        panic_at: Option<Instant>,
    }

    /// `K` or `K@MS`.
    fn parse(spec: &str) -> Option<(usize, Duration)> {
        let (k, ms) = spec.split_once('@').unwrap_or((spec, "0"));
        Some((k.trim().parse().ok()?, Duration::from_millis(ms.trim().parse().ok()?)))
    }

    pub(super) fn wrap(datapaths: Vec<EspDatapath>, spec: Option<&str>) -> Vec<Faulty> {
        let armed = spec.and_then(parse);
        let now = Instant::now();
        datapaths
            .into_iter()
            .enumerate()
            .map(|(index, inner)| Faulty {
                inner,
                index,
                panic_at: armed.and_then(|(k, after)| (k == index).then_some(now + after)),
            })
            .collect()
    }

    impl Datapath for Faulty {
        type Command = EspCommand;

        fn on_command(&mut self, now: Instant, cmd: EspCommand, io: &IoStats) {
            self.inner.on_command(now, cmd, io);
        }

        fn outbound(
            &mut self,
            now: Instant,
            pkts: &mut RxBatch,
            from: usize,
            out: &mut TxBatch,
            to_tun: &mut TxBatch,
        ) -> usize {
            self.inner.outbound(now, pkts, from, out, to_tun)
        }

        fn inbound(
            &mut self,
            now: Instant,
            dgrams: &mut RxBatch,
            from: usize,
            to_tun: &mut TxBatch,
            to_control: &mut TxBatch,
        ) -> usize {
            self.inner.inbound(now, dgrams, from, to_tun, to_control)
        }

        fn on_send_pushback(&mut self) {
            self.inner.on_send_pushback();
        }

        fn wants_link_verdicts(&self) -> bool {
            self.inner.wants_link_verdicts()
        }

        fn on_link(&mut self, verdict: esparto_io::link::LinkVerdict) {
            self.inner.on_link(verdict);
        }

        fn on_tick(&mut self, now: Instant) {
            if self.panic_at.is_some_and(|t| now >= t) {
                panic!("fault injected by {} in worker {}", super::ENV, self.index);
            }
            self.inner.on_tick(now);
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn specs_parse() {
            assert_eq!(parse("1"), Some((1, Duration::ZERO)));
            assert_eq!(parse("0@1500"), Some((0, Duration::from_millis(1500))));
            assert_eq!(parse("x"), None);
            assert_eq!(parse("1@soon"), None);
        }
    }
}
