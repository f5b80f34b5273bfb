//! `esparto up NAME` shows the negotiation as it happens, the way
//! `swanctl --initiate` prints charon's log: the daemon copies the log
//! lines about that connection to the waiting client, then its outcome.
//!
//! A [`WatchLayer`] sits in the daemon's `tracing` stack. With nobody
//! watching, it costs one relaxed atomic load per log line and nothing
//! else; the data plane does not log per packet, so the packet path never
//! reaches it. With a watch open, a line belongs to it if its
//! `connection` field names the watched connection, or its `ike_sa` (or
//! `old`/`new`, for a rekey) field names an IKE SA of that connection.
//!
//! Whose an IKE SA is, the Child SA table says (`Table::ike_sa_owner`:
//! an established IKE SA, or one being negotiated after the daemon
//! initiated it, as `up` does). The layer cannot ask it: it runs inside
//! the IKE engine's calls, while the control thread holds the table. So
//! the layer only queues the lines that name a connection or an IKE SA
//! (at most [`PENDING_LINES`]), and the control thread files them
//! ([`Watches::file`], given the table's answer) once the engine's call
//! has returned: before an event changes what the table knows, after
//! each event, and before it ends a watch with its outcome
//! ([`Watches::finish`]). A line no open watch claims then is dropped.
//!
//! Each watch keeps at most [`WATCH_LINES`] lines of at most
//! [`MAX_LINE`] bytes: a client that does not read loses the newest lines,
//! counted and reported to it as `{"dropped":N}`, and never slows the
//! daemon or makes it buffer without bound (a line that found the queue
//! full counts as dropped for every watch: it may have been any one's). At
//! most [`MAX_WATCHES`] watches are open at once, and one ends after
//! [`WATCH_LIMIT`] whatever happens. The IKE driver ends a connection's
//! watches with the outcome: its first Child SA installed, or the failure
//! and its reason.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use esparto_ike::IkeSaId;
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;
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
/// Lines queued between two filings ([`Watches::file`]); more are
/// dropped and counted.
pub const PENDING_LINES: usize = 1024;
/// Event subscriptions open at once ([`Watches::subscribe`]): each holds
/// a control client, and the control socket serves 32.
pub const MAX_SUBSCRIPTIONS: usize = 16;
/// Items queued per subscription; more are dropped and counted. A line is
/// at most [`MAX_LINE`] bytes and an event about as much: a client that
/// never reads costs the daemon well under 1 MiB.
pub const SUBSCRIPTION_ITEMS: usize = 256;

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
    lines: VecDeque<LogLine>,
    /// Lines lost since the client last read.
    dropped: u64,
    end: Option<Response>,
    until: Instant,
    /// [`StreamItem::Started`] was written.
    started: bool,
}

/// A line queued by the layer, until the control thread files it.
struct Pending {
    line: LogLine,
    /// Its `connection` field.
    connection: Option<String>,
    /// The IKE SAs it names.
    ike_sas: SmallVec<[IkeSaId; 2]>,
}

/// A client following SA events (and log lines): VICI's event
/// registrations. It lasts until the client leaves.
struct Subscription {
    id: u64,
    log: bool,
    items: VecDeque<StreamItem>,
    dropped: u64,
    started: bool,
}

impl Subscription {
    fn push(&mut self, item: StreamItem) {
        if self.items.len() >= SUBSCRIPTION_ITEMS {
            self.dropped += 1;
        } else {
            self.items.push_back(item);
        }
    }
}

#[derive(Default)]
struct Inner {
    next: u64,
    watches: Vec<Watch>,
    subscriptions: Vec<Subscription>,
    /// Lines not filed yet, in the order they were logged.
    pending: VecDeque<Pending>,
    /// Lines that found `pending` full since the last filing.
    lost: u64,
}

/// The open watches (see the module docs).
#[derive(Default)]
pub struct Watches {
    active: AtomicUsize,
    /// Subscriptions open, and those with log lines.
    subscribed: AtomicUsize,
    logging: AtomicUsize,
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
            lines: VecDeque::new(),
            dropped: 0,
            end: None,
            until: now + WATCH_LIMIT,
            started: false,
        });
        self.active.store(g.watches.len(), Ordering::Relaxed);
        Some(id)
    }

    /// Opens a subscription to SA events ([`publish`](Self::publish)),
    /// and with `log` to every log line; `None` when
    /// [`MAX_SUBSCRIPTIONS`] are open.
    pub fn subscribe(&self, log: bool) -> Option<u64> {
        let mut g = self.lock();
        if g.subscriptions.len() >= MAX_SUBSCRIPTIONS {
            return None;
        }
        g.next += 1;
        let id = g.next;
        g.subscriptions.push(Subscription { id, log, items: VecDeque::new(), dropped: 0, started: false });
        self.count_subscriptions(&g);
        Some(id)
    }

    fn count_subscriptions(&self, g: &Inner) {
        self.subscribed.store(g.subscriptions.len(), Ordering::Relaxed);
        self.logging.store(g.subscriptions.iter().filter(|s| s.log).count(), Ordering::Relaxed);
    }

    /// Whether anyone follows SA events: the caller builds an event only
    /// then.
    pub fn subscribed(&self) -> bool {
        self.subscribed.load(Ordering::Relaxed) > 0
    }

    /// Hands `event` to every subscription.
    pub fn publish(&self, event: &crate::control::SaEvent) {
        if !self.subscribed() {
            return;
        }
        for sub in &mut self.lock().subscriptions {
            sub.push(StreamItem::Event { event: Box::new(event.clone()) });
        }
    }

    /// Closes watch or subscription `id` (its client left, or it was
    /// written out).
    pub fn cancel(&self, id: u64) {
        let mut g = self.lock();
        g.watches.retain(|w| w.id != id);
        g.subscriptions.retain(|s| s.id != id);
        self.active.store(g.watches.len(), Ordering::Relaxed);
        self.count_subscriptions(&g);
    }

    /// Files the lines queued since the last call with the watches they
    /// belong to, in order: by their `connection` field, or by the
    /// connection `owner` says each IKE SA they name is of. A line no open
    /// watch claims is dropped.
    pub fn file<'a>(&self, owner: impl Fn(IkeSaId) -> Option<&'a str>) {
        if self.active.load(Ordering::Relaxed) == 0 {
            return;
        }
        // `owner` is called without the lock held.
        let (pending, lost) = {
            let mut g = self.lock();
            (std::mem::take(&mut g.pending), std::mem::take(&mut g.lost))
        };
        let owned: Vec<(Pending, SmallVec<[&str; 2]>)> = pending
            .into_iter()
            .map(|p| {
                let owners = p.ike_sas.iter().filter_map(|id| owner(*id)).collect();
                (p, owners)
            })
            .collect();
        let mut g = self.lock();
        for w in g.watches.iter_mut().filter(|w| w.end.is_none()) {
            w.dropped += lost;
            for (p, owners) in &owned {
                if p.connection.as_deref() == Some(w.connection.as_str()) || owners.contains(&w.connection.as_str()) {
                    w.push(p.line.clone());
                }
            }
        }
    }

    /// Files the queued lines ([`file`](Self::file)), then ends every
    /// open watch of `connection` with `outcome`.
    pub fn finish<'a>(&self, connection: &str, outcome: &Response, owner: impl Fn(IkeSaId) -> Option<&'a str>) {
        if self.active.load(Ordering::Relaxed) == 0 {
            return;
        }
        self.file(owner);
        for w in self.lock().watches.iter_mut().filter(|w| w.connection == connection && w.end.is_none()) {
            w.end = Some(outcome.clone());
        }
    }

    /// Appends watch `id`'s news to `out` as JSON lines ([`StreamItem`]):
    /// queued lines, how many were dropped, then the outcome once every
    /// line before it is out. A watch past [`WATCH_LIMIT`] ends as an
    /// error; an unknown `id` counts as ended.
    pub fn take(&self, id: u64, now: Instant, out: &mut Vec<u8>) -> Taken {
        let mut g = self.lock();
        let mut push = |item: &StreamItem| {
            if let Ok(mut v) = serde_json::to_vec(item) {
                v.push(b'\n');
                out.extend_from_slice(&v);
            }
        };
        if let Some(sub) = g.subscriptions.iter_mut().find(|s| s.id == id) {
            if !sub.started {
                push(&StreamItem::Started { started: "events".into() });
                sub.started = true;
            }
            if sub.dropped > 0 {
                push(&StreamItem::Dropped { dropped: sub.dropped });
                sub.dropped = 0;
            }
            for item in sub.items.drain(..) {
                push(&item);
            }
            return Taken::Open;
        }
        let Some(w) = g.watches.iter_mut().find(|w| w.id == id) else {
            return Taken::Ended;
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

    /// Hands a log line to the subscriptions that take them.
    fn log(&self, line: &LogLine) {
        for sub in self.lock().subscriptions.iter_mut().filter(|s| s.log) {
            sub.push(StreamItem::Log { log: line.clone() });
        }
    }

    /// Queues a log line for the next [`file`](Self::file).
    fn queue(&self, p: Pending) {
        let mut g = self.lock();
        if g.watches.is_empty() {
            return;
        }
        if g.pending.len() >= PENDING_LINES {
            g.lost += 1;
        } else {
            g.pending.push_back(p);
        }
    }
}

impl Watch {
    /// Keeps a line for the client, or counts it dropped.
    fn push(&mut self, line: LogLine) {
        if self.lines.len() >= WATCH_LINES {
            self.dropped += 1;
        } else {
            self.lines.push_back(line);
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
    /// `ike_sa`, `old`, `new` (logged in hex).
    ike_sas: SmallVec<[IkeSaId; 2]>,
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
            "ike_sa" | "old" | "new" => {
                if let Ok(id) = u64::from_str_radix(v.trim_matches('"'), 16) {
                    self.ike_sas.push(IkeSaId(id));
                }
            }
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
        let watching = self.0.active.load(Ordering::Relaxed) > 0;
        let logging = self.0.logging.load(Ordering::Relaxed) > 0;
        if !watching && !logging {
            return;
        }
        let mut f = Fields::default();
        event.record(&mut f);
        if !logging && f.connection.is_none() && f.ike_sas.is_empty() {
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
        let line = LogLine { level: m.level().as_str().to_string(), target: m.target().to_string(), message: f.text };
        if logging {
            self.0.log(&line);
        }
        if watching && (f.connection.is_some() || !f.ike_sas.is_empty()) {
            self.0.queue(Pending { line, connection: f.connection, ike_sas: f.ike_sas });
        }
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

    /// Whose the IKE SAs of the tests are, as the table would say.
    fn owner(id: IkeSaId) -> Option<&'static str> {
        match id.0 {
            0xaa | 0xcc => Some("site"),
            0xbb => Some("elsewhere"),
            _ => None,
        }
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
            // The same SA, without its connection: the table says whose.
            tracing::info!(ike_sa = %"00000000000000aa", peer = "192.0.2.2:500", "IKE_SA_INIT response received");
            // Another connection's SA: not ours.
            tracing::info!(ike_sa = %"00000000000000bb", "unrelated");
            // An SA the table does not know: nobody's.
            tracing::info!(ike_sa = %"00000000000000dd", "unknown");
            tracing::warn!(old = %"00000000000000aa", new = %"00000000000000cc", "rekeyed");
            tracing::info!(ike_sa = %"00000000000000cc", "after the rekey");
            tracing::info!("no fields: never a watch's");
        });
        let mut out = Vec::new();
        assert_eq!(w.take(id, t0, &mut out), Taken::Open);
        assert_eq!(items(&out), [StreamItem::Started { started: "site".into() }], "nothing filed yet");
        w.file(owner);
        let mut out = Vec::new();
        assert_eq!(w.take(id, t0, &mut out), Taken::Open);
        let msgs: Vec<String> = items(&out)
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
        // The outcome follows every line logged before it.
        with_layer(w, || tracing::info!(ike_sa = %"00000000000000cc", "Child SA installed"));
        w.finish("site", &Response::Done("site: net installed".into()), owner);
        with_layer(w, || tracing::info!(connection = "site", "after the outcome"));
        w.file(owner);
        let mut out = Vec::new();
        assert_eq!(w.take(id, t0, &mut out), Taken::Ended);
        let StreamItem::Log { log } = &items(&out)[0] else { panic!("{out:?}") };
        assert_eq!(log.message, "Child SA installed ike_sa=00000000000000cc");
        assert_eq!(items(&out)[1..], [StreamItem::End(Response::Done("site: net installed".into()))]);
        // Ended watches are gone; the other one is still open.
        assert_eq!(w.take(id, t0, &mut Vec::new()), Taken::Ended);
        w.finish("elsewhere", &Response::Error("x".into()), owner);
        assert_eq!(w.take(other, t0, &mut Vec::new()), Taken::Open);
        w.cancel(other);
        assert_eq!(w.active.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn lines_queued_past_the_bound_count_as_dropped_for_every_watch() {
        let w: &'static Watches = Box::leak(Box::default());
        let t0 = Instant::now();
        let a = w.begin("a", t0).unwrap();
        let b = w.begin("b", t0).unwrap();
        with_layer(w, || {
            for i in 0..PENDING_LINES + 3 {
                tracing::info!(connection = "a", i, "line");
            }
        });
        w.file(owner);
        // a: the queue's lines (as many as a watch keeps, the rest
        // dropped), and the 3 that found it full; b: those 3 alone.
        let a_dropped = (PENDING_LINES - WATCH_LINES + 3) as u64;
        for (id, kept, dropped) in [(a, WATCH_LINES, a_dropped), (b, 0, 3)] {
            let mut out = Vec::new();
            w.take(id, t0, &mut out);
            let got = items(&out);
            assert_eq!(got[1], StreamItem::Dropped { dropped }, "watch {id}");
            assert_eq!(got.len(), 2 + kept, "watch {id}");
        }
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
        w.file(owner);
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
    fn a_subscription_gets_events_and_every_line_bounded_until_it_is_cancelled() {
        let w: &'static Watches = Box::leak(Box::default());
        let t0 = Instant::now();
        let event = crate::control::SaEvent { kind: "ike-updown".into(), up: true, sa: Default::default(), old: None };
        w.publish(&event);
        let quiet = w.subscribe(false).unwrap();
        let logs = w.subscribe(true).unwrap();
        assert!(w.subscribed());
        with_layer(w, || {
            tracing::info!("no fields: still a line for who takes log lines");
            for i in 0..SUBSCRIPTION_ITEMS {
                tracing::debug!(i, "many");
            }
        });
        w.publish(&event);
        let mut out = Vec::new();
        assert_eq!(w.take(quiet, t0, &mut out), Taken::Open);
        let got = items(&out);
        assert_eq!(got, [StreamItem::Started { started: "events".into() }, StreamItem::Event { event: Box::new(event.clone()) }]);
        let mut out = Vec::new();
        assert_eq!(w.take(logs, t0 + WATCH_LIMIT, &mut out), Taken::Open, "no time limit");
        let got = items(&out);
        assert_eq!(got[1], StreamItem::Dropped { dropped: 2 }, "the queue kept its first {SUBSCRIPTION_ITEMS}");
        let StreamItem::Log { log } = &got[2] else { panic!("{:?}", got[2]) };
        assert_eq!(log.message, "no fields: still a line for who takes log lines");
        assert_eq!(got.len(), 2 + SUBSCRIPTION_ITEMS);
        w.cancel(quiet);
        w.cancel(logs);
        assert!(!w.subscribed());
        assert_eq!(w.logging.load(Ordering::Relaxed), 0);
        let ids: Vec<u64> = (0..MAX_SUBSCRIPTIONS).map(|_| w.subscribe(false).unwrap()).collect();
        assert_eq!(w.subscribe(true), None);
        w.cancel(ids[0]);
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
