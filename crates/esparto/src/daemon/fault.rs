//! Fault injection for tests: real workers made to fail in ways a test
//! cannot otherwise bring about on demand.
//!
//! Compiled only with the cargo feature `fault-injection` (the test suite
//! turns it on; a release build has no trace of it), and then armed only
//! by environment variables — never by the configuration file or anything
//! from the network:
//!
//! - [`ENV`], `ESPARTO_FAULT_PANIC_WORKER=K@MS`: worker `K` panics at its
//!   first tick `MS` milliseconds or more after start (`K` alone: at its
//!   first tick). For the test that a worker's panic stops the daemon.
//! - [`ENV_STALL`], `ESPARTO_FAULT_STALL_WORKER=K@MS+DUR`: worker `K`
//!   sleeps `DUR` milliseconds, once, at its first tick `MS` or more after
//!   start, as a thread starved of CPU would: the kernel's queues in front
//!   of it fill and overflow. For the tests of what `status` shows then.
//! - [`ENV_DELAY`], `ESPARTO_FAULT_DELAY_COMMANDS=K+MS` (`*+MS`: every
//!   worker): worker `K` applies each data-plane command `MS` milliseconds
//!   after it arrives, and meanwhile goes on reading and processing
//!   packets — a control thread's installs reaching a busy worker late,
//!   the race that SA installation must be safe from. Snapshots for
//!   `status` are not held back.

use crate::datapath::EspDatapath;

/// The environment variable that makes a worker panic.
#[cfg_attr(not(feature = "fault-injection"), allow(dead_code))]
pub const ENV: &str = "ESPARTO_FAULT_PANIC_WORKER";

/// The environment variable that makes a worker stall.
#[cfg_attr(not(feature = "fault-injection"), allow(dead_code))]
pub const ENV_STALL: &str = "ESPARTO_FAULT_STALL_WORKER";

/// The environment variable that makes workers apply commands late.
#[cfg_attr(not(feature = "fault-injection"), allow(dead_code))]
pub const ENV_DELAY: &str = "ESPARTO_FAULT_DELAY_COMMANDS";

/// Without the feature: the datapaths as they are.
#[cfg(not(feature = "fault-injection"))]
pub(super) fn inject(datapaths: Vec<EspDatapath>) -> Vec<EspDatapath> {
    datapaths
}

/// With the feature: every datapath wrapped, those named by the
/// environment armed.
#[cfg(feature = "fault-injection")]
pub(super) fn inject(datapaths: Vec<EspDatapath>) -> Vec<imp::Faulty> {
    let var = |name| std::env::var(name).ok();
    imp::wrap(datapaths, &imp::Specs::parse(var(ENV).as_deref(), var(ENV_STALL).as_deref(), var(ENV_DELAY).as_deref()))
}

#[cfg(feature = "fault-injection")]
mod imp {
    use std::collections::VecDeque;
    use std::time::{Duration, Instant};

    use esparto_io::worker::IoStats;
    use esparto_io::{Datapath, RxBatch, TxBatch};
    use tracing::warn;

    use crate::datapath::{EspCommand, EspDatapath};

    /// What the environment armed.
    #[derive(Debug, Default, PartialEq, Eq)]
    pub(crate) struct Specs {
        /// Worker, and how long after start it panics.
        panic: Option<(usize, Duration)>,
        /// Worker, how long after start, and for how long it stalls.
        stall: Option<(usize, Duration, Duration)>,
        /// Worker (`None`: every one) and how late it applies commands.
        delay: Option<(Option<usize>, Duration)>,
    }

    impl Specs {
        /// From the variables' values; a value that does not parse is
        /// logged and arms nothing.
        pub(crate) fn parse(panic: Option<&str>, stall: Option<&str>, delay: Option<&str>) -> Self {
            fn armed<T>(name: &str, v: Option<&str>, p: impl Fn(&str) -> Option<T>) -> Option<T> {
                let v = v?;
                let r = p(v);
                if r.is_none() {
                    warn!("{name}={v:?} does not parse: no fault injected");
                }
                r
            }
            Self {
                panic: armed(super::ENV, panic, parse_at),
                stall: armed(super::ENV_STALL, stall, |s| {
                    let (at, dur) = s.split_once('+')?;
                    let (k, after) = parse_at(at)?;
                    Some((k, after, ms(dur)?))
                }),
                delay: armed(super::ENV_DELAY, delay, |s| {
                    let (k, d) = s.split_once('+')?;
                    let k = if k.trim() == "*" { None } else { Some(k.trim().parse().ok()?) };
                    Some((k, ms(d)?))
                }),
            }
        }
    }

    fn ms(s: &str) -> Option<Duration> {
        Some(Duration::from_millis(s.trim().parse().ok()?))
    }

    /// `K` or `K@MS`.
    fn parse_at(spec: &str) -> Option<(usize, Duration)> {
        let (k, after) = spec.split_once('@').unwrap_or((spec, "0"));
        Some((k.trim().parse().ok()?, ms(after)?))
    }

    /// An [`EspDatapath`] that may be armed to fail.
    pub(crate) struct Faulty {
        inner: EspDatapath,
        index: usize,
        panic_at: Option<Instant>,
        stall: Option<(Instant, Duration)>,
        delay: Option<Duration>,
        /// Commands held back, with when each is due and the I/O
        /// counters it came with.
        held: VecDeque<(Instant, EspCommand, IoStats)>,
    }

    pub(super) fn wrap(datapaths: Vec<EspDatapath>, specs: &Specs) -> Vec<Faulty> {
        let now = Instant::now();
        if let Some((k, d)) = specs.delay {
            let who = k.map_or_else(|| "every worker".to_string(), |k| format!("worker {k}"));
            warn!(ms = d.as_millis() as u64, "fault injected: {who} applies commands late");
        }
        datapaths
            .into_iter()
            .enumerate()
            .map(|(index, inner)| Faulty {
                inner,
                index,
                panic_at: specs.panic.and_then(|(k, after)| (k == index).then_some(now + after)),
                stall: specs.stall.and_then(|(k, after, dur)| (k == index).then_some((now + after, dur))),
                delay: specs.delay.and_then(|(k, d)| k.is_none_or(|k| k == index).then_some(d)),
                held: VecDeque::new(),
            })
            .collect()
    }

    impl Faulty {
        /// Applies the held commands that are due, in the order they came.
        fn release(&mut self, now: Instant) {
            while self.held.front().is_some_and(|(due, _, _)| *due <= now) {
                if let Some((_, cmd, io)) = self.held.pop_front() {
                    self.inner.on_command(now, cmd, &io);
                }
            }
        }
    }

    impl Datapath for Faulty {
        type Command = EspCommand;

        fn on_command(&mut self, now: Instant, cmd: EspCommand, io: &IoStats) {
            match (self.delay, cmd) {
                (Some(d), EspCommand::Esp(c)) => self.held.push_back((now + d, EspCommand::Esp(c), io.clone())),
                (_, cmd) => self.inner.on_command(now, cmd, io),
            }
            self.release(now);
        }

        fn outbound(
            &mut self,
            now: Instant,
            pkts: &mut RxBatch,
            from: usize,
            out: &mut TxBatch,
            to_tun: &mut TxBatch,
        ) -> usize {
            self.release(now);
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
            self.release(now);
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
            if let Some((at, dur)) = self.stall.filter(|(at, _)| now >= *at) {
                self.stall = None;
                warn!(worker = self.index, ms = dur.as_millis() as u64, since_due_ms = now.duration_since(at).as_millis() as u64, "fault injected: worker stalls");
                std::thread::sleep(dur);
            }
            self.release(now);
            self.inner.on_tick(now);
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn specs_parse() {
            let s = Specs::parse(Some("1"), None, None);
            assert_eq!(s.panic, Some((1, Duration::ZERO)));
            let s = Specs::parse(Some("0@1500"), Some("1@200+500"), Some("*+300"));
            assert_eq!(s.panic, Some((0, Duration::from_millis(1500))));
            assert_eq!(s.stall, Some((1, Duration::from_millis(200), Duration::from_millis(500))));
            assert_eq!(s.delay, Some((None, Duration::from_millis(300))));
            assert_eq!(Specs::parse(None, None, Some("1+50")).delay, Some((Some(1), Duration::from_millis(50))));
            for bad in ["x", "1@soon", "1+", "a+5"] {
                assert_eq!(Specs::parse(Some(bad), Some(bad), Some(bad)), Specs::default(), "{bad}");
            }
        }
    }
}
