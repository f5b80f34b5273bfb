//! The cost of one control-plane event with 100, 1,000 and 10,000 tunnels
//! already present: the real table, and two real workers applying every
//! command it queues (no sockets). A tunnel is a connection with one IKE
//! SA and one child whose peer has its own `/24` (a hub's spokes).
//!
//! - *install*: a new connection, its IKE SA and its first Child SA
//!   (group, policy into each worker's SPD, inbound and outbound SAs);
//! - *delete*: that IKE SA deleted with its Child SA, and its connection
//!   removed (policy, group), so the table holds N tunnels before every
//!   install and every delete;
//! - *rekey*: a Child SA of a tunnel picked across all N rekeyed
//!   make-before-break (new pair in, old one deleted) and the inbound SA
//!   of the previous rekey removed when its `LINGER` is up.
//!
//! Each figure is the median over [`RUNS`] runs of [`BATCH`] events each.
//! Run it optimized:
//!
//! ```sh
//! cargo test --release -p esparto --lib table::bench -- --ignored --nocapture
//! ```
//!
//! For instruction counts, which the shared machine's load does not move,
//! `ESPARTO_TABLE_BENCH_TUNNELS=N` runs one size, and callgrind counts
//! each of the `#[inline(never)]` functions `install_one`, `rekey_one` and
//! `delete_one` (inclusive, divided by `RUNS * BATCH` events):
//!
//! ```sh
//! ESPARTO_TABLE_BENCH_TUNNELS=10000 valgrind --tool=callgrind --toggle-collect='*bench*_one' \
//!   target/release/deps/esparto-… table::bench --ignored
//! callgrind_annotate --inclusive=yes callgrind.out.* | grep _one
//! ```

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use esparto_ike::IkeSaId;

use super::tests::{Est, Harness, ike_ts};
use super::{IkeSaUp, LINGER};

/// Tunnels present before each measurement.
const SIZES: [usize; 3] = [100, 1_000, 10_000];
/// Events per batch.
const BATCH: usize = 1000;
/// Batches measured per figure (the median is reported).
const RUNS: usize = 9;

/// Remote selectors of tunnel `i`.
fn remote(i: usize) -> String {
    format!("10.{}.{}.0/24", 1 + i / 256, i % 256)
}

struct Bed {
    h: Harness,
    next_spi: u32,
    /// Each tunnel's current inbound SPI, by tunnel.
    current: Vec<u32>,
    /// Each tunnel's IKE SA.
    ike: Vec<u64>,
    /// Each tunnel's connection name and remote selector (made before
    /// anything is timed).
    names: Vec<Arc<str>>,
    remotes: Vec<esparto_ike::TrafficSelector>,
    remotes_esp: Vec<esparto_esp::Selector>,
    /// The rekey clock: each rekey is `LINGER` after the previous one.
    clock: Instant,
}

impl Bed {
    fn new(tunnels: usize) -> Self {
        let all = tunnels + 1;
        let mut b = Self {
            h: Harness::new(2),
            next_spi: 0x1000_0000,
            current: vec![0; all],
            ike: vec![0; all],
            names: (0..all).map(|i| Arc::from(format!("t{i}").as_str())).collect(),
            remotes: (0..all).map(|i| ike_ts(&remote(i))).collect(),
            remotes_esp: (0..all).map(|i| remote(i).parse().unwrap()).collect(),
            clock: Instant::now(),
        };
        for i in 0..tunnels {
            b.add(i);
        }
        b
    }

    fn spi(&mut self) -> u32 {
        self.next_spi += 1;
        self.next_spi
    }

    /// Tunnel `i` comes up.
    fn add(&mut self, i: usize) {
        let conn = self.names[i].clone();
        self.h.conn_ts(&conn, false, self.remotes_esp[i]);
        let id = self.h.table.conn_id(&conn).unwrap();
        let ike = self.spi().into();
        let up = IkeSaUp {
            local: super::tests::peer(),
            remote: super::tests::peer(),
            local_id: String::new(),
            remote_id: conn.to_string(),
            initiator: false,
        };
        self.h.table.ike_sa_up(self.h.now, IkeSaId(ike), id, &up);
        let (in_spi, out_spi) = (self.spi(), self.spi());
        let e = Est {
            conn: conn.clone(),
            remote: self.remotes[i],
            ..Est::new(ike, "", in_spi, out_spi)
        };
        self.h.establish(&e);
        self.current[i] = in_spi;
        self.ike[i] = ike;
    }

    /// Tunnel `i` goes.
    fn remove(&mut self, i: usize) {
        self.h.table.ike_sa_deleted(IkeSaId(self.ike[i]));
        if let Some(c) = self.h.table.conn_id(&self.names[i]) {
            self.h.table.remove_conn(c);
        }
        self.h.table.flush_unroutes();
        self.h.apply();
    }

    /// Tunnel `i`'s Child SA is rekeyed, and the previous rekey's inbound
    /// SA stops lingering.
    fn rekey(&mut self, i: usize) {
        self.clock += LINGER;
        self.h.now = self.clock;
        let old = self.current[i];
        let (in_spi, out_spi) = (self.spi(), self.spi());
        let e = Est {
            conn: self.names[i].clone(),
            remote: self.remotes[i],
            rekeys: Some(old),
            ..Est::new(self.ike[i], "", in_spi, out_spi)
        };
        self.h.establish(&e);
        self.h.table.child_deleted(self.h.now, old, true);
        self.h.table.expire_lingering(self.h.now);
        self.h.apply();
        self.current[i] = in_spi;
    }
}

/// Installs tunnel `n` and deletes it again, [`BATCH`] times: the table
/// holds `n` tunnels before each event. Returns the time of the installs
/// and of the deletes.
#[inline(never)]
fn install_delete_batch(b: &mut Bed, n: usize) -> (Duration, Duration) {
    let (mut ins, mut del) = (Duration::ZERO, Duration::ZERO);
    for _ in 0..BATCH {
        let t = Instant::now();
        install_one(b, n);
        let u = Instant::now();
        delete_one(b, n);
        ins += u - t;
        del += u.elapsed();
    }
    (ins, del)
}

#[inline(never)]
fn install_one(b: &mut Bed, i: usize) {
    b.add(i);
}

#[inline(never)]
fn delete_one(b: &mut Bed, i: usize) {
    b.remove(i);
}

#[inline(never)]
fn rekey_batch(b: &mut Bed, tunnels: usize, run: usize) -> Duration {
    let t = Instant::now();
    for j in 0..BATCH {
        rekey_one(b, (run * BATCH + j) * 7919 % tunnels);
    }
    t.elapsed()
}

#[inline(never)]
fn rekey_one(b: &mut Bed, i: usize) {
    b.rekey(i);
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[test]
#[ignore = "a benchmark: run optimized with --ignored --nocapture"]
fn per_event_cost() {
    let sizes: Vec<usize> = match std::env::var("ESPARTO_TABLE_BENCH_TUNNELS") {
        Ok(n) => vec![n.parse().unwrap()],
        Err(_) => SIZES.to_vec(),
    };
    println!(
        "tunnels | install (us/event) | rekey (us/event) | delete (us/event)   [median of {RUNS} batches of {BATCH}]"
    );
    let mut rows = Vec::new();
    for n in sizes {
        let mut b = Bed::new(n);
        let (mut ins, mut rek, mut del) = (Vec::new(), Vec::new(), Vec::new());
        let per = |d: Duration| d.as_secs_f64() * 1e6 / BATCH as f64;
        for run in 0..RUNS {
            let (i, d) = install_delete_batch(&mut b, n);
            ins.push(per(i));
            del.push(per(d));
            rek.push(per(rekey_batch(&mut b, n, run)));
            // Back to n tunnels, nothing left behind.
            assert_eq!(b.h.table.counts().0, n);
            assert_eq!(b.h.workers[0].spd().len(), n);
        }
        let row = (n, median(ins), median(rek), median(del));
        println!("{:>7} | {:>18.2} | {:>16.2} | {:>17.2}", row.0, row.1, row.2, row.3);
        rows.push(row);
    }
    if let (Some(first), Some(last)) = (rows.first(), rows.last()) {
        if rows.len() > 1 {
            println!(
                "{} vs {} tunnels: install x{:.2}, rekey x{:.2}, delete x{:.2}",
                last.0,
                first.0,
                last.1 / first.1,
                last.2 / first.2,
                last.3 / first.3
            );
        }
    }
}
