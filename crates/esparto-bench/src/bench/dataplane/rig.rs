//! The rigs of the data-plane benchmark: the loops that drive the ESP
//! data plane and the raw cipher, and the pinned threads they run on.
//!
//! A rig does [`CHUNK`] packets per call ([`Rig::chunk`]) and [`run_rig`]
//! calls it until its [`Stop`]: a deadline, or a packet count for
//! instruction counting. The ESP rigs are two `esparto_esp` [`Worker`]s
//! with one SA pair ([`worker_pair`]), the same calls the gateway's workers
//! make: [`Worker::encapsulate`] on the sender, [`Worker::decapsulate`] on
//! the receiver, in place. [`measure`] runs a rig on `n` pinned threads at
//! once and sums their rates; [`interleaved_ratio`] alternates the raw and
//! the ESP rig in one thread, timed by the cycle counter, so that whatever
//! else the machine does hits both alike.

use std::net::SocketAddr;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use aws_lc_rs::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use aws_lc_rs::cipher::{DecryptingKey, EncryptingKey, EncryptionContext, UnboundCipherKey};
use aws_lc_rs::{cipher, hmac};
use esparto_crypto::{EspSuite, Integ, SecretBytes};
use esparto_esp::{Action, Command, HEADROOM, InboundSa, Lifetime, OutboundSa, Policy, SaConfig, Selector, TAILROOM, Worker};

use super::{Options, Size};
use crate::bench::packet::udp_packet;

/// When a measuring loop stops: at a deadline, or after a packet count.
#[derive(Debug, Clone, Copy)]
pub(super) struct Stop {
    pub(super) deadline: Instant,
    pub(super) count: Option<u64>,
}

impl Stop {
    /// Whether to go on after `done` packets (checked every [`CHUNK`]).
    #[inline]
    pub(super) fn more(&self, done: u64, now: Instant) -> bool {
        match self.count {
            Some(c) => done < c,
            None => now < self.deadline,
        }
    }
}

/// Runs `body(k, stop)` on `n` pinned threads at once; returns packets
/// per second summed over the threads.
pub(super) fn measure<F>(opts: &Options, cpus: &[usize], n: usize, body: F) -> Result<f64>
where
    F: Fn(usize, Stop) -> Result<u64> + Sync,
{
    let barrier = Arc::new(Barrier::new(n + 1));
    let seconds = Duration::from_secs_f64(opts.seconds);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|k| {
                let barrier = barrier.clone();
                let body = &body;
                let cpu = cpus.get(k % cpus.len().max(1)).copied();
                s.spawn(move || -> Result<(u64, Duration)> {
                    if let Some(cpu) = cpu {
                        // Best effort: an unpinned run is still a run.
                        let _ = esparto_io::cpu::pin_current_thread(cpu);
                    }
                    barrier.wait();
                    let start = Instant::now();
                    let packets = body(k, Stop { deadline: start + seconds, count: opts.count })?;
                    Ok((packets, start.elapsed()))
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

/// Runs `body(0, stop)` on one pinned thread and returns its value.
pub(super) fn measure_value<F>(opts: &Options, cpus: &[usize], body: F) -> Result<f64>
where
    F: Fn(usize, Stop) -> Result<f64> + Sync,
{
    let cpu = cpus.first().copied();
    let seconds = Duration::from_secs_f64(opts.seconds);
    std::thread::scope(|s| {
        s.spawn(|| {
            if let Some(cpu) = cpu {
                let _ = esparto_io::cpu::pin_current_thread(cpu);
            }
            body(0, Stop { deadline: Instant::now() + seconds, count: opts.count })
        })
        .join()
        .map_err(|_| anyhow::anyhow!("benchmark thread panicked"))?
    })
}

/// Packets between clock reads.
pub(super) const CHUNK: u64 = 64;

pub(super) fn keymat(suite: EspSuite, salt: u8) -> Vec<u8> {
    (0..suite.keymat_len()).map(|i| (i as u8).wrapping_mul(31).wrapping_add(salt)).collect()
}

/// One benchmark body: does [`CHUNK`] packets per call.
pub(super) trait Rig {
    fn chunk(&mut self, now: Instant) -> Result<()>;
}

/// Runs a rig until `stop`; returns packets done.
pub(super) fn run_rig(rig: &mut dyn Rig, stop: Stop) -> Result<u64> {
    let mut packets = 0u64;
    let mut now = Instant::now();
    while stop.more(packets, now) {
        rig.chunk(now)?;
        packets += CHUNK;
        now = Instant::now();
    }
    Ok(packets)
}

/// Raw seal+open of `size`-byte buffers with aws-lc-rs directly.
pub(super) enum RawRig {
    Aead { key: LessSafeKey, sizes: Vec<usize>, buf: Vec<u8>, n: u64 },
    Cbc { enc: Box<EncryptingKey>, dec: Box<DecryptingKey>, hk: Box<hmac::Key>, sizes: Vec<usize>, buf: Vec<u8>, n: u64 },
}

impl RawRig {
    fn new(suite: EspSuite, size: Size, k: usize) -> Result<Self> {
        let sizes = size.sizes();
        let max = sizes.iter().copied().max().unwrap_or(64);
        let key = keymat(suite, k as u8);
        let buf = vec![0x5au8; max + 64];
        Ok(match suite {
            EspSuite::Aes128Gcm16 | EspSuite::Aes256Gcm16 | EspSuite::ChaCha20Poly1305 => {
                let alg = match suite {
                    EspSuite::Aes128Gcm16 => &aead::AES_128_GCM,
                    EspSuite::Aes256Gcm16 => &aead::AES_256_GCM,
                    _ => &aead::CHACHA20_POLY1305,
                };
                let key = LessSafeKey::new(UnboundKey::new(alg, &key[..alg.key_len()]).context("aead key")?);
                RawRig::Aead { key, sizes, buf, n: 0 }
            }
            EspSuite::AesCbc { key_bits, integ } => {
                let ek_len = usize::from(key_bits) / 8;
                let alg = if key_bits == 128 { &cipher::AES_128 } else { &cipher::AES_256 };
                let enc = EncryptingKey::cbc(UnboundCipherKey::new(alg, &key[..ek_len]).context("cbc key")?)
                    .context("cbc")?;
                let dec = DecryptingKey::cbc(UnboundCipherKey::new(alg, &key[..ek_len]).context("cbc key")?)
                    .context("cbc")?;
                let halg = match integ {
                    Integ::HmacSha1_96 => hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY,
                    Integ::HmacSha256_128 => hmac::HMAC_SHA256,
                    Integ::HmacSha384_192 => hmac::HMAC_SHA384,
                    Integ::HmacSha512_256 => hmac::HMAC_SHA512,
                };
                let hk = hmac::Key::new(halg, &key[ek_len..]);
                RawRig::Cbc { enc: Box::new(enc), dec: Box::new(dec), hk: Box::new(hk), sizes, buf, n: 0 }
            }
        })
    }
}

impl Rig for RawRig {
    fn chunk(&mut self, _now: Instant) -> Result<()> {
        match self {
            RawRig::Aead { key, sizes, buf, n } => {
                let aad = [0u8; 8];
                for _ in 0..CHUNK {
                    let len = sizes[(*n % sizes.len() as u64) as usize];
                    *n += 1;
                    let mut nonce = [0u8; 12];
                    nonce[4..].copy_from_slice(&n.to_be_bytes());
                    let tag = key
                        .seal_in_place_separate_tag(Nonce::assume_unique_for_key(nonce), Aad::from(aad), &mut buf[..len])
                        .context("seal")?;
                    buf[len..len + 16].copy_from_slice(tag.as_ref());
                    key.open_in_place(Nonce::assume_unique_for_key(nonce), Aad::from(aad), &mut buf[..len + 16])
                        .context("open")?;
                }
            }
            RawRig::Cbc { enc, dec, hk, sizes, buf, n } => {
                for _ in 0..CHUNK {
                    let len = sizes[(*n % sizes.len() as u64) as usize].next_multiple_of(16);
                    *n += 1;
                    let mut iv = [0u8; 16];
                    iv[8..].copy_from_slice(&n.to_be_bytes());
                    enc.less_safe_encrypt(&mut buf[..len], EncryptionContext::Iv128(iv.into())).context("encrypt")?;
                    let tag = hmac::sign(hk, &buf[..len]);
                    hmac::verify(hk, &buf[..len], tag.as_ref()).map_err(|_| anyhow::anyhow!("verify"))?;
                    dec.decrypt(&mut buf[..len], cipher::DecryptionContext::Iv128(iv.into())).context("decrypt")?;
                }
            }
        }
        Ok(())
    }
}

pub(super) fn raw_loop(suite: EspSuite, size: Size, k: usize, stop: Stop) -> Result<u64> {
    run_rig(&mut RawRig::new(suite, size, k)?, stop)
}

/// A sender and a receiver worker sharing one SA pair; worker `k` owns SPI
/// `0x1000 + k` as its sub-SA (the per-CPU case).
pub(super) fn worker_pair(suite: EspSuite, k: usize, now: Instant) -> Result<(Worker, Worker)> {
    let ts = |s: &str| -> Result<Selector> { Ok(s.parse()?) };
    let peer: SocketAddr = "192.0.2.2:4500".parse()?;
    let cfg = SaConfig {
        spi: 0x1000 + k as u32,
        suite,
        keymat: SecretBytes::from_slice(&keymat(suite, k as u8)),
        esn: true,
        replay_window: esparto_esp::DEFAULT_WINDOW,
        lifetime: Lifetime::default(),
        local_ts: vec![ts("10.2.0.0/16")?],
        remote_ts: vec![ts("10.1.0.0/16")?],
        peer,
        path_mtu: 9000,
    };
    let mut tx = Worker::new(k as u16);
    tx.apply(Command::AddPolicy(
        0,
        Box::new(Policy { local: ts("10.1.0.0/16")?, remote: ts("10.2.0.0/16")?, action: Action::Protect(1), priority: 100 }),
    ));
    tx.apply(Command::AddGroup { id: 1, per_cpu: true });
    tx.apply(Command::SetSub(1, Box::new(OutboundSa::owned(&cfg, now).map_err(|e| anyhow::anyhow!("{e:?}"))?)));
    let mut rx = Worker::new(k as u16);
    rx.apply(Command::AddInbound(Box::new(InboundSa::new(&cfg, now).map_err(|e| anyhow::anyhow!("{e:?}"))?)));
    Ok((tx, rx))
}

/// Buffers with one inner packet of each size at [`HEADROOM`].
pub(super) fn buffers(size: Size) -> Vec<(Vec<u8>, usize)> {
    size.sizes()
        .into_iter()
        .map(|len| {
            let mut buf = vec![0u8; HEADROOM + len + TAILROOM];
            buf[HEADROOM..HEADROOM + len].copy_from_slice(&udp_packet(len));
            (buf, len)
        })
        .collect()
}

/// ESP round trips: encapsulate, then decapsulate in place (which restores
/// the inner packet where it was, so no copy is needed between iterations).
pub(super) struct EspRig {
    tx: Worker,
    rx: Worker,
    bufs: Vec<(Vec<u8>, usize)>,
    i: usize,
}

impl EspRig {
    fn new(suite: EspSuite, size: Size, k: usize) -> Result<Self> {
        let (tx, rx) = worker_pair(suite, k, Instant::now())?;
        Ok(Self { tx, rx, bufs: buffers(size), i: 0 })
    }
}

impl Rig for EspRig {
    fn chunk(&mut self, now: Instant) -> Result<()> {
        let nb = self.bufs.len();
        for _ in 0..CHUNK {
            let (buf, len) = &mut self.bufs[self.i % nb];
            self.i += 1;
            let inner = HEADROOM..HEADROOM + *len;
            let e = self.tx.encapsulate(now, buf, inner.clone()).map_err(|d| anyhow::anyhow!("encapsulate: {:?}", d))?;
            let got = self.rx.decapsulate(now, buf, e.esp).map_err(|d| anyhow::anyhow!("decapsulate: {d}"))?;
            if got != inner {
                bail!("decapsulated packet at {got:?}, expected {inner:?}");
            }
        }
        Ok(())
    }
}

pub(super) fn esp_loop(suite: EspSuite, size: Size, k: usize, stop: Stop) -> Result<u64> {
    run_rig(&mut EspRig::new(suite, size, k)?, stop)
}

/// Encapsulation alone, copying the inner packet in each time (as a TUN
/// read would).
struct EncapRig {
    tx: Worker,
    bufs: Vec<(Vec<u8>, usize)>,
    originals: Vec<Vec<u8>>,
    i: usize,
}

impl Rig for EncapRig {
    fn chunk(&mut self, now: Instant) -> Result<()> {
        let nb = self.bufs.len();
        for _ in 0..CHUNK {
            let j = self.i % nb;
            self.i += 1;
            let (buf, len) = &mut self.bufs[j];
            buf[HEADROOM..HEADROOM + *len].copy_from_slice(&self.originals[j]);
            self.tx
                .encapsulate(now, buf, HEADROOM..HEADROOM + *len)
                .map_err(|d| anyhow::anyhow!("encapsulate: {:?}", d))?;
        }
        Ok(())
    }
}

pub(super) fn encap_loop(suite: EspSuite, size: Size, k: usize, stop: Stop) -> Result<u64> {
    let (tx, _) = worker_pair(suite, k, Instant::now())?;
    let bufs = buffers(size);
    let originals = bufs.iter().map(|(b, len)| b[HEADROOM..HEADROOM + len].to_vec()).collect();
    run_rig(&mut EncapRig { tx, bufs, originals, i: 0 }, stop)
}

/// Chunks per turn when alternating raw and ESP: long enough (1024 packets,
/// about half a millisecond at 1420 bytes) that the cost of switching code
/// paths — cold branch predictors, instruction cache — is noise, short
/// enough that both sides see the same machine.
const TURN: u64 = 16;

/// The ESP/raw ratio measured by alternating turns of the two in one
/// thread, each timed with the cycle counter: whatever else the machine
/// does hits both alike. Returns raw cycles per packet over ESP's.
pub(super) fn interleaved_ratio(suite: EspSuite, size: Size, k: usize, stop: Stop) -> Result<f64> {
    let mut raw = RawRig::new(suite, size, k)?;
    let mut esp = EspRig::new(suite, size, k)?;
    let (mut raw_cycles, mut esp_cycles) = (0u64, 0u64);
    let mut packets = 0u64;
    let mut now = Instant::now();
    while stop.more(packets, now) {
        let t0 = esparto_io::cpu::cycles();
        for _ in 0..TURN {
            raw.chunk(now)?;
        }
        let t1 = esparto_io::cpu::cycles();
        for _ in 0..TURN {
            esp.chunk(now)?;
        }
        let t2 = esparto_io::cpu::cycles();
        raw_cycles += t1.wrapping_sub(t0);
        esp_cycles += t2.wrapping_sub(t1);
        packets += TURN * CHUNK;
        now = Instant::now();
    }
    Ok(raw_cycles as f64 / esp_cycles.max(1) as f64)
}
