//! No packet is lost because a worker installs an SA late.
//!
//! A new Child SA's inbound half must be in its worker before the peer
//! sends on it. On a busy machine a worker may apply the control thread's
//! commands long after they were queued; the test makes every worker of
//! both daemons apply each command 100 ms late
//! (`ESPARTO_FAULT_DELAY_COMMANDS`, the `fault-injection` feature's hook),
//! so the race is provoked, not hoped for, while UDP flows cross the
//! tunnel both ways:
//!
//! - on-demand per-CPU sub-SAs (RFC 9611): rounds of `esparto up`, traffic
//!   on every worker of both gateways (each worker acquires its own
//!   sub-SA; the responder's outbound half waits for the initiator's first
//!   packet), `esparto down`;
//! - Child SA rekeys under traffic (`esparto rekey` on either side, every
//!   Child SA of the connection at once), Esparto against Esparto, and
//!   against strongSwan 5.9.8 (rekeys from both sides).
//!
//! Checked: no datagram lost, and no `unknown_spi` drop on either side.
//! The rounds are `ESPARTO_RACE_ROUNDS` (default 4) of each kind; the
//! figure in docs/BENCHMARKS.md ("SA installs under delayed workers") is
//! a run with more. Needs root (and strongSwan for the second test): SKIP
//! otherwise.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use esparto::daemon::fault;
use esparto::status::Status;
use esparto_testbed::esparto::{EspartoConfig, EspartoGateway, Keying};
use esparto_testbed::strongswan::{Charon, SwanConfig};
use esparto_testbed::topology::{Net, Node, Topology};
use esparto_testbed::udpgen::{SINK_PORT, UdpGen};
use esparto_testbed::{Family, skip, traffic};

const PSK: &str = "install race test key, namespaces only";
/// How late every worker applies commands.
const DELAY: &str = "*+100";
const WORKERS: usize = 4;

fn rounds() -> usize {
    std::env::var("ESPARTO_RACE_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(4)
}

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_esparto"))
}

fn esparto(topo: &Topology, side: Node, initiator: bool, per_cpu: &str) -> EspartoGateway {
    let west = side == Node::GwWest;
    let keying = Keying::Ike {
        proposal: "aes256gcm16-prfsha256-x25519".into(),
        local_id: if west { "@west" } else { "@east" }.into(),
        remote_id: if west { "@east" } else { "@west" }.into(),
        psk: PSK.into(),
        initiator,
    };
    let mut cfg = EspartoConfig::site(side, keying).unwrap();
    cfg.workers = Some(WORKERS);
    cfg.per_cpu_sas = per_cpu.into();
    cfg.child_extra.push(("per_cpu_max".into(), WORKERS.to_string()));
    EspartoGateway::start_with_env(topo.ns(side), bin(), &cfg, &[(fault::ENV_DELAY, DELAY)]).unwrap()
}

fn wait(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Until a ping crosses the tunnel both ways: the SAs are in the workers
/// (the table lists a Child SA as soon as it is negotiated; with every
/// command applied late, its halves reach the workers later).
fn wait_tunnel(topo: &Topology) {
    let (hw, he) = (Topology::addr(Node::HostWest, Net::Lan, Family::V4), Topology::addr(Node::HostEast, Net::Lan, Family::V4));
    wait("a ping through the tunnel both ways", 30, || {
        let ok = |ns, dst| traffic::ping(topo.ns(ns), dst, 1, Duration::from_millis(100)).is_ok_and(|r| r.received > 0);
        ok(Node::HostWest, he) && ok(Node::HostEast, hw)
    });
}

fn child_spis(gw: &EspartoGateway) -> Vec<String> {
    gw.sas().unwrap_or_default().iter().filter(|s| s.state == "established").flat_map(|s| s.children.iter().map(|c| c.in_spi.clone())).collect()
}

fn log(gw: &EspartoGateway) -> String {
    std::fs::read_to_string(gw.dir().path().join("esparto.log")).unwrap_or_default()
}

/// Lines of `log` saying a Child SA was installed, new (`rekey=false`) or
/// replacing another (`rekey=true`), in a worker's slot or any.
fn installed(log: &str, rekey: bool, sub_only: bool) -> usize {
    let r = format!("rekey={rekey}");
    log.lines()
        .filter(|l| l.contains("Child SA installed") && l.contains(&r) && (!sub_only || l.contains("slot=Worker(")))
        .count()
}

fn unknown_spi(st: &Status) -> u64 {
    st.drops.get("unknown_spi").copied().unwrap_or(0)
}

/// UDP both ways for `dur` (8 flows each way, so every worker of both
/// gateways carries some); returns (sent, received) over both.
fn both_ways(west: &mut UdpGen, east: &mut UdpGen, dur: Duration) -> (u64, u64) {
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| west.trial(256, 2_000.0, dur).unwrap().0);
        let b = s.spawn(|| east.trial(256, 2_000.0, dur).unwrap().0);
        (a.join().unwrap(), b.join().unwrap())
    });
    (a.sent + b.sent, a.received + b.received)
}

fn generators(topo: &Topology) -> (UdpGen, UdpGen) {
    let (hw, he) = (Topology::addr(Node::HostWest, Net::Lan, Family::V4), Topology::addr(Node::HostEast, Net::Lan, Family::V4));
    let to_east = UdpGen::with_flows(topo.ns(Node::HostWest), hw, topo.ns(Node::HostEast), he, 8).unwrap();
    let to_west = UdpGen::to_port(topo.ns(Node::HostEast), he, topo.ns(Node::HostWest), (hw, SINK_PORT + 1).into(), 8).unwrap();
    (to_east, to_west)
}

/// Rekeys every Child SA from `who`, waits until all were replaced.
fn rekey_all(who: &EspartoGateway, peer: &EspartoGateway) {
    let before = child_spis(who);
    let (ok, out) = who.cli(&["rekey", "site"]).unwrap();
    assert!(ok, "{out}");
    wait("a rekey of every Child SA", 30, || {
        let now = child_spis(who);
        now.len() >= before.len() && now.iter().all(|s| !before.contains(s)) && child_spis(peer).len() >= now.len()
    });
}

#[test]
fn delayed_installs_lose_nothing_between_two_esparto_gateways() {
    if skip("install_race_netns", false) {
        return;
    }
    let topo = Topology::new().unwrap();
    let east = esparto(&topo, Node::GwEast, false, "on-demand");
    let west = esparto(&topo, Node::GwWest, true, "on-demand");
    let (mut to_east, mut to_west) = generators(&topo);
    let (mut sent, mut received) = (0, 0);

    // On-demand sub-SAs, fresh each round.
    for round in 0..rounds() {
        if round > 0 {
            let (ok, out) = west.cli(&["up", "site", "--quiet"]).unwrap();
            assert!(ok, "{out}");
        }
        wait("the IKE SA and its first Child SA", 30, || !child_spis(&west).is_empty() && !child_spis(&east).is_empty());
        wait_tunnel(&topo);
        let (s, r) = both_ways(&mut to_east, &mut to_west, Duration::from_millis(1500));
        sent += s;
        received += r;
        // Nothing is sent while the SAs go: the deletes lose nothing.
        let (ok, out) = west.cli(&["down", "site"]).unwrap();
        assert!(ok, "{out}");
        wait("the IKE SA to go", 30, || child_spis(&west).is_empty() && child_spis(&east).is_empty());
    }
    let subs = installed(&log(&west), false, true);
    assert!(subs >= rounds() * 2, "only {subs} sub-SAs in {} rounds", rounds());

    // Rekeys under traffic, from both sides.
    let (ok, out) = west.cli(&["up", "site", "--quiet"]).unwrap();
    assert!(ok, "{out}");
    wait("the IKE SA and its first Child SA", 30, || !child_spis(&west).is_empty() && !child_spis(&east).is_empty());
    wait_tunnel(&topo);
    let (s, r) = both_ways(&mut to_east, &mut to_west, Duration::from_millis(1500));
    sent += s;
    received += r;
    let rekeys_before = installed(&log(&west), true, false);
    let traffic = Duration::from_secs(3 + 2 * rounds() as u64);
    let ((s, r), ()) = std::thread::scope(|sc| {
        let t = sc.spawn(|| both_ways(&mut to_east, &mut to_west, traffic));
        std::thread::sleep(Duration::from_millis(500));
        for round in 0..rounds() {
            if round % 2 == 0 { rekey_all(&west, &east) } else { rekey_all(&east, &west) }
        }
        (t.join().unwrap(), ())
    });
    sent += s;
    received += r;
    let rekeys = installed(&log(&west), true, false) - rekeys_before;

    let (ws, es) = (west.status().unwrap(), east.status().unwrap());
    eprintln!(
        "delayed installs ({DELAY} ms per command, {WORKERS} workers each): {subs} on-demand sub-SAs, {rekeys} Child SA rekeys; \
         {received} of {sent} datagrams arrived; drops west {:?}, east {:?}",
        ws.drops, es.drops
    );
    assert!(rekeys >= rounds() * 2, "only {rekeys} rekeys");
    assert!(log(&west).contains("fault injected: every worker applies commands late"));
    assert_eq!((unknown_spi(&ws), unknown_spi(&es)), (0, 0), "ESP for SAs not yet installed: west {:?}, east {:?}", ws.drops, es.drops);
    assert_eq!(received, sent, "datagrams lost; drops west {:?}, east {:?}", ws.drops, es.drops);
    west.stop().unwrap();
    east.stop().unwrap();
}

#[test]
fn delayed_installs_lose_nothing_to_strongswan_rekeys() {
    if skip("install_race_netns", true) {
        return;
    }
    let topo = Topology::new().unwrap();
    let mut swan = SwanConfig::site(Node::GwEast, PSK, "aes256gcm16-prfsha256-x25519", "aes256gcm16").unwrap();
    swan.initiator = false;
    let charon = Charon::start(topo.ns(Node::GwEast), swan).unwrap();
    let west = esparto(&topo, Node::GwWest, true, "no");
    wait("the tunnel", 30, || !child_spis(&west).is_empty() && charon.child_installed().unwrap_or(false));
    wait_tunnel(&topo);
    let (mut to_east, mut to_west) = generators(&topo);
    let rekeys_before = installed(&log(&west), true, false);
    let traffic = Duration::from_secs(3 + 2 * rounds() as u64);
    let ((sent, received), ()) = std::thread::scope(|sc| {
        let t = sc.spawn(|| both_ways(&mut to_east, &mut to_west, traffic));
        std::thread::sleep(Duration::from_millis(500));
        for round in 0..rounds() {
            let before = child_spis(&west);
            if round % 2 == 0 {
                let (ok, out) = west.cli(&["rekey", "site"]).unwrap();
                assert!(ok, "{out}");
            } else {
                let out = charon.swanctl(&["--rekey", "--child", "lan"]).unwrap();
                assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            }
            wait("the rekey", 30, || {
                let now = child_spis(&west);
                !now.is_empty() && now.iter().all(|s| !before.contains(s))
            });
        }
        (t.join().unwrap(), ())
    });
    let rekeys = installed(&log(&west), true, false) - rekeys_before;
    let ws = west.status().unwrap();
    eprintln!(
        "delayed installs against strongSwan ({DELAY} ms per command): {rekeys} Child SA rekeys; {received} of {sent} datagrams arrived; drops {:?}",
        ws.drops
    );
    assert!(rekeys >= rounds(), "only {rekeys} rekeys");
    assert_eq!(unknown_spi(&ws), 0, "ESP for SAs not yet installed: {:?}", ws.drops);
    assert_eq!(received, sent, "datagrams lost; drops {:?}", ws.drops);
    west.stop().unwrap();
    charon.stop().unwrap();
}
