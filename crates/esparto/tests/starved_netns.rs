//! A worker that does not run for a while — starved of CPU by other work,
//! or stalled — loses packets in the kernel's queues in front of it, where
//! no worker can count them. `esparto status` must still say where every
//! lost packet went, and show that the worker went without running: the
//! TUN device's own drops (`tun_queue_full`, read from the kernel), each
//! worker's loop gaps and its wait for a CPU.
//!
//! The stall is injected (`ESPARTO_FAULT_STALL_WORKER`, the
//! `fault-injection` feature's test hook in `daemon/fault.rs`), so the test
//! does not depend on how busy the machine is. Needs root: SKIP otherwise.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::Duration;

use esparto::daemon::fault;
use esparto_testbed::esparto::{EspartoConfig, EspartoGateway, Keying, StaticPair};
use esparto_testbed::topology::{Net, Node, Topology};
use esparto_testbed::udpgen::UdpGen;
use esparto_testbed::{Family, skip};

/// How long gw-west's worker sleeps, and when (after its start).
const STALL_MS: u64 = 600;
const STALL_AFTER_MS: u64 = 2500;

#[test]
fn a_stalled_worker_loses_packets_that_status_counts() {
    if skip("starved_netns", false) {
        return;
    }
    let bin = Path::new(env!("CARGO_BIN_EXE_esparto"));
    let topo = Topology::new().unwrap();
    let pair = StaticPair { in_spi: 0xc000_0201, out_spi: 0xc000_0101, in_key: "21".repeat(36), out_key: "12".repeat(36) };
    let mut east_cfg = EspartoConfig::site(Node::GwEast, Keying::Static(vec![pair.mirrored()])).unwrap();
    east_cfg.workers = Some(1);
    let east = EspartoGateway::start(topo.ns(Node::GwEast), bin, &east_cfg).unwrap();
    // One worker carries everything; a short TUN queue fills within the
    // stall at the generator's rate.
    let mut west_cfg = EspartoConfig::site(Node::GwWest, Keying::Static(vec![pair])).unwrap();
    west_cfg.workers = Some(1);
    west_cfg.daemon_extra.push(("tun_queue_len".into(), "256".into()));
    let stall = format!("0@{STALL_AFTER_MS}+{STALL_MS}");
    let west = EspartoGateway::start_with_env(topo.ns(Node::GwWest), bin, &west_cfg, &[(fault::ENV_STALL, &stall)]).unwrap();

    let src = Topology::addr(Node::HostWest, Net::Lan, Family::V4);
    let dst = Topology::addr(Node::HostEast, Net::Lan, Family::V4);
    let mut udp = UdpGen::new(topo.ns(Node::HostWest), src, topo.ns(Node::HostEast), dst).unwrap();
    // 5 s at 10,000 packets/s: the stall falls inside, and 6,000 packets
    // arrive at a queue of 256 while the worker sleeps.
    let (trial, _) = udp.trial(256, 10_000.0, Duration::from_secs(5)).unwrap();
    let log = std::fs::read_to_string(west.dir().path().join("esparto.log")).unwrap();
    assert!(log.contains("fault injected: worker stalls"), "the stall did not happen: {log}");
    let lost = trial.sent.saturating_sub(trial.received);
    let (w, e) = (west.status().unwrap(), east.status().unwrap());
    let dev = w.devices.iter().find(|d| d.name == "esparto0").unwrap_or_else(|| panic!("no device in {w:#?}"));
    assert!(dev.queue_full > 0, "nothing dropped at the TUN device: {trial:?} {dev:?}");
    assert_eq!(w.drops.get("tun_queue_full"), Some(&dev.queue_full), "{:?}", w.drops);
    assert!(dev.to_workers >= trial.received, "{dev:?} {trial:?}");
    // Every lost packet is counted, by one gateway or the other (leaving
    // out `discarded`: the MLD reports each kernel sends into its TUN
    // device as it comes up, not the test's packets).
    let counted: u64 = w.drops.iter().chain(&e.drops).filter(|(r, _)| *r != "discarded").map(|(_, n)| n).sum();
    assert_eq!(lost, counted, "lost {lost} of {trial:?}; counted west {:?}, east {:?}", w.drops, e.drops);
    // The worker shows that it did not run.
    let g = &w.workers[0].loop_gaps;
    assert!(g.max_ms >= STALL_MS as f64 * 0.9, "{g:?}");
    assert!(g.over_200ms >= 1, "{g:?}");
    assert_eq!(g.counts.len(), g.bounds_ms.len() + 1, "{g:?}");
    assert!(w.workers[0].cpu_wait_ms.is_some(), "{:?}", w.workers[0]);
    // And so does the text.
    let (ok, text) = west.cli(&["status"]).unwrap();
    assert!(ok, "{text}");
    assert!(text.contains("tun_queue_full") && text.contains("loop: longest gap"), "{text}");
    west.stop().unwrap();
    east.stop().unwrap();
}
