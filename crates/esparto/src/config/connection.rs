//! `[connections.NAME]`: outer addresses, the peer's ESP-in-UDP port, the
//! IKE settings, and the children.
//!
//! Key names are swanctl's (`local_addrs`, `remote_addrs`, `proposals`,
//! `encap`, `dpd_delay`, `local.id`, `remote.auth`, …). Whether IKE runs is
//! decided by the children: a child with `static_sas` is keyed by hand;
//! any other child is negotiated, and then the connection also yields an
//! [`esparto_ike::ConnectionConfig`]. IKE keys on a connection whose children are
//! all static are refused (they would be silently ignored).
//!
//! `remote_port` is *not* swanctl's (there it is the peer's IKE port): it
//! is the peer's ESP-in-UDP port, default 4500. The peer's IKE port is
//! taken to be our own `daemon.ike_port`.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use esparto_ike::AuthConfig;
use esparto_ike::identity::Identity;
use esparto_ike::proposal::Proposal;

use super::check::ChildSeen;
use super::child::{self, ConnCtx};
use super::error::KeyPath;
use super::model::{Child, Connection, Daemon};
use super::certs;
use super::layer::{Grafted, Walk, Walked};
use std::borrow::Cow;
use super::tree::{Cx, Field, Kind, Node, Span};
use super::value::{parse_addr, parse_duration, parse_ike_proposal};

/// IKE proposals of a connection that does not list any.
pub const DEFAULT_IKE_PROPOSALS: &[&str] = &[
    "aes256gcm16-prfsha256-x25519",
    "aes128gcm16-prfsha256-ecp256",
    "aes256-sha256-modp3072",
];
/// Default ESP-in-UDP port of the peer (RFC 3948 §2.1).
pub const DEFAULT_REMOTE_PORT: u16 = 4500;

const KEYS: &[&str] = &[
    "local_addrs",
    "remote_addrs",
    "remote_port",
    "version",
    "proposals",
    "encap",
    "dpd_delay",
    "dpd_timeout",
    "rekey_time",
    "rand_time",
    "recover",
    "unique",
    "fragmentation",
    "mobike",
    "local",
    "remote",
    "children",
];
/// Keys that configure IKE: refused when no child uses IKE.
const IKE_KEYS: &[&str] = &[
    "version",
    "proposals",
    "encap",
    "dpd_delay",
    "dpd_timeout",
    "rekey_time",
    "rand_time",
    "recover",
    "mobike",
    "local",
    "remote",
];

const UNSUPPORTED: &[(&str, &str)] = &[
    (
        "reauth_time",
        "reauthentication is not implemented (IKE SAs are rekeyed instead)",
    ),
    (
        "over_time",
        "the IKE SA's hard lifetime is not configurable",
    ),
    ("local_port", "the local IKE port is daemon.ike_port"),
    (
        "childless",
        "childless IKE SAs (RFC 6023) are not implemented",
    ),
    ("send_certreq", "Esparto always sends CERTREQ naming its CAs when it authenticates with a certificate"),
    ("send_cert", "Esparto always sends its certificate and local.certs intermediates (strongSwan's `always`)"),
    ("ocsp", "OCSP is not supported: revocation is checked with CRLs (remote.crls, [authorities] crl)"),
    ("ppk_id", "post-quantum PPKs (RFC 8784) are not implemented"),
    (
        "ppk_required",
        "post-quantum PPKs (RFC 8784) are not implemented",
    ),
    ("keyingtries", "retransmission is configured globally"),
    ("aggressive", "aggressive mode is IKEv1"),
    ("pull", "mode config is not implemented"),
    ("vips", "virtual IPs are not implemented"),
    ("pools", "address pools are not implemented"),
    ("dscp", "not configurable"),
    ("encap_port", "use remote_port"),
    ("if_id_in", "XFRM interface ids do not exist in Esparto"),
    ("if_id_out", "XFRM interface ids do not exist in Esparto"),
    ("mediation", "mediation is not implemented"),
    ("mediated_by", "mediation is not implemented"),
    ("mediation_peer", "mediation is not implemented"),
];

const AUTH_KEYS: &[&str] = &["auth", "id", "certs", "key", "cacerts", "crls"];
const AUTH_UNSUPPORTED: &[(&str, &str)] = &[
    ("pubkeys", "raw public keys are not supported (use certs)"),
    ("ca_id", "name the CA with cacerts"),
    ("cert_policy", "certificate policies are not checked"),
    ("revocation", "only CRL files are checked (crls, [authorities] crl)"),
    ("eap_id", "EAP is not supported (PSK or certificates only)"),
    ("aaa_id", "EAP is not supported (PSK or certificates only)"),
    ("xauth_id", "XAuth is IKEv1"),
    ("groups", "group membership is not supported"),
    (
        "round",
        "multiple authentication rounds (RFC 4739) are not supported",
    ),
];

/// A PSK the connection will need: checked against `[secrets]` once both are parsed.
pub(crate) struct PskNeed {
    /// The connection's header.
    pub(crate) span: Span,
    /// Its position in [`Parsed::connections`].
    pub(crate) conn: usize,
}

/// The identities a PSK of `c` must be found for: ours and the peer's,
/// or `None` when they are not known until the IKE SA runs (the peer's
/// is any).
pub(crate) fn psk_ids(c: &Connection) -> Option<(Cow<'_, Identity>, Cow<'_, Identity>)> {
    let ike = c.ike.as_ref()?;
    fn side<'a>(id: &'a Option<Identity>, addrs: &[std::net::IpAddr]) -> Option<Cow<'a, Identity>> {
        match id {
            Some(i) => Some(Cow::Borrowed(i)),
            None => addrs.first().map(|a| Cow::Owned(Identity::from(*a))),
        }
    }
    let local = side(&ike.local.id, &c.local_addrs)?;
    let remote = side(&ike.remote.id, &c.remote_addrs).filter(|r| !r.is_any())?;
    Some((local, remote))
}

/// Every connection, the children's cross-check records, and the PSKs needed.
#[derive(Default)]
pub(crate) struct Parsed {
    pub(crate) connections: Vec<Arc<Connection>>,
    pub(crate) seen: Vec<Arc<ChildSeen>>,
    pub(crate) psk_needs: Vec<PskNeed>,
}

/// Parse every `[connections.*]`: the file's in its order, then those
/// loaded over VICI in theirs (walked here if `grafted`, else their kept
/// walks; see `layer`).
pub(crate) fn parse_all(
    cx: &mut Cx<'_>,
    root: &Node,
    daemon: &Daemon,
    authorities: &certs::Authorities,
    grafted: &Grafted,
) -> Parsed {
    let mut out = Parsed::default();
    let mut fresh: HashMap<String, Walk> = HashMap::new();
    if let Some(f) = root.field(&KeyPath::root(), "connections") {
        let Some(t) = cx.table(&f) else {
            return out;
        };
        for e in t.entries() {
            let path = f.path.key(&e.key);
            let Some(n) = cx.table(&Field {
                node: &e.value,
                path: path.clone(),
            }) else {
                continue;
            };
            let (errors, warnings) = (cx.error_count(), cx.warning_count());
            let Some((c, s)) = parse_one(cx, daemon, authorities, &e.key, n, &path) else {
                continue;
            };
            let (c, s): (_, Vec<Arc<ChildSeen>>) = (Arc::new(c), s.into_iter().map(Arc::new).collect());
            if !cx.grafted(&n.span) {
                out.push(c, &s, n.span.clone());
            } else if cx.error_count() == errors {
                let warnings = cx.warnings_since(warnings);
                fresh.insert(e.key.clone(), Walk { walked: Walked::Conn(c, s.into()), warnings });
            }
        }
    }
    for (slot, walked) in grafted.walks(cx, "connections", fresh) {
        if let Walked::Conn(c, s) = walked {
            out.push(c, &s, slot.span.clone());
        }
    }
    out
}

impl Parsed {
    /// Adds a parsed connection (at `span`) and what the checks
    /// across connections need of it.
    fn push(&mut self, c: Arc<Connection>, seen: &[Arc<ChildSeen>], span: Span) {
        // Both sides sign: no PSK.
        if let Some(ike) = &c.ike {
            if ike.local.credential.is_none() || ike.remote.trust.is_none() {
                self.psk_needs.push(PskNeed { span, conn: self.connections.len() });
            }
        }
        self.connections.push(c);
        self.seen.extend_from_slice(seen);
    }
}

/// The addresses of `key`, the host names among them (only where
/// `names` allows them), and where they were written.
fn addrs(
    cx: &mut Cx<'_>,
    node: &Node,
    path: &KeyPath,
    key: &str,
    names: bool,
) -> (Vec<IpAddr>, Vec<esparto_ike::RemoteHost>, Option<(Span, KeyPath)>) {
    let Some(f) = node.field(path, key) else {
        return (vec![], vec![], None);
    };
    let mut out = Vec::new();
    let mut hosts: Vec<esparto_ike::RemoteHost> = Vec::new();
    for (fld, s) in cx.str_list(&f) {
        if s == "%any" || s == "%any4" || s == "%any6" {
            continue;
        }
        if s.parse::<IpAddr>().is_err() && is_host_name(s) {
            if !names {
                cx.err_at(&fld, format!("'{s}': host names are accepted in remote_addrs only; give our address here, or leave local_addrs out (the route's source is used)"));
            } else if hosts.iter().any(|h| h.name.eq_ignore_ascii_case(s)) {
                cx.err_at(&fld, format!("'{s}' is listed twice"));
            } else {
                hosts.push(esparto_ike::RemoteHost { name: s.trim_end_matches('.').into(), position: out.len() });
            }
            continue;
        }
        match parse_addr(s) {
            Ok(a) if a.is_unspecified() || a.is_multicast() => {
                cx.err_at(
                    &fld,
                    format!("'{s}' cannot be a tunnel endpoint (unspecified or multicast)"),
                );
            }
            Ok(a) if out.contains(&a) => cx.err_at(&fld, format!("'{s}' is listed twice")),
            Ok(a) => out.push(a),
            Err(e) => cx.err_at(&fld, e),
        }
    }
    (out, hosts, Some((f.node.span.clone(), f.path.clone())))
}

/// A DNS host name (RFC 1123 §2.1): dot-separated labels of letters,
/// digits and hyphens, none starting or ending with a hyphen, at most 63
/// octets each and 253 in all, an optional final dot; the last label not
/// all digits, so that a mistyped IPv4 address (`192.0.2.256`) is not
/// taken for a name.
pub(crate) fn is_host_name(s: &str) -> bool {
    let s = s.strip_suffix('.').unwrap_or(s);
    let label = |l: &str| {
        (1..=63).contains(&l.len())
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(label)
        && s.rsplit('.').next().is_some_and(|last| !last.bytes().all(|b| b.is_ascii_digit()))
}

fn parse_one(
    cx: &mut Cx<'_>,
    daemon: &Daemon,
    authorities: &certs::Authorities,
    name: &str,
    node: &Node,
    path: &KeyPath,
) -> Option<(Connection, Vec<ChildSeen>)> {
    let before = cx.error_count();
    cx.check_keys(node, path, KEYS, UNSUPPORTED);
    let addr_errors = cx.error_count();
    let (local_addrs, _, _) = addrs(cx, node, path, "local_addrs", false);
    let (remote_addrs, remote_hosts, _) = addrs(cx, node, path, "remote_addrs", true);
    // Only complain that addresses are missing when none were misspelt.
    // (A static child needs literal ones: nothing resolves a name for it.)
    let addrs_missing =
        cx.error_count() == addr_errors && (local_addrs.is_empty() || remote_addrs.is_empty());
    let remote_port = match node.field(path, "remote_port") {
        Some(f) => cx.int::<u16>(&f, 1..=65535).unwrap_or(DEFAULT_REMOTE_PORT),
        None => DEFAULT_REMOTE_PORT,
    };
    let cctx = ConnCtx {
        name,
        // A static child's ends: the first peer, and our first address of
        // its family.
        local: remote_addrs
            .first()
            .and_then(|r| local_addrs.iter().find(|l| l.is_ipv6() == r.is_ipv6()))
            .or(local_addrs.first())
            .copied(),
        remote: remote_addrs.first().copied(),
        workers: daemon.workers,
    };
    let children = children(cx, &cctx, node, path, addrs_missing);
    let ike = if uses_ike(node) {
        ike_settings(
            cx,
            daemon,
            authorities,
            name,
            node,
            path,
            &local_addrs,
            (&remote_addrs, &remote_hosts),
            children.ike,
        )
    } else {
        // Without any child, the missing children are the error; the IKE
        // settings are not "ignored" ones on top.
        let has_children = node.get("children").is_some_and(|c| !c.value.entries().is_empty());
        for k in IKE_KEYS.iter().filter(|_| has_children) {
            if let Some(e) = node.get(k) {
                cx.err(&e.key_span, &path.key(k), "IKE setting on a connection whose children are all statically keyed (it would be ignored)");
            }
        }
        None
    };

    if cx.error_count() != before {
        return None;
    }
    Some((
        Connection {
            name: name.to_string(),
            local_addrs,
            remote_addrs,
            remote_hosts,
            remote_port,
            ike,
            children: children.children,
        },
        children.seen,
    ))
}

/// A connection's parsed children.
#[derive(Default)]
struct Children {
    /// Every child without errors.
    children: Vec<Child>,
    /// The IKE configuration of those that are negotiated.
    ike: Vec<esparto_ike::ChildConfig>,
    /// What the checks across the file need of each.
    seen: Vec<ChildSeen>,
}

/// `children`: at least one. A statically keyed child needs the
/// connection's addresses spelled out (`addrs_missing` says they are not).
fn children(
    cx: &mut Cx<'_>,
    cctx: &ConnCtx<'_>,
    node: &Node,
    path: &KeyPath,
    addrs_missing: bool,
) -> Children {
    let mut out = Children::default();
    let Some(f) = node.field(path, "children") else {
        cx.err(
            &node.span,
            &path.key("children"),
            "missing: a connection needs at least one child",
        );
        return out;
    };
    let Some(t) = cx.table(&f) else {
        return out;
    };
    if t.entries().is_empty() {
        cx.err_at(&f, "no children");
    }
    for e in t.entries() {
        let cp = f.path.key(&e.key);
        let Some(cn) = cx.table(&Field {
            node: &e.value,
            path: cp.clone(),
        }) else {
            continue;
        };
        if cn.get("static_sas").is_some() && addrs_missing {
            cx.err(&cn.span, &cp, "a statically keyed child needs explicit local_addrs and remote_addrs on its connection (nothing negotiates them)");
        }
        if let Some(p) = child::parse(cx, cctx, &e.key, cn, &cp) {
            if let Some(ic) = p.ike {
                out.ike.push(ic);
            }
            out.children.push(p.child);
            out.seen.push(p.seen);
        }
    }
    out
}

/// Does any child of the connection use IKE (has no `static_sas`)? Read
/// from the file, so it holds for children with errors too.
fn uses_ike(node: &Node) -> bool {
    node.get("children")
        .map(|c| {
            c.value
                .entries()
                .iter()
                .any(|e| e.value.get("static_sas").is_none())
        })
        .unwrap_or(false)
}

#[allow(clippy::too_many_arguments)]
fn ike_settings(
    cx: &mut Cx<'_>,
    daemon: &Daemon,
    authorities: &certs::Authorities,
    name: &str,
    node: &Node,
    path: &KeyPath,
    local_addrs: &[IpAddr],
    (remote_addrs, remote_hosts): (&[IpAddr], &[esparto_ike::RemoteHost]),
    children: Vec<esparto_ike::ChildConfig>,
) -> Option<esparto_ike::ConnectionConfig> {
    let errors_before = cx.error_count();
    check_version(cx, node, path);
    let proposals = ike_proposals(cx, node, path);
    let encap = match node.field(path, "encap") {
        Some(f) => cx.bool(&f).unwrap_or(true),
        None => true,
    };
    let dpd_delay = duration(cx, node, path, "dpd_delay", 86_400);
    let dpd_timeout = duration(cx, node, path, "dpd_timeout", 86_400);
    // swanctl's default, as the engine's own `ConnectionConfig::new` has it.
    let rekey_time =
        duration(cx, node, path, "rekey_time", 365 * 86_400).or(Some(esparto_ike::lifetime::IKE_REKEY_TIME));
    let rand_time = duration(cx, node, path, "rand_time", 365 * 86_400);
    if let (Some(r), Some(j)) = (rekey_time, rand_time) {
        if j >= r {
            if let Some(f) = node.field(path, "rand_time") {
                cx.err_at(
                    &f,
                    "rand_time must be shorter than rekey_time (it is subtracted from it)",
                );
            }
        }
    }
    let (dpd_action, close_action) = after_death(cx, node, path, &children);
    let recover = recover(cx, node, path, !remote_addrs.is_empty() || !remote_hosts.is_empty());
    let unique = unique(cx, node, path);
    let fragmentation = fragmentation(cx, node, path);
    let mobike = match node.field(path, "mobike") {
        Some(f) => cx.bool(&f).unwrap_or(true),
        None => true,
    };
    let local = auth(cx, node, path, "local", authorities);
    let remote = auth(cx, node, path, "remote", authorities);
    if let (Some(cred), Some(f)) = (&local.credential, node.field(path, "local")) {
        certs::check_chain(cx, &f, cred, remote.trust.as_deref(), authorities);
    }
    if matches!(local.id, Some(Identity::Any)) {
        if let Some(f) = node.field(path, "local") {
            cx.err_at(&f, "local id cannot be %any (it is sent to the peer)");
        }
    }
    let conn = esparto_ike::ConnectionConfig {
        name: name.into(),
        local_addrs: local_addrs.to_vec(),
        remote_addrs: remote_addrs.to_vec(),
        remote_hosts: remote_hosts.to_vec(),
        remote_port: daemon.ike_port,
        proposals,
        encap,
        local,
        remote,
        children,
        dpd_delay,
        dpd_timeout,
        dpd_action,
        close_action,
        recover,
        unique,
        fragmentation,
        mobike,
        rekey_time,
        rand_time,
    };
    // What the engine checks when `run` adds the connection (children
    // with errors are missing here, and already reported; a proposal
    // with an error is missing too, and "without proposals" would be a
    // second error for it).
    if let (false, Err(e)) = (conn.children.is_empty(), conn.validate()) {
        if cx.error_count() == errors_before {
            cx.err(&node.span, path, e.to_string());
        }
        return None;
    }
    Some(conn)
}

/// `version`: only 2.
fn check_version(cx: &mut Cx<'_>, node: &Node, path: &KeyPath) {
    let Some(f) = node.field(path, "version") else {
        return;
    };
    if let Some(v) = cx.int::<u8>(&f, 0..=255) {
        if v != 2 {
            cx.err_at(
                &f,
                format!("IKE version {v}: only IKEv2 (RFC 7296) is implemented; write version = 2"),
            );
        }
    }
}

/// `proposals`, with `default` expanded to [`DEFAULT_IKE_PROPOSALS`]
/// (also what an absent key means).
fn ike_proposals(cx: &mut Cx<'_>, node: &Node, path: &KeyPath) -> Vec<Proposal> {
    let mut proposals: Vec<Proposal> = Vec::new();
    match node.field(path, "proposals") {
        Some(f) => {
            let items = cx.str_list(&f);
            if items.is_empty() && matches!(f.node.kind, Kind::Str(_) | Kind::Array(_)) {
                cx.err_at(&f, "no proposals");
            }
            for (fld, s) in items {
                let list: Vec<&str> = if s == "default" {
                    DEFAULT_IKE_PROPOSALS.to_vec()
                } else {
                    vec![s]
                };
                for s in list {
                    match parse_ike_proposal(s) {
                        Ok(p) => proposals.push(p),
                        Err(e) => cx.err_at(&fld, e),
                    }
                }
            }
        }
        None => proposals.extend(
            DEFAULT_IKE_PROPOSALS
                .iter()
                .filter_map(|s| parse_ike_proposal(s).ok()),
        ),
    }
    if proposals.len() > 255 {
        cx.err(
            &node.span,
            &path.key("proposals"),
            "more than 255 proposals (RFC 7296 §3.3: the proposal number is one octet)",
        );
    }
    proposals
}

/// What to do when the IKE SA dies (`dpd_action`) or the peer closes it
/// (`close_action`). swanctl sets them per child; the engine applies them
/// per IKE SA, so the children of a connection must agree.
fn after_death(
    cx: &mut Cx<'_>,
    node: &Node,
    path: &KeyPath,
    children: &[esparto_ike::ChildConfig],
) -> (esparto_ike::DpdAction, esparto_ike::CloseAction) {
    use esparto_ike::{CloseAction, DpdAction};
    let dpd_action = shared_action(
        cx,
        node,
        path,
        "dpd_action",
        |v| match v {
            "clear" => Some(DpdAction::Clear),
            "restart" => Some(DpdAction::Restart),
            "trap" => Some(DpdAction::Trap),
            _ => None,
        },
        "clear, restart or trap",
    );
    let close_action = shared_action(
        cx,
        node,
        path,
        "close_action",
        |v| match v {
            "none" => Some(CloseAction::None),
            "start" => Some(CloseAction::Start),
            "trap" => Some(CloseAction::Trap),
            _ => None,
        },
        "none, start or trap",
    );
    // A connection we start ourselves is meant to stay up: unless set, a
    // dead peer restarts it and a peer's Delete starts it again (with
    // back-off, see esparto_ike::lifetime). Otherwise swanctl's defaults.
    let starts = children
        .iter()
        .any(|c| c.start_action == esparto_ike::StartAction::Start);
    let dpd_action = dpd_action.unwrap_or(if starts {
        DpdAction::Restart
    } else {
        DpdAction::Clear
    });
    let close_action = close_action.unwrap_or(if starts {
        CloseAction::Start
    } else {
        CloseAction::None
    });
    (dpd_action, close_action)
}

/// `recover`: what ESP for an unknown SPI from the peer makes us do while
/// we hold no IKE SA with it. `initiate` needs an address to initiate to.
fn recover(cx: &mut Cx<'_>, node: &Node, path: &KeyPath, has_remote: bool) -> esparto_ike::Recover {
    let Some(f) = node.field(path, "recover") else {
        return esparto_ike::Recover::Notify;
    };
    match cx.str(&f) {
        Some("notify") => esparto_ike::Recover::Notify,
        Some("initiate") if !has_remote => {
            cx.err_at(&f, "recover = \"initiate\" needs remote_addrs: the peer's address to initiate to");
            esparto_ike::Recover::Notify
        }
        Some("initiate") => esparto_ike::Recover::Initiate,
        Some(v) => {
            cx.err_at(&f, format!("'{v}': expected notify or initiate"));
            esparto_ike::Recover::Notify
        }
        None => esparto_ike::Recover::Notify,
    }
}

/// `unique`: what a new IKE SA with the same identities does to the ones
/// up (swanctl's values and default).
fn unique(cx: &mut Cx<'_>, node: &Node, path: &KeyPath) -> esparto_ike::Unique {
    let Some(f) = node.field(path, "unique") else {
        return esparto_ike::Unique::No;
    };
    let v = cx.str(&f).unwrap_or("no");
    match esparto_ike::Unique::NAMES.iter().find(|(n, _)| *n == v) {
        Some((_, u)) => *u,
        None => {
            let names: Vec<&str> = esparto_ike::Unique::NAMES.iter().map(|(n, _)| *n).collect();
            cx.err_at(&f, format!("'{v}': expected {}", names.join(", ")));
            esparto_ike::Unique::No
        }
    }
}

/// `fragmentation`: IKE fragmentation (RFC 7383), swanctl's values but
/// IKEv1's `force`; `true`/`false` as swanctl's `yes`/`no`.
fn fragmentation(cx: &mut Cx<'_>, node: &Node, path: &KeyPath) -> esparto_ike::Fragmentation {
    use esparto_ike::Fragmentation;
    let Some(f) = node.field(path, "fragmentation") else {
        return Fragmentation::Yes;
    };
    if let super::tree::Kind::Bool(b) = f.node.kind {
        return if b { Fragmentation::Yes } else { Fragmentation::No };
    }
    let v = cx.str(&f).unwrap_or("yes");
    match Fragmentation::NAMES.iter().find(|(n, _)| *n == v) {
        Some((_, x)) => *x,
        None if v == "force" => {
            cx.err_at(&f, "'force' fragments IKEv1's first message; IKEv2 fragments only encrypted messages (RFC 7383): use yes");
            Fragmentation::Yes
        }
        None => {
            cx.err_at(&f, format!("'{v}': expected yes, accept or no"));
            Fragmentation::Yes
        }
    }
}

/// A per-child action key (`dpd_action`, `close_action`) that the children
/// of one connection must share (it acts on the IKE SA); `None` if no child
/// sets it.
fn shared_action<T: Copy + PartialEq>(
    cx: &mut Cx<'_>,
    node: &Node,
    path: &KeyPath,
    key: &str,
    parse: impl Fn(&str) -> Option<T>,
    expected: &str,
) -> Option<T> {
    let mut action = None;
    let cf = node.field(path, "children")?;
    let table = cx.table(&cf);
    for e in table.map(|t| t.entries()).unwrap_or_default() {
        let cpath = cf.path.key(&e.key);
        let Some(f) = e.value.field(&cpath, key) else {
            continue;
        };
        let Some(v) = cx.str(&f) else { continue };
        let Some(a) = parse(v) else {
            cx.err_at(&f, format!("'{v}': expected {expected}"));
            continue;
        };
        match action {
            Some(prev) if prev != a => cx.err_at(
                &f,
                format!(
                    "the children of one connection must share a {key} (it acts on the IKE SA)"
                ),
            ),
            _ => action = Some(a),
        }
    }
    action
}

/// A duration key (`"30s"`, `"4h"`, or seconds, at most `max_secs`); 0 or
/// absent is `None`.
fn duration(
    cx: &mut Cx<'_>,
    node: &Node,
    path: &KeyPath,
    key: &str,
    max_secs: i64,
) -> Option<Duration> {
    let f = node.field(path, key)?;
    let d = match &f.node.kind {
        Kind::Int(_) => cx.int::<u64>(&f, 0..=max_secs).map(Duration::from_secs),
        Kind::Str(s) => match parse_duration(s) {
            Ok(d) if d.as_secs() as i64 <= max_secs => Some(d),
            Ok(d) => {
                cx.err_at(
                    &f,
                    format!("{} is too long (at most {max_secs} s)", d.as_secs()),
                );
                None
            }
            Err(e) => {
                cx.err_at(&f, e);
                None
            }
        },
        _ => {
            cx.err_at(
                &f,
                format!("expected a duration, found {}", f.node.type_name()),
            );
            None
        }
    };
    d.filter(|d| !d.is_zero())
}

fn auth(
    cx: &mut Cx<'_>,
    node: &Node,
    path: &KeyPath,
    side: &str,
    authorities: &certs::Authorities,
) -> AuthConfig {
    let mut a = AuthConfig::default();
    let Some(f) = node.field(path, side) else {
        return a;
    };
    let Some(t) = cx.table(&f) else { return a };
    cx.check_keys(t, &f.path, AUTH_KEYS, AUTH_UNSUPPORTED);
    let mut pubkey = None;
    if let Some(af) = t.field(&f.path, "auth") {
        if let Some(s) = cx.str(&af) {
            match s {
                "psk" => {}
                "pubkey" | "rsa" | "ecdsa" | "ed25519" => pubkey = Some(false),
                "rsa/pss" => pubkey = Some(true),
                _ => cx.err_at(
                    &af,
                    format!("'{s}': expected psk or pubkey (EAP and XAuth are not implemented)"),
                ),
            }
        }
    }
    if pubkey.is_none() {
        for key in ["certs", "key", "cacerts", "crls"] {
            if let Some(kf) = t.field(&f.path, key) {
                cx.err_at(&kf, "only with auth = \"pubkey\"");
            }
        }
    }
    if let Some(idf) = t.field(&f.path, "id") {
        if let Some(s) = cx.str(&idf) {
            match Identity::parse(s) {
                Ok(id) => a.id = Some(id),
                Err(e) => cx.err_at(&idf, e.to_string()),
            }
        }
    }
    if let Some(pss) = pubkey {
        if side == "local" {
            for key in ["cacerts", "crls"] {
                if let Some(kf) = t.field(&f.path, key) {
                    cx.err_at(&kf, "belongs to remote (the CAs we accept for the peer)");
                }
            }
            a.credential = certs::local_credential(cx, &f, t, pss);
            if let (Some(id), Some(c)) = (&a.id, &a.credential) {
                if !c.binds(id) {
                    let at = t.field(&f.path, "id").unwrap_or_else(|| f.clone());
                    cx.err_at(&at, format!("our certificate does not name {id} (subject or subjectAltName); the peer would refuse it"));
                }
            }
        } else {
            for key in ["certs", "key"] {
                if let Some(kf) = t.field(&f.path, key) {
                    cx.err_at(&kf, "belongs to local (our own certificate)");
                }
            }
            a.trust = certs::remote_trust(cx, &f, t, authorities);
        }
    }
    a
}
