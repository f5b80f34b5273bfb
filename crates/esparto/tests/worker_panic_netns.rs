//! A worker that panics stops the daemon: it exits non-zero, its log names
//! the worker and the panic, and it leaves neither TUN device nor lock
//! behind, so that a service manager restarts it whole.
//!
//! The panic is injected by the `fault-injection` feature's test hook
//! (`ESPARTO_FAULT_PANIC_WORKER`, see `daemon/fault.rs`); this test is only
//! built with that feature (`cargo test --features esparto/fault-injection`).
//! Needs root, iproute2: SKIP otherwise.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::Duration;

use esparto::daemon::fault;
use esparto_testbed::esparto::{EspartoConfig, Keying, StaticPair, run_to_exit};
use esparto_testbed::skip;
use esparto_testbed::topology::{Node, Topology};

#[test]
fn a_worker_panic_stops_the_daemon_with_the_reason() {
    if skip("worker_panic_netns", false) {
        return;
    }
    let bin = Path::new(env!("CARGO_BIN_EXE_esparto"));
    let topo = Topology::new().unwrap();
    let pair = StaticPair { in_spi: 0xc000_0101, out_spi: 0xc000_0201, in_key: "11".repeat(36), out_key: "22".repeat(36) };
    let mut cfg = EspartoConfig::site(Node::GwWest, Keying::Static(vec![pair])).unwrap();
    cfg.workers = Some(2);
    let gw = topo.ns(Node::GwWest);
    // Worker 1 panics at its first tick a second after start.
    let run = run_to_exit(gw, bin, &cfg, &[(fault::ENV, "1@1000")], Duration::from_secs(30)).unwrap();
    let status = run.status.unwrap_or_else(|| panic!("still running after {:?}: {}", run.ran, run.log));
    assert_eq!(status.code(), Some(1), "{}", run.log);
    assert!(run.log.contains("esparto running"), "it had started: {}", run.log);
    let reason = format!("worker 1 panicked: fault injected by {} in worker 1", fault::ENV);
    assert!(run.log.contains(&reason), "{reason:?} not in: {}", run.log);
    assert!(run.log.contains("a worker stopped; stopping the daemon"), "{}", run.log);
    // The panic itself, with its thread and location, through the log.
    assert!(run.log.contains("esparto-w1") && run.log.contains("fault.rs"), "{}", run.log);
    assert!(gw.ip(&["link", "show", "esparto0"]).is_err(), "the TUN device outlived the daemon");
}
