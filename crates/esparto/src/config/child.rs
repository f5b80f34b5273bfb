//! `[connections.NAME.children.CHILD]`: selectors, ESP proposals,
//! lifetimes, per-CPU SAs, and statically keyed SAs.
//!
//! A child with `static_sas` is keyed by hand, like `ip xfrm state add`:
//! nothing is negotiated, so it needs fixed selectors, exactly one ESP
//! proposal naming one algorithm of each kind, and keys of exactly the
//! suite's KEYMAT length (RFC 7296 §2.17 layout: encryption key, then salt
//! for AEADs, then integrity key). The first pair is the fallback SA, each
//! further pair the sub-SA of worker 0, 1, … (RFC 9611's per-resource SAs,
//! fixed in advance). A child without `static_sas` is negotiated by IKE
//! and also yields an `esparto_ike::ChildConfig`.
//!
//! Lifetimes follow swanctl: `rekey_*` is the soft limit, `life_*` the hard
//! one, and `life_*` defaults to `rekey_*` plus 10 %. An IKE child rekeys
//! after one hour by default; a static child has no limits by default,
//! because nothing could rekey it and a hard limit would simply cut the
//! tunnel. The `static_sas` pairs themselves are parsed in `static_sas`.

use std::net::IpAddr;
use std::time::Duration;

use esparto_esp::{DEFAULT_WINDOW, IpcompMode, Lifetime, MAX_WINDOW, Selector};
use esparto_ike::proposal::Proposal;
use esparto_ike::{ChildConfig, StartAction, TsConfig};

use super::check::{ChildSeen, Located};
use super::daemon::MAX_WORKERS;
use super::error::KeyPath;
use super::model::{Child, PerCpuSas, StaticSas};
use super::static_sas;
use super::tree::{Cx, Field, Kind, Node};
use super::value::{
    fmt_duration, parse_esp_proposal, parse_selector, resolve_selector, static_suite,
};

/// ESP proposals of an IKE child that does not list any (the AEADs Esparto
/// implements, fastest first on AES-NI machines).
pub const DEFAULT_ESP_PROPOSALS: &[&str] = &["aes256gcm16", "aes128gcm16", "chacha20poly1305"];
/// swanctl's default `rekey_time` for children.
pub const DEFAULT_REKEY_TIME: Duration = Duration::from_secs(3600);
/// The shortest `rekey_time` of a child. Each Child SA rekey keeps the
/// old inbound SA for two seconds after the new one takes over (for
/// packets already in flight), and negotiating the new one takes a round
/// trip and a key exchange; a child rekeyed more often than this would
/// hold two generations of SAs almost all the time and spend its peer's
/// CPU on rekeys rather than traffic. strongSwan warns of nothing so
/// short either: one second there is a typing error, not a policy.
pub(super) const MIN_REKEY_TIME: Duration = Duration::from_secs(5);
/// Smallest anti-replay window (the data plane's granularity).
pub const MIN_REPLAY_WINDOW: u32 = 64;

const KEYS: &[&str] = &[
    "local_ts",
    "remote_ts",
    "esp_proposals",
    "mode",
    "replay_window",
    "rekey_time",
    "life_time",
    "rekey_bytes",
    "life_bytes",
    "rekey_packets",
    "life_packets",
    "per_cpu_sas",
    "per_cpu_max",
    "start_action",
    "static_sas",
    "rand_time",
    "dpd_action",
    "close_action",
    "ipcomp",
    "link_mbps",
];

const UNSUPPORTED: &[(&str, &str)] = &[
    ("ah_proposals", "AH is not implemented (ESP only)"),
    ("rand_bytes", "jitter of byte limits is not implemented (rand_time jitters the rekey time)"),
    ("rand_packets", "jitter of packet limits is not implemented (rand_time jitters the rekey time)"),
    ("updown", "updown scripts are not implemented"),
    ("hostaccess", "updown scripts are not implemented"),
    ("inactivity", "inactivity timeouts are not implemented"),
    (
        "reqid",
        "reqids are an XFRM notion; Esparto has no kernel SAs",
    ),
    (
        "priority",
        "policy priorities are not implemented (overlapping children are refused)",
    ),
    ("interface", "policies are not bound to interfaces"),
    ("mark_in", "XFRM marks do not exist in Esparto"),
    ("mark_out", "XFRM marks do not exist in Esparto"),
    ("set_mark_in", "XFRM marks do not exist in Esparto"),
    ("set_mark_out", "XFRM marks do not exist in Esparto"),
    ("if_id_in", "XFRM interface ids do not exist in Esparto"),
    ("if_id_out", "XFRM interface ids do not exist in Esparto"),
    ("hw_offload", "Esparto runs in userspace"),
    ("copy_df", "not configurable"),
    ("copy_ecn", "not configurable"),
    ("copy_dscp", "not configurable"),
    (
        "sha256_96",
        "only RFC 4868's 128-bit truncation is implemented",
    ),
    ("policies", "policies are always installed"),
    ("policies_fwd_out", "policies are always installed"),
    ("label", "security labels are not implemented"),
];

/// The connection-level facts a child needs.
pub(crate) struct ConnCtx<'a> {
    /// Connection name.
    pub(crate) name: &'a str,
    /// Our first outer address, if known (resolves `dynamic` in local_ts).
    pub(crate) local: Option<IpAddr>,
    /// The peer's first outer address, if known.
    pub(crate) remote: Option<IpAddr>,
    /// Worker count (default `per_cpu_max`).
    pub(crate) workers: usize,
}

/// A parsed child: the model, the IKE config if negotiated, and what the
/// cross checks need.
pub(crate) struct Parsed {
    pub(crate) child: Child,
    pub(crate) ike: Option<ChildConfig>,
    pub(crate) seen: ChildSeen,
}

/// Parse one child table. Returns `None` if it had errors.
///
/// Errors come in the order the keys are checked here (selectors,
/// proposals, mode, replay window, lifetimes, negotiation keys, static
/// SAs, `rand_time`), which the loader's tests rely on.
pub(crate) fn parse(
    cx: &mut Cx<'_>,
    conn: &ConnCtx<'_>,
    name: &str,
    node: &Node,
    path: &KeyPath,
) -> Option<Parsed> {
    let errors_before = cx.error_count();
    cx.check_keys(node, path, KEYS, UNSUPPORTED);
    let static_field = node.field(path, "static_sas");
    let is_static = static_field.is_some();

    let mut seen = ChildSeen {
        name: format!("{}/{}", conn.name, name),
        connection: conn.name.to_string(),
        local: vec![],
        remote: vec![],
        in_spis: vec![],
        out_spis: vec![],
        keys: vec![],
    };
    let (local_cfg, remote_cfg) = traffic_selectors(cx, conn, node, path, is_static, &mut seen);
    let proposals = esp_proposals(cx, node, path, is_static);
    check_mode(cx, node, path);
    let replay_window = replay_window(cx, node, path);
    let lifetime = lifetimes(cx, node, path, is_static);
    let mut negotiation = if is_static {
        refuse_negotiation_keys(cx, node, path);
        Negotiation::new(conn.workers)
    } else {
        negotiation(cx, node, path, conn.workers)
    };
    let ipcomp = ipcomp(cx, node, path);
    let link_mbps = link_mbps(cx, node, path, ipcomp);
    let static_sas = static_field.and_then(|f| static_sas(cx, &f, &proposals, &mut seen));
    if let Some(s) = &static_sas {
        // The pairs fix the SAs: the first is the fallback, each further
        // one a worker's sub-SA.
        negotiation.per_cpu_sas = if s.pairs.len() > 1 {
            PerCpuSas::Eager
        } else {
            PerCpuSas::No
        };
        negotiation.per_cpu_max = s.pairs.len().saturating_sub(1).max(1);
    }

    if cx.error_count() != errors_before {
        return None;
    }
    let rand_time = rand_time(cx, node, path, lifetime.soft_time);
    let ike = if is_static {
        None
    } else {
        let mut c = ike_config(
            name,
            local_cfg,
            remote_cfg,
            proposals,
            &negotiation,
            &lifetime,
            rand_time,
        );
        c.ipcomp = ipcomp.is_some();
        if let Err(e) = c.validate() {
            cx.err(&node.span, path, e.to_string());
            return None;
        }
        Some(c)
    };
    let child = Child {
        name: name.to_string(),
        local_ts: seen.local.iter().map(|l| l.value).collect(),
        remote_ts: seen.remote.iter().map(|l| l.value).collect(),
        replay_window,
        lifetime,
        per_cpu_sas: negotiation.per_cpu_sas,
        per_cpu_max: negotiation.per_cpu_max,
        static_sas,
        ipcomp,
        link_mbps,
    };
    Some(Parsed { child, ike, seen })
}

/// An ESP proposal with the text it came from and where it was written.
type EspProposal<'n> = (Field<'n>, &'n str, Proposal);

/// `local_ts` and `remote_ts`: their IKE forms, and the resolved selectors
/// pushed to `seen`. Refuses a pair of sides with no address family in
/// common, which no packet could match.
fn traffic_selectors(
    cx: &mut Cx<'_>,
    conn: &ConnCtx<'_>,
    node: &Node,
    path: &KeyPath,
    is_static: bool,
    seen: &mut ChildSeen,
) -> (Vec<TsConfig>, Vec<TsConfig>) {
    let local = selectors(
        cx,
        node,
        path,
        "local_ts",
        is_static,
        conn.local,
        &mut seen.local,
    );
    let remote = selectors(
        cx,
        node,
        path,
        "remote_ts",
        is_static,
        conn.remote,
        &mut seen.remote,
    );
    if seen.local.is_empty() || seen.remote.is_empty() {
        return (local, remote);
    }
    let common = seen.local.iter().any(|l| {
        seen.remote
            .iter()
            .any(|r| l.value.addrs.family() == r.value.addrs.family())
    });
    if !common {
        if let Some(r) = seen.remote.first() {
            cx.err(
                &r.span,
                &r.path,
                "no address family in common with local_ts: no packet could match",
            );
        }
    }
    (local, remote)
}

/// `esp_proposals`, with `default` expanded to [`DEFAULT_ESP_PROPOSALS`];
/// absent: the defaults for an IKE child, an error for a static one.
fn esp_proposals<'n>(
    cx: &mut Cx<'_>,
    node: &'n Node,
    path: &KeyPath,
    is_static: bool,
) -> Vec<EspProposal<'n>> {
    let mut proposals = Vec::new();
    let defaults = |at: &Field<'n>, out: &mut Vec<EspProposal<'n>>| {
        for d in DEFAULT_ESP_PROPOSALS {
            if let Ok(p) = parse_esp_proposal(d) {
                out.push((at.clone(), d, p));
            }
        }
    };
    let Some(f) = node.field(path, "esp_proposals") else {
        if is_static {
            cx.err(
                &node.span,
                &path.key("esp_proposals"),
                "missing: a statically keyed child needs exactly one ESP proposal",
            );
        } else {
            let at = Field {
                node,
                path: path.key("esp_proposals"),
            };
            defaults(&at, &mut proposals);
        }
        return proposals;
    };
    let items = cx.str_list(&f);
    // An empty list of the wrong type has had its type error already.
    if items.is_empty() && matches!(f.node.kind, Kind::Str(_) | Kind::Array(_)) {
        cx.err_at(&f, "no proposals");
    }
    for (fld, s) in items {
        if s == "default" {
            defaults(&fld, &mut proposals);
            continue;
        }
        match parse_esp_proposal(s) {
            Ok(p) => proposals.push((fld, s, p)),
            Err(e) => cx.err_at(&fld, e),
        }
    }
    proposals
}

/// `mode`: only `tunnel` is implemented.
fn check_mode(cx: &mut Cx<'_>, node: &Node, path: &KeyPath) {
    let Some(f) = node.field(path, "mode") else {
        return;
    };
    if let Some(m) = cx.str(&f) {
        if m != "tunnel" {
            cx.err_at(&f, format!("'{m}': only tunnel mode is implemented"));
        }
    }
}

/// `ipcomp`: `"no"` (default) or `false`, `"yes"` or `true`, `"adaptive"`.
fn ipcomp(cx: &mut Cx<'_>, node: &Node, path: &KeyPath) -> Option<IpcompMode> {
    let f = node.field(path, "ipcomp")?;
    if let Kind::Bool(b) = f.node.kind {
        return b.then_some(IpcompMode::Always);
    }
    match cx.str(&f)? {
        "no" => None,
        "yes" => Some(IpcompMode::Always),
        "adaptive" => Some(IpcompMode::Adaptive),
        s => {
            cx.err_at(&f, format!("'{s}': expected yes, no or adaptive"));
            None
        }
    }
}

/// Fastest WAN link rate `link_mbps` accepts (1 Tbit/s).
const MAX_LINK_MBPS: i64 = 1_000_000;

/// `link_mbps`: what the WAN link toward the peer carries, for
/// `ipcomp = "adaptive"` (which weighs it against compression's cost);
/// with any other `ipcomp` it is an error (it would change nothing).
fn link_mbps(cx: &mut Cx<'_>, node: &Node, path: &KeyPath, ipcomp: Option<IpcompMode>) -> Option<u32> {
    let f = node.field(path, "link_mbps")?;
    let v = cx.int::<u32>(&f, 1..=MAX_LINK_MBPS)?;
    if ipcomp != Some(IpcompMode::Adaptive) {
        cx.err_at(&f, "only applies with ipcomp = \"adaptive\"".to_string());
        return None;
    }
    Some(v)
}

/// `replay_window` in packets (default [`DEFAULT_WINDOW`]).
fn replay_window(cx: &mut Cx<'_>, node: &Node, path: &KeyPath) -> u32 {
    match node.field(path, "replay_window") {
        Some(f) => cx
            .int::<u32>(&f, i64::from(MIN_REPLAY_WINDOW)..=i64::from(MAX_WINDOW))
            .unwrap_or(DEFAULT_WINDOW),
        None => DEFAULT_WINDOW,
    }
}

/// How IKE negotiates the child's SAs.
struct Negotiation {
    per_cpu_sas: PerCpuSas,
    per_cpu_max: usize,
    start_action: StartAction,
}

impl Negotiation {
    /// The defaults: per-CPU SAs on demand, up to one per worker; started
    /// by nothing.
    fn new(workers: usize) -> Self {
        Negotiation {
            per_cpu_sas: PerCpuSas::OnDemand,
            per_cpu_max: workers,
            start_action: StartAction::None,
        }
    }
}

/// `per_cpu_sas`, `per_cpu_max` and `start_action` of an IKE child.
fn negotiation(cx: &mut Cx<'_>, node: &Node, path: &KeyPath, workers: usize) -> Negotiation {
    let mut n = Negotiation::new(workers);
    if let Some(f) = node.field(path, "per_cpu_sas") {
        if let Some(s) = cx.str(&f) {
            match s {
                "no" => n.per_cpu_sas = PerCpuSas::No,
                "eager" => n.per_cpu_sas = PerCpuSas::Eager,
                "on-demand" => n.per_cpu_sas = PerCpuSas::OnDemand,
                _ => cx.err_at(&f, format!("'{s}': expected no, eager or on-demand")),
            }
        }
    }
    if let Some(f) = node.field(path, "per_cpu_max") {
        if let Some(max) = cx.int::<usize>(&f, 1..=MAX_WORKERS as i64) {
            n.per_cpu_max = max;
        }
    }
    if let Some(f) = node.field(path, "start_action") {
        if let Some(s) = cx.str(&f) {
            match s {
                "none" => n.start_action = StartAction::None,
                "start" => n.start_action = StartAction::Start,
                "trap" => n.start_action = StartAction::Trap,
                _ => cx.err_at(&f, format!("'{s}': expected none, start or trap")),
            }
        }
    }
    n
}

/// A statically keyed child refuses the keys that only mean something to
/// IKE, rather than ignore them.
fn refuse_negotiation_keys(cx: &mut Cx<'_>, node: &Node, path: &KeyPath) {
    // Nothing negotiates a static child: no jitter to apply, no peer to
    // declare dead.
    for key in ["rand_time", "dpd_action", "close_action"] {
        if let Some(f) = node.field(path, key) {
            cx.err_at(
                &f,
                "has no effect on a statically keyed child (nothing negotiates it)",
            );
        }
    }
    for key in ["per_cpu_sas", "per_cpu_max", "start_action"] {
        if let Some(f) = node.field(path, key) {
            cx.err_at(
                &f,
                "has no effect on a statically keyed child (its static_sas pairs fix the SAs)",
            );
        }
    }
}

/// `static_sas` of field `f`, keyed for the child's single ESP proposal.
/// `None` if the proposals do not give one suite (reported).
fn static_sas(
    cx: &mut Cx<'_>,
    f: &Field<'_>,
    proposals: &[EspProposal<'_>],
    seen: &mut ChildSeen,
) -> Option<StaticSas> {
    if proposals.len() > 1 {
        let (fld, _, _) = &proposals[1];
        cx.err_at(
            fld,
            format!(
                "a statically keyed child takes exactly one ESP proposal, found {}",
                proposals.len()
            ),
        );
        return None;
    }
    let (fld, text, p) = proposals.first()?;
    let (suite, esn) = match static_suite(text, p) {
        Ok(s) => s,
        Err(e) => {
            cx.err_at(fld, e);
            return None;
        }
    };
    let pairs = static_sas::parse(cx, f, suite, seen);
    if pairs.len() > MAX_WORKERS + 1 {
        cx.err_at(
            f,
            format!(
                "{} pairs: at most one fallback and {MAX_WORKERS} per-worker pairs",
                pairs.len()
            ),
        );
    }
    Some(StaticSas { suite, esn, pairs })
}

/// `rand_time`: how much the IKE engine may take off `rekey_time` at
/// random (0 or absent: nothing). It must be shorter than `rekey_time`.
fn rand_time(
    cx: &mut Cx<'_>,
    node: &Node,
    path: &KeyPath,
    rekey_time: Option<Duration>,
) -> Option<Duration> {
    let rand_time = limit(cx, node, path, "rand_time", true)
        .filter(|&s| s > 0)
        .map(Duration::from_secs);
    if let (Some(j), Some(r)) = (rand_time, rekey_time) {
        if j >= r {
            if let Some(f) = node.field(path, "rand_time") {
                cx.err_at(
                    &f,
                    "rand_time must be shorter than rekey_time (it is subtracted from it)",
                );
            }
        }
    }
    rand_time
}

/// The IKE engine's view of a negotiated child. The engine rekeys by time
/// (with jitter) and deletes at `life_time`; byte and packet limits are
/// counted by the data plane, which asks the engine for the rekey.
fn ike_config(
    name: &str,
    local_ts: Vec<TsConfig>,
    remote_ts: Vec<TsConfig>,
    proposals: Vec<EspProposal<'_>>,
    negotiation: &Negotiation,
    lifetime: &Lifetime,
    rand_time: Option<Duration>,
) -> ChildConfig {
    ChildConfig {
        name: name.into(),
        local_ts,
        remote_ts,
        esp_proposals: proposals.into_iter().map(|(_, _, p)| p).collect(),
        start_action: negotiation.start_action,
        rekey_time: lifetime.soft_time,
        life_time: lifetime.hard_time,
        rand_time,
        rekey_bytes: lifetime.soft_bytes.unwrap_or(0),
        rekey_packets: lifetime.soft_packets.unwrap_or(0),
        per_cpu_sas: negotiation.per_cpu_sas,
        per_cpu_max: u16::try_from(negotiation.per_cpu_max).unwrap_or(u16::MAX),
        ipcomp: false,
    }
}

/// Parse `local_ts`/`remote_ts`: returns the IKE form, and pushes resolved
/// selectors (with positions) to `out`.
fn selectors(
    cx: &mut Cx<'_>,
    node: &Node,
    path: &KeyPath,
    key: &str,
    is_static: bool,
    addr: Option<IpAddr>,
    out: &mut Vec<Located<Selector>>,
) -> Vec<TsConfig> {
    let Some(f) = node.field(path, key) else {
        if is_static {
            cx.err(
                &node.span,
                &path.key(key),
                "missing: a statically keyed child needs fixed traffic selectors",
            );
            return vec![];
        }
        // swanctl's default: the IKE address of that side.
        let d = TsConfig::Dynamic {
            protocol: 0,
            start_port: 0,
            end_port: u16::MAX,
        };
        if let Some(value) = resolve_selector(&d, addr) {
            out.push(Located {
                value,
                span: node.span.clone(),
                path: path.key(key),
            });
        }
        return vec![d];
    };
    let items = cx.str_list(&f);
    if items.is_empty() && matches!(f.node.kind, Kind::Str(_) | Kind::Array(_)) {
        cx.err_at(&f, "no traffic selectors");
    }
    let mut cfg = Vec::with_capacity(items.len());
    for (fld, s) in items {
        match parse_selector(s) {
            Ok(ts) => {
                if let Some(value) = resolve_selector(&ts, addr) {
                    out.push(Located {
                        value,
                        span: fld.node.span.clone(),
                        path: fld.path.clone(),
                    });
                }
                cfg.push(ts);
            }
            Err(e) => cx.err_at(&fld, e),
        }
    }
    cfg
}

/// One of `rekey_time`/`life_time` etc. as a number (seconds for times).
fn limit(cx: &mut Cx<'_>, node: &Node, path: &KeyPath, key: &str, time: bool) -> Option<u64> {
    let f = node.field(path, key)?;
    if time {
        match &f.node.kind {
            Kind::Int(_) => cx.int::<u64>(&f, 0..=super::value::MAX_DURATION.as_secs() as i64),
            Kind::Str(s) => match super::value::parse_duration(s) {
                Ok(d) => Some(d.as_secs()),
                Err(e) => {
                    cx.err_at(&f, e);
                    None
                }
            },
            _ => {
                cx.err_at(
                    &f,
                    format!(
                        "expected a duration (\"30s\", \"4h\") or seconds, found {}",
                        f.node.type_name()
                    ),
                );
                None
            }
        }
    } else {
        cx.int::<u64>(&f, 0..=i64::MAX)
    }
}

/// swanctl lifetimes: soft `rekey_*`, hard `life_*` (default soft + 10 %).
fn lifetimes(cx: &mut Cx<'_>, node: &Node, path: &KeyPath, is_static: bool) -> Lifetime {
    let mut lt = Lifetime::default();
    let kinds: [(&str, &str, bool, u64); 3] = [
        (
            "rekey_time",
            "life_time",
            true,
            if is_static {
                0
            } else {
                DEFAULT_REKEY_TIME.as_secs()
            },
        ),
        ("rekey_bytes", "life_bytes", false, 0),
        ("rekey_packets", "life_packets", false, 0),
    ];
    for (soft_key, hard_key, time, default_soft) in kinds {
        let soft = limit(cx, node, path, soft_key, time);
        let hard = limit(cx, node, path, hard_key, time);
        let (soft, hard) = match (soft, hard) {
            (Some(s), Some(h)) => {
                if s > 0 && h > 0 && h <= s {
                    if let Some(f) = node.field(path, hard_key) {
                        let show = |v: u64| {
                            if time {
                                fmt_duration(Duration::from_secs(v))
                            } else {
                                v.to_string()
                            }
                        };
                        cx.err_at(&f, format!("{hard_key} ({}) must be greater than {soft_key} ({}): the SA would die before it is rekeyed", show(h), show(s)));
                    }
                }
                (s, h)
            }
            // swanctl: life = rekey + 10 %, at least one unit more (5 s → 6 s).
            (Some(s), None) => (s, s.saturating_add((s / 10).max(u64::from(s > 0)))),
            // Only the hard limit given: rekey at the default, or at 90 % of
            // the hard limit if that comes first (static: never).
            (None, Some(h)) => {
                let s = if h == 0 {
                    default_soft
                } else {
                    default_soft.min(h - h / 10)
                };
                (s, h)
            }
            (None, None) => (
                default_soft,
                default_soft.saturating_add((default_soft / 10).max(u64::from(default_soft > 0))),
            ),
        };
        if time && soft > 0 && soft < MIN_REKEY_TIME.as_secs() {
            if let Some(f) = node.field(path, soft_key) {
                cx.err_at(
                    &f,
                    format!(
                        "{soft_key} ({}) is shorter than the {} minimum: each rekey overlaps two generations of SAs for seconds (0 turns rekeying off)",
                        fmt_duration(Duration::from_secs(soft)),
                        fmt_duration(MIN_REKEY_TIME)
                    ),
                );
            }
        }
        let nz = |v: u64| (v > 0).then_some(v);
        if time {
            lt.soft_time = nz(soft).map(Duration::from_secs);
            lt.hard_time = nz(hard).map(Duration::from_secs);
        } else if soft_key == "rekey_bytes" {
            lt.soft_bytes = nz(soft);
            lt.hard_bytes = nz(hard);
        } else {
            lt.soft_packets = nz(soft);
            lt.hard_packets = nz(hard);
        }
    }
    lt
}
