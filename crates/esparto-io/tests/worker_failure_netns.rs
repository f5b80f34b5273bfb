//! A worker that stops on its own is reported, not lost: one whose
//! [`Datapath`] panics, and one whose TUN device is deleted under it.
//! `Workers::failure` names the worker and the reason while the others run
//! on; the owner's loop is expected to stop the process on it.

#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use esparto_netns::Netns;
use esparto_io::tun::{TunConfig, TunDevice};
use esparto_io::udp::UdpGroup;
use esparto_io::worker::{FailureCause, IoStats, WorkerConfig, WorkerFailure};
use esparto_io::{Datapath, RxBatch, TxBatch, Workers};

const WORKERS: usize = 2;
/// Generous: the machine may be loaded; a failure is normally seen in
/// well under a millisecond.
const DEADLINE: Duration = Duration::from_secs(5);

enum Cmd {
    Panic,
    Ping(mpsc::Sender<usize>),
}

/// Drops every packet; panics when told to.
struct Fragile {
    index: usize,
}

impl Datapath for Fragile {
    type Command = Cmd;

    fn on_command(&mut self, _now: Instant, cmd: Cmd, _io: &IoStats) {
        match cmd {
            Cmd::Panic => panic!("boom in worker {}", self.index),
            Cmd::Ping(reply) => {
                let _ = reply.send(self.index);
            }
        }
    }

    fn outbound(&mut self, _: Instant, pkts: &mut RxBatch, _: usize, _: &mut TxBatch, _: &mut TxBatch) -> usize {
        pkts.len()
    }

    fn inbound(&mut self, _: Instant, dgrams: &mut RxBatch, _: usize, _: &mut TxBatch, _: &mut TxBatch) -> usize {
        dgrams.len()
    }
}

fn workers(ns: &Netns, tun: &str) -> Workers<Cmd> {
    let bind: SocketAddr = "127.0.0.1:4500".parse().unwrap();
    let (tun, group) = ns
        .run(|| {
            let tun = TunDevice::create(&TunConfig { name: tun.into(), queues: WORKERS, ..TunConfig::default() })?;
            let group = UdpGroup::bind(bind, WORKERS, &common::steered())?;
            std::io::Result::Ok((tun, group))
        })
        .unwrap()
        .unwrap();
    let dps = (0..WORKERS).map(|index| Fragile { index }).collect();
    let cfg = WorkerConfig { tick: Duration::from_millis(20), pin: false, ..WorkerConfig::default() };
    Workers::spawn(&cfg, tun.into_queues(), group.workers, dps, None).unwrap()
}

fn wait_failure(w: &Workers<Cmd>) -> Option<WorkerFailure> {
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(f) = w.failure() {
            return Some(f);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn ping(w: &Workers<Cmd>, k: usize) -> Option<usize> {
    let (tx, rx) = mpsc::channel();
    w.send(k, Cmd::Ping(tx)).ok()?;
    rx.recv_timeout(DEADLINE).ok()
}

#[test]
fn a_panicking_worker_is_reported_with_its_message() {
    require_netns!("a_panicking_worker_is_reported_with_its_message");
    let ns = Netns::new("wpanic").unwrap();
    let w = workers(&ns, "tunP");
    assert_eq!(w.failure(), None);
    assert_eq!(ping(&w, 1), Some(1));

    assert!(w.send(1, Cmd::Panic).is_ok());
    let f = wait_failure(&w).expect("the panic is reported");
    assert_eq!(f, WorkerFailure { index: 1, cause: FailureCause::Panicked("boom in worker 1".into()) });
    assert_eq!(f.to_string(), "worker 1 panicked: boom in worker 1");
    // The dead worker takes no more commands; the other one runs on.
    assert!(ping(&w, 1).is_none());
    assert_eq!(ping(&w, 0), Some(0));
    let reports = w.shutdown();
    assert_eq!(reports.iter().map(|r| r.index).collect::<Vec<_>>(), vec![0]);
}

#[test]
fn a_worker_whose_tun_device_is_deleted_is_reported() {
    require_netns!("a_worker_whose_tun_device_is_deleted_is_reported");
    let ns = Netns::new("wtungone").unwrap();
    let w = workers(&ns, "tunG");
    assert_eq!(ping(&w, 0), Some(0));
    ns.ip(&["link", "del", "tunG"]).unwrap();
    let f = wait_failure(&w).expect("the lost TUN queue is reported");
    assert_eq!(f.cause, FailureCause::TunClosed, "{f}");
    assert!(f.to_string().contains("its TUN queue was closed"), "{f}");
    // Workers told to stop are no failure: shutting down the rest is clean.
    let reports = w.shutdown();
    assert!(reports.len() <= WORKERS);
}
