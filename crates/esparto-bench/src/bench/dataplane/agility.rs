//! `esparto bench dataplane --sas N`: key agility, many active SAs per
//! worker.
//!
//! A gateway with N tunnels holds N policies, N groups and N inbound SAs on
//! each worker; traffic that switches between them pays for the SA state
//! that is no longer in cache (cipher key schedule, sequence counter, replay
//! window, counters). `--sas N` measures that: each worker gets N SA pairs
//! behind N policies (one remote /32 each), and consecutive packets go to
//! different SAs, round robin (every SA cold when its turn comes) or drawn
//! from a Zipf(s = 1) distribution (a few busy tunnels, a long tail). Each
//! N is measured side by side with N = 1 through the same code, so the ratio
//! is the cost of switching. Rates are per CPU-second of the measuring
//! thread, so time another process held the core does not count against
//! either side.

use std::net::SocketAddr;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use esparto_crypto::{EspSuite, SecretBytes};
use esparto_esp::{
    Action, Command, HEADROOM, InboundSa, Lifetime, OutboundSa, PREFETCH_AHEAD, Policy, Prefetch, SaConfig, Selector,
    TAILROOM, Worker,
};
use serde::{Deserialize, Serialize};

use super::rig::{CHUNK, Rig, Stop, keymat, run_rig};
use crate::bench::median;
use crate::bench::packet::udp_packet;

/// How packets are spread over the SAs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SaMix {
    /// SA 0, 1, …, N-1, 0, 1, …
    RoundRobin,
    /// SA of rank k with probability proportional to 1/k.
    Zipf,
}

impl SaMix {
    /// Parses "rr" / "round-robin" or "zipf".
    pub fn parse(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "rr" | "round-robin" | "roundrobin" => Ok(SaMix::RoundRobin),
            "zipf" => Ok(SaMix::Zipf),
            other => bail!("unknown SA mix '{other}' (known: round-robin, zipf)"),
        }
    }

    /// "round-robin", "zipf".
    pub fn label(self) -> &'static str {
        match self {
            SaMix::RoundRobin => "round-robin",
            SaMix::Zipf => "zipf",
        }
    }
}

/// Most SAs per worker `--sas` accepts.
pub const MAX_SAS: usize = 1_000_000;

/// Options of the key-agility benchmark.
#[derive(Debug, Clone)]
pub struct AgilityOptions {
    /// The ESP suite.
    pub suite: EspSuite,
    /// Packet sizes.
    pub sizes: Vec<usize>,
    /// Numbers of active SAs per worker to measure (1 is always measured
    /// beside each as the reference).
    pub sas: Vec<usize>,
    /// How packets are spread over the SAs.
    pub mix: SaMix,
    /// Worker threads, each with its own N SAs.
    pub workers: usize,
    /// Length of one measurement.
    pub seconds: f64,
    /// Measurements per figure (the median is reported).
    pub runs: usize,
    /// Exactly this many packets per thread and measurement instead of `seconds`.
    pub count: Option<u64>,
    /// Prefetch each packet's SA state [`PREFETCH_AHEAD`] packets ahead in
    /// the batch, as the data path does (off: to measure what it buys).
    pub prefetch: bool,
}

/// One row of the key-agility results: one packet size, one number of SAs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgilityRow {
    /// Inner packet size in bytes.
    pub size: usize,
    /// Active SA pairs (outbound and inbound) per worker.
    pub sas: usize,
    /// How packets were spread over them.
    pub mix: SaMix,
    /// Worker threads.
    pub workers: usize,
    /// Suite.
    pub suite: String,
    /// ESP round trips per second with `sas` SAs, all workers, millions
    /// (per CPU-second of the measuring threads: on a shared machine, time
    /// they were preempted does not count).
    pub mpps: f64,
    /// The same in Gbit/s of inner packets.
    pub gbps: f64,
    /// ESP round trips per second with one SA, measured alternately with
    /// `mpps` in the same run, millions.
    pub mpps_1: f64,
    /// Median over runs of (rate with `sas` SAs / rate with one SA), each
    /// pair measured back to back.
    pub ratio: f64,
    /// Packets encapsulated and decapsulated in the last measurement, as the
    /// workers counted them (equal, or the row is refused).
    pub packets: u64,
    /// SAs that carried at least one packet in the last measurement (per worker).
    pub sas_used: usize,
    /// Resident memory added by installing one outbound SA with its policy
    /// and group, bytes: VmRSS growth over the install, divided by the SAs
    /// installed. `None` below [`MEMORY_MIN_SAS`] (page granularity).
    pub out_bytes_per_sa: Option<f64>,
    /// The same for one inbound SA in the SAD.
    pub in_bytes_per_sa: Option<f64>,
    /// Heap bytes the allocator handed out for one outbound SA with its
    /// policy and group (the crypto library's key schedule included, and
    /// the tables' spare capacity): the allocator's bytes in use before and
    /// after the install, divided by the SAs installed.
    #[serde(default)]
    pub out_heap_per_sa: Option<f64>,
    /// The same for one inbound SA in the SAD.
    #[serde(default)]
    pub in_heap_per_sa: Option<f64>,
    /// Whether the SA state was prefetched ahead in each batch.
    #[serde(default)]
    pub prefetch: bool,
}

/// Fewest SAs per worker for which the memory per SA is reported: below it
/// the 4 KiB page granularity of VmRSS dominates.
pub const MEMORY_MIN_SAS: usize = 1000;

/// Runs the key-agility benchmark: for each number of SAs (smallest
/// first, so that memory freed by one is not reused by a larger one's
/// install), each size, `runs` back-to-back pairs of measurements with one
/// SA and with N.
pub fn run_agility(opts: &AgilityOptions) -> Result<Vec<AgilityRow>> {
    let cpus = esparto_io::cpu::allowed_cpus().context("reading the CPU affinity mask")?;
    let mut list = opts.sas.clone();
    list.sort_unstable();
    list.dedup();
    let mut base = build_rigs(opts, 1)?;
    let mut rows = Vec::new();
    for &n in &list {
        if n == 0 || n > MAX_SAS {
            bail!("--sas {n}: must be between 1 and {MAX_SAS}");
        }
        let mut rigs = build_rigs(opts, n)?;
        let installed = (n * opts.workers) as f64;
        let per_sa = |b: Option<u64>| (n >= MEMORY_MIN_SAS).then_some(b.map(|b| b as f64)).flatten();
        let out_bytes = rigs.iter().map(|r| per_sa(r.out_bytes)).sum::<Option<f64>>().map(|b| b / installed);
        let in_bytes = rigs.iter().map(|r| per_sa(r.in_bytes)).sum::<Option<f64>>().map(|b| b / installed);
        let out_heap = rigs.iter().map(|r| per_sa(r.out_heap)).sum::<Option<f64>>().map(|b| b / installed);
        let in_heap = rigs.iter().map(|r| per_sa(r.in_heap)).sum::<Option<f64>>().map(|b| b / installed);
        for (si, &size) in opts.sizes.iter().enumerate() {
            for r in base.iter_mut().chain(rigs.iter_mut()) {
                r.size = si;
            }
            let (mut one, mut many, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
            let mut last = (0, 0, 0);
            for _ in 0..opts.runs.max(1) {
                let b = measure_rigs(opts, &cpus, &mut base)?;
                let before: Vec<_> = rigs.iter().map(AgilityRig::counts).collect();
                let m = measure_rigs(opts, &cpus, &mut rigs)?;
                let after: Vec<_> = rigs.iter().map(AgilityRig::counts).collect();
                let tx: u64 = after.iter().zip(&before).map(|(a, b)| a.0 - b.0).sum();
                let rx: u64 = after.iter().zip(&before).map(|(a, b)| a.1 - b.1).sum();
                if tx != rx {
                    bail!("{n} SAs: {tx} packets encapsulated but {rx} decapsulated");
                }
                last = (tx, rx, after.iter().map(|c| c.2).max().unwrap_or(0));
                one.push(b);
                many.push(m);
                ratio.push(m / b);
            }
            let mpps = median(&many);
            rows.push(AgilityRow {
                size,
                sas: n,
                mix: opts.mix,
                workers: opts.workers,
                suite: opts.suite.name().to_string(),
                mpps: mpps / 1e6,
                gbps: mpps * size as f64 * 8.0 / 1e9,
                mpps_1: median(&one) / 1e6,
                ratio: median(&ratio),
                packets: last.0,
                sas_used: last.2,
                out_bytes_per_sa: out_bytes,
                in_bytes_per_sa: in_bytes,
                out_heap_per_sa: out_heap,
                in_heap_per_sa: in_heap,
                prefetch: opts.prefetch,
            });
        }
    }
    Ok(rows)
}

/// Prints the key-agility table.
pub fn print_agility(rows: &[AgilityRow]) {
    let Some(first) = rows.first() else { return };
    println!(
        "esparto bench dataplane --sas: suite {}, {} worker(s), packets spread {} over N SA pairs per worker, \
         batches of {AGILITY_BATCH}, {}",
        first.suite,
        first.workers,
        first.mix.label(),
        if first.prefetch { format!("SA state prefetched {PREFETCH_AHEAD} packets ahead") } else { "no prefetch".into() }
    );
    println!(
        "{:>6} {:>8} {:>9} {:>9} {:>10} {:>8} {:>11} {:>11} {:>11} {:>11}",
        "size", "SAs", "Mpps", "Gb/s", "1-SA Mpps", "ratio", "out B/SA", "in B/SA", "out heap/SA", "in heap/SA"
    );
    let mem = |b: Option<f64>| b.map_or_else(|| "-".to_string(), |b| format!("{b:.0}"));
    for r in rows {
        println!(
            "{:>6} {:>8} {:>9.3} {:>9.2} {:>10.3} {:>8.3} {:>11} {:>11} {:>11} {:>11}",
            r.size,
            r.sas,
            r.mpps,
            r.gbps,
            r.mpps_1,
            r.ratio,
            mem(r.out_bytes_per_sa),
            mem(r.in_bytes_per_sa),
            mem(r.out_heap_per_sa),
            mem(r.in_heap_per_sa)
        );
    }
    println!(
        "Mpps/Gb/s = ESP round trips (encapsulate + decapsulate) with N SAs, all workers; ratio = median of \
         (N SAs / one SA) measured back to back; out/in B/SA = resident memory (VmRSS growth) per outbound SA \
         (with its policy and group) and per inbound SA; heap/SA = bytes the allocator handed out for them \
         (key schedules and spare table capacity included); memory shown from {MEMORY_MIN_SAS} SAs."
    );
    println!(
        "inline sizes: OutboundSa {} B, InboundSa {} B (boxed in the SAD; {} hot lines first), SaGroup {} B, \
         Policy {} B; replay bitmap {} B on the heap (plus the cipher's key schedule and the selectors, also on \
         the heap).",
        core::mem::size_of::<OutboundSa>(),
        core::mem::size_of::<InboundSa>(),
        esparto_esp::HOT_LINES,
        core::mem::size_of::<esparto_esp::SaGroup>(),
        core::mem::size_of::<Policy>(),
        esparto_esp::DEFAULT_WINDOW / 8
    );
}

/// Length of the precomputed Zipf sequence of SA indices (it repeats).
const ZIPF_LEN: usize = 1 << 20;

/// The remote /32 of SA `i`: 10.64.0.0 + i (up to 2^22 SAs).
fn remote_addr(i: usize) -> [u8; 4] {
    (0x0a40_0000u32 + i as u32).to_be_bytes()
}

/// This process's resident memory in bytes (VmRSS), if readable.
fn rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Packets the agility rig handles as one batch, as the data path does
/// with a batch of reads from the TUN or the UDP socket: the batch is
/// encapsulated, then the result decapsulated.
const AGILITY_BATCH: usize = 32;
const _: () = assert!(CHUNK as usize % AGILITY_BATCH == 0, "a chunk is whole batches");

/// One worker's rig: a sender with N policies and N groups (one sub-SA
/// each) and a receiver with the N inbound SAs, plus a batch of buffers
/// per size.
struct AgilityRig {
    tx: Worker,
    rx: Worker,
    n: usize,
    /// Zipf: the sequence of SA indices; round robin: empty.
    order: Vec<u32>,
    next: usize,
    /// Per size: its length and [`AGILITY_BATCH`] buffers holding a packet.
    bufs: Vec<(usize, Vec<Vec<u8>>)>,
    size: usize,
    prefetch: Option<Prefetch>,
    /// RSS growth while installing the outbound and the inbound SAs.
    out_bytes: Option<u64>,
    in_bytes: Option<u64>,
    /// Heap (allocator) growth while installing them.
    out_heap: Option<u64>,
    in_heap: Option<u64>,
}

impl AgilityRig {
    fn new(suite: EspSuite, sizes: &[usize], n: usize, mix: SaMix, k: usize, prefetch: bool, now: Instant) -> Result<Self> {
        let local: Selector = "10.1.0.0/16".parse()?;
        let peer: SocketAddr = "192.0.2.2:4500".parse()?;
        let order = match mix {
            SaMix::RoundRobin => Vec::new(),
            SaMix::Zipf => zipf_order(n, ZIPF_LEN, 0x9E37_79B9 ^ k as u64),
        };
        let bufs = sizes
            .iter()
            .map(|&len| {
                let mut buf = vec![0u8; HEADROOM + len + TAILROOM];
                buf[HEADROOM..HEADROOM + len].copy_from_slice(&udp_packet(len));
                (len, vec![buf; AGILITY_BATCH])
            })
            .collect();
        let cfg = |i: usize| -> Result<SaConfig> {
            let remote: Selector = format!("{}/32", std::net::Ipv4Addr::from(remote_addr(i))).parse()?;
            Ok(SaConfig {
                spi: 0x1000_0000 + (k as u32) * MAX_SAS as u32 + i as u32,
                suite,
                keymat: SecretBytes::from_slice(&keymat(suite, (i ^ k) as u8)),
                esn: true,
                replay_window: esparto_esp::DEFAULT_WINDOW,
                lifetime: Lifetime::default(),
                // The receiver is the peer gateway: its local side is the remote /32.
                local_ts: vec![remote],
                remote_ts: vec![local],
                peer,
                path_mtu: 9000,
            })
        };
        let sa_err = |e| anyhow::anyhow!("{e:?}");
        let mut tx = Worker::new(k as u16);
        let heap_before = esparto_io::mem::heap_in_use();
        let before = rss_bytes();
        for i in 0..n {
            let c = cfg(i)?;
            let id = i as u32;
            tx.apply(Command::AddPolicy(
                id,
                Box::new(Policy { local, remote: c.local_ts[0], action: Action::Protect(id), priority: 100 }),
            ));
            tx.apply(Command::AddGroup { id, per_cpu: true });
            tx.apply(Command::SetSub(id, Box::new(OutboundSa::owned(&c, now).map_err(sa_err)?)));
        }
        let mid = rss_bytes();
        let heap_mid = esparto_io::mem::heap_in_use();
        let mut rx = Worker::new(k as u16);
        for i in 0..n {
            rx.apply(Command::AddInbound(Box::new(InboundSa::new(&cfg(i)?, now).map_err(sa_err)?)));
        }
        let after = rss_bytes();
        let heap_after = esparto_io::mem::heap_in_use();
        let delta = |a: Option<u64>, b: Option<u64>| Some(b?.saturating_sub(a?));
        Ok(Self {
            tx,
            rx,
            n,
            order,
            next: 0,
            bufs,
            size: 0,
            prefetch: prefetch.then_some(esparto_io::cpu::prefetch as Prefetch),
            out_bytes: delta(before, mid),
            in_bytes: delta(mid, after),
            out_heap: delta(heap_before, heap_mid),
            in_heap: delta(heap_mid, heap_after),
        })
    }

    /// Packets encapsulated, decapsulated, and SAs (outbound) that carried any.
    fn counts(&self) -> (u64, u64, usize) {
        let tx = self.tx.stats();
        let rx = self.rx.stats();
        let used = tx.sas.iter().filter(|s| s.counters.packets > 0).count();
        (tx.tx_packets, rx.rx_packets, used)
    }

    #[inline]
    fn next_sa(&mut self) -> usize {
        let i = if self.order.is_empty() {
            self.next % self.n
        } else {
            self.order[self.next % self.order.len()] as usize
        };
        self.next = self.next.wrapping_add(1);
        i
    }
}

impl AgilityRig {
    /// One batch: address each packet to its SA's /32 (as if just read
    /// from the TUN), encapsulate the batch, decapsulate it; with
    /// prefetching, each packet's SA is looked up and its state asked for
    /// [`PREFETCH_AHEAD`] packets before its turn, as the data path does.
    fn batch(&mut self, now: Instant) -> Result<()> {
        let mut sa = [0usize; AGILITY_BATCH];
        for s in &mut sa {
            *s = self.next_sa();
        }
        let (len, bufs) = &mut self.bufs[self.size];
        let inner = HEADROOM..HEADROOM + *len;
        for (buf, &i) in bufs.iter_mut().zip(&sa) {
            // Address the packet to SA i's remote /32 (and keep the IPv4
            // header checksum valid).
            let ip = &mut buf[HEADROOM..HEADROOM + 20];
            ip[16..20].copy_from_slice(&remote_addr(i));
            ip[10..12].fill(0);
            let sum = !esparto_wire::checksum::data(ip);
            ip[10..12].copy_from_slice(&sum.to_be_bytes());
        }
        let mut esp: [core::ops::Range<usize>; AGILITY_BATCH] = core::array::from_fn(|_| 0..0);
        if let Some(pf) = self.prefetch {
            for buf in bufs.iter().take(PREFETCH_AHEAD) {
                self.tx.prefetch_outbound(buf, inner.clone(), pf);
            }
        }
        for j in 0..AGILITY_BATCH {
            if let (Some(pf), Some(ahead)) = (self.prefetch, bufs.get(j + PREFETCH_AHEAD)) {
                self.tx.prefetch_outbound(ahead, inner.clone(), pf);
            }
            let e = self
                .tx
                .encapsulate(now, &mut bufs[j], inner.clone())
                .map_err(|d| anyhow::anyhow!("encapsulate: {:?}", d))?;
            esp[j] = e.esp;
        }
        if let Some(pf) = self.prefetch {
            for (buf, r) in bufs.iter().zip(&esp).take(PREFETCH_AHEAD) {
                self.rx.prefetch_inbound(&buf[r.clone()], pf);
            }
        }
        for j in 0..AGILITY_BATCH {
            if let Some(pf) = self.prefetch {
                if let (Some(ahead), Some(r)) = (bufs.get(j + PREFETCH_AHEAD), esp.get(j + PREFETCH_AHEAD)) {
                    self.rx.prefetch_inbound(&ahead[r.clone()], pf);
                }
            }
            let got =
                self.rx.decapsulate(now, &mut bufs[j], esp[j].clone()).map_err(|d| anyhow::anyhow!("decapsulate: {d}"))?;
            if got != inner {
                bail!("decapsulated packet at {got:?}, expected {inner:?}");
            }
        }
        Ok(())
    }
}

impl Rig for AgilityRig {
    fn chunk(&mut self, now: Instant) -> Result<()> {
        for _ in 0..CHUNK as usize / AGILITY_BATCH {
            self.batch(now)?;
        }
        Ok(())
    }
}

/// A sequence of `len` SA indices in 0..n drawn from Zipf(s = 1): rank r
/// (1-based) with probability (1/r) / H(n). Ranks map to SA indices by a
/// fixed permutation, so the busy SAs are scattered in memory rather than
/// installed first.
fn zipf_order(n: usize, len: usize, seed: u64) -> Vec<u32> {
    let mut cdf = Vec::with_capacity(n);
    let mut acc = 0.0;
    for r in 1..=n {
        acc += 1.0 / r as f64;
        cdf.push(acc);
    }
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            // xorshift64*
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            let u = (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64 * acc;
            let rank = cdf.partition_point(|&c| c < u).min(n - 1);
            // 2654435761 is prime and larger than MAX_SAS: a bijection on 0..n.
            ((rank as u64 * 2_654_435_761) % n as u64) as u32
        })
        .collect()
}

/// Runs each rig on its own pinned thread for one measurement; packets per
/// CPU-second of each thread, summed over the threads.
fn measure_rigs(opts: &AgilityOptions, cpus: &[usize], rigs: &mut [AgilityRig]) -> Result<f64> {
    let barrier = Barrier::new(rigs.len() + 1);
    let seconds = Duration::from_secs_f64(opts.seconds);
    std::thread::scope(|s| {
        let handles: Vec<_> = rigs
            .iter_mut()
            .enumerate()
            .map(|(k, rig)| {
                let barrier = &barrier;
                let cpu = cpus.get(k % cpus.len().max(1)).copied();
                s.spawn(move || -> Result<(u64, Duration)> {
                    if let Some(cpu) = cpu {
                        let _ = esparto_io::cpu::pin_current_thread(cpu);
                    }
                    barrier.wait();
                    let start = Instant::now();
                    let cpu_start = esparto_io::cpu::thread_cpu_time();
                    let packets = run_rig(rig, Stop { deadline: start + seconds, count: opts.count })?;
                    // Per CPU-second of this thread: time it spent preempted
                    // by other work on a shared machine does not count.
                    let cpu = esparto_io::cpu::thread_cpu_time().saturating_sub(cpu_start);
                    Ok((packets, if cpu.is_zero() { start.elapsed() } else { cpu }))
                })
            })
            .collect();
        barrier.wait();
        let mut pps = 0.0;
        for h in handles {
            let (packets, took) = h.join().map_err(|_| anyhow::anyhow!("benchmark thread panicked"))??;
            pps += packets as f64 / took.as_secs_f64();
        }
        Ok(pps)
    })
}

fn build_rigs(opts: &AgilityOptions, n: usize) -> Result<Vec<AgilityRig>> {
    let now = Instant::now();
    (0..opts.workers).map(|k| AgilityRig::new(opts.suite, &opts.sizes, n, opts.mix, k, opts.prefetch, now)).collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn round_robin_spreads_packets_evenly_and_every_packet_comes_back() {
        for prefetch in [true, false] {
            round_robin_rig(prefetch);
        }
    }

    fn round_robin_rig(prefetch: bool) {
        let n = 5;
        let mut rig =
            AgilityRig::new(EspSuite::Aes256Gcm16, &[64, 1420], n, SaMix::RoundRobin, 0, prefetch, Instant::now()).unwrap();
        assert_eq!(rig.tx.spd().len(), n);
        assert_eq!(rig.rx.sad().len(), n);
        let now = Instant::now();
        for size in [0, 1] {
            rig.size = size;
            for _ in 0..5 {
                rig.chunk(now).unwrap();
            }
        }
        let total = 10 * CHUNK;
        assert_eq!(rig.counts(), (total, total, n));
        let tx = rig.tx.stats();
        for sa in tx.sas.iter().filter(|s| s.direction == esparto_esp::Direction::Outbound) {
            assert_eq!(sa.counters.packets, total / n as u64, "SA {:#x}", sa.spi);
        }
        assert_eq!(tx.drops.total(), 0);
    }

    #[test]
    fn zipf_favours_the_first_ranks_and_covers_many() {
        let n = 1000;
        let order = zipf_order(n, 100_000, 7);
        assert!(order.iter().all(|&i| (i as usize) < n));
        let mut hits = vec![0u32; n];
        for &i in &order {
            hits[i as usize] += 1;
        }
        // Rank 1 (index 0) has probability 1/H(1000) ≈ 13 %; rank 2 (its
        // image under the permutation) half that.
        let share = f64::from(hits[0]) / order.len() as f64;
        assert!((0.11..0.16).contains(&share), "rank 1 share {share}");
        let rank2 = ((2_654_435_761u64) % n as u64) as usize;
        assert!(hits[rank2] * 3 > hits[0] && hits[rank2] < hits[0]);
        assert!(hits.iter().filter(|&&h| h > 0).count() > n / 2);
    }

    #[test]
    fn agility_rows_report_consistent_counts() {
        let opts = AgilityOptions {
            suite: EspSuite::Aes128Gcm16,
            sizes: vec![64],
            sas: vec![7, 1],
            mix: SaMix::RoundRobin,
            workers: 1,
            seconds: 1.0,
            runs: 2,
            count: Some(7 * CHUNK),
            prefetch: true,
        };
        let rows = run_agility(&opts).unwrap();
        assert_eq!(rows.iter().map(|r| r.sas).collect::<Vec<_>>(), [1, 7]);
        for r in &rows {
            assert_eq!(r.packets, 7 * CHUNK);
            assert_eq!(r.sas_used, r.sas);
            assert!(r.mpps > 0.0 && r.mpps_1 > 0.0 && r.ratio > 0.0);
            assert_eq!(r.out_bytes_per_sa, None, "below {MEMORY_MIN_SAS} SAs no memory figure");
            assert_eq!(r.in_heap_per_sa, None);
            assert!(r.prefetch);
        }
    }
}
