//! SPD lookup with 1, 100, 1,000 and 10,000 policies: the index
//! ([`Spd::lookup`]) against the linear scan it replaces
//! ([`Spd::lookup_linear`]), and the cost of one change (a site's policy
//! removed and added again, as when a tunnel goes and comes), which must
//! not grow with the number of policies.
//!
//! The policies are a hub's: site *i* is `10.0.0.0/16` (local) to
//! `10.(1 + i/256).(i%256).0/24` (remote), plus a catch-all discard at the
//! lowest priority, like a gateway with one child per spoke. Lookups cycle
//! through 1,024 destinations spread over all sites.
//!
//! ```sh
//! cargo bench -p esparto-esp --bench spd
//! ```

#![allow(missing_docs, clippy::unwrap_used)]

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use esparto_esp::{Action, FlowKey, IpRange, Policy, PolicyId, Selector, Spd};

fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(a, b, c, d))
}

fn hub(n: usize) -> Spd {
    let local = Selector::addrs(IpRange::prefix(v4(10, 0, 0, 0), 16).unwrap());
    let mut policies: Vec<Policy> = (0..n)
        .map(|i| {
            let remote = Selector::addrs(IpRange::prefix(v4(10, 1 + (i / 256) as u8, (i % 256) as u8, 0), 24).unwrap());
            Policy { local, remote, action: Action::Protect(i as u32), priority: Policy::auto_priority(&local, &remote) }
        })
        .collect();
    let any = Selector::addrs(IpRange::prefix(v4(0, 0, 0, 0), 0).unwrap());
    policies.push(Policy { local: any, remote: any, action: Action::Discard, priority: u32::MAX });
    Spd::new(policies)
}

fn keys(n: usize) -> Vec<FlowKey> {
    (0..1024usize)
        .map(|k| {
            let site = (k * 7919) % n.max(1);
            let dst = u32::from_be_bytes([10, 1 + (site / 256) as u8, (site % 256) as u8, (k % 250) as u8 + 1]);
            FlowKey {
                v6: false,
                src: u128::from(u32::from_be_bytes([10, 0, 0, 7])),
                dst: u128::from(dst),
                proto: 17,
                src_port: 40_000 + k as u16,
                dst_port: 5201,
            }
        })
        .collect()
}

fn bench_spd(c: &mut Criterion) {
    let mut g = c.benchmark_group("spd");
    for n in [1usize, 100, 1_000, 10_000] {
        let spd = hub(n);
        let keys = keys(n);
        // Same answers both ways, or the comparison means nothing.
        for k in &keys {
            assert_eq!(spd.lookup(k), spd.lookup_linear(k));
            assert!(matches!(spd.lookup(k).map(|p| p.action), Some(Action::Protect(_))));
        }
        let mut i = 0usize;
        g.bench_with_input(BenchmarkId::new("lookup (index)", n), &n, |b, _| {
            b.iter(|| {
                i = (i + 1) & 1023;
                black_box(spd.lookup(black_box(&keys[i])))
            })
        });
        g.bench_with_input(BenchmarkId::new("lookup_linear (scan)", n), &n, |b, _| {
            b.iter(|| {
                i = (i + 1) & 1023;
                black_box(spd.lookup_linear(black_box(&keys[i])))
            })
        });
        let mut spd = spd;
        let mut site = 0usize;
        g.bench_with_input(BenchmarkId::new("remove + insert one policy", n), &n, |b, _| {
            b.iter(|| {
                site = (site + 7919) % n;
                let id = site as PolicyId;
                let p = spd.remove(id).unwrap();
                black_box(spd.insert(id, p))
            })
        });
        assert_eq!(spd.len(), n + 1);
    }
    g.finish();
}

criterion_group!(benches, bench_spd);
criterion_main!(benches);
