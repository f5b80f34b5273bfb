//! The metrics endpoint of a running daemon, in the standard topology:
//! with traffic through an IKE tunnel, a scrape over TCP says what
//! `esparto status --json` says (workers, Child SAs, drops, IKE SAs by
//! state, set-ups, rekeys), from a thread that holds no capabilities; an
//! address already in use stops the daemon before it touches anything (no
//! TUN device, no policy rule, no state file).
//! Needs root, iproute2, ping: SKIP otherwise.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use esparto::status::Status;
use esparto_netns::Netns;
use esparto_testbed::esparto::{EspartoConfig, EspartoGateway, Keying, StaticPair, run_to_exit};
use esparto_testbed::topology::{Net, Node, Topology};
use esparto_testbed::{Family, skip, traffic};

const METRICS: &str = "127.0.0.1:9720";

/// A sample's name and labels, sorted.
type Series = (String, Vec<(String, String)>);

/// One scrape: its HTTP head and its samples.
struct Scrape {
    head: String,
    samples: BTreeMap<Series, f64>,
}

impl Scrape {
    /// `GET /metrics` from inside `ns` (the endpoint is on its loopback).
    fn take(ns: &Netns, accept: &str) -> Self {
        let mut s = ns.run(|| TcpStream::connect(METRICS)).unwrap().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        write!(
            s,
            "GET /metrics HTTP/1.1\r\nHost: {METRICS}\r\nAccept: {accept}\r\n\r\n"
        )
        .unwrap();
        let mut raw = String::new();
        s.read_to_string(&mut raw).unwrap();
        let (head, body) = raw.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{raw}");
        Self {
            head: head.to_string(),
            samples: parse(body),
        }
    }

    /// The value of `name{labels}`, if exported.
    fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let mut l: Vec<(String, String)> = labels.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect();
        l.sort();
        self.samples.get(&(name.to_string(), l)).copied()
    }

    /// Every series of `name`.
    fn all(&self, name: &str) -> impl Iterator<Item = (&Vec<(String, String)>, f64)> {
        self.samples
            .iter()
            .filter(move |((n, _), _)| n == name)
            .map(|((_, l), v)| (l, *v))
    }
}

/// Samples of the text format: `name{k="v",…} value`.
fn parse(body: &str) -> BTreeMap<Series, f64> {
    let mut out = BTreeMap::new();
    for line in body.lines().filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let (series, value) = line.rsplit_once(' ').unwrap();
        let (name, labels) = match series.split_once('{') {
            Some((n, rest)) => (n, labels_of(rest.strip_suffix('}').unwrap())),
            None => (series, Vec::new()),
        };
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("{line}"));
        assert!(out.insert((name.to_string(), labels), value).is_none(), "twice: {line}");
    }
    out
}

/// `k="v",…` (values may hold escaped quotes), sorted.
fn labels_of(mut s: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    while !s.is_empty() {
        let (k, rest) = s.split_once("=\"").unwrap();
        let mut v = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next().unwrap() {
                (_, '\\') => v.push(chars.next().unwrap().1),
                (i, '"') => break i,
                (_, c) => v.push(c),
            }
        };
        out.push((k.to_string(), v));
        s = rest[end + 1..].strip_prefix(',').unwrap_or(&rest[end + 1..]);
    }
    out.sort();
    out
}

/// `before ≤ value ≤ after`: the counter was read between two statuses.
fn between(what: &str, value: Option<f64>, before: u64, after: u64) {
    let v = value.unwrap_or_else(|| panic!("{what}: not exported"));
    assert!(
        before as f64 <= v && v <= after as f64,
        "{what}: {v} not within {before}..={after}"
    );
}

fn ike(initiator: bool) -> Keying {
    let (l, r) = if initiator {
        ("@west", "@east")
    } else {
        ("@east", "@west")
    };
    Keying::Ike {
        proposal: "aes256gcm16-prfsha256-x25519".into(),
        local_id: l.into(),
        remote_id: r.into(),
        psk: "correct horse battery staple".into(),
        initiator,
    }
}

fn pings(topo: &Topology) -> bool {
    let host = topo.ns(Node::HostWest);
    [Family::V4, Family::V6].into_iter().all(|fam| {
        let dst = Topology::addr(Node::HostEast, Net::Lan, fam);
        traffic::ping(host, dst, 5, Duration::from_millis(20)).is_ok_and(|r| r.all_answered())
    })
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Every per-worker and per-SA figure of the scrape lies between the two
/// statuses taken around it; drops appear for the reasons status lists,
/// and for no other.
fn check_against(m: &Scrape, before: &Status, after: &Status) {
    assert_eq!(m.get("esparto_workers", &[]), Some(after.workers.len() as f64));
    for (b, a) in before.workers.iter().zip(&after.workers) {
        let k = a.worker.to_string();
        let w = |dir| [("worker", k.as_str()), ("direction", dir)];
        between(
            "worker tx packets",
            m.get("esparto_worker_packets_total", &w("out")),
            b.tx_packets,
            a.tx_packets,
        );
        between(
            "worker rx packets",
            m.get("esparto_worker_packets_total", &w("in")),
            b.rx_packets,
            a.rx_packets,
        );
        between(
            "worker tx bytes",
            m.get("esparto_worker_bytes_total", &w("out")),
            b.tx_bytes,
            a.tx_bytes,
        );
        between(
            "worker rx bytes",
            m.get("esparto_worker_bytes_total", &w("in")),
            b.rx_bytes,
            a.rx_bytes,
        );
        let tun = m.get("esparto_worker_tun_read_packets_total", &[("worker", &k)]);
        between("worker tun reads", tun, b.io.tun_rx_packets, a.io.tun_rx_packets);
        for (reason, n) in &a.drops {
            let before = b.drops.get(reason).copied().unwrap_or(0);
            let got = m.get("esparto_worker_drops_total", &[("worker", &k), ("reason", reason)]);
            between(&format!("worker {k} drops {reason}"), got, before, *n);
        }
        let of_worker = |l: &Vec<(String, String)>| l.iter().any(|(n, v)| n == "worker" && *v == k);
        for (labels, _) in m.all("esparto_worker_drops_total").filter(|(l, _)| of_worker(l)) {
            let reason = &labels.iter().find(|(n, _)| n == "reason").unwrap().1;
            assert!(
                a.drops.contains_key(reason),
                "worker {k}: {reason} exported, not in status"
            );
        }
    }
    // Per SA, summed over workers as the metric is.
    let sum = |s: &Status| {
        let mut by: BTreeMap<(String, String, String, String), (u64, u64)> = BTreeMap::new();
        for sa in &s.sas {
            let e = by
                .entry((
                    sa.connection.clone(),
                    sa.child.clone(),
                    sa.direction.clone(),
                    sa.spi.clone(),
                ))
                .or_default();
            e.0 += sa.packets;
            e.1 += sa.bytes;
        }
        by
    };
    let (sb, sa) = (sum(before), sum(after));
    assert_eq!(
        sb.keys().collect::<Vec<_>>(),
        sa.keys().collect::<Vec<_>>(),
        "SAs changed during the scrape"
    );
    assert_eq!(m.all("esparto_child_sa_packets_total").count(), sa.len());
    for ((conn, child, dir, spi), (p1, b1)) in &sa {
        let (p0, b0) = sb[&(conn.clone(), child.clone(), dir.clone(), spi.clone())];
        let l = [
            ("connection", conn.as_str()),
            ("child", child.as_str()),
            ("direction", dir.as_str()),
            ("spi", spi.as_str()),
        ];
        between(
            &format!("{spi} {dir} packets"),
            m.get("esparto_child_sa_packets_total", &l),
            p0,
            *p1,
        );
        between(
            &format!("{spi} {dir} bytes"),
            m.get("esparto_child_sa_bytes_total", &l),
            b0,
            *b1,
        );
    }
    // The IKE view of the same Child SAs.
    for child in after.ike_sas.iter().flat_map(|i| &i.children) {
        let l = |dir, spi| {
            [
                ("connection", "site"),
                ("child", "lan"),
                ("direction", dir),
                ("spi", spi),
            ]
        };
        let got = m.get("esparto_child_sa_packets_total", &l("in", child.in_spi.as_str()));
        assert!(
            got.is_some_and(|v| v <= child.in_packets as f64),
            "{child:?} vs {got:?}"
        );
        let got = m.get("esparto_child_sa_bytes_total", &l("out", child.out_spi.as_str()));
        assert!(got.is_some_and(|v| v <= child.out_bytes as f64), "{child:?} vs {got:?}");
    }
    for (state, n) in &after.ike_events.ike_sa_states {
        assert_eq!(
            m.get("esparto_ike_sas", &[("state", state)]),
            Some(*n as f64),
            "{state}"
        );
    }
    let ev = |b: &Status, a: &Status| (b.ike_events.child_sa_setups, a.ike_events.child_sa_setups);
    let (c0, c1) = ev(before, after);
    between("child setups", m.get("esparto_child_sa_setups_total", &[]), c0, c1);
    let (s0, s1) = (before.ike_events.ike_sa_setups, after.ike_events.ike_sa_setups);
    between("IKE setups", m.get("esparto_ike_sa_setups_total", &[]), s0, s1);
    let (r0, r1) = (before.ike_events.child_sa_rekeys, after.ike_events.child_sa_rekeys);
    between("child rekeys", m.get("esparto_child_sa_rekeys_total", &[]), r0, r1);
    between(
        "IKE datagrams",
        m.get("esparto_ike_datagrams_total", &[]),
        before.ike["datagrams"],
        after.ike["datagrams"],
    );
}

#[test]
fn a_scrape_says_what_status_says() {
    if skip("metrics_netns", false) {
        return;
    }
    let bin = Path::new(env!("CARGO_BIN_EXE_esparto"));
    let topo = Topology::new().unwrap();
    let mut wcfg = EspartoConfig::site(Node::GwWest, ike(true)).unwrap();
    wcfg.workers = Some(2);
    wcfg.daemon_extra.push(("metrics".into(), format!("\"{METRICS}\"")));
    let mut ecfg = EspartoConfig::site(Node::GwEast, ike(false)).unwrap();
    ecfg.workers = Some(2);
    let east = EspartoGateway::start(topo.ns(Node::GwEast), bin, &ecfg).unwrap();
    let west = EspartoGateway::start(topo.ns(Node::GwWest), bin, &wcfg).unwrap();
    let gw = topo.ns(Node::GwWest);
    wait_for("the tunnel", || {
        west.sas().is_ok_and(|s| s.iter().any(|s| !s.children.is_empty()))
    });
    assert!(pings(&topo), "no traffic through the tunnel");

    // Traffic has stopped: the scrape and the statuses around it agree.
    let before = west.status().unwrap();
    let m = Scrape::take(
        gw,
        "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
    );
    let after = west.status().unwrap();
    assert!(
        m.head
            .contains("Content-Type: application/openmetrics-text; version=1.0.0"),
        "{}",
        m.head
    );
    check_against(&m, &before, &after);
    assert!(
        after.workers.iter().map(|w| w.tx_packets).sum::<u64>() >= 10,
        "{after:#?}"
    );
    assert_eq!(m.get("esparto_ike_sas", &[("state", "established")]), Some(1.0));
    assert_eq!(m.get("esparto_ike_sa_setups_total", &[]), Some(1.0));
    assert_eq!(m.get("esparto_child_sa_setups_total", &[]), Some(1.0));
    assert_eq!(
        m.get("esparto_build_info", &[("version", after.version.as_str())]),
        Some(1.0)
    );
    let gather = m.get("esparto_metrics_gather_seconds", &[]).unwrap();
    assert!(gather > 0.0 && gather < 5.0, "{gather}");
    let start = m.get("process_start_time_seconds", &[]).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(
        (now - start - after.uptime_s).abs() < 10.0,
        "started {start}, now {now}, up {} s",
        after.uptime_s
    );
    for (w, s) in after.workers.iter().map(|w| (w.worker, w)) {
        // A worker's bytes are its own SAs' bytes (no SA went away).
        let sa_bytes: u64 = after
            .sas
            .iter()
            .filter(|sa| sa.worker == w && sa.direction == "out")
            .map(|sa| sa.bytes)
            .sum();
        assert_eq!(s.tx_bytes, sa_bytes, "worker {w}");
        let sa_bytes: u64 = after
            .sas
            .iter()
            .filter(|sa| sa.worker == w && sa.direction == "in")
            .map(|sa| sa.bytes)
            .sum();
        assert_eq!(s.rx_bytes, sa_bytes, "worker {w}");
    }

    // A rekey is counted as one, beside the set-up.
    let (ok, out) = west.cli(&["rekey", "site"]).unwrap();
    assert!(ok, "{out}");
    wait_for("the rekey", || {
        west.status().is_ok_and(|s| s.ike_events.child_sa_rekeys == 1)
    });
    // The old inbound SA lingers a moment for packets in flight; the
    // comparison wants the same SAs before and after the scrape.
    wait_for("the old SA to go", || {
        west.status()
            .is_ok_and(|s| s.sas.iter().filter(|sa| sa.direction == "in").count() == 1)
    });
    assert!(pings(&topo));
    let before = west.status().unwrap();
    let m = Scrape::take(gw, "*/*");
    let after = west.status().unwrap();
    assert!(m.head.contains("Content-Type: text/plain; version=0.0.4"), "{}", m.head);
    check_against(&m, &before, &after);
    assert_eq!(m.get("esparto_child_sa_rekeys_total", &[]), Some(1.0));
    assert_eq!(m.get("esparto_child_sa_setups_total", &[]), Some(1.0));

    // The endpoint's thread holds no capability.
    let task = std::fs::read_dir(format!("/proc/{}/task", west.pid()))
        .unwrap()
        .map(|t| t.unwrap().path())
        .find(|p| std::fs::read_to_string(p.join("comm")).is_ok_and(|c| c.trim() == "esparto-metrics"))
        .expect("an esparto-metrics thread");
    let status = std::fs::read_to_string(task.join("status")).unwrap();
    for set in ["CapEff", "CapPrm", "CapBnd"] {
        let line = status.lines().find(|l| l.starts_with(set)).unwrap();
        assert!(line.ends_with("0000000000000000"), "{}: {line}", task.display());
    }
    west.stop().unwrap();
    east.stop().unwrap();
}

#[test]
fn an_address_in_use_stops_the_start_before_anything_is_touched() {
    if skip("metrics_netns", false) {
        return;
    }
    let bin = Path::new(env!("CARGO_BIN_EXE_esparto"));
    let topo = Topology::new().unwrap();
    let gw = topo.ns(Node::GwWest);
    let pair = StaticPair {
        in_spi: 0xc000_0101,
        out_spi: 0xc000_0201,
        in_key: "11".repeat(36),
        out_key: "22".repeat(36),
    };
    let mut cfg = EspartoConfig::site(Node::GwWest, Keying::Static(vec![pair])).unwrap();
    cfg.daemon_extra.push(("metrics".into(), format!("\"{METRICS}\"")));
    let state = tempfile::tempdir().unwrap();
    cfg.state_dir = Some(PathBuf::from(state.path()));
    let _holder = gw.run(|| TcpListener::bind(METRICS)).unwrap().unwrap();
    let rules = |fam| String::from_utf8_lossy(&gw.ip(&[fam, "rule"]).unwrap().stdout).to_string();
    let rules_before = (rules("-4"), rules("-6"));
    let ran = run_to_exit(gw, bin, &cfg, &[], Duration::from_secs(20)).unwrap();
    let status = ran.status.expect("the daemon exits by itself");
    assert!(!status.success(), "{status}: {}", ran.log);
    let want = format!("[daemon] metrics = \"{METRICS}\": cannot listen there: Address already in use");
    assert!(ran.log.contains(&want), "{want:?} not in: {}", ran.log);
    assert!(
        !ran.log.contains("data plane up"),
        "it touched the data plane: {}",
        ran.log
    );
    let links = String::from_utf8_lossy(&gw.ip(&["link"]).unwrap().stdout).to_string();
    assert!(!links.contains("esparto0"), "{links}");
    assert_eq!((rules("-4"), rules("-6")), rules_before, "policy rules changed");
    assert!(
        std::fs::read_dir(state.path()).unwrap().next().is_none(),
        "the state directory was written"
    );
}
