//! Two Esparto gateways with IKEv2 (PSK; the initiator `start_action =
//! start`, the responder waits; default DPD, i.e. none) while both hosts
//! ping each other 20 times a second, and one side goes away:
//!
//! - (a) the responder is killed (SIGKILL) and started again 5 s later;
//! - (b) the same with the initiator;
//! - (c) one side stops (SIGTERM): its Delete reaches the peer, which
//!   drops the IKE SA at once and (start_action = start) initiates again
//!   with back-off, not in a loop.
//!
//! (a) and (b) measure the time from the restart until pings answer both
//! ways again and hold it to 10 s (it is about a second: see
//! `esparto_ike::lifetime::REINITIATE_DELAY`); every figure is printed.
//! After each recovery both gateways' data planes hold exactly the SAs
//! their IKE SA lists: the stale ones went with the old IKE SA. Needs
//! root: SKIP otherwise.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use esparto_testbed::esparto::{EspartoConfig, EspartoGateway, Keying};
use esparto_testbed::pinger::{Pinger, unix_secs};
use esparto_testbed::topology::{Net, Node, Topology};
use esparto_testbed::{Family, skip};

/// Pings per second from each host.
const PING_INTERVAL: Duration = Duration::from_millis(50);
/// How long the killed side stays down.
const DOWN_FOR: Duration = Duration::from_secs(5);
/// The most a recovery may take, from the restart until pings answer both
/// ways (the daemon's start-up included).
const RECOVERY_LIMIT: f64 = 10.0;
/// How long we wait for anything before calling it failed (generous: the
/// machine is shared).
const PATIENCE: Duration = Duration::from_secs(40);

fn config(side: Node) -> EspartoConfig {
    let west = side == Node::GwWest;
    let (l, r) = if west { ("@west", "@east") } else { ("@east", "@west") };
    let mut c = EspartoConfig::site(
        side,
        Keying::Ike {
            proposal: "aes256gcm16-prfsha256-x25519".into(),
            local_id: l.into(),
            remote_id: r.into(),
            psk: "recovery test secret".into(),
            initiator: west,
        },
    )
    .unwrap();
    c.workers = Some(2);
    // The documented default: a sub-SA per worker when it has traffic.
    c.per_cpu_sas = "on-demand".into();
    c
}

fn wait_established(gw: &EspartoGateway, what: &str) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let s = gw.sas().unwrap();
        if s.iter().any(|s| s.state == "established" && !s.children.is_empty()) {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: no IKE SA with a Child SA: {s:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Wait until both pingers have an answer at or after `t` (UNIX seconds);
/// the later of the two first answers.
fn both_ways_after(pings: &[Pinger; 2], t: f64, what: &str) -> f64 {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let firsts: Vec<Option<f64>> = pings.iter().map(|p| p.first_reply_after(t)).collect();
        if let [Some(a), Some(b)] = firsts[..] {
            return a.max(b);
        }
        assert!(
            Instant::now() < deadline,
            "{what}: pings do not answer both ways ({} / {}: {firsts:?})",
            pings[0].what(),
            pings[1].what()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The data plane holds exactly the SAs the gateway's IKE SAs list: one
/// IKE SA, and no SPI of a deleted Child SA left behind. An outbound half
/// no worker sends on (`idle`: a sub-SA whose worker already sends on
/// another) is listed but, by design, not installed.
fn data_plane_matches_ike(gw: &EspartoGateway, what: &str) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let sas = gw.sas().unwrap();
        let listed: BTreeSet<(String, String)> = sas
            .iter()
            .flat_map(|s| &s.children)
            .flat_map(|c| {
                let out = (c.out_state != "idle").then(|| (c.out_spi.clone(), "out".to_string()));
                std::iter::once((c.in_spi.clone(), "in".to_string())).chain(out)
            })
            .collect();
        let installed: BTreeSet<(String, String)> =
            gw.status().unwrap().sas.iter().map(|s| (s.spi.clone(), s.direction.clone())).collect();
        // Inbound SAs of a rekey linger a moment; none here (no rekey).
        if sas.len() == 1 && installed == listed {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: IKE SAs {sas:?}\nlisted {listed:?}\ninstalled {installed:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The IKE SA ids a gateway lists.
fn ike_ids(gw: &EspartoGateway) -> Vec<String> {
    gw.sas().unwrap().into_iter().map(|s| s.id).collect()
}

/// Kill one side, start it again after [`DOWN_FOR`], and return the
/// seconds from the restart until pings answer both ways.
fn crash_and_restart(gw: &mut EspartoGateway, pings: &[Pinger; 2], what: &str) -> (f64, f64) {
    gw.kill().unwrap();
    let killed = unix_secs(SystemTime::now());
    std::thread::sleep(DOWN_FOR);
    let t = unix_secs(SystemTime::now());
    gw.restart().unwrap();
    let back = both_ways_after(pings, t, what);
    let last = pings.iter().filter_map(|p| p.last_reply_before(killed + 0.5)).fold(0.0, f64::max);
    (back - t, back - last)
}

#[test]
fn a_killed_peer_restarted_is_back_within_seconds_both_ways() {
    if skip("restart_netns", false) {
        return;
    }
    let bin = Path::new(env!("CARGO_BIN_EXE_esparto"));
    let topo = Topology::new().unwrap();
    let mut east = EspartoGateway::start(topo.ns(Node::GwEast), bin, &config(Node::GwEast)).unwrap();
    let mut west = EspartoGateway::start(topo.ns(Node::GwWest), bin, &config(Node::GwWest)).unwrap();
    wait_established(&west, "start");
    let pings = [
        Pinger::start(topo.ns(Node::HostWest), Topology::addr(Node::HostEast, Net::Lan, Family::V4), PING_INTERVAL)
            .unwrap(),
        Pinger::start(topo.ns(Node::HostEast), Topology::addr(Node::HostWest, Net::Lan, Family::V4), PING_INTERVAL)
            .unwrap(),
    ];
    both_ways_after(&pings, unix_secs(SystemTime::now()), "before");

    // (a) The responder crashes and comes back: the initiator learns from
    // its INVALID_SPI / INVALID_IKE_SPI at once and initiates again.
    let before = ike_ids(&west);
    let (a, gap_a) = crash_and_restart(&mut east, &pings, "responder restarted");
    println!("(a) responder killed, restarted {DOWN_FOR:?} later: traffic both ways {a:.2} s after the restart (outage {gap_a:.2} s)");
    assert!(ike_ids(&west).iter().all(|id| !before.contains(id)), "a new IKE SA");
    data_plane_matches_ike(&west, "(a) west");
    data_plane_matches_ike(&east, "(a) east");
    let log = std::fs::read_to_string(west.dir().path().join("esparto.log")).unwrap();
    assert!(log.contains("INVALID_IKE_SPI"), "the initiator says why it dropped the IKE SA");

    // (b) The initiator crashes and comes back: it starts its connection
    // with INITIAL_CONTACT, and the responder drops the old IKE SA and its
    // Child SAs (and their SAs in the data plane).
    let before = ike_ids(&east);
    let (b, gap_b) = crash_and_restart(&mut west, &pings, "initiator restarted");
    println!("(b) initiator killed, restarted {DOWN_FOR:?} later: traffic both ways {b:.2} s after the restart (outage {gap_b:.2} s)");
    data_plane_matches_ike(&east, "(b) east");
    data_plane_matches_ike(&west, "(b) west");
    assert!(ike_ids(&east).iter().all(|id| !before.contains(id)), "the stale IKE SA is gone");

    assert!(a <= RECOVERY_LIMIT, "(a) took {a:.2} s");
    assert!(b <= RECOVERY_LIMIT, "(b) took {b:.2} s");
    drop(pings);
    west.stop().unwrap();
    east.stop().unwrap();
}

#[test]
fn a_stopped_peer_deletes_its_ike_sa_and_the_initiator_backs_off() {
    if skip("restart_netns", false) {
        return;
    }
    let bin = Path::new(env!("CARGO_BIN_EXE_esparto"));
    let topo = Topology::new().unwrap();
    let mut east = EspartoGateway::start(topo.ns(Node::GwEast), bin, &config(Node::GwEast)).unwrap();
    let west = EspartoGateway::start(topo.ns(Node::GwWest), bin, &config(Node::GwWest)).unwrap();
    wait_established(&west, "start");
    let old = ike_ids(&west);

    // (c) SIGTERM the responder: its Delete reaches the initiator, which
    // lists no IKE SA from then on (a new one, while the responder is
    // away, stays "connecting" and is not listed).
    let t0 = Instant::now();
    let gone = std::thread::scope(|s| {
        let stopping = s.spawn(|| east.terminate());
        let deadline = t0 + PATIENCE;
        let gone = loop {
            if ike_ids(&west).iter().all(|id| !old.contains(id)) {
                break t0.elapsed();
            }
            assert!(Instant::now() < deadline, "the initiator kept {old:?}");
            std::thread::sleep(Duration::from_millis(20));
        };
        stopping.join().unwrap().unwrap();
        gone
    });
    let stopped = t0.elapsed();
    println!("(c) responder stopped (SIGTERM): the initiator's IKE SA gone {:.2} s after the signal; the responder exited after {:.2} s",
        gone.as_secs_f64(), stopped.as_secs_f64());
    assert!(gone <= Duration::from_secs(3), "the peer took {gone:?} to drop the IKE SA");
    let elog = std::fs::read_to_string(east.dir().path().join("esparto.log")).unwrap();
    assert!(elog.contains("every IKE SA deleted"), "{elog}");

    // The initiator re-initiates (close_action = start by default for a
    // start connection), with back-off: one attempt, retransmitted on the
    // IKE schedule, not a loop.
    std::thread::sleep(Duration::from_secs(8));
    let wlog = std::fs::read_to_string(west.dir().path().join("esparto.log")).unwrap();
    let attempts = wlog.matches("re-initiating the connection").count();
    println!("(c) re-initiations in the 8 s after the Delete: {attempts}");
    assert!((1..=2).contains(&attempts), "{attempts} re-initiations in 8 s:\n{wlog}");

    // The responder comes back: the initiator's retransmitted IKE_SA_INIT
    // reaches it and the tunnel is up again.
    let t1 = Instant::now();
    east.restart().unwrap();
    wait_established(&west, "after the responder's return");
    println!("(c) responder started again: tunnel up {:.2} s later", t1.elapsed().as_secs_f64());
    west.stop().unwrap();
    east.stop().unwrap();
}
