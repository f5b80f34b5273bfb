//! Reloading the configuration (`esparto reload`, SIGHUP): the file the
//! daemon was started with is read again, and what changed is applied
//! connection by connection while the data plane carries on.
//!
//! **The diff.** Connections are matched by name. One whose every setting
//! (its own and each child's, in order: [`Connection`]'s equality) is as
//! before is *unchanged*: the reload does not touch it, so its IKE SA, its
//! Child SAs, their sequence numbers and replay windows, its policies and
//! its routes stay exactly as they are, and no packet of it is lost. One
//! that is new is *added*: loaded, then started or trapped as its
//! `start_action` says. One the file no longer has is *removed*: its IKE
//! SAs are deleted with the peer (an INFORMATIONAL Delete, RFC 7296
//! §1.4.1), and its Child SAs, policies, groups and the routes no other
//! child uses leave the data plane at once. One whose settings differ is
//! *changed*: removed, then added — break before make, for that
//! connection only. A statically keyed child follows the same rules; its
//! new SAs send only once their sequence numbers are reserved durably
//! (`seqstate`), and a key it keeps continues after what it used.
//! Pre-shared keys are replaced for the authentications to come; IKE SAs
//! already authenticated keep running.
//!
//! **All or nothing.** First, with nothing changed yet: the file is
//! loaded (its errors, with file, line and key, refuse the reload), static
//! keys are checked as at start, the new connections are checked against
//! what the running daemon can serve (its sockets' address, whether it
//! has an IKE socket at all, start actions it could not carry out, a peer
//! its own packets would reach only through the tunnel, static sequence
//! numbers it could not reserve), and the engine validates the IKE
//! configurations. Any refusal leaves the running configuration
//! exactly as it was. Then the changes are applied: the engine's
//! connection set ([`esparto_ike::Endpoint::replace_connections`]), the
//! Child SA table (removals, then additions), the static reservations,
//! start actions; the workers get the resulting commands in one go.
//!
//! **`[daemon]`.** Its settings shape what set-up built (workers, TUN
//! device, ports, socket addresses, the state directory, …), so a change
//! there needs a restart. The reload applies everything else and reports
//! each such setting, with its running and its new value: a file that
//! adds a tunnel and also raises `workers` gets its tunnel now and its
//! workers at the next restart. A change the connections themselves
//! depend on — the sockets' local address, an IKE socket the daemon
//! started without — refuses the whole reload instead, since the new
//! connections could not work without it.
//!
//! **One at a time.** The control thread applies a reload from start to
//! finish before it reads the next request or signal, so reloads never
//! overlap: one asked for during another waits for it, then reads the
//! file again.
//!
//! **Cost.** Reading and diffing are linear in the connections (a hash
//! lookup each); applying costs what the changed connections cost (their
//! children's policies and SAs), plus one rebuild of the engine's
//! connection index (linear, microseconds per connection). Unchanged
//! connections cost nothing beyond the comparison.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use esparto_ike::{NewConnection, Secrets};
use tracing::{info, warn};

use super::Gateway;
use super::gateway::{bind_addr, dual_stack, tun_mtu};
use super::ike::{Ike, check_activation};
use super::seqstate::{self, PairAt, StaticOut};
use crate::config::{self, Config, Connection, Daemon};
use crate::status::ReloadReport;

/// What happens to a connection of the new file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fate {
    /// Not running yet: loaded.
    Added,
    /// Running with other settings: closed and loaded again.
    Changed,
    /// Running with the same settings: left alone.
    Unchanged,
}

/// What a reload would do, from the two configurations alone.
#[derive(Debug, Default)]
pub(super) struct Plan {
    /// For each connection of the new file, in its order.
    pub(super) fates: Vec<Fate>,
    /// Running connections the new file does not have.
    pub(super) removed: Vec<String>,
    /// `[daemon]` settings (and what follows from them) that only a
    /// restart applies.
    pub(super) needs_restart: Vec<String>,
}

impl Plan {
    /// Compares the running configuration with the new one.
    pub(super) fn new(running: &Config, new: &Config) -> Self {
        let old: HashMap<&str, &Arc<Connection>> = running.connections.iter().map(|c| (c.name.as_str(), c)).collect();
        let fates = new
            .connections
            .iter()
            .map(|c| match old.get(c.name.as_str()) {
                None => Fate::Added,
                // The same one (kept by a load over VICI), or equal.
                Some(o) if Arc::ptr_eq(o, c) || *o == c => Fate::Unchanged,
                Some(_) => Fate::Changed,
            })
            .collect();
        let kept: HashSet<&str> = new.connections.iter().map(|c| c.name.as_str()).collect();
        let removed = running
            .connections
            .iter()
            .filter(|c| !kept.contains(c.name.as_str()))
            .map(|c| c.name.clone())
            .collect();
        let mut needs_restart = daemon_changes(&running.daemon, &new.daemon);
        let (mtu, new_mtu) = (tun_mtu(running), tun_mtu(new));
        if mtu != new_mtu {
            needs_restart.push(format!(
                "the TUN device's MTU stays {mtu}: the static SAs of the file would make it {new_mtu}"
            ));
        }
        Self {
            fates,
            removed,
            needs_restart,
        }
    }

    /// Names of the new file's connections with this fate.
    fn named<'a>(&'a self, new: &'a Config, fate: Fate) -> impl Iterator<Item = &'a Connection> + 'a {
        new.connections
            .iter()
            .zip(&self.fates)
            .filter(move |(_, f)| **f == fate)
            .map(|(c, _)| &**c)
    }
}

/// The `[daemon]` settings that differ, each with its running and its new
/// value.
fn daemon_changes(old: &Daemon, new: &Daemon) -> Vec<String> {
    let mut v = Vec::new();
    macro_rules! keys {
        ($($name:literal: $field:expr;)*) => {$(
            let (a, b) = ($field(old), $field(new));
            if a != b {
                v.push(format!("[daemon] {}: running with {a:?}, the file says {b:?}", $name));
            }
        )*};
    }
    keys! {
        "workers": |d: &Daemon| d.workers;
        "cpus": |d: &Daemon| d.cpus.clone();
        "control": |d: &Daemon| d.control.clone();
        "vici": |d: &Daemon| d.vici.clone();
        "tun": |d: &Daemon| d.tun.clone();
        "port": |d: &Daemon| d.port;
        "ike_port": |d: &Daemon| d.ike_port;
        "path_mtu": |d: &Daemon| d.path_mtu;
        "tun_queue_len": |d: &Daemon| d.tun_queue_len;
        "log": |d: &Daemon| d.log.clone();
        "state_dir": |d: &Daemon| d.state_dir.clone();
        "cookie_threshold": |d: &Daemon| d.ike.cookie_threshold;
        "cookie_threshold_per_source": |d: &Daemon| d.ike.cookie_threshold_per_source;
        "half_open_per_source": |d: &Daemon| d.ike.half_open_per_source;
        "cookie_threshold_per_peer": |d: &Daemon| d.ike.cookie_threshold_per_peer;
        "half_open_per_peer": |d: &Daemon| d.ike.half_open_per_peer;
        "max_half_open": |d: &Daemon| d.ike.max_half_open;
        "initiating_per_peer": |d: &Daemon| d.ike.initiating_per_peer;
        "window_size": |d: &Daemon| d.ike.window_size;
        "fragment_size": |d: &Daemon| d.ike.fragment_size;
        "routing_table": |d: &Daemon| d.routing.table;
        "routing_table_prio": |d: &Daemon| d.routing.priority;
        "routing_mark": |d: &Daemon| d.routing.mark;
        "metrics": |d: &Daemon| d.metrics;
    }
    if v.is_empty() && old != new {
        // A setting this list does not name yet.
        v.push("[daemon]: settings differ from the running ones".into());
    }
    v
}

/// Reloads the configuration `running` was read from (see the module
/// docs), for `why` (`SIGHUP`, `esparto reload`). A refusal is returned
/// as the message for the operator; the running configuration is then
/// unchanged. The service manager hears `RELOADING=1` before and `READY=1`
/// after, whatever the outcome ([`notify`](super::notify)).
pub(super) fn reload(
    running: &mut Config,
    gw: &mut Gateway,
    ike: Option<&mut Ike>,
    why: &str,
) -> Result<ReloadReport, String> {
    super::notify::reloading(&format!("reloading {} ({why})", running.path.display()));
    let outcome = apply(running, gw, ike, why);
    super::notify::ready(running, gw);
    outcome
}

/// Reads the file again, checks it against the running daemon, applies
/// it and reports what it did (see the module docs). What was loaded over
/// VICI stays beside the file's connections.
fn apply(
    running: &mut Config,
    gw: &mut Gateway,
    ike: Option<&mut Ike>,
    why: &str,
) -> Result<ReloadReport, String> {
    let started = Instant::now();
    let file = running.path.display().to_string();
    info!(%file, why, "reloading the configuration");
    let new = config::load_layered(&running.path, &config::Host::default(), &running.layer)
        .map_err(|errors| invalid(&file, &errors))?;
    apply_new(started, running, gw, ike, new, &file)
}

/// Applies what was loaded over VICI: `layer` (the running layer with a
/// connection or secret added, changed or removed) beside the file's text
/// as the daemon runs it, checked and applied as a reload (see the module
/// docs). `what` names the change in messages (`load-conn 'site'`).
pub(super) fn load_layer(
    running: &mut Config,
    gw: &mut Gateway,
    ike: Option<&mut Ike>,
    layer: config::Layer,
    what: &str,
) -> Result<ReloadReport, String> {
    let started = Instant::now();
    let new = config::relayer(running, &config::Host::default(), &layer).map_err(|errors| invalid(what, &errors))?;
    apply_new(started, running, gw, ike, new, what)
}

/// The refusal of a configuration with `errors`.
fn invalid(what: &str, errors: &config::ConfigErrors) -> String {
    format!(
        "{what}: invalid configuration ({} error{}); the running configuration stays as it was:\n{errors}",
        errors.len(),
        if errors.len() == 1 { "" } else { "s" }
    )
}

/// Checks `new` against the running daemon and applies it; `file` names
/// it in messages.
fn apply_new(
    started: Instant,
    running: &mut Config,
    gw: &mut Gateway,
    mut ike: Option<&mut Ike>,
    mut new: Config,
    file: &str,
) -> Result<ReloadReport, String> {
    let file = file.to_string();
    let refuse = |reason: String| format!("{file}: not reloaded, the running configuration stays as it was: {reason}");
    let secrets = std::mem::take(&mut new.secrets);
    let plan = Plan::new(running, &new);
    let changes = check(running, &new, &plan, gw, ike.is_some()).map_err(refuse)?;
    // Apply: the engine first (it may still refuse, with nothing changed).
    let now = Instant::now();
    let retired = match ike.as_deref_mut() {
        Some(ike) => replace_ike_connections(now, ike, gw, &new, &plan, secrets).map_err(refuse)?,
        None => 0,
    };
    let problems = apply_to_table(now, gw, ike, &new, changes);
    let names = |fate| plan.named(&new, fate).map(|c| c.name.clone()).collect::<Vec<_>>();
    let report = ReloadReport {
        file,
        added: names(Fate::Added),
        changed: names(Fate::Changed),
        removed: plan.removed.clone(),
        unchanged: plan.fates.iter().filter(|f| **f == Fate::Unchanged).count(),
        ike_sas_deleted: retired,
        needs_restart: plan.needs_restart.clone(),
        warnings: new.warnings.iter().map(ToString::to_string).collect(),
        problems,
        took_ms: started.elapsed().as_secs_f64() * 1e3,
    };
    *running = new;
    log_report(&report);
    Ok(report)
}

/// What a reload changes, once every check has passed.
struct Changes<'a> {
    /// Connections of the new file to load: added and changed.
    loading: HashSet<&'a str>,
    /// Running connections to close: removed and changed.
    closing: HashSet<&'a str>,
    /// Key ids of the static outbound SAs that close.
    released: Vec<[u8; 16]>,
    /// The static outbound SAs that load.
    outs: Vec<(PairAt, StaticOut)>,
}

/// Every check, with nothing changed yet: the new connections against
/// what the running daemon can serve, their start actions, the engine's
/// validation, their peers' routes, and the static SAs' sequence numbers.
/// A refusal is the reason.
fn check<'a>(
    running: &Config,
    new: &'a Config,
    plan: &'a Plan,
    gw: &mut Gateway,
    has_ike: bool,
) -> Result<Changes<'a>, String> {
    let bind = bind_addr(new);
    if dual_stack(new) && !gw.is_dual_stack() {
        return Err(format!(
            "the connections have addresses of both families now, which needs dual-stack sockets, and the running daemon's are bound to {} alone: \
             that takes a restart",
            gw.local_ip()
        ));
    }
    // Sockets bound to the wildcard address of the family (or dual-stack,
    // of both) serve any local address of it.
    let wildcard = gw.is_dual_stack()
        || (gw.local_ip().is_unspecified() && gw.local_ip().is_ipv4() == bind.ip().is_ipv4());
    if bind.ip() != gw.local_ip() && !wildcard {
        return Err(format!(
            "the connections' local addresses need the sockets bound to {}, and the running daemon's are bound to {}: \
             that takes a restart",
            bind.ip(),
            gw.local_ip()
        ));
    }
    if !has_ike && new.connections.iter().any(|c| c.ike.is_some()) {
        return Err(
            "the daemon started without IKE connections and without a VICI socket, so it has no IKE socket: adding the first one takes a restart"
                .into(),
        );
    }
    let loading: HashSet<&str> = plan
        .named(new, Fate::Added)
        .chain(plan.named(new, Fate::Changed))
        .map(|c| c.name.as_str())
        .collect();
    let load = || new.connections.iter().filter(|c| loading.contains(c.name.as_str())).map(|c| &**c);
    for conn in load() {
        check_activation(conn)?;
        if let Some(ic) = &conn.ike {
            ic.validate().map_err(|e| format!("connection {}: {e}", conn.name))?;
        }
    }
    // As at start: a peer the daemon's own packets would reach only
    // through the tunnel is refused.
    gw.check_peers(load()).map_err(|e| format!("{e:#}"))?;
    let closing: HashSet<&str> = plan
        .removed
        .iter()
        .map(String::as_str)
        .chain(plan.named(new, Fate::Changed).map(|c| c.name.as_str()))
        .collect();
    let workers = gw.workers();
    let released: Vec<[u8; 16]> = seqstate::static_outbound(running, workers)
        .map_err(|e| format!("{e:#}"))?
        .into_iter()
        .filter(|((conn, _, _), _)| closing.contains(conn.as_str()))
        .map(|(_, sa)| sa.key_id)
        .collect();
    let outs: Vec<_> = seqstate::static_outbound(new, workers)
        .map_err(|e| format!("{e:#}"))?
        .into_iter()
        .filter(|((conn, _, _), _)| loading.contains(conn.as_str()))
        .collect();
    let out_sas: Vec<_> = outs.iter().map(|(_, sa)| sa.clone()).collect();
    gw.check_static(&running.daemon.state_dir, &out_sas, &released).map_err(|e| format!("{e:#}"))?;
    Ok(Changes { loading, closing, released, outs })
}

/// Gives the engine the new connection list in file order (unchanged
/// ones kept, the others loaded; the IKE SAs of every other connection
/// it held retired, and the table told so) and the new secrets. Returns
/// how many IKE SAs were retired; a refusal changes nothing.
fn replace_ike_connections(
    now: Instant,
    ike: &mut Ike,
    gw: &mut Gateway,
    new: &Config,
    plan: &Plan,
    secrets: Secrets,
) -> Result<usize, String> {
    let list = new
        .connections
        .iter()
        .zip(&plan.fates)
        .filter_map(|(c, fate)| {
            let ic = c.ike.as_ref()?;
            Some(match fate {
                Fate::Unchanged => NewConnection::Keep(ic.name.clone()),
                Fate::Added | Fate::Changed => NewConnection::Load(Box::new(ic.clone())),
            })
        })
        .collect();
    let ids = ike.ep.replace_connections(now, list).map_err(|e| format!("{e}"))?;
    let retired = ids.len();
    gw.table.retire_ike_sas(ids);
    *ike.ep.secrets_mut() = secrets;
    Ok(retired)
}

/// Applies the changes to the table and the data plane: the closing
/// connections removed, the static reservations released and claimed,
/// the loading connections added, installed and activated, the routes
/// no child wants any more removed, and the workers' commands sent.
/// Returns what went wrong (the rest is applied regardless).
fn apply_to_table(now: Instant, gw: &mut Gateway, mut ike: Option<&mut Ike>, new: &Config, changes: Changes<'_>) -> Vec<String> {
    let Changes { loading, closing, released, outs } = changes;
    for name in &closing {
        if let Some(id) = gw.table.conn_id(name) {
            gw.table.remove_conn(id);
        }
    }
    let mut problems = Vec::new();
    let (claims, failed) = gw.reserve_static(outs, &released);
    if let Some(e) = failed {
        problems.push(format!(
            "static SAs: {e:#}; their new SAs send once the reservation is written (retried)"
        ));
    }
    let local_ip = gw.local_ip();
    for conn in new.connections.iter().filter(|c| loading.contains(c.name.as_str())) {
        gw.table.add_configured(conn, local_ip);
        if let Err(e) = gw.install_static(now, conn, &claims) {
            problems.push(format!("{e:#}"));
        }
        if let Some(ike) = ike.as_deref_mut() {
            if let Err(e) = ike.activate(now, gw, conn) {
                problems.push(format!("connection {}: {e:#}", conn.name));
            }
        }
    }
    // Routes a changed connection still wants stayed in place meanwhile.
    gw.table.flush_unroutes();
    if let Err(e) = gw.apply() {
        problems.push(format!("{e:#}"));
    }
    if let Some(ike) = ike {
        ike.flush(now, gw);
    }
    problems
}

/// Logs what a reload did, connection by connection, then a summary.
fn log_report(report: &ReloadReport) {
    for n in &report.added {
        info!(connection = %n, "reload: connection added");
    }
    for n in &report.changed {
        info!(connection = %n, "reload: connection changed: closed and loaded again");
    }
    for n in &report.removed {
        info!(connection = %n, "reload: connection removed");
    }
    for w in &report.warnings {
        warn!("reload: {w}");
    }
    for n in &report.needs_restart {
        warn!("reload: not applied, needs a restart: {n}");
    }
    for p in &report.problems {
        warn!("reload: {p}");
    }
    info!(
        file = %report.file, added = report.added.len(), changed = report.changed.len(), removed = report.removed.len(),
        unchanged = report.unchanged, ike_sas_deleted = report.ike_sas_deleted, took_ms = report.took_ms,
        "configuration reloaded"
    );
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// An IKE connection `name` protecting 10.1.N.0/24 to 10.2.N.0/24.
    fn conn(name: &str, n: u8, esp: &str) -> String {
        format!(
            r#"
[connections.{name}]
local_addrs = ["192.0.2.1"]
remote_addrs = ["192.0.2.2"]
version = 2
proposals = ["aes256gcm16-prfsha256-x25519"]
local.auth = "psk"
local.id = "@west-{name}"
remote.auth = "psk"
remote.id = "@east-{name}"
[connections.{name}.children.net]
local_ts = ["10.1.{n}.0/24"]
remote_ts = ["10.2.{n}.0/24"]
esp_proposals = ["{esp}"]
start_action = "start"
[secrets.{name}]
ids = ["@west-{name}", "@east-{name}"]
secret = "a secret of {name} that is long enough"
"#
        )
    }

    fn file(daemon: &str, conns: &[String]) -> Config {
        let text = format!("[daemon]\nworkers = 2\n{daemon}\n{}", conns.concat());
        config::parse_str(&text, "west.toml").unwrap()
    }

    #[test]
    fn the_same_file_changes_nothing() {
        let a = [conn("a", 1, "aes256gcm16"), conn("b", 2, "aes256gcm16")];
        let p = Plan::new(&file("", &a), &file("", &a));
        assert_eq!(p.fates, [Fate::Unchanged, Fate::Unchanged]);
        assert!(p.removed.is_empty() && p.needs_restart.is_empty(), "{p:?}");
    }

    #[test]
    fn connections_are_added_changed_removed_or_left_alone_by_name() {
        let running = file(
            "",
            &[
                conn("a", 1, "aes256gcm16"),
                conn("b", 2, "aes256gcm16"),
                conn("d", 4, "aes256gcm16"),
            ],
        );
        // b goes, c comes, a's ESP proposal changes, d stays as it was
        // (moved within the file).
        let new = file(
            "",
            &[
                conn("d", 4, "aes256gcm16"),
                conn("c", 3, "aes256gcm16"),
                conn("a", 1, "aes128gcm16"),
            ],
        );
        let p = Plan::new(&running, &new);
        assert_eq!(p.fates, [Fate::Unchanged, Fate::Added, Fate::Changed]);
        assert_eq!(p.removed, ["b"]);
        let names = |f| p.named(&new, f).map(|c| c.name.as_str()).collect::<Vec<_>>();
        assert_eq!(names(Fate::Added), ["c"]);
        assert_eq!(names(Fate::Changed), ["a"]);
        assert_eq!(names(Fate::Unchanged), ["d"]);
    }

    #[test]
    fn a_secret_alone_changes_no_connection() {
        let running = file("", &[conn("a", 1, "aes256gcm16")]);
        let text = conn("a", 1, "aes256gcm16").replace("long enough", "long enough too");
        let p = Plan::new(&running, &file("", &[text]));
        assert_eq!(p.fates, [Fate::Unchanged]);
    }

    #[test]
    fn daemon_settings_are_reported_as_needing_a_restart() {
        let a = [conn("a", 1, "aes256gcm16")];
        let p = Plan::new(
            &file("", &a),
            &file("tun = \"esp1\"\nport = 4501\ncookie_threshold = 7", &a),
        );
        assert_eq!(p.fates, [Fate::Unchanged]);
        assert_eq!(p.needs_restart.len(), 3, "{:?}", p.needs_restart);
        assert!(
            p.needs_restart[0].starts_with("[daemon] tun: running with \"esparto0\""),
            "{:?}",
            p.needs_restart
        );
        assert!(
            p.needs_restart
                .iter()
                .any(|n| n.contains("port: running with 4500, the file says 4501"))
        );
        assert!(p.needs_restart.iter().any(|n| n.contains("cookie_threshold")));
    }

    #[test]
    fn a_new_metrics_address_needs_a_restart() {
        let a = [conn("a", 1, "aes256gcm16")];
        let p = Plan::new(&file("", &a), &file("metrics = \"127.0.0.1:9720\"", &a));
        assert_eq!(p.fates, [Fate::Unchanged]);
        assert_eq!(p.needs_restart, ["[daemon] metrics: running with None, the file says Some(127.0.0.1:9720)"]);
    }
}
