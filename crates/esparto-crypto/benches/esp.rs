//! ESP seal/open per packet, next to the bare aws-lc-rs AEAD call.
//!
//! Sizes are the plaintext handed to ESP (an inner IP packet): 64 bytes
//! (small-packet rate) and 1420 bytes (a full packet under a 1500-byte MTU
//! after ESP-in-UDP overhead). `raw/...` runs `LessSafeKey::seal_in_place_
//! separate_tag` / `open_in_place` on a buffer of the same payload length
//! with the same nonce and AAD construction, so `seal/aes128gcm16/N` minus
//! `raw/seal/aes128gcm16/N` is what the `EspCipher` wrapper costs.
//!
//! Run with `cargo bench -p esparto-crypto --bench esp`. Figures are only
//! meaningful on an otherwise idle machine.
#![allow(missing_docs, unreachable_pub, clippy::unwrap_used)]

use aws_lc_rs::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use criterion::{
    BatchSize, BenchmarkId, Criterion, Throughput, black_box, criterion_group, criterion_main,
};
use esparto_crypto::{DeterministicRng, EspCipher, EspSuite, Integ, Rng};

const SIZES: [usize; 2] = [64, 1420];

fn suites() -> [EspSuite; 4] {
    [
        EspSuite::Aes128Gcm16,
        EspSuite::Aes256Gcm16,
        EspSuite::ChaCha20Poly1305,
        EspSuite::AesCbc {
            key_bits: 128,
            integ: Integ::HmacSha256_128,
        },
    ]
}

/// An ESP packet around `inner` bytes of plaintext, padded as ESP would
/// (payload ‖ padding ‖ pad length ‖ next header, aligned to the block).
fn packet(suite: EspSuite, inner: usize) -> Vec<u8> {
    let bs = suite.block_size();
    let padded = (inner + 2).div_ceil(bs) * bs;
    let mut p = vec![0u8; 8 + suite.iv_len() + padded + suite.icv_len()];
    p[..4].copy_from_slice(&0x1000_0001u32.to_be_bytes());
    p
}

fn cipher(suite: EspSuite) -> EspCipher {
    let mut k = vec![0u8; suite.keymat_len()];
    DeterministicRng::new(1).fill_secret(&mut k);
    EspCipher::new(suite, &k).unwrap()
}

fn bench_seal(c: &mut Criterion) {
    let mut g = c.benchmark_group("seal");
    for suite in suites() {
        let ci = cipher(suite);
        for size in SIZES {
            g.throughput(Throughput::Bytes(size as u64));
            let mut p = packet(suite, size);
            let mut seq = 0u64;
            g.bench_with_input(BenchmarkId::new(suite.name(), size), &size, |b, _| {
                b.iter(|| {
                    seq += 1;
                    p[4..8].copy_from_slice(&(seq as u32).to_be_bytes());
                    ci.seal(seq, false, black_box(&mut p)).unwrap();
                })
            });
        }
    }
    g.finish();
}

fn bench_open(c: &mut Criterion) {
    let mut g = c.benchmark_group("open");
    for suite in suites() {
        let ci = cipher(suite);
        for size in SIZES {
            g.throughput(Throughput::Bytes(size as u64));
            let mut sealed = packet(suite, size);
            sealed[4..8].copy_from_slice(&7u32.to_be_bytes());
            ci.seal(7, false, &mut sealed).unwrap();
            g.bench_with_input(BenchmarkId::new(suite.name(), size), &size, |b, _| {
                b.iter_batched_ref(
                    || sealed.clone(),
                    |p| ci.open(7, false, black_box(p)).unwrap(),
                    BatchSize::SmallInput,
                )
            });
        }
    }
    g.finish();
}

/// The same work without the wrapper: split the buffer, build nonce and
/// AAD, call aws-lc-rs directly.
fn bench_raw(c: &mut Criterion) {
    let mut g = c.benchmark_group("raw");
    let suite = EspSuite::Aes128Gcm16;
    let key = LessSafeKey::new(UnboundKey::new(&aead::AES_128_GCM, &[7u8; 16]).unwrap());
    let salt = [1u8, 2, 3, 4];
    for size in SIZES {
        g.throughput(Throughput::Bytes(size as u64));
        let mut p = packet(suite, size);
        let mut seq = 0u64;
        g.bench_with_input(BenchmarkId::new("seal/aes128gcm16", size), &size, |b, _| {
            b.iter(|| {
                seq += 1;
                p[4..8].copy_from_slice(&(seq as u32).to_be_bytes());
                let buf = black_box(&mut p[..]);
                let len = buf.len();
                let mut n = [0u8; 12];
                n[..4].copy_from_slice(&salt);
                n[4..].copy_from_slice(&seq.to_be_bytes());
                let mut aad = [0u8; 8];
                aad.copy_from_slice(&buf[..8]);
                buf[8..16].copy_from_slice(&seq.to_be_bytes());
                let (payload, icv) = buf[16..].split_at_mut(len - 16 - 16);
                let tag = key
                    .seal_in_place_separate_tag(
                        Nonce::assume_unique_for_key(n),
                        Aad::from(aad),
                        payload,
                    )
                    .unwrap();
                icv.copy_from_slice(tag.as_ref());
            })
        });

        let mut sealed = packet(suite, size);
        let mut n = [0u8; 12];
        n[..4].copy_from_slice(&salt);
        n[4..].copy_from_slice(&7u64.to_be_bytes());
        let aad: [u8; 8] = sealed[..8].try_into().unwrap();
        let len = sealed.len();
        let (payload, icv) = sealed[16..].split_at_mut(len - 32);
        let tag = key
            .seal_in_place_separate_tag(Nonce::assume_unique_for_key(n), Aad::from(aad), payload)
            .unwrap();
        icv.copy_from_slice(tag.as_ref());
        sealed[8..16].copy_from_slice(&7u64.to_be_bytes());
        g.bench_with_input(BenchmarkId::new("open/aes128gcm16", size), &size, |b, _| {
            b.iter_batched_ref(
                || sealed.clone(),
                |p| {
                    let mut n = [0u8; 12];
                    n[..4].copy_from_slice(&salt);
                    n[4..].copy_from_slice(&p[8..16]);
                    let aad: [u8; 8] = p[..8].try_into().unwrap();
                    key.open_in_place(
                        Nonce::assume_unique_for_key(n),
                        Aad::from(aad),
                        &mut black_box(p)[16..],
                    )
                    .unwrap()
                    .len()
                },
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

criterion_group!(benches, bench_seal, bench_open, bench_raw);
criterion_main!(benches);
