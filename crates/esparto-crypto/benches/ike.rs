//! IKE-side costs: one key exchange per group (generate our half + agree
//! with a fixed peer value, i.e. what one side of IKE_SA_INIT or a PFS
//! CREATE_CHILD_SA pays), the IKE SA key derivation, and SK payload
//! protection of a typical IKE_AUTH-sized message.
//!
//! The MODP groups run on crypto-bigint (no aws-lc DH API); the ECP and
//! X25519 groups on aws-lc. Run with
//! `cargo bench -p esparto-crypto --bench ike`.
#![allow(missing_docs, unreachable_pub, clippy::unwrap_used)]

use criterion::{BenchmarkId, Criterion, black_box, criterion_group, criterion_main};
use esparto_crypto::DeterministicRng;
use esparto_crypto::ike::{IkeCipher, IkeEncr, KeGroup, Prf};
use esparto_crypto::{Integ, Rng};

fn bench_key_exchange(c: &mut Criterion) {
    let mut g = c.benchmark_group("ke");
    g.sample_size(20);
    for group in KeGroup::ALL {
        let peer = group.generate(&mut DeterministicRng::new(99)).unwrap();
        let peer_public = peer.public_value().to_vec();
        let mut rng = DeterministicRng::new(1);
        g.bench_function(BenchmarkId::new("generate+agree", group.name()), |b| {
            b.iter(|| {
                let k = group.generate(&mut rng).unwrap();
                black_box(k.agree(black_box(&peer_public)).unwrap())
            })
        });
    }
    g.finish();
}

fn bench_derivation(c: &mut Criterion) {
    let mut g = c.benchmark_group("prf");
    let (ni, nr, spis) = ([1u8; 32], [2u8; 32], [3u8; 16]);
    let gir = [4u8; 32];
    for prf in [Prf::HmacSha256, Prf::HmacSha512] {
        // SK_d, SK_ai/ar (none with AEAD), SK_ei/er (AES-256-GCM: 36 each),
        // SK_pi/pr.
        let len = 3 * prf.key_len() + 2 * 36;
        g.bench_function(BenchmarkId::new("ike_sa_keys", prf.name()), |b| {
            b.iter(|| {
                let skeyseed = prf.prf_parts(&[&ni[..], &nr[..]].concat(), &[&gir[..]]);
                prf.prf_plus_parts(skeyseed.as_slice(), &[&ni, &nr, &spis], black_box(len))
                    .unwrap()
            })
        });
    }
    g.finish();
}

fn bench_sk(c: &mut Criterion) {
    let mut g = c.benchmark_group("sk");
    let configs = [
        (IkeEncr::AesGcm16 { key_bits: 256 }, None),
        (IkeEncr::ChaCha20Poly1305, None),
        (
            IkeEncr::AesCbc { key_bits: 256 },
            Some(Integ::HmacSha256_128),
        ),
    ];
    for (encr, integ) in configs {
        let mut rng = DeterministicRng::new(5);
        let mut e = vec![0u8; encr.key_len()];
        let mut a = vec![0u8; integ.map_or(0, Integ::key_len)];
        rng.fill_secret(&mut e);
        rng.fill_secret(&mut a);
        let ci = IkeCipher::new(encr, integ, &e, &a).unwrap();
        // ~IKE_AUTH with PSK and two traffic selectors: 400 bytes inside SK.
        let pt = 400usize.div_ceil(ci.block_size()) * ci.block_size();
        let mut msg = vec![0u8; 28 + 4 + ci.iv_len() + pt + ci.icv_len()];
        let mut counter = 0u64;
        g.bench_function(BenchmarkId::new("seal", encr.name()), |b| {
            b.iter(|| {
                counter += 1;
                ci.seal_sk(black_box(&mut msg), 28, counter).unwrap()
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench_key_exchange, bench_derivation, bench_sk);
criterion_main!(benches);
