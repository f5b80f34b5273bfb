#![allow(clippy::unwrap_used)]
use super::*;
use esparto_esp::{EspSuite, HEADROOM, InboundSa, Lifetime, OutboundSa, SaConfig, SecretBytes, TAILROOM};

const SPI: u32 = 0x0100_0001;

fn config(spi: u32, lifetime: Lifetime) -> SaConfig {
    SaConfig {
        spi,
        suite: EspSuite::Aes256Gcm16,
        keymat: SecretBytes::from_slice(&[7u8; 36]),
        esn: false,
        replay_window: 64,
        lifetime,
        local_ts: vec!["10.2.0.0/16".parse().unwrap()],
        remote_ts: vec!["10.1.0.0/16".parse().unwrap()],
        peer: "192.0.2.1:4500".parse().unwrap(),
        path_mtu: 1500,
    }
}

/// An IPv4/UDP packet 10.1.0.1 → 10.2.0.1.
fn inner(len: usize) -> Vec<u8> {
    let total = 28 + len;
    let mut p = vec![0u8; total];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p[8] = 64;
    p[9] = 17;
    p[12..16].copy_from_slice(&[10, 1, 0, 1]);
    p[16..20].copy_from_slice(&[10, 2, 0, 1]);
    p[24..26].copy_from_slice(&((8 + len) as u16).to_be_bytes());
    p
}

fn seal(out: &mut OutboundSa, next_header: u8, inner: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; HEADROOM + inner.len() + TAILROOM];
    buf[HEADROOM..HEADROOM + inner.len()].copy_from_slice(inner);
    let r = out.encapsulate(Instant::now(), &mut buf, HEADROOM..HEADROOM + inner.len(), next_header, &mut None).unwrap();
    buf[r].to_vec()
}

/// One receive slot holding `dgrams` back to back, one entry each: what
/// a UDP GRO read of a mixed train looks like.
fn train(dgrams: &[Vec<u8>]) -> RxBatch {
    let mut b = RxBatch::new(1, 0, 4096, 64);
    let peer = Some("192.0.2.1:4500".parse().unwrap());
    let segments: Vec<&[u8]> = dgrams.iter().map(Vec::as_slice).collect();
    b.push_read(&segments, peer).unwrap();
    b
}

fn datapath(events: SyncSender<WorkerEvent>) -> EspDatapath {
    EspDatapath::new(0, events, IcmpSources::default())
}

#[test]
fn a_mixed_gro_train_is_classified_datagram_by_datagram() {
    let (tx, _rx) = event_channel();
    let mut dp = datapath(tx);
    let now = Instant::now();
    let cfg = config(SPI, Lifetime::default());
    dp.on_command(now, EspCommand::Esp(Command::AddInbound(Box::new(InboundSa::new(&cfg, now).unwrap()))), &IoStats::default());
    let mut out = OutboundSa::owned(&cfg, now).unwrap();
    let mut ike = vec![0u8; 4];
    ike.extend_from_slice(&[0x11; 28]);
    let mut other_spi = seal(&mut out, 4, &inner(10));
    other_spi[..4].copy_from_slice(&0x0200_0002u32.to_be_bytes());
    let mut batch = train(&[
        seal(&mut out, 4, &inner(10)),
        ike.clone(),
        seal(&mut out, 59, &[0u8; 16]), // RFC 4303 §2.6: a dummy packet
        ike.clone(),
        other_spi,                       // an SA this worker does not own
        vec![1, 2, 3],                   // too short for anything
        vec![0xff],                      // RFC 3948 §2.3: NAT keepalive
    ]);
    let mut to_tun = TxBatch::new(16, 16, 2048);
    let mut to_control = TxBatch::new(16, 0, 2048);
    assert_eq!(dp.inbound(now, &mut batch, 0, &mut to_tun, &mut to_control), 7);
    assert_eq!(to_tun.len(), 1);
    assert_eq!(to_tun.packet(0).unwrap(), &inner(10)[..]);
    assert_eq!(to_control.len(), 2);
    assert_eq!(to_control.packet(1).unwrap(), &ike[..], "marker included, for the IKE thread");
    assert_eq!(to_control.dst(0), Some("192.0.2.1:4500".parse().unwrap()));
    assert_eq!(dp.keepalives, 1);
    let d = dp.worker().drops();
    assert_eq!(
        (d.get(DropReason::Dummy), d.get(DropReason::UnknownSpi), d.get(DropReason::Malformed), d.total()),
        (1, 1, 1, 3)
    );
}

#[test]
fn a_full_control_batch_stops_the_pass_and_loses_nothing() {
    let (tx, _rx) = event_channel();
    let mut dp = datapath(tx);
    let ike: Vec<Vec<u8>> = (0..5u8).map(|i| vec![0, 0, 0, 0, i, i, i, i]).collect();
    let mut batch = train(&ike);
    let mut to_tun = TxBatch::new(4, 16, 2048);
    let mut to_control = TxBatch::new(2, 0, 2048);
    let now = Instant::now();
    // The worker loop forwards what was queued and calls again from
    // where the datapath stopped.
    let mut from = 0;
    let mut seen = Vec::new();
    while from < batch.len() {
        to_control.clear();
        from = dp.inbound(now, &mut batch, from, &mut to_tun, &mut to_control);
        seen.extend((0..to_control.len()).map(|i| to_control.packet(i).unwrap()[4]));
    }
    assert_eq!(seen, [0, 1, 2, 3, 4]);
    assert_eq!(dp.worker().drops().total(), 0);
}

#[test]
fn events_wait_for_room_in_the_channel_and_none_is_lost() {
    let (tx, rx) = mpsc::sync_channel(1);
    let mut dp = datapath(tx);
    let now = Instant::now();
    // Three inbound SAs whose soft time limit passes at the first tick.
    let lifetime = Lifetime { soft_time: Some(Duration::from_secs(1)), ..Lifetime::default() };
    for spi in [0x100, 0x200, 0x300] {
        let sa = InboundSa::new(&config(spi, lifetime), now).unwrap();
        dp.on_command(now, EspCommand::Esp(Command::AddInbound(Box::new(sa))), &IoStats::default());
    }
    let later = now + Duration::from_secs(2);
    dp.on_tick(later);
    let mut got = Vec::new();
    for _ in 0..3 {
        // One fits the channel at a time; the others wait in the worker.
        let ev = rx.try_recv().unwrap();
        assert!(rx.try_recv().is_err(), "the channel holds one");
        got.push(ev.event);
        dp.on_tick(later);
    }
    assert!(rx.try_recv().is_err());
    let mut spis: Vec<u32> = got
        .iter()
        .map(|e| match e {
            Event::Expire { spi, .. } => *spi,
            other => panic!("{other:?}"),
        })
        .collect();
    spis.sort_unstable();
    assert_eq!(spis, [0x100, 0x200, 0x300]);
    assert_eq!(dp.worker().stats().events_dropped, 0);
}

#[test]
fn a_snapshot_carries_keepalives_and_never_waits() {
    let (tx, _rx) = event_channel();
    let mut dp = datapath(tx);
    let now = Instant::now();
    let mut batch = train(&[vec![0xff], vec![0xff]]);
    dp.inbound(now, &mut batch, 0, &mut TxBatch::new(2, 16, 64), &mut TxBatch::new(2, 0, 64));
    let (reply, answers) = mpsc::sync_channel(1);
    dp.on_command(now, EspCommand::Snapshot(reply.clone()), &IoStats::default());
    // A second request while the first answer is unread: dropped, not a wait.
    dp.on_command(now, EspCommand::Snapshot(reply), &IoStats::default());
    let s = answers.try_recv().unwrap();
    assert_eq!((s.keepalives, s.esp.worker), (2, 0));
    assert!(answers.try_recv().is_err());
}

#[test]
fn unknown_spis_are_reported_with_their_source_within_the_rate_limit() {
    let (tx, rx) = mpsc::sync_channel(64);
    let mut dp = EspDatapath::new(3, tx, IcmpSources::default());
    let peer: SocketAddr = "192.0.2.2:4500".parse().unwrap();
    let n = 2 * UNKNOWN_SPI_REPORTS_PER_SEC as usize;
    let mut esp = [0u8; 64];
    esp[..4].copy_from_slice(&0xc0de_0100_u32.to_be_bytes());
    esp[4..8].copy_from_slice(&1u32.to_be_bytes());
    let mut dgrams = RxBatch::new(2, 0, 64 * n, n + 1);
    dgrams.push_read(&vec![&esp[..]; n], Some(peer)).unwrap();
    // The last one arrived without a known source.
    dgrams.push_read(&[&esp[..]], None).unwrap();
    let (mut to_tun, mut to_control) = (TxBatch::new(4, 0, 64), TxBatch::new(4, 0, 64));
    let now = Instant::now();
    assert_eq!(dp.inbound(now, &mut dgrams, 0, &mut to_tun, &mut to_control), n + 1);
    let events: Vec<WorkerEvent> = rx.try_iter().collect();
    assert_eq!(events.len(), UNKNOWN_SPI_REPORTS_PER_SEC as usize, "rate-limited");
    assert!(events.iter().all(|e| e.worker == 3 && e.event == Event::UnknownSpi { spi: 0xc0de_0100, peer }));
    assert_eq!(dp.worker().stats().drops.get(DropReason::UnknownSpi), n as u64 + 1, "all counted");
    // A second later the worker reports again.
    dgrams.clear();
    dgrams.push_read(&[&esp[..]], Some(peer)).unwrap();
    dp.inbound(now + Duration::from_secs(1), &mut dgrams, 0, &mut to_tun, &mut to_control);
    assert_eq!(rx.try_iter().count(), 1);
}

/// The I/O layer's drop reasons share one map with the ESP engine's in
/// `esparto status`: no name may collide.
#[test]
fn io_and_esp_drop_names_do_not_collide() {
    for (name, _) in IoStats::default().drops() {
        assert!(DropReason::ALL.iter().all(|r| r.name() != name), "{name}");
    }
}
