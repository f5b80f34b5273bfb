//! The reservation logic against a disk in memory that can fail or
//! "crash" between any two steps, with real SAs sending: no (key, sequence
//! number) pair is used twice across restarts. Then the state directory on
//! a real file system.

#![allow(clippy::unwrap_used)]

use std::cell::RefCell;
use std::collections::HashSet;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Instant;

use esparto_esp::{DropReason, EspSuite, Lifetime, OutboundSa, SaConfig, SecretBytes};

use super::*;
use crate::config::parse_str;

/// The disk: survives a "crash" (dropping everything else).
#[derive(Debug, Default)]
struct Disk {
    file: Option<Vec<u8>>,
    saves: usize,
    /// Saves fail while set (a full or broken disk).
    failing: bool,
}

#[derive(Debug, Clone)]
struct MemStore {
    disk: Rc<RefCell<Disk>>,
    path: PathBuf,
}

impl MemStore {
    fn new() -> Self {
        Self { disk: Rc::default(), path: PathBuf::from("/var/lib/esparto/static-sa-seq.json") }
    }
    fn saves(&self) -> usize {
        self.disk.borrow().saves
    }
    fn fail(&self, on: bool) {
        self.disk.borrow_mut().failing = on;
    }
    fn bytes(&self) -> Vec<u8> {
        self.disk.borrow().file.clone().unwrap()
    }
    fn set(&self, b: Vec<u8>) {
        self.disk.borrow_mut().file = Some(b);
    }
}

impl Store for MemStore {
    fn path(&self) -> &Path {
        &self.path
    }
    fn load(&mut self) -> io::Result<Option<Vec<u8>>> {
        Ok(self.disk.borrow().file.clone())
    }
    fn save(&mut self, bytes: &[u8]) -> io::Result<()> {
        let mut d = self.disk.borrow_mut();
        if d.failing {
            return Err(io::Error::other("no space left on device"));
        }
        d.file = Some(bytes.to_vec());
        d.saves += 1;
        Ok(())
    }
}

const KEY: [u8; 20] = [7; 20];

fn out(esn: bool) -> StaticOut {
    StaticOut { connection: "site".into(), child: "lan".into(), out_spi: 0xc000_0200, key_id: key_id(&KEY), esn }
}

fn sa_config(esn: bool) -> SaConfig {
    SaConfig {
        spi: 0xc000_0200,
        suite: EspSuite::Aes128Gcm16,
        keymat: SecretBytes::from_slice(&KEY),
        esn,
        replay_window: 64,
        lifetime: Lifetime::default(),
        local_ts: vec!["10.1.0.0/16".parse().unwrap()],
        remote_ts: vec!["10.2.0.0/16".parse().unwrap()],
        peer: "192.0.2.2:4500".parse().unwrap(),
        path_mtu: 1500,
    }
}

/// The SA a worker sends on: its own counter, or (`copies` > 1) a fallback
/// shared by that many workers.
fn senders(c: &Claimed, esn: bool, copies: usize) -> Vec<OutboundSa> {
    let now = Instant::now();
    let cfg = sa_config(esn);
    if copies == 1 {
        vec![OutboundSa::owned(&cfg, now).unwrap().reserved(c.limit.clone())]
    } else {
        (0..copies)
            .map(|_| OutboundSa::shared(&cfg, c.shared.clone(), now).unwrap().reserved(c.limit.clone()))
            .collect()
    }
}

/// Sends one packet: the sequence number on the wire, or why not.
fn send(sa: &mut OutboundSa) -> Result<u64, DropReason> {
    let mut buf = vec![0u8; esparto_esp::HEADROOM + 28 + esparto_esp::TAILROOM];
    let p = &mut buf[esparto_esp::HEADROOM..esparto_esp::HEADROOM + 28];
    p[0] = 0x45;
    p[3] = 28;
    p[9] = 17;
    let inner = esparto_esp::HEADROOM..esparto_esp::HEADROOM + 28;
    let r = sa.encapsulate(Instant::now(), &mut buf, inner, 4, &mut None).map_err(|d| d.reason)?;
    Ok(u64::from(u32::from_be_bytes(buf[r][4..8].try_into().unwrap())))
}

#[test]
fn a_fresh_sa_sends_nothing_until_its_first_step_is_durable() {
    let store = MemStore::new();
    let mut r = Reservations::open(store.clone()).unwrap().with_steps(100, 400);
    let c = r.claim(&out(false)).unwrap();
    let mut sa = senders(&c, false, 1).remove(0);
    assert_eq!(send(&mut sa), Err(DropReason::SeqUnreserved), "claimed is not yet reserved");
    assert_eq!(store.saves(), 0);
    r.commit().unwrap();
    assert_eq!(store.saves(), 1);
    assert_eq!(r.entries()[0].reserved, 100);
    assert_eq!(send(&mut sa), Ok(1));
    // Up to the request mark (half a step before the limit) nothing is asked.
    for want in 2..50 {
        assert_eq!(send(&mut sa), Ok(want));
    }
    assert_eq!(r.poll().unwrap(), 0);
    assert_eq!(send(&mut sa), Ok(50));
    assert_eq!(r.poll().unwrap(), 1, "asked at the mark");
    assert_eq!((store.saves(), r.entries()[0].reserved, c.limit.limit()), (2, 200, 200));
    for want in 51..=200 {
        assert_eq!(send(&mut sa), Ok(want));
    }
    assert_eq!(send(&mut sa), Err(DropReason::SeqUnreserved), "the control thread did not keep up");
    r.poll().unwrap();
    assert_eq!(send(&mut sa), Ok(201), "and no number was lost");
}

#[test]
fn a_restart_continues_after_the_reservation_not_after_the_last_packet() {
    let store = MemStore::new();
    // Run 1 reserves and crashes before sending anything.
    let mut r = Reservations::open(store.clone()).unwrap().with_steps(100, 400);
    let c = r.claim(&out(false)).unwrap();
    r.commit().unwrap();
    drop((r, c));
    // Run 2 sends a little, crashes.
    let mut r = Reservations::open(store.clone()).unwrap().with_steps(100, 400);
    let c = r.claim(&out(false)).unwrap();
    assert_eq!(c.limit.start(), 100);
    r.commit().unwrap();
    let mut sa = senders(&c, false, 1).remove(0);
    assert_eq!(send(&mut sa), Ok(101));
    assert_eq!(send(&mut sa), Ok(102));
    drop((r, c, sa));
    // Run 3 starts after everything run 2 may have used.
    let mut r = Reservations::open(store.clone()).unwrap().with_steps(100, 400);
    let c = r.claim(&out(false)).unwrap();
    r.commit().unwrap();
    assert_eq!(send(&mut senders(&c, false, 1).remove(0)), Ok(201));
}

#[test]
fn a_failed_write_raises_nothing_and_is_retried() {
    let store = MemStore::new();
    store.fail(true);
    let mut r = Reservations::open(store.clone()).unwrap().with_steps(100, 400);
    let c = r.claim(&out(false)).unwrap();
    assert!(r.commit().is_err());
    let mut sa = senders(&c, false, 1).remove(0);
    assert_eq!(send(&mut sa), Err(DropReason::SeqUnreserved));
    store.fail(false);
    r.poll().unwrap();
    assert_eq!(send(&mut sa), Ok(1));
    // At run time: the extension fails, the SA runs to its limit and stops.
    for _ in 2..=50 {
        send(&mut sa).unwrap();
    }
    store.fail(true);
    assert!(r.poll().is_err());
    assert_eq!(c.limit.limit(), 100);
    for _ in 51..=100 {
        send(&mut sa).unwrap();
    }
    assert_eq!(send(&mut sa), Err(DropReason::SeqUnreserved));
    // A crash now: the disk still says 100, and 100 was the last sent.
    let on_disk = file::decode(&store.bytes()).unwrap();
    assert_eq!(on_disk[0].reserved, 100);
    store.fail(false);
    assert_eq!(r.poll().unwrap(), 0, "the pending extension is written, not a second one");
    assert_eq!((c.limit.limit(), file::decode(&store.bytes()).unwrap()[0].reserved), (200, 200));
    assert_eq!(send(&mut sa), Ok(101));
}

/// A small deterministic generator (the test must not depend on a seed
/// that changes from run to run).
struct Lcg(u64);
impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

#[test]
fn a_hundred_crashes_at_random_moments_never_repeat_a_sequence_number() {
    const STEP: u64 = 64;
    let store = MemStore::new();
    let mut rng = Lcg(0x5eed);
    let mut used = HashSet::new();
    let mut last_used = 0u64;
    let mut most_skipped = 0u64;
    // Whether a write failed in the previous run (a shared counter then
    // counts on while its packets are refused, and a restart skips those
    // numbers too).
    let mut failed = false;
    for run in 0..100 {
        let mut r = Reservations::open(store.clone()).unwrap().with_steps(STEP, 4 * STEP);
        let c = r.claim(&out(false)).unwrap();
        let start = c.limit.start();
        assert!(start >= last_used, "run {run} starts at {start}, {last_used} was sent");
        if !failed {
            most_skipped = most_skipped.max(start - last_used);
        }
        failed = false;
        // Some runs die before the first reservation is durable.
        if rng.below(10) == 0 {
            continue;
        }
        r.commit().unwrap();
        // Every other run sends on a fallback shared by two workers.
        let mut sas = senders(&c, false, if run % 2 == 0 { 1 } else { 2 });
        let packets = rng.below(6 * STEP);
        for i in 0..packets {
            // The control thread looks now and then, and sometimes its
            // write fails; the run may crash at any packet.
            if rng.below(8) == 0 {
                store.fail(rng.below(4) == 0);
                failed |= r.poll().is_err();
            }
            let k = (i % sas.len() as u64) as usize;
            if let Ok(seq) = send(&mut sas[k]) {
                assert!(used.insert(seq), "run {run}: sequence number {seq} sent twice");
                last_used = last_used.max(seq);
            }
        }
        store.fail(false);
    }
    assert!(used.len() > 1000, "{} packets sent", used.len());
    // A crash skips at most the step just reserved and half the one before.
    assert!(most_skipped <= STEP + STEP / 2 + 1, "{most_skipped} numbers skipped by one restart");
}

#[test]
fn a_damaged_or_foreign_file_stops_the_start_naming_it() {
    let store = MemStore::new();
    let mut r = Reservations::open(store.clone()).unwrap();
    r.claim(&out(false)).unwrap();
    r.commit().unwrap();
    let good = String::from_utf8(store.bytes()).unwrap();
    assert!(good.contains(&format!("\"reserved\": {STEP}")), "{good}");
    let flipped = good.replace(&format!("\"reserved\": {STEP}"), &format!("\"reserved\": {}", STEP - 1));
    let cases: [(String, &str); 6] = [
        (flipped, "SHA-256 does not match"),
        (good[..good.len() / 2].to_string(), "not a valid state file"),
        (String::new(), "not a valid state file"),
        (good.replace("\"version\": 1", "\"version\": 2"), "version 2 is not supported"),
        (good.replace("\"format\": \"esparto static", "\"format\": \"other static"), "not an Esparto state file"),
        (good.replace("\"sas\"", "\"extra\": 1, \"sas\""), "unknown field"),
    ];
    for (text, why) in cases {
        store.set(text.into_bytes());
        let e = Reservations::open(store.clone()).unwrap_err().to_string();
        assert!(e.starts_with("/var/lib/esparto/static-sa-seq.json: "), "{e}");
        assert!(e.contains(why), "{why}: {e}");
        assert!(e.contains("Configure new keys"), "{e}");
    }
}

#[test]
fn a_used_up_sequence_space_refuses_to_start_and_stops_at_the_top() {
    const STEP: u64 = 100;
    let store = MemStore::new();
    let mut r = Reservations::open(store.clone()).unwrap().with_steps(STEP, 4 * STEP);
    r.claim(&out(false)).unwrap();
    r.commit().unwrap();
    // An earlier run reserved up to one step before the top: this run may
    // have the last step.
    let mut e = file::decode(&store.bytes()).unwrap();
    e[0].reserved = MAX_SEQ - STEP;
    store.set(file::encode(&e));
    let mut r = Reservations::open(store.clone()).unwrap().with_steps(STEP, 4 * STEP);
    let c = r.claim(&out(false)).unwrap();
    r.commit().unwrap();
    assert_eq!(c.limit.limit(), MAX_SEQ);
    // A sender asking for more gets nothing: there is nothing left, and
    // the lifetime's hard limit ends the SA at 2^32 - 1.
    let mut sa = senders(&c, false, 1).remove(0);
    for _ in 0..STEP / 2 {
        send(&mut sa).unwrap();
    }
    assert!(c.limit.wants_more());
    assert_eq!((r.poll().unwrap(), c.limit.limit()), (0, MAX_SEQ));
    for _ in 0..STEP / 2 {
        send(&mut sa).unwrap();
    }
    assert_eq!(send(&mut sa), Err(DropReason::LifetimeExpired));
    // One number fewer than a step left: refused, with what to do.
    e[0].reserved = MAX_SEQ - STEP + 1;
    store.set(file::encode(&e));
    let mut r = Reservations::open(store.clone()).unwrap().with_steps(STEP, 4 * STEP);
    let msg = r.claim(&out(false)).unwrap_err().to_string();
    assert!(msg.contains("sequence numbers are used up"), "{msg}");
    assert!(msg.contains("Configure a new out_key") && msg.contains("/var/lib/esparto/static-sa-seq.json"), "{msg}");
    // With ESN the same key continues into the 64-bit space.
    let c = r.claim(&out(true)).unwrap();
    assert_eq!(c.limit.start(), MAX_SEQ - STEP + 1);
}

#[test]
fn a_key_keeps_its_numbers_under_a_new_name_and_sends_once_per_run() {
    let store = MemStore::new();
    let mut r = Reservations::open(store.clone()).unwrap();
    r.claim(&out(false)).unwrap();
    r.commit().unwrap();
    let mut r = Reservations::open(store.clone()).unwrap();
    let renamed = StaticOut { connection: "hq".into(), child: "all".into(), out_spi: 0xc000_9999, ..out(false) };
    let c = r.claim(&renamed).unwrap();
    assert_eq!(c.limit.start(), STEP, "same key, new name: continues");
    let dup = r.claim(&out(false)).unwrap_err().to_string();
    assert!(dup.contains("same out_key as hq/all out_spi 0xc0009999"), "{dup}");
    // Another key starts at the beginning; the old entry stays.
    let other = StaticOut { key_id: key_id(&[8; 20]), ..out(false) };
    assert_eq!(r.claim(&other).unwrap().limit.start(), 0);
    r.commit().unwrap();
    let e = file::decode(&store.bytes()).unwrap();
    assert_eq!(e.len(), 2);
    assert_eq!((e[0].connection.as_str(), e[0].out_spi, e[0].reserved), ("hq", 0xc000_9999, 2 * STEP));
}

#[test]
fn a_reloaded_sa_with_the_same_key_continues_after_its_old_reservation() {
    let store = MemStore::new();
    let mut r = Reservations::open(store.clone()).unwrap().with_steps(100, 400);
    let old = r.claim(&out(false)).unwrap();
    r.commit().unwrap();
    let mut sa = senders(&old, false, 1).remove(0);
    for want in 1..=60 {
        assert_eq!(send(&mut sa), Ok(want));
    }
    r.poll().unwrap();
    assert_eq!(old.limit.limit(), 200);
    // While it runs, the same key is refused to anyone else...
    let e = r.check_claim(&out(false), &[]).unwrap_err().to_string();
    assert!(e.contains("same out_key as site/lan") && e.contains("running"), "{e}");
    // ...but not to its own replacement, and checking changes nothing.
    r.check_claim(&out(false), &[out(false).key_id]).unwrap();
    assert_eq!(r.entries()[0].reserved, 200);
    assert!(r.release(&out(false).key_id));
    assert!(!r.release(&out(false).key_id), "released once");
    let new = r.claim(&out(false)).unwrap();
    assert_eq!(new.limit.start(), 200, "after everything the old one may have used");
    r.commit().unwrap();
    assert_eq!(send(&mut senders(&new, false, 1).remove(0)), Ok(201));
    // The old one is no longer extended: it stops at its limit.
    for want in 61..=200 {
        assert_eq!(send(&mut sa), Ok(want));
    }
    r.poll().unwrap();
    assert_eq!(send(&mut sa), Err(DropReason::SeqUnreserved));
}

#[test]
fn a_reload_checks_the_sequence_space_before_anything_changes() {
    let store = MemStore::new();
    let mut r = Reservations::open(store.clone()).unwrap().with_steps(1 << 31, 400);
    r.claim(&out(false)).unwrap();
    r.commit().unwrap();
    // 2^31 of 2^32 - 1 used: another step does not fit.
    assert!(r.release(&out(false).key_id));
    let e = r.check_claim(&out(false), &[]).unwrap_err().to_string();
    assert!(e.contains("used up"), "{e}");
    // A key never seen has its whole space.
    r.check_claim(&StaticOut { key_id: key_id(&[10; 20]), ..out(false) }, &[]).unwrap();
}

#[test]
fn key_ids_are_stable_distinct_and_not_the_key() {
    let a = key_id(&KEY);
    assert_eq!(a, key_id(&KEY));
    assert_ne!(a, key_id(&[8; 20]));
    assert_ne!(a, key_id(&KEY[..19]));
    // Not a plain digest of the key either: the key is the HMAC key.
    let plain = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &KEY);
    assert_ne!(&a[..], &plain.as_ref()[..16]);
    let text = String::from_utf8(file::encode(&[Entry {
        key_id: a,
        connection: "c".into(),
        child: "d".into(),
        out_spi: 0x100,
        reserved: 1,
    }]))
    .unwrap();
    assert!(!text.contains("0707070707"), "{text}");
}

/// A static configuration: `pairs` pairs whose keys are `keys[2i]` (in)
/// and `keys[2i + 1]` (out), 20-byte AES-128-GCM KEYMAT.
fn static_config(state: &Path, keys: &[u8]) -> crate::config::Config {
    let mut t = format!(
        "[daemon]\nworkers = 2\nstate_dir = \"{}\"\n[connections.site]\nlocal_addrs = [\"192.0.2.1\"]\nremote_addrs = [\"192.0.2.2\"]\n\
         [connections.site.children.lan]\nlocal_ts = [\"10.1.0.0/16\"]\nremote_ts = [\"10.2.0.0/16\"]\nesp_proposals = [\"aes128gcm16\"]\n",
        state.display()
    );
    for (i, k) in keys.chunks(2).enumerate() {
        t += &format!(
            "[[connections.site.children.lan.static_sas]]\nin_spi = {}\nout_spi = {}\nin_key = \"{}\"\nout_key = \"{}\"\n",
            0x1000 + i,
            0x2000 + i,
            format!("{:02x}", k[0]).repeat(20),
            format!("{:02x}", k[1]).repeat(20)
        );
    }
    parse_str(&t, "west.toml").unwrap()
}

#[test]
fn pairs_beyond_the_workers_reserve_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    // Pairs beyond the workers are received on only: nothing to reserve.
    let outs = static_outbound(&static_config(&state, &[1, 2, 3, 4, 5, 6, 7, 8]), 2).unwrap();
    assert_eq!(outs.iter().map(|(at, _)| at.2).collect::<Vec<_>>(), [0, 1, 2]);
    assert!(!state.exists());
}

#[test]
fn the_state_directory_is_created_private_locked_and_written_durably() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("var/lib/esparto");
    let cfg = static_config(&state, &[1, 2, 3, 4, 5, 6]);
    let (r, claims) = reserve_static(&cfg, 2).unwrap().unwrap();
    assert_eq!(claims.len(), 3);
    assert!(claims.values().all(|c| c.limit.start() == 0 && c.limit.limit() == STEP));
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&state), 0o700);
    assert_eq!(mode(&state.join(STATE_FILE)), 0o600);
    // One daemon per state directory.
    let e = reserve_static(&cfg, 2).unwrap_err().to_string();
    assert!(e.contains(&format!("state_dir {} is in use by another esparto", state.display())), "{e}");
    drop(r);
    // A temporary file left by a crash before its rename changes nothing.
    std::fs::write(state.join("static-sa-seq.json.tmp"), b"half a fi").unwrap();
    let (_r, claims) = reserve_static(&cfg, 2).unwrap().unwrap();
    assert!(claims.values().all(|c| c.limit.start() == STEP && c.limit.limit() == 2 * STEP));
}

#[test]
fn an_unusable_state_directory_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, b"").unwrap();
    let e = reserve_static(&static_config(&file, &[1, 2]), 1).unwrap_err();
    assert!(format!("{e:#}").contains(&format!("state_dir {}", file.display())), "{e:#}");
    let below = file.join("sub");
    let e = reserve_static(&static_config(&below, &[1, 2]), 1).unwrap_err();
    assert!(format!("{e:#}").contains(&format!("state_dir {}: cannot create it", below.display())), "{e:#}");
    // A state file that cannot be read (here: a directory) is named too.
    let state = dir.path().join("s");
    std::fs::create_dir_all(state.join(STATE_FILE)).unwrap();
    let e = reserve_static(&static_config(&state, &[1, 2]), 1).unwrap_err().to_string();
    assert!(e.starts_with(&format!("{}: cannot read", state.join(STATE_FILE).display())), "{e}");
    // Without static children nothing is touched.
    let ike = parse_str(
        "[connections.gw]\nremote_addrs = \"198.51.100.7\"\n[connections.gw.children.host]\n[secrets.ike]\nsecret = \"0x00112233445566778899\"\n",
        "ike.toml",
    )
    .unwrap();
    assert!(reserve_static(&ike, 1).unwrap().is_none());
}
