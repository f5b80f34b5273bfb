//! Two DEFLATE libraries on IPComp's packets: libdeflate (libdeflater, the
//! data plane's engine) against zlib-rs (through flate2), on the corpora
//! and packets of `esparto bench ipcomp`, raw DEFLATE, each packet on its
//! own, level 1 (the data plane's) and 6.
//!
//! ```text
//! cargo run --release -p esparto-bench --example deflate_libs [-- SECONDS RUNS]
//! ```
//!
//! It first checks the property the data plane relies on: compressing into
//! an output buffer bounded to "smaller than the input" (how a sender gives
//! up on a packet that does not shrink) must fail cleanly, never panic.
//! zlib-rs 0.6.8 panics there after `reset()` on random data, so its
//! figures below give it the whole output buffer instead (and the caller
//! would compare sizes afterwards); libdeflate runs the data plane's own
//! bounded call. flate2 is a dev-dependency only: the gateway links
//! libdeflate alone.

use std::time::{Duration, Instant};

use esparto_bench::bench::corpus::Corpus;
use esparto_bench::bench::ipcomp::packets;
use esparto_bench::bench::median;
use esparto_esp::{Deflate, MAX_PACKET};
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

/// IPComp header: the bounded output leaves room for it.
const HEADER: usize = 4;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let seconds: f64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(0.3);
    let runs: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(3);
    let seconds = Duration::from_secs_f64(seconds);

    println!("bounded output after reset(), 20,000 random packets of 90..1490 bytes:");
    for level in [1, 6] {
        println!("  zlib-rs level {level}: {}", zlib_rs_bounded(level));
    }
    println!("  libdeflate level 1: {}", libdeflate_bounded());
    println!();
    println!(
        "{:<8} {:>5} {:>3} | {:>22} | {:>22}",
        "corpus", "size", "lvl", "libdeflate c/d ns/B, ratio", "zlib-rs c/d ns/B, ratio"
    );
    for corpus in Corpus::ALL {
        for size in [200, 576, 1400] {
            let pkts = packets(corpus, size, None).expect("a generated corpus");
            for level in [1u32, 6] {
                let mut ld = (Vec::new(), Vec::new(), 0.0);
                let mut zr = (Vec::new(), Vec::new(), 0.0);
                for _ in 0..runs {
                    let (c, d, r) = libdeflate_run(&pkts, level, seconds);
                    ld.0.push(c);
                    ld.1.push(d);
                    ld.2 = r;
                    let (c, d, r) = zlib_rs_run(&pkts, level, seconds);
                    zr.0.push(c);
                    zr.1.push(d);
                    zr.2 = r;
                }
                println!(
                    "{:<8} {:>5} {:>3} | {:>7.2} {:>6.2} {:>7.3} | {:>7.2} {:>6.2} {:>7.3}",
                    corpus.name(),
                    size,
                    level,
                    median(&ld.0),
                    median(&ld.1),
                    ld.2,
                    median(&zr.0),
                    median(&zr.1),
                    zr.2
                );
            }
        }
    }
    println!(
        "\nns/B: nanoseconds per inner byte, one thread, median of {runs} runs of {seconds:?} each; c = compress (every \
         packet), d = decompress (the packets that shrank, per byte delivered); ratio = bytes as sent / bytes in \
         (packets that do not shrink by more than the 4-byte header go as they are)."
    );
}

fn random(n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s as u8
        })
        .collect()
}

/// Compresses random packets into "smaller than the input" with one
/// reused stream; says whether that panicked.
fn zlib_rs_bounded(level: u32) -> String {
    let mut c = Compress::new(Compression::new(level), false);
    let mut out = vec![0u8; MAX_PACKET];
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let mut verdict = "no panic".to_string();
    for i in 0..20_000u64 {
        let input = random(90 + (i as usize * 37) % 1400, 0x9e37_79b9_7f4a_7c15 ^ i);
        c.reset();
        let limit = input.len() - HEADER - 1;
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            c.compress(&input, &mut out[..limit], FlushCompress::Finish)
        }));
        if r.is_err() {
            verdict = format!("PANIC on packet {i} ({} bytes)", input.len());
            break;
        }
    }
    std::panic::set_hook(hook);
    verdict
}

fn libdeflate_bounded() -> String {
    let mut d = Deflate::new();
    let mut sent_as_is = 0;
    for i in 0..20_000u64 {
        let input = random(90 + (i as usize * 37) % 1400, 0x9e37_79b9_7f4a_7c15 ^ i);
        if d.compress(&input).is_none() {
            sent_as_is += 1;
        }
    }
    format!("no panic ({sent_as_is} of 20000 did not shrink: sent as they are)")
}

/// libdeflate as the data plane calls it (level 1: the engine itself; level
/// 6: the same crate at that level, bounded the same way).
fn libdeflate_run(pkts: &[Vec<u8>], level: u32, seconds: Duration) -> (f64, f64, f64) {
    let lvl = libdeflater::CompressionLvl::new(level as i32).unwrap_or_else(|_| libdeflater::CompressionLvl::fastest());
    let mut c = libdeflater::Compressor::new(lvl);
    let mut dec = libdeflater::Decompressor::new();
    let mut out = vec![0u8; MAX_PACKET];
    let mut back = vec![0u8; MAX_PACKET];
    let compress_one = |c: &mut libdeflater::Compressor, p: &[u8], out: &mut [u8]| {
        let limit = p.len() - HEADER - 1;
        c.deflate_compress(p, &mut out[..limit]).ok()
    };
    let compressed: Vec<Option<Vec<u8>>> =
        pkts.iter().map(|p| compress_one(&mut c, p, &mut out).map(|n| out[..n].to_vec())).collect();
    let ratio = wire_ratio(pkts, &compressed);
    let cns = per_byte(seconds, pkts, |p| {
        std::hint::black_box(compress_one(&mut c, p, &mut out));
        p.len()
    });
    let dns = per_byte_compressed(seconds, pkts, &compressed, |p, z| {
        let n = dec.deflate_decompress(z, &mut back[..p.len()]).unwrap_or(0);
        assert_eq!(&back[..n], p, "libdeflate round trip");
        n
    });
    (cns, dns, ratio)
}

fn zlib_rs_run(pkts: &[Vec<u8>], level: u32, seconds: Duration) -> (f64, f64, f64) {
    let mut c = Compress::new(Compression::new(level), false);
    let mut dec = Decompress::new(false);
    let mut out = vec![0u8; MAX_PACKET];
    let mut back = vec![0u8; MAX_PACKET];
    // The whole buffer as output room (bounded room panics, see main);
    // "does it pay" is decided on the size afterwards.
    let compress_one = |c: &mut Compress, p: &[u8], out: &mut [u8]| {
        c.reset();
        match c.compress(p, out, FlushCompress::Finish) {
            Ok(Status::StreamEnd) => {
                let n = c.total_out() as usize;
                (n + HEADER < p.len()).then_some(n)
            }
            _ => None,
        }
    };
    let compressed: Vec<Option<Vec<u8>>> =
        pkts.iter().map(|p| compress_one(&mut c, p, &mut out).map(|n| out[..n].to_vec())).collect();
    let ratio = wire_ratio(pkts, &compressed);
    let cns = per_byte(seconds, pkts, |p| {
        std::hint::black_box(compress_one(&mut c, p, &mut out));
        p.len()
    });
    let dns = per_byte_compressed(seconds, pkts, &compressed, |p, z| {
        dec.reset(false);
        let n = match dec.decompress(z, &mut back[..p.len()], FlushDecompress::Finish) {
            Ok(Status::StreamEnd) => dec.total_out() as usize,
            _ => 0,
        };
        assert_eq!(&back[..n], p, "zlib-rs round trip");
        n
    });
    (cns, dns, ratio)
}

fn wire_ratio(pkts: &[Vec<u8>], compressed: &[Option<Vec<u8>>]) -> f64 {
    let bytes_in: usize = pkts.iter().map(Vec::len).sum();
    let sent: usize =
        pkts.iter().zip(compressed).map(|(p, c)| c.as_ref().map_or(p.len(), |z| z.len() + HEADER)).sum();
    sent as f64 / bytes_in as f64
}

fn per_byte(seconds: Duration, pkts: &[Vec<u8>], mut f: impl FnMut(&[u8]) -> usize) -> f64 {
    let (t0, mut bytes) = (Instant::now(), 0usize);
    while t0.elapsed() < seconds {
        for p in pkts {
            bytes += f(p);
        }
    }
    t0.elapsed().as_nanos() as f64 / bytes.max(1) as f64
}

fn per_byte_compressed(
    seconds: Duration,
    pkts: &[Vec<u8>],
    compressed: &[Option<Vec<u8>>],
    mut f: impl FnMut(&[u8], &[u8]) -> usize,
) -> f64 {
    if compressed.iter().all(Option::is_none) {
        return 0.0;
    }
    let (t0, mut bytes) = (Instant::now(), 0usize);
    while t0.elapsed() < seconds {
        for (p, z) in pkts.iter().zip(compressed) {
            if let Some(z) = z {
                bytes += f(p, z);
            }
        }
    }
    t0.elapsed().as_nanos() as f64 / bytes.max(1) as f64
}
