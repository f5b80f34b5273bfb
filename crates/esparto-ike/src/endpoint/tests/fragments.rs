//! IKE fragmentation (RFC 7383) between two endpoints: negotiated in
//! IKE_SA_INIT, IKE_AUTH and later messages above `fragment_size` sent as
//! SKF fragments, and the peer's put back together — on a path that drops
//! every datagram above the size, which without fragmentation no IKE_AUTH
//! crosses.

use super::*;
use crate::config::Fragmentation;

/// Above IKE_SA_INIT (236 octets as IP carries it here), below IKE_AUTH
/// with the selectors of [`wide`].
const SIZE: usize = 300;

fn side(seed: u64, initiator: bool, tweak: fn(&mut ConnectionConfig)) -> Endpoint {
    let (local, remote, me, peer) = if initiator { (MOON, SUN, "@moon", "@sun") } else { (SUN, MOON, "@sun", "@moon") };
    let mut ep = endpoint_with(seed, local, remote, me, peer, tweak);
    ep.config.fragment_size = SIZE;
    ep
}

/// Sixteen selectors on MOON's side (within what SUN allows): IKE_AUTH
/// and CREATE_CHILD_SA carry them all, past [`SIZE`].
fn wide(c: &mut ConnectionConfig) {
    let nets: Vec<String> = (0..16).map(|i| format!("10.1.{i}.0/24")).collect();
    if c.local_addrs[0].to_string() == MOON {
        c.children[0] = ChildConfig::new("net", &nets.join(","), "10.2.0.0/16", "aes256gcm16").unwrap();
    }
}

/// An initiator and a responder, their connections tweaked by `i` and `r`.
fn pair(i: fn(&mut ConnectionConfig), r: fn(&mut ConnectionConfig)) -> Pair {
    Pair {
        i: side(1, true, i),
        r: side(2, false, r),
        now: Instant::now(),
        ike: IkeSaId(0),
    }
}

fn yes(c: &mut ConnectionConfig) {
    wide(c);
}
fn no(c: &mut ConnectionConfig) {
    wide(c);
    c.fragmentation = Fragmentation::No;
}
fn accept(c: &mut ConnectionConfig) {
    wide(c);
    c.fragmentation = Fragmentation::Accept;
}

/// Move datagrams until quiet, dropping those longer than `mtu` (as a
/// path that drops IP fragments would): (delivered, dropped).
fn pump_mtu(p: &mut Pair, mtu: usize) -> (usize, usize) {
    let (mut ok, mut dropped) = (0, 0);
    loop {
        let mut moved = false;
        for to_r in [true, false] {
            let (from, to) = if to_r { (&mut p.i, &mut p.r) } else { (&mut p.r, &mut p.i) };
            while let Some(t) = from.poll_transmit() {
                moved = true;
                // The datagram as IP carries it: the IKE message and the
                // non-ESP marker, plus UDP and IPv4 headers.
                if t.data.len() + 28 > mtu {
                    dropped += 1;
                    continue;
                }
                ok += 1;
                to.handle_datagram(p.now, wall_clock(), t.remote, t.local, &t.data);
            }
        }
        if !moved {
            return (ok, dropped);
        }
    }
}

/// The inbound SPI of a Child SA established, if one was.
fn child(ep: &mut Endpoint) -> Option<u32> {
    let mut spi = None;
    while let Some(e) = ep.poll_event() {
        if let Event::ChildSaEstablished(c) = e {
            spi = Some(c.inbound_spi);
        }
    }
    spi
}

fn up(ep: &mut Endpoint) -> bool {
    child(ep).is_some()
}

#[test]
fn ike_auth_crosses_a_small_path_in_fragments() {
    let mut p = pair(yes, yes);
    p.ike = p.i.initiate(p.now, "gw", None).unwrap();
    let (_, dropped) = pump_mtu(&mut p, SIZE);
    assert_eq!(dropped, 0, "every fragment fits");
    let spi = child(&mut p.i);
    assert!(spi.is_some() && up(&mut p.r), "the Child SA came up on both sides");
    for ep in [&p.i, &p.r] {
        let s = ep.stats();
        assert!(s.fragments_sent >= 2 && s.messages_reassembled == 1, "{s:?}");
        assert_eq!((s.fragments_dropped, s.fragment_bytes_held), (0, 0));
        assert_eq!(s.messages.sent[1][0] + s.messages.sent[1][1], 1, "IKE_AUTH counted once, not per fragment");
    }
    // Later messages too: a rekey of the Child SA crosses the same path.
    let before = p.r.stats().messages_reassembled;
    p.i.rekey_child(p.now, p.ike, spi.unwrap()).unwrap();
    let (_, dropped) = pump_mtu(&mut p, SIZE);
    assert_eq!(dropped, 0);
    assert!(p.r.stats().messages_reassembled > before, "CREATE_CHILD_SA was fragmented");
    assert!(child(&mut p.i).is_some(), "and the new Child SA is up");
    assert_eq!(p.r.stats().fragment_bytes_held, 0);
}

#[test]
fn without_fragmentation_on_either_side_ike_auth_is_lost() {
    for (what, fi, fr) in [("no/yes", no as fn(&mut ConnectionConfig), yes as fn(&mut ConnectionConfig)), ("yes/no", yes, no), ("accept/accept", accept, accept)] {
        let mut p = pair(fi, fr);
        p.i.initiate(p.now, "gw", None).unwrap();
        let (_, dropped) = pump_mtu(&mut p, SIZE);
        assert!(dropped > 0, "{what}: the whole IKE_AUTH did not fit");
        assert!(!up(&mut p.i) && !up(&mut p.r), "{what}");
        assert_eq!(p.i.stats().fragments_sent + p.r.stats().fragments_sent, 0);
    }
}

/// Bad fragments of IKE_AUTH: one tampered in flight fails its ICV and is
/// not kept (counted as an integrity failure), a duplicate is dropped and
/// counted; the initiator's retransmission, all fragments again, then
/// completes the message, and nothing stays held.
#[test]
fn tampered_and_duplicate_fragments_are_dropped_and_counted() {
    let mut p = pair(yes, yes);
    p.ike = p.i.initiate(p.now, "gw", None).unwrap();
    // IKE_SA_INIT both ways.
    let t = p.i.poll_transmit().unwrap();
    p.r.handle_datagram(p.now, wall_clock(), t.remote, t.local, &t.data);
    let t = p.r.poll_transmit().unwrap();
    p.i.handle_datagram(p.now, wall_clock(), t.remote, t.local, &t.data);
    // IKE_AUTH: several fragments; the second tampered, the first twice.
    let frags: Vec<Transmit> = std::iter::from_fn(|| p.i.poll_transmit()).collect();
    assert!(frags.len() >= 2, "{} fragments", frags.len());
    for (k, t) in frags.iter().enumerate() {
        let mut data = t.data.clone();
        if k == 1 {
            let last = data.len() - 1;
            data[last] ^= 1;
        }
        p.r.handle_datagram(p.now, wall_clock(), t.remote, t.local, &data);
        if k == 0 {
            p.r.handle_datagram(p.now, wall_clock(), t.remote, t.local, &data);
        }
    }
    let s = p.r.stats();
    assert_eq!((s.integrity_failures, s.fragments_dropped, s.messages_reassembled), (1, 1, 0), "{s:?}");
    assert!(s.fragment_bytes_held > 0, "the good ones wait for the missing one");
    assert!(p.r.poll_transmit().is_none(), "no answer to a message not whole");
    // The retransmission brings every fragment again: whole now.
    p.now += core::time::Duration::from_secs(5);
    p.i.handle_timeout(p.now);
    let (_, dropped) = pump_mtu(&mut p, SIZE);
    assert_eq!(dropped, 0);
    assert!(up(&mut p.r), "established after the retransmission");
    let s = p.r.stats();
    assert_eq!((s.messages_reassembled, s.fragment_bytes_held), (1, 0), "{s:?}");
}
