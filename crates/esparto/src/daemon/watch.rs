//! `esparto up NAME` shows the negotiation as it happens, the way
//! `swanctl --initiate` prints charon's log: the daemon copies the log
//! lines about that connection to the waiting client, then its outcome.
//!
//! A [`WatchLayer`] sits in the daemon's `tracing` stack. With nobody
//! watching, it costs one relaxed atomic load per log line and nothing
//! else; the data plane does not log per packet, so the packet path never
//! reaches it. With a watch open, a line belongs to it if its
//! `connection` field names the watched connection, or its `ike_sa` (or
//! `old`/`new`, for a rekey) field names an IKE SA that an earlier line of
//! the connection named: "initiating IKE_SA" carries both, so every later
//! line of that SA follows without the engine knowing of watches.
//!
//! Each watch keeps at most [`WATCH_LINES`] lines of at most
//! [`MAX_LINE`] bytes: a client that does not read loses the newest lines,
//! counted and reported to it as `{"dropped":N}`, and never slows the
//! daemon or makes it buffer without bound. At most [`MAX_WATCHES`] watches
//! are open at once, and one ends after [`WATCH_LIMIT`] whatever happens.
//! The IKE driver ends a connection's watches with the outcome: its first
//! Child SA installed, or the failure and its reason ([`Watches::finish`]).

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

use crate::control::{Response, StreamItem};

/// Lines queued per watch; more are dropped and counted.
pub const WATCH_LINES: usize = 256;
/// Longest line kept, in bytes (a line may quote what a peer sent).
pub const MAX_LINE: usize = 2048;
/// Watches open at once (one per waiting `esparto up`).
pub const MAX_WATCHES: usize = 16;
/// A watch ends after this long, outcome or not.
pub const WATCH_LIMIT: Duration = Duration::from_secs(600);
/// IKE SAs a watch follows (a connection has one, two while rekeying).
const MAX_FOLLOWED: usize = 8;

/// One log line as the client prints it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogLine {
    /// `INFO`, `WARN`, …
    pub level: String,
    /// The module that logged it.
    pub target: String,
    /// The message, then its fields as `key=value`.
    pub message: String,
}

impl std::fmt::Display for LogLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:>5} {}: {}", self.level, self.target, self.message)
    }
}

struct Watch {
    id: u64,
    connection: String,
    /// IKE SA ids (hex, as logged) seen on lines of the connection.
    ike_sas: Vec<String>,
    lines: VecDeque<LogLine>,
    /// Lines lost since the client last read.
    dropped: u64,
    end: Option<Response>,
    until: Instant,
    /// [`StreamItem::Started`] was written.
    started: bool,
}

#[derive(Default)]
struct Inner {
    next: u64,
    watches: Vec<Watch>,
}

/// The open watches (see the module docs).
#[derive(Default)]
pub struct Watches {
    active: AtomicUsize,
    inner: Mutex<Inner>,
}

/// What [`Watches::take`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// More may come.
    Open,
    /// The outcome was written: nothing more will come.
    Ended,
}

/// The daemon's watches, shared by its log layer and its control loop.
pub fn global() -> &'static Watches {
    static W: OnceLock<Watches> = OnceLock::new();
    W.get_or_init(Watches::default)
}

impl Watches {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding it leaves nothing half-done worth refusing.
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Opens a watch of `connection`; `None` when [`MAX_WATCHES`] are open.
    pub fn begin(&self, connection: &str, now: Instant) -> Option<u64> {
        let mut g = self.lock();
        if g.watches.len() >= MAX_WATCHES {
            return None;
        }
        g.next += 1;
        let id = g.next;
        g.watches.push(Watch {
            id,
            connection: connection.to_string(),
            ike_sas: Vec::new(),
            lines: VecDeque::new(),
            dropped: 0,
            end: None,
            until: now + WATCH_LIMIT,
            started: false,
        });
        self.active.store(g.watches.len(), Ordering::Relaxed);
        Some(id)
    }

    /// Closes watch `id` (its client left, or it was written out).
    pub fn cancel(&self, id: u64) {
        let mut g = self.lock();
        g.watches.retain(|w| w.id != id);
        self.active.store(g.watches.len(), Ordering::Relaxed);
    }

    /// Ends every open watch of `connection` with `outcome`.
    pub fn finish(&self, connection: &str, outcome: &Response) {
        if self.active.load(Ordering::Relaxed) == 0 {
            return;
        }
        for w in self.lock().watches.iter_mut().filter(|w| w.connection == connection && w.end.is_none()) {
            w.end = Some(outcome.clone());
        }
    }

    /// Ends every open watch following IKE SA `ike_sa` (hex) with `outcome`.
    pub fn finish_ike_sa(&self, ike_sa: &str, outcome: &Response) {
        if self.active.load(Ordering::Relaxed) == 0 {
            return;
        }
        for w in self.lock().watches.iter_mut().filter(|w| w.end.is_none() && w.ike_sas.iter().any(|s| s == ike_sa)) {
            w.end = Some(outcome.clone());
        }
    }

    /// Appends watch `id`'s news to `out` as JSON lines ([`StreamItem`]):
    /// queued lines, how many were dropped, then the outcome once every
    /// line before it is out. A watch past [`WATCH_LIMIT`] ends as an
    /// error; an unknown `id` counts as ended.
    pub fn take(&self, id: u64, now: Instant, out: &mut Vec<u8>) -> Taken {
        let mut g = self.lock();
        let Some(w) = g.watches.iter_mut().find(|w| w.id == id) else {
            return Taken::Ended;
        };
        let mut push = |item: &StreamItem| {
            if let Ok(mut v) = serde_json::to_vec(item) {
                v.push(b'\n');
                out.extend_from_slice(&v);
            }
        };
        if !w.started {
            push(&StreamItem::Started { started: w.connection.clone() });
            w.started = true;
        }
        if w.dropped > 0 {
            push(&StreamItem::Dropped { dropped: w.dropped });
            w.dropped = 0;
        }
        for line in w.lines.drain(..) {
            push(&StreamItem::Log { log: line });
        }
        if w.end.is_none() && now >= w.until {
            w.end = Some(Response::Error(format!("{}: no outcome within {} s", w.connection, WATCH_LIMIT.as_secs())));
        }
        match w.end.take() {
            Some(end) => {
                push(&StreamItem::End(end));
                drop(g);
                self.cancel(id);
                Taken::Ended
            }
            None => Taken::Open,
        }
    }

    /// Files a log line with every watch it belongs to.
    fn record(&self, fields: &Fields, level: &str, target: &str) {
        let mut g = self.lock();
        for w in &mut g.watches {
            if w.end.is_some() {
                continue;
            }
            let by_conn = fields.connection.as_deref() == Some(w.connection.as_str());
            let by_sa = fields.ike_sas.iter().any(|s| w.ike_sas.contains(s));
            if !(by_conn || by_sa) {
                continue;
            }
            for s in &fields.ike_sas {
                if !w.ike_sas.contains(s) && w.ike_sas.len() < MAX_FOLLOWED {
                    w.ike_sas.push(s.clone());
                }
            }
            if w.lines.len() >= WATCH_LINES {
                w.dropped += 1;
                continue;
            }
            w.lines.push_back(LogLine {
                level: level.to_string(),
                target: target.to_string(),
                message: fields.text.clone(),
            });
        }
    }
}

/// What a log line says, gathered by [`Visit`].
#[derive(Default)]
struct Fields {
    /// The message, then `key=value` for each other field.
    text: String,
    rest: String,
    connection: Option<String>,
    /// `ike_sa`, `old`, `new`.
    ike_sas: Vec<String>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.record_debug(field, &format_args!("{value}"));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let name = field.name();
        let mut v = String::new();
        let _ = write!(v, "{value:?}");
        match name {
            "message" => {
                self.text = v;
                return;
            }
            "connection" => self.connection = Some(v.trim_matches('"').to_string()),
            "ike_sa" | "old" | "new" => self.ike_sas.push(v.clone()),
            _ => {}
        }
        if self.rest.len() < MAX_LINE {
            let _ = write!(self.rest, " {name}={v}");
        }
    }
}

/// The `tracing` layer that feeds [`Watches`].
pub struct WatchLayer(pub &'static Watches);

impl<S: Subscriber> Layer<S> for WatchLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        if self.0.active.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut f = Fields::default();
        event.record(&mut f);
        if f.connection.is_none() && f.ike_sas.is_empty() {
            return;
        }
        let rest = std::mem::take(&mut f.rest);
        f.text.push_str(&rest);
        if f.text.len() > MAX_LINE {
            let mut cut = MAX_LINE;
            while !f.text.is_char_boundary(cut) {
                cut -= 1;
            }
            f.text.truncate(cut);
            f.text.push('…');
        }
        let m = event.metadata();
        self.0.record(&f, m.level().as_str(), m.target());
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    fn items(out: &[u8]) -> Vec<StreamItem> {
        std::str::from_utf8(out).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }

    fn with_layer(w: &'static Watches, f: impl FnOnce()) {
        let sub = tracing_subscriber::registry().with(WatchLayer(w));
        tracing::subscriber::with_default(sub, f);
    }

    #[test]
    fn lines_of_the_connection_and_of_its_ike_sas_then_the_outcome() {
        let w: &'static Watches = Box::leak(Box::default());
        let t0 = Instant::now();
        // Nobody watching: nothing is kept.
        with_layer(w, || tracing::info!(connection = "site", "before"));
        let id = w.begin("site", t0).unwrap();
        let other = w.begin("other", t0).unwrap();
        with_layer(w, || {
            tracing::info!(ike_sa = %"00000000000000aa", connection = "site", "initiating IKE_SA");
            // The same SA, without its connection: followed.
            tracing::info!(ike_sa = %"00000000000000aa", peer = "192.0.2.2:500", "IKE_SA_INIT response received");
            // Another connection's SA: not ours.
            tracing::info!(ike_sa = %"00000000000000bb", "unrelated");
            tracing::warn!(old = %"00000000000000aa", new = %"00000000000000cc", "rekeyed");
            tracing::info!(ike_sa = %"00000000000000cc", "after the rekey");
            tracing::info!("no fields: never a watch's");
        });
        let mut out = Vec::new();
        assert_eq!(w.take(id, t0, &mut out), Taken::Open);
        let mut got = items(&out);
        assert_eq!(got.remove(0), StreamItem::Started { started: "site".into() });
        let msgs: Vec<String> = got
            .iter()
            .map(|i| match i {
                StreamItem::Log { log } => format!("{} {}", log.level, log.message),
                i => panic!("{i:?}"),
            })
            .collect();
        assert_eq!(
            msgs,
            [
                "INFO initiating IKE_SA ike_sa=00000000000000aa connection=site",
                "INFO IKE_SA_INIT response received ike_sa=00000000000000aa peer=192.0.2.2:500",
                "WARN rekeyed old=00000000000000aa new=00000000000000cc",
                "INFO after the rekey ike_sa=00000000000000cc",
            ]
        );
        let mut out = Vec::new();
        assert_eq!(w.take(other, t0, &mut out), Taken::Open);
        assert_eq!(items(&out), [StreamItem::Started { started: "other".into() }], "the other connection saw nothing");
        w.finish("site", &Response::Done("site: net installed".into()));
        let mut out = Vec::new();
        assert_eq!(w.take(id, t0, &mut out), Taken::Ended);
        assert_eq!(items(&out), [StreamItem::End(Response::Done("site: net installed".into()))]);
        // Ended watches are gone; the other one is still open.
        assert_eq!(w.take(id, t0, &mut Vec::new()), Taken::Ended);
        w.finish_ike_sa("00000000000000bb", &Response::Error("x".into()));
        assert_eq!(w.take(other, t0, &mut Vec::new()), Taken::Open);
        w.cancel(other);
        assert_eq!(w.active.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_slow_client_loses_lines_counted_never_memory() {
        let w: &'static Watches = Box::leak(Box::default());
        let t0 = Instant::now();
        let id = w.begin("site", t0).unwrap();
        let long = "x".repeat(3 * MAX_LINE);
        with_layer(w, || {
            for i in 0..WATCH_LINES + 10 {
                tracing::info!(connection = "site", i, "{long}");
            }
        });
        let mut out = Vec::new();
        w.take(id, t0, &mut out);
        let mut got = items(&out);
        got.remove(0);
        assert_eq!(got[0], StreamItem::Dropped { dropped: 10 });
        assert_eq!(got.len(), WATCH_LINES + 1);
        let StreamItem::Log { log } = &got[1] else { panic!() };
        assert!(log.message.len() <= MAX_LINE + '…'.len_utf8(), "{}", log.message.len());
        assert!(log.message.ends_with('…'));
        // The limit ends a watch that sees no outcome.
        let mut out = Vec::new();
        assert_eq!(w.take(id, t0 + WATCH_LIMIT, &mut out), Taken::Ended);
        assert!(matches!(&items(&out)[..], [StreamItem::End(Response::Error(e))] if e.contains("no outcome")));
    }

    #[test]
    fn at_most_max_watches() {
        let w: &'static Watches = Box::leak(Box::default());
        let t0 = Instant::now();
        let ids: Vec<u64> = (0..MAX_WATCHES).map(|_| w.begin("c", t0).unwrap()).collect();
        assert_eq!(w.begin("c", t0), None);
        w.cancel(ids[0]);
        assert!(w.begin("c", t0).is_some());
    }
}
