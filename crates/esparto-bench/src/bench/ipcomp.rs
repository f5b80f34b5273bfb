//! `esparto bench ipcomp`: IPComp's DEFLATE measured in process, per
//! corpus and packet size, on the machine the gateway runs on.
//!
//! It runs the data plane's own engine ([`esparto_esp::Deflate`], one per
//! worker, level [`esparto_esp::DEFLATE_LEVEL`]) through the calls the
//! worker makes: [`Deflate::compress_in_place`] on an SA that always
//! compresses (the inner packet copied into the buffer first, as a TUN
//! read puts it there), then [`Deflate::decompress_packet`] on the
//! compressed ones. The packets are IPv4/TCP packets whose payloads are
//! consecutive slices of a [`Corpus`], as a TCP stream of that data would
//! cut them, each compressed on its own (RFC 3173 §2.2).
//!
//! Per corpus and size it reports what IPComp's rules make of the
//! traffic — the share of packets sent compressed (at least
//! [`esparto_esp::MIN_COMPRESS_LEN`] bytes and smaller with the header),
//! the compressed size over the original (of those packets, and of all
//! bytes as sent) — and what it costs: reference cycles per byte to
//! compress (every packet tried, the sender's cost) and to decompress (the
//! receiver's, per byte delivered), and what one core can push at that
//! cost. Compress and decompress alternate within each run; each figure is
//! the median of the runs.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use esparto_esp::{Deflate, IpcompMode, IpcompParams, IpcompSa};
use esparto_io::cpu::cycles;
use esparto_wire::ip::proto;
use esparto_wire::{ipv4, tcp};
use serde::{Deserialize, Serialize};

use super::corpus::{Corpus, CorpusFile};
use super::median;
use super::tsc::tsc_hz;

/// Distinct packets per corpus and size: enough that the engine's work is
/// not one packet's, few enough to stay in cache like a busy worker's.
pub const PACKETS: usize = 256;

/// IPv4 plus TCP header in front of each payload.
pub const HEADERS: usize = 40;

/// The packet sizes measured unless told: a small request, the IPv4
/// minimum MTU's datagram, a full-size TCP segment in a 1,500-byte path.
pub const DEFAULT_SIZES: [usize; 3] = [200, 576, 1400];

/// The CPI of the benchmark's SAs (any value outside the reserved range).
const CPI: u16 = 0x4242;

/// Options of the benchmark.
#[derive(Debug, Clone)]
pub struct Options {
    /// Corpora to measure.
    pub corpora: Vec<Corpus>,
    /// Inner packet sizes, bytes (IP header included).
    pub sizes: Vec<usize>,
    /// Seconds per measurement (compress and decompress each).
    pub seconds: f64,
    /// Measurements per figure; the median is reported.
    pub runs: usize,
    /// The file behind [`Corpus::File`].
    pub file: Option<CorpusFile>,
}

/// One corpus at one packet size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// The corpus.
    pub corpus: Corpus,
    /// Inner packet size, bytes.
    pub size: usize,
    /// Share of the packets sent compressed (RFC 3173: the rest go as
    /// they are, being short or not smaller compressed).
    pub compressed_share: f64,
    /// Compressed size (IPComp header included) over original size, of
    /// the packets sent compressed (1.0 if none).
    pub ratio: f64,
    /// Bytes as sent over bytes in, all packets.
    pub wire_ratio: f64,
    /// Reference cycles per inner byte to compress, every packet tried.
    pub compress_cycles_per_byte: f64,
    /// Reference cycles per delivered byte to decompress (0 if none was
    /// compressed).
    pub decompress_cycles_per_byte: f64,
    /// Inner Mbit/s one core compresses at that cost.
    pub compress_mbps_1: f64,
    /// Delivered Mbit/s one core decompresses at that cost (0 if none).
    pub decompress_mbps_1: f64,
}

/// An IPv4/TCP packet of `HEADERS + payload.len()` bytes, 10.1.0.1:40000 →
/// 10.2.0.1:443, with sequence number `seq` and valid checksums. `payload`
/// is at most [`esparto_esp::MAX_PACKET`] − [`HEADERS`] bytes (`run` refuses
/// larger sizes), so the headers always fit.
pub fn tcp_packet(payload: &[u8], seq: u32, id: u16) -> Vec<u8> {
    let (src, dst) = (Ipv4Addr::new(10, 1, 0, 1), Ipv4Addr::new(10, 2, 0, 1));
    let seg = tcp::Repr {
        src_port: 40000,
        dst_port: 443,
        seq_number: seq,
        ack_number: 0x1000_0000u32.wrapping_add(seq / 3),
        flags: tcp::flags::PSH | tcp::flags::ACK,
        window: 502,
        urgent_ptr: 0,
        options: &[],
        payload_len: payload.len(),
    };
    let hdr = ipv4::Repr {
        src_addr: src,
        dst_addr: dst,
        protocol: proto::TCP,
        payload_len: seg.buffer_len(),
        ttl: 64,
        dscp: 0,
        ecn: 0,
        ident: id,
        dont_frag: true,
        more_frags: false,
        frag_offset: 0,
    };
    let mut p = vec![0u8; hdr.buffer_len()];
    let mut ip = ipv4::Packet::new_unchecked(&mut p[..]);
    hdr.emit(&mut ip).expect("the payload fits an IPv4 packet");
    let mut t = tcp::Packet::new_unchecked(ip.payload_mut());
    seg.emit(&mut t).expect("sized for the segment");
    t.payload_mut().copy_from_slice(payload);
    t.fill_checksum_v4(src, dst).expect("sized for the segment");
    p
}

/// [`PACKETS`] packets of `size` bytes carrying consecutive slices of
/// `corpus` (`file`: the bytes of [`Corpus::File`]).
pub fn packets(corpus: Corpus, size: usize, file: Option<&CorpusFile>) -> Result<Vec<Vec<u8>>> {
    let payload = size.saturating_sub(HEADERS).max(1);
    let data = corpus.bytes(payload * PACKETS, file)?;
    Ok(data
        .chunks(payload)
        .enumerate()
        .map(|(i, c)| tcp_packet(c, (i * payload) as u32, i as u16))
        .collect())
}

/// What IPComp's rules make of `packets` (no timing): per packet, the
/// compressed payload (IPComp header included) or `None` if sent as is.
pub fn compress_all(d: &mut Deflate, packets: &[Vec<u8>]) -> Vec<Option<Vec<u8>>> {
    let mut sa = IpcompSa::new(params(65_535));
    let mut buf = vec![0u8; esparto_esp::MAX_PACKET];
    packets
        .iter()
        .map(|p| {
            let n = p.len().min(buf.len());
            buf[..n].copy_from_slice(&p[..n]);
            let (r, nh, _) = d.compress_in_place(&mut sa, &mut buf, 0..n, 4);
            (nh == esparto_wire::esp::NEXT_HEADER_IPCOMP).then(|| buf[r].to_vec())
        })
        .collect()
}

fn params(max_inner: usize) -> IpcompParams {
    IpcompParams { cpi: CPI, mode: IpcompMode::Always, max_inner, link_mbps: None }
}

/// Runs the benchmark.
pub fn run(opts: &Options) -> Result<Vec<Row>> {
    if opts.runs == 0 || opts.seconds.is_nan() || opts.seconds <= 0.0 {
        bail!("need at least one run of more than 0 seconds");
    }
    let hz = tsc_hz();
    let seconds = Duration::from_secs_f64(opts.seconds);
    let mut d = Deflate::new();
    let mut rows = Vec::new();
    for &corpus in &opts.corpora {
        for &size in &opts.sizes {
            if !(HEADERS + 1..=esparto_esp::MAX_PACKET).contains(&size) {
                bail!("packet size {size} is outside {}..={}", HEADERS + 1, esparto_esp::MAX_PACKET);
            }
            let pkts = packets(corpus, size, opts.file.as_ref())?;
            let compressed = compress_all(&mut d, &pkts);
            let bytes_in: usize = pkts.iter().map(Vec::len).sum();
            let (mut n_c, mut c_in, mut c_out, mut sent) = (0usize, 0usize, 0usize, 0usize);
            for (p, c) in pkts.iter().zip(&compressed) {
                match c {
                    Some(c) => {
                        n_c += 1;
                        c_in += p.len();
                        c_out += c.len();
                        sent += c.len();
                    }
                    None => sent += p.len(),
                }
            }
            let (mut comp, mut decomp) = (Vec::new(), Vec::new());
            for _ in 0..opts.runs {
                comp.push(compress_cycles_per_byte(&mut d, &pkts, seconds));
                if n_c > 0 {
                    decomp.push(decompress_cycles_per_byte(&mut d, &compressed, size, seconds)?);
                }
            }
            let (c, dc) = (median(&comp), median(&decomp));
            let mbps = |cpb: f64| if cpb > 0.0 { hz / cpb * 8.0 / 1e6 } else { 0.0 };
            rows.push(Row {
                corpus,
                size,
                compressed_share: n_c as f64 / pkts.len() as f64,
                ratio: if c_in == 0 { 1.0 } else { c_out as f64 / c_in as f64 },
                wire_ratio: sent as f64 / bytes_in as f64,
                compress_cycles_per_byte: c,
                decompress_cycles_per_byte: dc,
                compress_mbps_1: mbps(c),
                decompress_mbps_1: mbps(dc),
            });
        }
    }
    Ok(rows)
}

/// Cycles per inner byte of compressing every packet, for `seconds`.
fn compress_cycles_per_byte(d: &mut Deflate, pkts: &[Vec<u8>], seconds: Duration) -> f64 {
    let mut sa = IpcompSa::new(params(65_535));
    let mut buf = vec![0u8; esparto_esp::MAX_PACKET];
    let (mut spent, mut bytes) = (0u64, 0u64);
    let deadline = Instant::now() + seconds;
    loop {
        let t0 = cycles();
        for p in pkts {
            let n = p.len();
            buf[..n].copy_from_slice(p);
            let (r, _, _) = d.compress_in_place(&mut sa, &mut buf, 0..n, 4);
            std::hint::black_box(r);
            bytes += n as u64;
        }
        spent += cycles().wrapping_sub(t0);
        if Instant::now() >= deadline {
            break;
        }
    }
    spent as f64 / bytes.max(1) as f64
}

/// Cycles per delivered byte of decompressing the compressed packets.
fn decompress_cycles_per_byte(
    d: &mut Deflate,
    compressed: &[Option<Vec<u8>>],
    size: usize,
    seconds: Duration,
) -> Result<f64> {
    let mut sa = IpcompSa::new(params(size));
    let (mut spent, mut bytes) = (0u64, 0u64);
    let deadline = Instant::now() + seconds;
    loop {
        let t0 = cycles();
        for c in compressed.iter().flatten() {
            match d.decompress_packet(&mut sa, c) {
                Ok((_, n)) => bytes += n as u64,
                Err(e) => bail!("a packet the engine compressed did not decompress: {e:?}"),
            }
        }
        spent += cycles().wrapping_sub(t0);
        if Instant::now() >= deadline {
            break;
        }
    }
    Ok(spent as f64 / bytes.max(1) as f64)
}

/// Prints the table.
pub fn print_table(rows: &[Row]) {
    println!(
        "{:<8} {:>5} {:>10} {:>6} {:>6} {:>9} {:>9} {:>10} {:>10}",
        "corpus", "size", "compressed", "ratio", "wire", "comp c/B", "dec c/B", "comp Mb/s", "dec Mb/s"
    );
    for r in rows {
        println!(
            "{:<8} {:>5} {:>9.0}% {:>6.3} {:>6.3} {:>9.2} {:>9.2} {:>10.0} {:>10.0}",
            r.corpus.name(),
            r.size,
            r.compressed_share * 100.0,
            r.ratio,
            r.wire_ratio,
            r.compress_cycles_per_byte,
            r.decompress_cycles_per_byte,
            r.compress_mbps_1,
            r.decompress_mbps_1,
        );
    }
    println!(
        "\nDEFLATE level {} (libdeflate), each packet on its own; compressed = share sent compressed (≥ {} B and \
         smaller with the 4-byte header); ratio = compressed/original of those; wire = bytes sent/bytes in, all \
         packets; c/B = reference cycles per inner byte, one core (compress: every packet tried; decompress: per \
         byte delivered); Mb/s = one core at that cost. Medians.",
        esparto_esp::DEFLATE_LEVEL,
        esparto_esp::MIN_COMPRESS_LEN,
    );
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn packets_are_valid_ipv4_tcp_of_the_size_asked() {
        for size in [200, 1400] {
            let p = packets(Corpus::Json, size, None).unwrap();
            assert_eq!(p.len(), PACKETS);
            for x in &p {
                assert_eq!(x.len(), size);
                let ip = esparto_wire::ipv4::Packet::new_checked(&x[..]).unwrap();
                assert!(ip.verify_checksum());
                assert_eq!(usize::from(ip.total_len()), size);
            }
            // Consecutive slices: the payloads join up into the corpus.
            let joined: Vec<u8> = p.iter().flat_map(|x| x[HEADERS..].to_vec()).collect();
            assert_eq!(joined, Corpus::Json.bytes(joined.len(), None).unwrap());
        }
    }

    #[test]
    fn text_compresses_random_does_not_and_the_figures_are_consistent() {
        let opts = Options { corpora: Corpus::ALL.to_vec(), sizes: vec![1400], seconds: 0.01, runs: 1, file: None };
        let rows = run(&opts).unwrap();
        assert_eq!(rows.len(), 4);
        let by = |c: Corpus| rows.iter().find(|r| r.corpus == c).unwrap();
        for c in [Corpus::Text, Corpus::Json, Corpus::Records] {
            let r = by(c);
            assert_eq!(r.compressed_share, 1.0, "{r:?}");
            assert!(r.ratio < 0.8 && r.ratio > 0.05, "{r:?}");
            assert!((r.wire_ratio - r.ratio).abs() < 1e-9, "{r:?}");
            assert!(r.decompress_cycles_per_byte > 0.0 && r.compress_cycles_per_byte > 0.0, "{r:?}");
        }
        let r = by(Corpus::Random);
        assert_eq!((r.compressed_share, r.ratio, r.wire_ratio), (0.0, 1.0, 1.0), "{r:?}");
        assert_eq!(r.decompress_cycles_per_byte, 0.0);
        assert!(r.compress_cycles_per_byte > 0.0);
        assert!(run(&Options { sizes: vec![20], ..opts.clone() }).is_err());
        assert!(run(&Options { runs: 0, ..opts }).is_err());
    }

    #[test]
    fn what_is_compressed_decompresses_to_the_packet() {
        let mut d = Deflate::new();
        let pkts = packets(Corpus::Records, 576, None).unwrap();
        let out = compress_all(&mut d, &pkts);
        let mut sa = IpcompSa::new(params(576));
        for (p, c) in pkts.iter().zip(&out) {
            let c = c.as_ref().unwrap();
            let (nh, n) = d.decompress_packet(&mut sa, c).unwrap();
            assert_eq!((nh, &d.scratch()[..n]), (4, &p[..]));
        }
    }
}
