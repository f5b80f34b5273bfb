//! Tests of a worker: policy lookup, SA selection within a group, acquires,
//! drop accounting, and that no input makes it panic.

#![allow(clippy::unwrap_used)]

use super::*;
use crate::sa::{HEADROOM, SaConfig, SharedSeq, TAILROOM};
use crate::spd::{FlowKey, Policy, Spd};
use crate::testutil::*;
use esparto_crypto::EspSuite;
use std::time::Duration;
use proptest::prelude::*;

const GROUP: GroupId = 7;

fn policies() -> Vec<Policy> {
    vec![
        Policy {
            local: "10.1.0.0/16".parse().unwrap(),
            remote: "10.2.0.0/16".parse().unwrap(),
            action: Action::Protect(GROUP),
            priority: 100,
        },
        Policy {
            local: "10.1.0.0/16".parse().unwrap(),
            remote: "10.2.9.0/24".parse().unwrap(),
            action: Action::Discard,
            priority: 10,
        },
    ]
}

/// Installs `policies` as ids `0..n`.
fn set_policies(w: &mut Worker, policies: Vec<Policy>) {
    for (id, p) in (0..).zip(policies) {
        w.apply(Command::AddPolicy(id, Box::new(p)));
    }
}

/// A sender worker with a per-CPU group, and a receiver worker holding the
/// inbound side of `spis`.
fn setup(per_cpu: bool, spis: &[u32], now: Instant) -> (Worker, Worker, Vec<SaConfig>) {
    let mut tx = Worker::new(0);
    set_policies(&mut tx, policies());
    tx.apply(Command::AddGroup { id: GROUP, per_cpu });
    let mut rx = Worker::new(1);
    let cfgs: Vec<SaConfig> = spis.iter().map(|&s| config(EspSuite::Aes256Gcm16, s, true, false)).collect();
    for c in &cfgs {
        rx.apply(Command::AddInbound(Box::new(InboundSa::new(c, now).unwrap())));
    }
    (tx, rx, cfgs)
}

fn send(w: &mut Worker, now: Instant, inner: &[u8]) -> Result<(Vec<u8>, SocketAddr), Dropped> {
    let mut buf = vec![0u8; HEADROOM + inner.len() + TAILROOM];
    buf[HEADROOM..HEADROOM + inner.len()].copy_from_slice(inner);
    let e = w.encapsulate(now, &mut buf, HEADROOM..HEADROOM + inner.len())?;
    Ok((buf[e.esp].to_vec(), e.peer))
}

fn recv(w: &mut Worker, now: Instant, esp: &[u8]) -> Result<Vec<u8>, DropReason> {
    let mut buf = esp.to_vec();
    let n = buf.len();
    let r = w.decapsulate(now, &mut buf, 0..n)?;
    Ok(buf[r].to_vec())
}

fn cfgs_for(spi: u32) -> SaConfig {
    config(EspSuite::Aes256Gcm16, spi, true, false)
}

fn spi_of(esp: &[u8]) -> u32 {
    u32::from_be_bytes([esp[0], esp[1], esp[2], esp[3]])
}

#[test]
fn fallback_then_sub_sa_with_one_acquire() {
    let now = Instant::now();
    let (mut tx, mut rx, cfgs) = setup(true, &[0x100, 0x200], now);
    // Nothing installed: dropped, and one group-wide acquire.
    assert_eq!(send(&mut tx, now, &udp4(10)).unwrap_err().reason, DropReason::NoSa);
    assert_eq!(tx.poll_event(), Some(Event::Acquire { group: GROUP, worker: None }));
    assert_eq!(tx.poll_event(), None);

    // The fallback arrives: traffic flows on it, and this worker asks once
    // for its own sub-SA (after the retry interval since the last acquire).
    let seq = SharedSeq::new();
    tx.apply(Command::SetFallback(GROUP, Box::new(OutboundSa::shared(&cfgs[0], seq, now).unwrap())));
    let later = now + crate::ACQUIRE_RETRY;
    for _ in 0..5 {
        let (esp, peer) = send(&mut tx, later, &udp4(10)).unwrap();
        assert_eq!(spi_of(&esp), 0x100);
        assert_eq!(peer, cfgs[0].peer);
        assert_eq!(recv(&mut rx, later, &esp).unwrap(), udp4(10));
    }
    assert_eq!(tx.poll_event(), Some(Event::Acquire { group: GROUP, worker: Some(0) }));
    assert_eq!(tx.poll_event(), None, "raised once, not per packet");

    // The sub-SA arrives: traffic moves onto it.
    tx.apply(Command::SetSub(GROUP, Box::new(OutboundSa::owned(&cfgs[1], later).unwrap())));
    let (esp, _) = send(&mut tx, later, &udp4(10)).unwrap();
    assert_eq!(spi_of(&esp), 0x200);
    assert!(recv(&mut rx, later, &esp).is_ok());

    let stats = tx.stats();
    assert_eq!(stats.tx_packets, 6);
    assert_eq!(stats.drops.get(DropReason::NoSa), 1);
    let by_spi = |spi| stats.sas.iter().find(|s| s.spi == spi).unwrap().counters.packets;
    assert_eq!((by_spi(0x100), by_spi(0x200)), (5, 1));
    // The worker's bytes are its SAs' bytes, and stay when an SA goes.
    let sa_bytes: u64 = stats.sas.iter().map(|s| s.counters.bytes).sum();
    assert_eq!((stats.tx_bytes, sa_bytes), (6 * udp4(10).len() as u64, stats.tx_bytes));
    assert_eq!(rx.stats().rx_bytes, stats.tx_bytes);
    tx.apply(Command::RemoveOutbound(GROUP, 0x200));
    assert_eq!(tx.stats().tx_bytes, stats.tx_bytes);
}

/// Each SA remembers the batch time of its last packet, each way; a
/// refused packet does not count.
#[test]
fn sas_remember_when_they_last_carried_a_packet() {
    let now = Instant::now();
    let (mut tx, mut rx, cfgs) = setup(false, &[0x100], now);
    tx.apply(Command::SetFallback(GROUP, Box::new(OutboundSa::owned(&cfgs[0], now).unwrap())));
    let last = |w: &Worker| w.stats().sas.iter().map(|s| s.last_used).collect::<Vec<_>>();
    assert_eq!((last(&tx), last(&rx)), (vec![None], vec![None]), "nothing yet");
    let t1 = now + Duration::from_millis(10);
    let (esp, _) = send(&mut tx, t1, &udp4(10)).unwrap();
    assert_eq!(last(&tx), [Some(t1)]);
    let t2 = t1 + Duration::from_millis(10);
    recv(&mut rx, t2, &esp).unwrap();
    assert_eq!(last(&rx), [Some(t2)]);
    // A replayed packet is refused and leaves the time as it was.
    assert!(recv(&mut rx, t2 + Duration::from_secs(1), &esp).is_err());
    assert_eq!(last(&rx), [Some(t2)]);
}

#[test]
fn the_first_delivered_packet_is_announced_once_and_a_barrier_answers_in_order() {
    let now = Instant::now();
    let (mut tx, mut rx, cfgs) = setup(false, &[0x100], now);
    tx.apply(Command::SetFallback(GROUP, Box::new(OutboundSa::owned(&cfgs[0], now).unwrap())));
    rx.apply(Command::AnnounceFirst(0x100));
    rx.apply(Command::Barrier(7));
    assert_eq!(rx.poll_event(), Some(Event::Barrier(7)), "applied in order, answered at once");
    let (esp, _) = send(&mut tx, now, &udp4(10)).unwrap();
    // A forgery proves nothing: not announced.
    let mut bad = esp.clone();
    *bad.last_mut().unwrap() ^= 1;
    assert!(recv(&mut rx, now, &bad).is_err());
    assert_eq!(rx.poll_event(), None);
    recv(&mut rx, now, &esp).unwrap();
    assert_eq!(rx.poll_event(), Some(Event::FirstPacket { spi: 0x100 }));
    let (esp2, _) = send(&mut tx, now, &udp4(10)).unwrap();
    recv(&mut rx, now, &esp2).unwrap();
    assert_eq!(rx.poll_event(), None, "once");
    // Removing the SA cancels an announcement not yet made.
    rx.apply(Command::AnnounceFirst(0x100));
    rx.apply(Command::RemoveInbound(0x100));
    rx.apply(Command::AddInbound(Box::new(InboundSa::new(&cfgs[0], now).unwrap())));
    let (esp3, _) = send(&mut tx, now, &udp4(10)).unwrap();
    recv(&mut rx, now, &esp3).unwrap();
    assert_eq!(rx.poll_event(), None);
}

#[test]
fn another_thread_reads_the_last_packet_time_through_a_shared_handle() {
    let now = Instant::now();
    let (mut tx, mut rx, cfgs) = setup(false, &[], now);
    let mut sa = InboundSa::new(&cfgs_for(0x100), now).unwrap();
    let seen = sa.share_last_used();
    assert_eq!(seen.get(), None);
    rx.apply(Command::AddInbound(Box::new(sa)));
    let _ = cfgs;
    tx.apply(Command::SetFallback(GROUP, Box::new(OutboundSa::owned(&cfgs_for(0x100), now).unwrap())));
    let t1 = now + Duration::from_millis(5);
    let (esp, _) = send(&mut tx, t1, &udp4(10)).unwrap();
    recv(&mut rx, t1, &esp).unwrap();
    let t = std::thread::spawn(move || seen.get()).join().unwrap();
    assert_eq!(t, Some(t1));
}

#[test]
fn without_per_cpu_the_fallback_is_enough() {
    let now = Instant::now();
    let (mut tx, _, cfgs) = setup(false, &[0x100], now);
    tx.apply(Command::SetFallback(GROUP, Box::new(OutboundSa::owned(&cfgs[0], now).unwrap())));
    for _ in 0..3 {
        send(&mut tx, now + crate::ACQUIRE_RETRY, &udp4(10)).unwrap();
    }
    assert_eq!(tx.poll_event(), None);
}

#[test]
fn policy_decides_discard_and_mismatch() {
    let now = Instant::now();
    let (mut tx, _, cfgs) = setup(false, &[0x100], now);
    tx.apply(Command::SetFallback(GROUP, Box::new(OutboundSa::owned(&cfgs[0], now).unwrap())));
    let mut p = udp4(10);
    p[16..20].copy_from_slice(&[10, 2, 9, 1]);
    assert_eq!(send(&mut tx, now, &p).unwrap_err().reason, DropReason::Discarded);
    p[16..20].copy_from_slice(&[10, 3, 0, 1]);
    assert_eq!(send(&mut tx, now, &p).unwrap_err().reason, DropReason::PolicyMismatch);
    assert_eq!(send(&mut tx, now, &[0x45, 0, 0]).unwrap_err().reason, DropReason::Malformed);
    assert_eq!(send(&mut tx, now, &[]).unwrap_err().reason, DropReason::Malformed);
    let d = tx.drops();
    assert_eq!((d.get(DropReason::Discarded), d.get(DropReason::PolicyMismatch), d.get(DropReason::Malformed)), (1, 1, 2));
}

#[test]
fn link_scope_ipv6_without_a_policy_is_discarded_not_a_policy_miss() {
    let now = Instant::now();
    let (mut tx, _, _) = setup(false, &[0x100], now);
    // No IPv6 policy: a routed IPv6 packet is a policy miss...
    let mut p = udp6(10);
    assert_eq!(send(&mut tx, now, &p).unwrap_err().reason, DropReason::PolicyMismatch);
    // ...but the kernel's MLD report (to ff02::16), a router solicitation
    // (ff02::2) or link-local unicast never belonged in a tunnel.
    for dst in [[0xff, 0x02], [0xff, 0x01], [0xfe, 0x80], [0xfe, 0xbf]] {
        p[24..26].copy_from_slice(&dst);
        assert_eq!(send(&mut tx, now, &p).unwrap_err().reason, DropReason::Discarded, "{dst:x?}");
    }
    // Site-local scope and wider multicast are the SPD's business.
    for dst in [[0xff, 0x05], [0xfe, 0xc0]] {
        p[24..26].copy_from_slice(&dst);
        assert_eq!(send(&mut tx, now, &p).unwrap_err().reason, DropReason::PolicyMismatch, "{dst:x?}");
    }
    let d = tx.drops();
    assert_eq!((d.get(DropReason::Discarded), d.get(DropReason::PolicyMismatch)), (4, 3));
}

#[test]
fn a_policy_change_takes_effect_at_once_despite_the_flow_cache() {
    let now = Instant::now();
    let (mut tx, _, cfgs) = setup(false, &[0x100], now);
    tx.apply(Command::SetFallback(GROUP, Box::new(OutboundSa::owned(&cfgs[0], now).unwrap())));
    assert!(send(&mut tx, now, &udp4(10)).is_ok(), "cached as protect");
    let discard = Policy {
        local: "10.1.0.0/16".parse().unwrap(),
        remote: "10.2.0.0/16".parse().unwrap(),
        action: Action::Discard,
        priority: 1,
    };
    tx.apply(Command::AddPolicy(5, Box::new(discard)));
    assert_eq!(send(&mut tx, now, &udp4(10)).unwrap_err().reason, DropReason::Discarded);
    tx.apply(Command::RemovePolicy(5));
    assert!(send(&mut tx, now, &udp4(10)).is_ok());
    // The group's own policy goes: no policy at all.
    tx.apply(Command::RemovePolicy(0));
    assert_eq!(send(&mut tx, now, &udp4(10)).unwrap_err().reason, DropReason::PolicyMismatch);
    assert_eq!(tx.spd().len(), 1);
}

/// Many flows (so many collide in the cache): every decision equals the SPD's.
#[test]
fn flow_cache_agrees_with_the_spd() {
    let now = Instant::now();
    let (mut tx, _, cfgs) = setup(false, &[0x100], now);
    tx.apply(Command::SetFallback(GROUP, Box::new(OutboundSa::owned(&cfgs[0], now).unwrap())));
    let table = Spd::new(policies());
    let mut x: u32 = 7;
    for _ in 0..5000 {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
        let mut p = udp4(8);
        p[16..20].copy_from_slice(&[10, 2, (x >> 8) as u8 % 12, (x >> 16) as u8]);
        p[20..22].copy_from_slice(&((x >> 4) as u16 % 40).to_be_bytes());
        let want = table.lookup(&FlowKey::extract(&p).unwrap()).map(|p| p.action);
        let got = send(&mut tx, now, &p);
        match want {
            Some(Action::Protect(_)) => assert!(got.is_ok()),
            Some(Action::Discard) => assert_eq!(got.unwrap_err().reason, DropReason::Discarded),
            None => assert_eq!(got.unwrap_err().reason, DropReason::PolicyMismatch),
        }
    }
}

#[test]
fn unknown_spi_and_removed_sa_are_counted() {
    let now = Instant::now();
    let (mut tx, mut rx, cfgs) = setup(false, &[0x100], now);
    tx.apply(Command::SetFallback(GROUP, Box::new(OutboundSa::owned(&cfgs[0], now).unwrap())));
    let (esp, _) = send(&mut tx, now, &udp4(10)).unwrap();
    let mut other = esp.clone();
    other[0..4].copy_from_slice(&0xdead_beefu32.to_be_bytes());
    assert_eq!(recv(&mut rx, now, &other), Err(DropReason::UnknownSpi));
    rx.apply(Command::RemoveInbound(0x100));
    assert_eq!(recv(&mut rx, now, &esp), Err(DropReason::UnknownSpi));
    assert_eq!(rx.drops().get(DropReason::UnknownSpi), 2);
    assert_eq!(recv(&mut rx, now, &[1, 2, 3]), Err(DropReason::Malformed));
}

#[test]
fn a_dummy_packet_is_a_counted_drop_and_still_raises_its_lifetime_event() {
    let now = Instant::now();
    let mut cfg = config(EspSuite::Aes256Gcm16, 0x100, true, false);
    // The dummy packet is the one that crosses the soft packet limit.
    cfg.lifetime.soft_packets = Some(1);
    let mut rx = Worker::new(1);
    rx.apply(Command::AddInbound(Box::new(InboundSa::new(&cfg, now).unwrap())));
    let mut out = OutboundSa::owned(&cfg, now).unwrap();
    let mut esp_of = |nh: u8, inner: &[u8]| {
        let mut buf = vec![0u8; HEADROOM + inner.len() + TAILROOM];
        buf[HEADROOM..HEADROOM + inner.len()].copy_from_slice(inner);
        let r = out.encapsulate(now, &mut buf, HEADROOM..HEADROOM + inner.len(), nh, &mut None).unwrap();
        buf[r].to_vec()
    };
    let good = esp_of(4, &udp4(10));
    assert_eq!(recv(&mut rx, now, &good).unwrap(), udp4(10));
    // RFC 4303 §2.6: next header 59, a dummy packet: discarded, counted.
    let dummy = esp_of(59, &[0u8; 24]);
    assert_eq!(recv(&mut rx, now, &dummy), Err(DropReason::Dummy));
    assert_eq!(rx.drops().get(DropReason::Dummy), 1);
    assert_eq!(rx.drops().total(), 1);
    let st = rx.stats();
    assert_eq!(st.rx_packets, 1, "a dummy is not a received packet");
    assert_eq!(st.sas[0].counters.drops.get(DropReason::Dummy), 1);
    assert_eq!(st.sas[0].counters.packets, 1);
    // It is authentic and spent its sequence number: once more, a replay.
    assert_eq!(recv(&mut rx, now, &dummy), Err(DropReason::Replay));
    // The first packet over the soft limit was the dummy: its event is raised.
    assert_eq!(rx.poll_event(), Some(Event::Expire { spi: 0x100, direction: Direction::Inbound, kind: Expiry::Soft }));
    assert_eq!(rx.poll_event(), None);
}

#[test]
fn limits_crossed_by_refused_packets_reach_the_control_plane() {
    let now = Instant::now();
    let mut cfg = config(EspSuite::Aes256Gcm16, 0x100, true, false);
    cfg.lifetime.soft_packets = Some(1);
    cfg.lifetime.hard_packets = Some(2);
    let mut rx = Worker::new(1);
    rx.apply(Command::AddInbound(Box::new(InboundSa::new(&cfg, now).unwrap())));
    let mut out = OutboundSa::owned(&config(EspSuite::Aes256Gcm16, 0x100, true, false), now).unwrap();
    let mut esp_of = |inner: &[u8]| {
        let mut buf = vec![0u8; HEADROOM + inner.len() + TAILROOM];
        buf[HEADROOM..HEADROOM + inner.len()].copy_from_slice(inner);
        let r = out.encapsulate(now, &mut buf, HEADROOM..HEADROOM + inner.len(), 4, &mut None).unwrap();
        buf[r].to_vec()
    };
    // Both packets that cross a limit are refused: the first lies outside
    // the selectors, the second would pass the hard limit.
    let mut outside = udp4(10);
    outside[16..20].copy_from_slice(&[10, 3, 0, 1]);
    assert_eq!(recv(&mut rx, now, &esp_of(&udp4(10))).unwrap(), udp4(10));
    assert_eq!(recv(&mut rx, now, &esp_of(&outside)), Err(DropReason::PolicyMismatch));
    assert_eq!(rx.poll_event(), Some(Event::Expire { spi: 0x100, direction: Direction::Inbound, kind: Expiry::Soft }));
    assert_eq!(rx.poll_event(), None);
    assert_eq!(recv(&mut rx, now, &esp_of(&udp4(10))), Err(DropReason::LifetimeExpired));
    assert_eq!(rx.poll_event(), Some(Event::Expire { spi: 0x100, direction: Direction::Inbound, kind: Expiry::Hard }));
    // Everything after is refused too, and raises nothing more.
    assert_eq!(recv(&mut rx, now, &esp_of(&udp4(10))), Err(DropReason::LifetimeExpired));
    assert_eq!(rx.poll_event(), None);
    assert_eq!(rx.drops().get(DropReason::LifetimeExpired), 2);
    assert_eq!(rx.stats().rx_packets, 1);
}

#[test]
fn events_past_the_pending_limit_are_dropped_and_counted() {
    let now = Instant::now();
    let mut w = Worker::new(0);
    // Groups with no SA: each packet's acquire is its group's first.
    let groups = MAX_PENDING_EVENTS as u32 + 10;
    let mut policies = Vec::new();
    for g in 0..groups {
        w.apply(Command::AddGroup { id: g, per_cpu: false });
        policies.push(Policy {
            local: "10.1.0.0/16".parse().unwrap(),
            remote: format!("10.{}.{}.{}/32", 100 + g / 65_536, (g / 256) % 256, g % 256).parse().unwrap(),
            action: Action::Protect(g),
            priority: 1,
        });
    }
    set_policies(&mut w, policies);
    for g in 0..groups {
        let mut p = udp4(10);
        p[16..20].copy_from_slice(&[10, (100 + g / 65_536) as u8, ((g / 256) % 256) as u8, (g % 256) as u8]);
        assert_eq!(send(&mut w, now, &p).unwrap_err().reason, DropReason::NoSa);
    }
    assert_eq!(w.stats().events_dropped, 10);
    let mut n = 0;
    while w.poll_event().is_some() {
        n += 1;
    }
    assert_eq!(n, MAX_PENDING_EVENTS);
}

#[test]
fn time_lifetimes_fire_on_tick() {
    let now = Instant::now();
    let mut cfg = config(EspSuite::Aes128Gcm16, 0x300, true, false);
    cfg.lifetime.soft_time = Some(std::time::Duration::from_secs(5));
    let mut w = Worker::new(0);
    w.apply(Command::AddInbound(Box::new(InboundSa::new(&cfg, now).unwrap())));
    w.tick(now + std::time::Duration::from_secs(4));
    assert_eq!(w.poll_event(), None);
    w.tick(now + std::time::Duration::from_secs(5));
    assert_eq!(
        w.poll_event(),
        Some(Event::Expire { spi: 0x300, direction: Direction::Inbound, kind: Expiry::Soft })
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Arbitrary bytes are a counted drop, never a panic.
    #[test]
    fn decapsulate_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300), known in any::<bool>()) {
        let now = Instant::now();
        let (_, mut rx, _) = setup(false, &[0x100], now);
        let mut b = bytes.clone();
        if known && b.len() >= 4 {
            b[0..4].copy_from_slice(&0x100u32.to_be_bytes());
        }
        let r = recv(&mut rx, now, &b);
        prop_assert!(r.is_err());
        prop_assert_eq!(rx.drops().total(), 1);
    }

    /// Arbitrary inner "packets" from the TUN are encrypted or counted.
    #[test]
    fn encapsulate_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let now = Instant::now();
        let (mut tx, _, cfgs) = setup(false, &[0x100], now);
        tx.apply(Command::SetFallback(GROUP, Box::new(OutboundSa::owned(&cfgs[0], now).unwrap())));
        let ok = send(&mut tx, now, &bytes).is_ok();
        prop_assert_eq!(tx.drops().total(), u64::from(!ok));
    }

    /// A valid packet with one byte changed is dropped (never delivered altered).
    #[test]
    fn mutated_packets_never_deliver(pos in 0usize..200, xor in 1u8..=255) {
        let now = Instant::now();
        let (mut tx, mut rx, cfgs) = setup(false, &[0x100], now);
        tx.apply(Command::SetFallback(GROUP, Box::new(OutboundSa::owned(&cfgs[0], now).unwrap())));
        let (mut esp, _) = send(&mut tx, now, &udp4(60)).unwrap();
        let pos = pos % esp.len();
        esp[pos] ^= xor;
        prop_assert!(recv(&mut rx, now, &esp).is_err());
    }
}

thread_local! {
    static PREFETCHED: std::cell::RefCell<Vec<usize>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A prefetch that records the addresses it was asked for.
fn record(addr: *const u8) {
    PREFETCHED.with(|p| p.borrow_mut().push(addr as usize));
}

fn prefetched() -> Vec<usize> {
    PREFETCHED.with(|p| core::mem::take(&mut *p.borrow_mut()))
}

#[test]
fn prefetch_asks_for_the_hot_lines_of_the_packets_sa_and_nothing_else() {
    let now = Instant::now();
    let (mut tx, mut rx, cfgs) = setup(true, &[0x100, 0x200], now);
    tx.apply(Command::SetSub(GROUP, Box::new(OutboundSa::owned(&cfgs[1], now).unwrap())));
    let inner = udp4(100);
    let mut buf = vec![0u8; HEADROOM + inner.len() + TAILROOM];
    buf[HEADROOM..HEADROOM + inner.len()].copy_from_slice(&inner);
    let range = HEADROOM..HEADROOM + inner.len();

    // Outbound: the group's sub-SA, its first HOT_LINES lines.
    let _ = prefetched();
    tx.prefetch_outbound(&buf, range.clone(), record);
    let sub = tx.group(GROUP).unwrap().sub().unwrap() as *const OutboundSa as usize;
    let want: Vec<usize> = (0..crate::sa::HOT_LINES).map(|l| sub + 64 * l).collect();
    assert_eq!(prefetched(), want);
    // A packet no policy protects, or one that is not IP: nothing.
    let mut other = buf.clone();
    other[HEADROOM + 16..HEADROOM + 20].copy_from_slice(&[192, 0, 2, 1]);
    tx.prefetch_outbound(&other, range.clone(), record);
    tx.prefetch_outbound(&[0u8; 10], 0..10, record);
    assert_eq!(prefetched(), Vec::<usize>::new());
    // Prefetching changed nothing: the packet goes out and comes back.
    let e = tx.encapsulate(now, &mut buf, range.clone()).unwrap();
    let esp = e.esp.clone();

    // Inbound: the SA's hot lines (it is aligned to a line), then the
    // replay window's word for the next number.
    rx.prefetch_inbound(&buf[esp.clone()], record);
    let sa = rx.sad().get(0x200).unwrap() as *const InboundSa as usize;
    assert_eq!(sa % 64, 0);
    let got = prefetched();
    assert_eq!(got.len(), crate::sa::HOT_LINES + 1);
    assert_eq!(got[..crate::sa::HOT_LINES], (0..crate::sa::HOT_LINES).map(|l| sa + 64 * l).collect::<Vec<_>>()[..]);
    assert!(got[crate::sa::HOT_LINES] < sa || got[crate::sa::HOT_LINES] >= sa + size_of::<InboundSa>(), "the bitmap is on the heap");
    // Unknown SPI, too short: nothing.
    let mut unknown = buf[esp.clone()].to_vec();
    unknown[..4].copy_from_slice(&0x999u32.to_be_bytes());
    rx.prefetch_inbound(&unknown, record);
    rx.prefetch_inbound(&[1, 2, 3], record);
    assert_eq!(prefetched(), Vec::<usize>::new());
    assert_eq!(rx.decapsulate(now, &mut buf, esp), Ok(range));
    assert_eq!(rx.drops().total() + tx.drops().total(), 0);
}

mod ipcomp {
    use super::*;
    use crate::ipcomp::{IpcompMode, IpcompParams};
    use esparto_wire::esp::NEXT_HEADER_IPCOMP;

    const SPI: u32 = 0x300;

    fn recvp(w: &mut Worker, now: Instant, esp: &[u8]) -> Result<Vec<u8>, DropReason> {
        let mut buf = esp.to_vec();
        let n = buf.len();
        w.decapsulate_packet(now, &mut buf, 0..n).map(<[u8]>::to_vec)
    }

    #[test]
    fn decapsulate_in_place_needs_room() {
        let now = Instant::now();
        let (mut tx, mut rx, _) = setup_ipcomp(now);
        let inner = udp4(1300);
        let (esp, _) = send(&mut tx, now, &inner).unwrap();
        // Room for the decompressed packet after the ESP packet's start.
        let mut buf = esp.clone();
        buf.resize(2000, 0);
        let r = rx.decapsulate(now, &mut buf, 0..esp.len()).unwrap();
        assert_eq!(&buf[r], &inner[..]);
        // No room: refused as too big, not a panic.
        let (esp, _) = send(&mut tx, now, &inner).unwrap();
        let mut buf = esp.clone();
        let n = buf.len();
        assert_eq!(rx.decapsulate(now, &mut buf, 0..n), Err(DropReason::TooBig));
    }
    const CPI: u16 = 0x4242;

    fn params(mode: IpcompMode) -> IpcompParams {
        IpcompParams { cpi: CPI, mode, max_inner: 1500, link_mbps: None }
    }

    /// A sender and a receiver with one SA and IPComp on both sides.
    fn setup_ipcomp(now: Instant) -> (Worker, Worker, SaConfig) {
        let (mut tx, mut rx, mut cfgs) = setup(false, &[], now);
        let cfg = config(EspSuite::Aes256Gcm16, SPI, true, false);
        tx.apply(Command::SetIpcomp(SPI, Direction::Outbound, Some(params(IpcompMode::Always))));
        tx.apply(Command::SetFallback(GROUP, Box::new(OutboundSa::owned(&cfg, now).unwrap())));
        rx.apply(Command::SetIpcomp(SPI, Direction::Inbound, Some(params(IpcompMode::Always))));
        rx.apply(Command::AddInbound(Box::new(InboundSa::new(&cfg, now).unwrap())));
        cfgs.push(config(EspSuite::Aes256Gcm16, SPI, true, false));
        (tx, rx, cfgs.pop().unwrap())
    }

    /// Seals `payload` as the plaintext of ESP on `cfg` with `next_header`.
    fn seal_raw(cfg: &SaConfig, now: Instant, payload: &[u8], next_header: u8) -> Vec<u8> {
        let mut sa = OutboundSa::owned(cfg, now).unwrap();
        let mut buf = vec![0u8; HEADROOM + payload.len() + TAILROOM];
        buf[HEADROOM..HEADROOM + payload.len()].copy_from_slice(payload);
        let r = sa.encapsulate(now, &mut buf, HEADROOM..HEADROOM + payload.len(), next_header, &mut None).unwrap();
        buf[r].to_vec()
    }

    #[test]
    fn compressible_goes_compressed_and_comes_back() {
        let now = Instant::now();
        let (mut tx, mut rx, _) = setup_ipcomp(now);
        let inner = udp4(1300);
        let (esp, _) = send(&mut tx, now, &inner).unwrap();
        assert!(esp.len() < inner.len() / 2, "ESP {} for inner {}", esp.len(), inner.len());
        assert_eq!(recvp(&mut rx, now, &esp).unwrap(), inner);
        // Short packets go uncompressed on the same SA and are accepted.
        let short = udp4(20);
        let (esp, _) = send(&mut tx, now, &short).unwrap();
        assert!(esp.len() > short.len());
        let mut buf = esp.clone();
        let n = buf.len();
        assert_eq!(rx.decapsulate_packet(now, &mut buf, 0..n).unwrap(), &short[..]);
        let out = tx.stats().sas[0].ipcomp.unwrap();
        assert_eq!((out.compressed, out.skipped), (1, 1));
        assert!(out.bytes_saved() > 600);
        let inb = rx.stats().sas[0].ipcomp.unwrap();
        assert_eq!(inb.compressed, 1);
        assert_eq!(rx.stats().rx_bytes, (inner.len() + short.len()) as u64);
    }

    #[test]
    fn decapsulate_packet_leaves_the_rest_of_the_buffer() {
        let now = Instant::now();
        let (mut tx, mut rx, _) = setup_ipcomp(now);
        let inner = udp4(1300);
        let (esp, _) = send(&mut tx, now, &inner).unwrap();
        // Two datagrams back to back, as a GRO read leaves them.
        let mut buf = esp.clone();
        buf.extend_from_slice(&esp);
        let n = esp.len();
        assert_eq!(rx.decapsulate_packet(now, &mut buf, 0..n).unwrap(), &inner[..]);
        assert_eq!(&buf[n..], &esp[..]);
    }

    #[test]
    fn bad_ipcomp_payloads_are_counted_drops() {
        let now = Instant::now();
        let (_, mut rx, _) = setup_ipcomp(now);
        let corrupt = [4u8, 0, (CPI >> 8) as u8, CPI as u8, 0xff, 0xff, 0xff, 0xff];
        let wrong_cpi = [4u8, 0, 0x11, 0x11, 0x03, 0x00];
        for (i, payload) in [&corrupt[..], &wrong_cpi[..]].iter().enumerate() {
            let c = config(EspSuite::Aes256Gcm16, SPI, true, false);
            // A fresh sender restarts at sequence 1: use the replay window's
            // room by sending each at a later number.
            let mut sa = OutboundSa::owned(&c, now).unwrap();
            for _ in 0..i {
                let mut b = vec![0u8; HEADROOM + 40 + TAILROOM];
                b[HEADROOM..HEADROOM + 40].copy_from_slice(&udp4(12));
                sa.encapsulate(now, &mut b, HEADROOM..HEADROOM + 40, 4, &mut None).unwrap();
            }
            let mut buf = vec![0u8; HEADROOM + payload.len() + TAILROOM];
            buf[HEADROOM..HEADROOM + payload.len()].copy_from_slice(payload);
            let r = sa.encapsulate(now, &mut buf, HEADROOM..HEADROOM + payload.len(), NEXT_HEADER_IPCOMP, &mut None).unwrap();
            assert_eq!(recvp(&mut rx, now, &buf[r]).unwrap_err(), DropReason::Malformed);
        }
        // A bomb: 60 000 zeros, far past the 1500 bytes allowed.
        let mut d = crate::ipcomp::Deflate::new();
        let n = d.compress(&vec![0u8; 60_000]).unwrap();
        let mut bomb = vec![4u8, 0, (CPI >> 8) as u8, CPI as u8];
        bomb.extend_from_slice(&d.scratch()[..n]);
        let c = config(EspSuite::Aes256Gcm16, SPI, true, false);
        let mut sa = OutboundSa::owned(&c, now).unwrap();
        for _ in 0..2 {
            let mut b = vec![0u8; HEADROOM + 40 + TAILROOM];
            b[HEADROOM..HEADROOM + 40].copy_from_slice(&udp4(12));
            sa.encapsulate(now, &mut b, HEADROOM..HEADROOM + 40, 4, &mut None).unwrap();
        }
        let mut buf = vec![0u8; HEADROOM + bomb.len() + TAILROOM];
        buf[HEADROOM..HEADROOM + bomb.len()].copy_from_slice(&bomb);
        let r = sa.encapsulate(now, &mut buf, HEADROOM..HEADROOM + bomb.len(), NEXT_HEADER_IPCOMP, &mut None).unwrap();
        assert_eq!(recvp(&mut rx, now, &buf[r]).unwrap_err(), DropReason::TooBig);
        assert_eq!(rx.drops().get(DropReason::Malformed), 2);
        assert_eq!(rx.drops().get(DropReason::TooBig), 1);
        assert_eq!(rx.stats().sas[0].counters.drops.get(DropReason::Malformed), 2);
        let ipc = rx.stats().sas[0].ipcomp.unwrap();
        assert_eq!((ipc.decompress_failed, ipc.too_big), (2, 1));
    }

    #[test]
    fn ipcomp_on_an_sa_without_it_is_refused() {
        let now = Instant::now();
        let (_, mut rx, cfgs) = setup(false, &[0x100], now);
        let mut d = crate::ipcomp::Deflate::new();
        let inner = udp4(1000);
        let n = d.compress(&inner).unwrap();
        let mut payload = vec![4u8, 0, 0, 2];
        payload.extend_from_slice(&d.scratch()[..n]);
        let esp = seal_raw(&cfgs[0], now, &payload, NEXT_HEADER_IPCOMP);
        assert_eq!(recvp(&mut rx, now, &esp).unwrap_err(), DropReason::Malformed);
    }

    #[test]
    fn adaptive_switch_is_an_event() {
        let now = Instant::now();
        let (mut tx, _, _) = setup(false, &[], now);
        let cfg = config(EspSuite::Aes256Gcm16, SPI, true, false);
        tx.apply(Command::SetIpcomp(SPI, Direction::Outbound, Some(params(IpcompMode::Adaptive))));
        tx.apply(Command::SetFallback(GROUP, Box::new(OutboundSa::owned(&cfg, now).unwrap())));
        let mut s = 7u64;
        let mut random = udp4(1300);
        for b in random[28..].iter_mut() {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            *b = s as u8;
        }
        for _ in 0..crate::ipcomp::PROBE_PACKETS {
            send(&mut tx, now, &random).unwrap();
        }
        let ev = std::iter::from_fn(|| tx.poll_event()).find(|e| matches!(e, Event::IpcompSwitched { .. }));
        let Some(Event::IpcompSwitched { spi, switch }) = ev else { panic!("no switch: {ev:?}") };
        assert_eq!(spi, SPI);
        assert_eq!(switch.state.name(), "paused-incompressible");
        assert!(switch.ratio_permille > 900);
        // Removing the SA removes its IPComp state.
        tx.apply(Command::RemoveOutbound(GROUP, SPI));
        assert!(tx.ipcomp.outbound.is_empty());
    }

    #[test]
    fn adaptive_text_compresses_while_the_link_pushes_back() {
        let now = Instant::now();
        let (mut tx, _, _) = setup(false, &[], now);
        let cfg = config(EspSuite::Aes256Gcm16, SPI, true, false);
        tx.apply(Command::SetIpcomp(SPI, Direction::Outbound, Some(params(IpcompMode::Adaptive))));
        tx.apply(Command::SetFallback(GROUP, Box::new(OutboundSa::owned(&cfg, now).unwrap())));
        let mut text = udp4(1300);
        for (i, b) in text[28..].iter_mut().enumerate() {
            *b = b"tunnel gateway link "[i % 20];
        }
        // The socket refuses part of a batch now and then: the link is
        // the bottleneck, and text compresses.
        for i in 0..4 * crate::ipcomp::PROBE_PACKETS {
            if i % 5 == 0 {
                tx.note_send_pushback();
            }
            send(&mut tx, now, &text).unwrap();
        }
        assert!(std::iter::from_fn(|| tx.poll_event()).all(|e| !matches!(e, Event::IpcompSwitched { .. })));
        let st = *tx.ipcomp.outbound[&SPI].stats();
        assert_eq!(st.state.name(), "compressing");
        assert_eq!(st.compressed, u64::from(4 * crate::ipcomp::PROBE_PACKETS));
        // The link stops pushing back: it carries all the worker sends,
        // so compressing only spends CPU.
        for _ in 0..crate::ipcomp::PROBE_PACKETS {
            send(&mut tx, now, &text).unwrap();
        }
        let ev = std::iter::from_fn(|| tx.poll_event()).find(|e| matches!(e, Event::IpcompSwitched { .. }));
        let Some(Event::IpcompSwitched { switch, .. }) = ev else { panic!("no switch: {ev:?}") };
        assert_eq!(switch.state.name(), "paused-cpu");
        assert!(!switch.pushback);
        assert!(switch.ps_per_byte > 0, "compression was timed");
        assert!(switch.reason().contains("CPU-bound"), "{}", switch.reason());
        assert_eq!(tx.ipcomp.outbound[&SPI].stats().last_switch, Some(switch));
    }

    #[test]
    fn adaptive_text_weighs_the_measured_link_rate() {
        let now = Instant::now();
        let (mut tx, _, _) = setup(false, &[], now);
        let cfg = config(EspSuite::Aes256Gcm16, SPI, true, false);
        assert!(!tx.wants_link());
        tx.apply(Command::SetIpcomp(SPI, Direction::Outbound, Some(params(IpcompMode::Adaptive))));
        tx.apply(Command::SetFallback(GROUP, Box::new(OutboundSa::owned(&cfg, now).unwrap())));
        assert!(tx.wants_link());
        let mut text = udp4(1300);
        for (i, b) in text[28..].iter_mut().enumerate() {
            *b = b"tunnel gateway link "[i % 20];
        }
        // The worker's send queue stands, draining 50 Mbit/s: far below
        // what one core compresses, so compressing carries more.
        tx.note_link(Some(50_000_000 / 8));
        for _ in 0..4 * crate::ipcomp::PROBE_PACKETS {
            send(&mut tx, now, &text).unwrap();
        }
        assert!(std::iter::from_fn(|| tx.poll_event()).all(|e| !matches!(e, Event::IpcompSwitched { .. })));
        assert_eq!(tx.ipcomp.outbound[&SPI].stats().state.name(), "compressing");
        // Saturated at 1,000 Gbit/s: no core compresses that fast, so the
        // link would carry less compressed than as it is.
        tx.note_link(Some(125_000_000_000));
        for _ in 0..crate::ipcomp::PROBE_PACKETS {
            send(&mut tx, now, &text).unwrap();
        }
        let ev = std::iter::from_fn(|| tx.poll_event()).find(|e| matches!(e, Event::IpcompSwitched { .. }));
        let Some(Event::IpcompSwitched { switch, .. }) = ev else { panic!("no switch: {ev:?}") };
        assert_eq!(switch.state.name(), "paused-cpu");
        assert!(switch.link_measured);
        assert_eq!(switch.link_mbps, Some(1_000_000));
        assert!(switch.reason().contains("link saturated at 1000000 Mbit/s"), "{}", switch.reason());
        // The queue empties: the link keeps up, and the SA stays paused
        // through its back-off and the probe after it.
        tx.note_link(None);
        for _ in 0..crate::ipcomp::BACKOFF_MIN + crate::ipcomp::PROBE_PACKETS {
            send(&mut tx, now, &text).unwrap();
        }
        let ev = std::iter::from_fn(|| tx.poll_event()).find(|e| matches!(e, Event::IpcompSwitched { .. }));
        let Some(Event::IpcompSwitched { switch, .. }) = ev else { panic!("no switch: {ev:?}") };
        assert_eq!(switch.state.name(), "paused-cpu");
        assert!(!switch.link_measured);
        assert!(switch.reason().contains("link not pushing back"), "{}", switch.reason());
    }
}
