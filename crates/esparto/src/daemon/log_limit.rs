//! Log lines that traffic can cause: at most [`LINES_PER_WINDOW`] of each
//! per [`WINDOW`], then one summary of what was left out.
//!
//! The data plane never logs per packet; it counts. The control plane
//! wants to *say* what happened — a refused IKE_SA_INIT, a failed
//! authentication, a malformed request — but each of those is one message
//! a remote peer sent, and a flood of 20,000 forged requests must not
//! become 20,000 lines (disk, journald, an operator's attention). So each
//! such line gets through [`LINES_PER_WINDOW`] times per [`WINDOW`]; the
//! rest are counted, and when the window has passed one line says so:
//!
//! ```text
//! INFO esparto::log: "IKE_SA_INIT: no proposal chosen" (esparto_ike::endpoint::init_responder) … and 19,990 more in the last 10 s
//! ```
//!
//! Which lines: every event of the IKE engine (target `esparto_ike…`: each
//! is caused by a message, or by a timer of an SA that some peer created)
//! and the daemon's own lines that a message or a packet can cause, which
//! it logs under the target [`TRAFFIC`] (authentication failures, failed
//! acquires, a full IKE send buffer). The daemon's lifecycle lines (SA
//! installed, deleted, rekeyed) are not limited. A line is known by its
//! call site, not by its fields: the set of keys is fixed by the code, so
//! the limiter's memory is bounded however many sources a flood forges.
//!
//! [`Limiter`] is the core, with time passed in (tested with an injected
//! clock); [`ThrottleLayer`] applies it to `tracing` events, and the
//! daemon's loop calls [`Throttle::flush`] to write the summaries (a
//! summary cannot be logged from inside the subscriber).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tracing::callsite::Identifier;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

/// Lines of one kind written per window.
pub const LINES_PER_WINDOW: u32 = 10;
/// The window.
pub const WINDOW: Duration = Duration::from_secs(10);
/// Target of the daemon's own lines that traffic can cause (limited).
pub const TRAFFIC: &str = "esparto::traffic";
/// Target of the summaries (never limited).
pub const SUMMARY: &str = "esparto::log";
/// Longest description of a line kept for its summary (a message may
/// quote an identity a peer chose).
const MAX_WHAT: usize = 160;

/// Whether lines of `target` are limited.
pub fn limited(target: &str) -> bool {
    target == TRAFFIC || target == "esparto_ike" || target.starts_with("esparto_ike::")
}

/// What was left out of one window of one kind of line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// The line, as its first occurrence described it.
    pub what: String,
    /// Its level.
    pub level: Level,
    /// Lines not written.
    pub suppressed: u64,
    /// How long the window lasted (shorter at shutdown).
    pub window: Duration,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let secs = self.window.as_secs_f64();
        let secs = if secs >= 10.0 { format!("{secs:.0}") } else { format!("{secs:.1}") };
        write!(f, "{} … and {} more in the last {secs} s", self.what, thousands(self.suppressed))
    }
}

/// `19990` as `19,990`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// One kind's lines in its current window.
#[derive(Debug)]
struct Tally {
    start: Instant,
    logged: u32,
    suppressed: u64,
    what: String,
    level: Level,
}

/// Counts lines by key in fixed windows; see the module essay.
#[derive(Debug)]
pub struct Limiter<K> {
    per_window: u32,
    window: Duration,
    tallies: HashMap<K, Tally>,
    /// Summaries of windows closed by a new line, not yet flushed.
    ended: Vec<Summary>,
}

impl<K: Hash + Eq> Limiter<K> {
    /// At most `per_window` lines of a key per `window`.
    pub fn new(per_window: u32, window: Duration) -> Self {
        Self { per_window, window, tallies: HashMap::new(), ended: Vec::new() }
    }

    /// Whether a line of `key` at `now` is written. `what` describes the
    /// line for its summary; it is asked only when a window opens.
    pub fn admit(&mut self, key: K, now: Instant, level: Level, what: impl FnOnce() -> String) -> bool {
        let window = self.window;
        let tally = self.tallies.entry(key).or_insert_with(|| Tally {
            start: now,
            logged: 0,
            suppressed: 0,
            what: String::new(),
            level,
        });
        if now.saturating_duration_since(tally.start) >= window {
            if let Some(s) = close(tally, now) {
                self.ended.push(s);
            }
            tally.start = now;
        }
        if tally.logged == 0 && tally.suppressed == 0 {
            tally.what = what();
            tally.level = level;
        }
        if tally.logged < self.per_window {
            tally.logged += 1;
            true
        } else {
            tally.suppressed += 1;
            false
        }
    }

    /// The summaries of every window that has passed with lines left out
    /// (or of every window, when `all`: at shutdown). Quiet keys are
    /// forgotten.
    pub fn flush(&mut self, now: Instant, all: bool) -> Vec<Summary> {
        let mut out = std::mem::take(&mut self.ended);
        let window = self.window;
        self.tallies.retain(|_, tally| {
            let over = now.saturating_duration_since(tally.start) >= window;
            if over || all {
                if let Some(s) = close(tally, now) {
                    out.push(s);
                }
                tally.start = now;
            }
            // A window that has passed is done with: the key's next line
            // opens a new one, and a quiet key takes no memory.
            !over
        });
        out
    }
}

/// Ends `tally`'s window at `now`: its summary if lines were left out.
fn close(tally: &mut Tally, now: Instant) -> Option<Summary> {
    let s = (tally.suppressed > 0).then(|| Summary {
        what: tally.what.clone(),
        level: tally.level,
        suppressed: tally.suppressed,
        window: now.saturating_duration_since(tally.start),
    });
    tally.logged = 0;
    tally.suppressed = 0;
    s
}

/// The limiter shared by the [`ThrottleLayer`] and the daemon's loop.
#[derive(Debug, Clone)]
pub struct Throttle {
    limiter: Arc<Mutex<Limiter<Identifier>>>,
}

impl Default for Throttle {
    fn default() -> Self {
        Self { limiter: Arc::new(Mutex::new(Limiter::new(LINES_PER_WINDOW, WINDOW))) }
    }
}

impl Throttle {
    /// The `tracing` layer that drops what the limiter refuses.
    pub fn layer(&self) -> ThrottleLayer {
        ThrottleLayer { throttle: self.clone() }
    }

    /// Writes the summaries of the windows that have passed (`all`: of
    /// every window, at shutdown).
    pub fn flush(&self, now: Instant, all: bool) {
        let summaries = match self.limiter.lock() {
            Ok(mut l) => l.flush(now, all),
            Err(_) => return,
        };
        for s in summaries {
            match s.level {
                Level::ERROR => tracing::error!(target: SUMMARY, "{s}"),
                Level::WARN => tracing::warn!(target: SUMMARY, "{s}"),
                Level::INFO => tracing::info!(target: SUMMARY, "{s}"),
                Level::DEBUG => tracing::debug!(target: SUMMARY, "{s}"),
                _ => tracing::trace!(target: SUMMARY, "{s}"),
            }
        }
    }
}

/// A `tracing` layer that lets through only what [`Throttle`] admits of
/// the [limited](limited) targets.
#[derive(Debug)]
pub struct ThrottleLayer {
    throttle: Throttle,
}

impl<S: Subscriber> Layer<S> for ThrottleLayer {
    fn event_enabled(&self, event: &Event<'_>, _ctx: Context<'_, S>) -> bool {
        let meta = event.metadata();
        if !limited(meta.target()) {
            return true;
        }
        // A poisoned lock (a panic elsewhere while logging): let it through.
        let Ok(mut l) = self.throttle.limiter.lock() else { return true };
        l.admit(meta.callsite(), Instant::now(), *meta.level(), || describe(event))
    }
}

/// `"message" (target)`, cut to [`MAX_WHAT`].
fn describe(event: &Event<'_>) -> String {
    struct Message(String);
    impl Visit for Message {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            if field.name() == "message" {
                let _ = write!(self.0, "{value:?}");
            }
        }
    }
    let mut m = Message(String::new());
    event.record(&mut m);
    let mut what: String = m.0.chars().take(MAX_WHAT).collect();
    if what.len() < m.0.len() {
        what.push('…');
    }
    format!("\"{what}\" ({})", event.metadata().target())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn s(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    #[test]
    fn ten_lines_per_window_then_one_summary() {
        let t0 = Instant::now();
        let mut l = Limiter::new(10, s(10));
        let mut written = 0;
        // 20,000 lines of one kind over 5 s (the clock is ours).
        for i in 0..20_000u64 {
            let now = t0 + Duration::from_micros(i * 250);
            if l.admit("refused", now, Level::INFO, || "\"IKE_SA_INIT refused\" (esparto_ike)".into()) {
                written += 1;
            }
        }
        assert_eq!(written, 10);
        // The window has not passed yet: nothing to say.
        assert!(l.flush(t0 + s(9), false).is_empty());
        let sums = l.flush(t0 + s(10), false);
        assert_eq!(
            sums,
            vec![Summary {
                what: "\"IKE_SA_INIT refused\" (esparto_ike)".into(),
                level: Level::INFO,
                suppressed: 19_990,
                window: s(10),
            }]
        );
        assert_eq!(
            sums[0].to_string(),
            "\"IKE_SA_INIT refused\" (esparto_ike) … and 19,990 more in the last 10 s"
        );
        // Said once: the next flush has nothing.
        assert!(l.flush(t0 + s(11), false).is_empty());
        // The next window starts afresh.
        for k in 0..12 {
            let admitted = l.admit("refused", t0 + s(12) + Duration::from_millis(k), Level::INFO, String::new);
            assert_eq!(admitted, k < 10, "line {k}");
        }
        let sums = l.flush(t0 + s(30), false);
        assert_eq!(sums.len(), 1);
        assert_eq!(sums[0].suppressed, 2);
    }

    #[test]
    fn kinds_are_counted_apart_and_quiet_ones_are_silent() {
        let t0 = Instant::now();
        let mut l = Limiter::new(2, s(10));
        for _ in 0..5 {
            l.admit("a", t0, Level::WARN, || "a".into());
        }
        // "b" is under its limit: written, and no summary for it.
        assert!(l.admit("b", t0, Level::INFO, || "b".into()));
        let sums = l.flush(t0 + s(10), false);
        assert_eq!(sums.len(), 1);
        assert_eq!((sums[0].what.as_str(), sums[0].level, sums[0].suppressed), ("a", Level::WARN, 3));
        // Quiet for a whole window: both keys forgotten (memory stays small).
        assert!(l.flush(t0 + s(20), false).is_empty());
        assert!(l.tallies.is_empty());
    }

    #[test]
    fn a_line_after_the_window_closes_it_before_the_flush() {
        let t0 = Instant::now();
        let mut l = Limiter::new(1, s(10));
        assert!(l.admit(1, t0, Level::INFO, || "x".into()));
        assert!(!l.admit(1, t0 + s(1), Level::INFO, || "x".into()));
        assert!(!l.admit(1, t0 + s(2), Level::INFO, || "x".into()));
        // 12 s later the next line is written, and the old window's
        // summary is waiting for the flush.
        assert!(l.admit(1, t0 + s(12), Level::INFO, || "x".into()));
        let sums = l.flush(t0 + s(13), false);
        assert_eq!(sums.len(), 1);
        assert_eq!((sums[0].suppressed, sums[0].window), (2, s(12)));
    }

    #[test]
    fn shutdown_flushes_open_windows() {
        let t0 = Instant::now();
        let mut l = Limiter::new(1, s(10));
        for _ in 0..4 {
            l.admit("k", t0, Level::WARN, || "k".into());
        }
        assert!(l.flush(t0 + s(3), false).is_empty());
        let sums = l.flush(t0 + s(3), true);
        assert_eq!((sums[0].suppressed, sums[0].window), (3, s(3)));
        assert_eq!(sums[0].to_string(), "k … and 3 more in the last 3.0 s");
    }

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_000), "1,000");
        assert_eq!(thousands(19_990), "19,990");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }

    #[test]
    fn which_targets_are_limited() {
        for t in ["esparto_ike", "esparto_ike::task::ike_init", TRAFFIC] {
            assert!(limited(t), "{t}");
        }
        for t in ["esparto", "esparto::daemon::ike_events", "esparto_ikes", SUMMARY] {
            assert!(!limited(t), "{t}");
        }
    }

    /// The layer under a real subscriber: the engine's line is cut to the
    /// limit, other lines pass, and the summary is written by the flush.
    #[test]
    fn the_layer_limits_engine_lines_only() {
        use tracing_subscriber::layer::SubscriberExt;
        #[derive(Clone, Default)]
        struct Lines(Arc<Mutex<Vec<String>>>);
        impl<S: Subscriber> Layer<S> for Lines {
            fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
                let what = describe(event);
                self.0.lock().unwrap().push(what);
            }
        }
        let lines = Lines::default();
        let throttle = Throttle::default();
        let sub = tracing_subscriber::registry().with(throttle.layer()).with(lines.clone());
        tracing::subscriber::with_default(sub, || {
            for _ in 0..100 {
                tracing::info!(target: "esparto_ike::endpoint", peer = "192.0.2.9", "IKE_SA_INIT: no proposal chosen");
                tracing::warn!(target: TRAFFIC, "IKE authentication failed");
                tracing::info!(target: "esparto::daemon", "Child SA installed");
            }
            throttle.flush(Instant::now(), true);
        });
        let lines = lines.0.lock().unwrap();
        let count = |s: &str| lines.iter().filter(|l| *l == s).count();
        let refused = "\"IKE_SA_INIT: no proposal chosen\" (esparto_ike::endpoint)";
        let auth = "\"IKE authentication failed\" (esparto::traffic)";
        assert_eq!(count(refused), LINES_PER_WINDOW as usize);
        assert_eq!(count(auth), LINES_PER_WINDOW as usize);
        assert_eq!(count("\"Child SA installed\" (esparto::daemon)"), 100, "lifecycle lines are not limited");
        for what in [refused, auth] {
            let summary = lines.iter().filter(|l| l.starts_with(&format!("\"{what} … and 90 more in the last "))).count();
            assert_eq!(summary, 1, "{what}: {lines:#?}");
        }
        assert_eq!(lines.len(), 2 * LINES_PER_WINDOW as usize + 100 + 2);
    }
}
