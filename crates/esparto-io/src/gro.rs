//! GRO on the TUN write path: consecutive TCP segments (and, with USO,
//! same-sized UDP datagrams) of one flow in a batch leave as one
//! virtio-net super-packet, written with one `writev` that gathers the
//! payloads where they lie: no copy, no allocation.
//!
//! The rules are the kernel's (`tcp_gro_receive`, `udp_gro_receive_segment`)
//! and wireguard-go's (`tun/offload_linux.go`), which tun-rs ports:
//!
//! - a packet joins the open *head* of its flow (addresses, ports, and for
//!   TCP the ACK number) only if its IP header agrees with the head's (TOS
//!   or traffic class, TTL or hop limit, DF, flow label), its TCP header
//!   agrees (length, the AE and reserved bits, window, urgent pointer,
//!   options), its payload is no larger than the head's first one, and for
//!   TCP its sequence number continues the head: segmenting the
//!   super-packet again must give back the packets that went in, IPv4 IDs
//!   aside;
//! - a shorter payload, or PSH, ends the head (a GSO packet's segments are
//!   all `gso_size` long but the last);
//! - both checksums are verified before two packets are merged: the merged
//!   packet leaves with `VIRTIO_NET_HDR_F_NEEDS_CSUM` (the checksum is
//!   recomputed over the whole), so merging an unverified packet would
//!   launder a corrupt one. A packet that fails is written alone, as it
//!   came, for the receiving host to drop;
//! - at most [`MAX_SEGMENTS`] segments and 64 KiB per super-packet; IPv4
//!   without options or fragments, IPv6 without extension headers; TCP
//!   flags ACK (and PSH on the last); anything else is written alone.
//!
//! Headers are read through `esparto-wire`'s views, once per packet: what
//! a packet must share with its head is kept from that reading and
//! compared without reading either packet again (but for TCP options).
//!
//! A packet that is not merged but belongs to a flow with an open head
//! (a pure ACK, a FIN, a corrupt segment) closes that head, so no later
//! segment of the flow overtakes it. Packets go out in the order their
//! first segment came; flows may interleave differently than they arrived.
//!
//! tun-rs 2.8's GRO does the same with a copy of every packet into a fresh
//! `Vec` and a second copy into the head's buffer (see [`crate::tun`]).

use std::io::{self, IoSlice};

use esparto_wire::ip::{FlowKey, IpVersion, proto};
use esparto_wire::{ipv4, ipv6, tcp, udp};
use tun_rs::{VIRTIO_NET_HDR_GSO_TCPV4, VIRTIO_NET_HDR_GSO_TCPV6, VIRTIO_NET_HDR_GSO_UDP_L4, VirtioNetHdr};

use crate::batch::TxBatch;
use crate::tun::VNET_HDR_LEN;

/// Most segments in one super-packet (the kernel's `UDP_MAX_SEGMENTS`).
pub const MAX_SEGMENTS: usize = 64;

/// Largest super-packet (IPv4 total length; IPv6 is held to the same).
const MAX_LEN: usize = 65_535;

/// Flows with an open head at once; a packet of a further flow is written
/// alone.
const MAX_HEADS: usize = 16;

const NONE: u32 = u32::MAX;
const VIRTIO_NET_HDR_F_NEEDS_CSUM: u8 = 1;

/// A packet's headers, as far as merging needs them.
#[derive(Debug, Clone, Copy)]
struct Parsed {
    /// The flow: addresses, protocol, ports.
    key: FlowKey,
    /// TCP ACK number (0 for UDP): segments of one super-packet share it.
    ack: u32,
    /// The IP header fields segments of one super-packet share (its
    /// segmentation copies the head's headers into every segment), packed
    /// for one comparison: IPv4 DSCP and ECN, DF, TTL; or IPv6 traffic
    /// class, flow label, hop limit.
    ip_shared: u64,
    /// The same for TCP: the bits between Data Offset and the flags (AE and
    /// reserved), window and urgent pointer (the options are compared
    /// apart, [`headers_agree`]).
    tcp_shared: u64,
    ip_hlen: usize,
    l4_hlen: usize,
    payload: usize,
    seq: u32,
    psh: bool,
    /// TCP with ACK (and maybe PSH) and data, or UDP with a checksum and
    /// data: may be merged.
    mergeable: bool,
}

/// The flow and headers of a TCP or UDP packet over IPv4 (no options, not a
/// fragment) or IPv6 (no extension headers); `None` for anything else.
fn parse(p: &[u8]) -> Option<Parsed> {
    // The flow's ports are filled in from the transport header below.
    let (ip_hlen, ip_shared, mut key) = match IpVersion::of(p).ok()? {
        IpVersion::V4 => {
            let ip = ipv4::Packet::new_checked(p).ok()?;
            // Of the flags and fragment offset, only DF may be set: no
            // fragment, no reserved bit (the kernel's GRO flushes them too).
            if ip.header_len() != ipv4::HEADER_LEN
                || usize::from(ip.total_len()) != p.len()
                || ip.is_fragment()
                || ip.reserved_flag()
            {
                return None;
            }
            let shared = u64::from(ip.dscp_ecn()) << 16 | u64::from(ip.dont_frag()) << 8 | u64::from(ip.ttl());
            let (src, dst) = (u32::from(ip.src_addr()).into(), u32::from(ip.dst_addr()).into());
            let key = FlowKey { v6: false, src, dst, proto: ip.protocol(), src_port: 0, dst_port: 0 };
            (ipv4::HEADER_LEN, shared, key)
        }
        IpVersion::V6 => {
            let ip = ipv6::Packet::new_checked(p).ok()?;
            if ip.total_len() != p.len() {
                return None;
            }
            let shared =
                u64::from(ip.traffic_class()) << 28 | u64::from(ip.flow_label()) << 8 | u64::from(ip.hop_limit());
            let (src, dst) = (ip.src_addr().into(), ip.dst_addr().into());
            let key = FlowKey { v6: true, src, dst, proto: ip.next_header(), src_port: 0, dst_port: 0 };
            (ipv6::HEADER_LEN, shared, key)
        }
    };
    let l4 = &p[ip_hlen..];
    match key.proto {
        proto::TCP => {
            let tcp = tcp::Packet::new_checked(l4).ok()?;
            (key.src_port, key.dst_port) = (tcp.src_port(), tcp.dst_port());
            let l4_hlen = tcp.header_len();
            let flags = tcp.flags();
            let payload = l4.len() - l4_hlen;
            Some(Parsed {
                key,
                ack: tcp.ack_number(),
                ip_shared,
                tcp_shared: u64::from(tcp.reserved_bits()) << 32
                    | u64::from(tcp.window()) << 16
                    | u64::from(tcp.urgent_ptr()),
                ip_hlen,
                l4_hlen,
                payload,
                seq: tcp.seq_number(),
                psh: flags & tcp::flags::PSH != 0,
                mergeable: payload > 0 && flags & !tcp::flags::PSH == tcp::flags::ACK,
            })
        }
        proto::UDP => {
            let udp = udp::Packet::new_checked(l4).ok()?;
            if usize::from(udp.len()) != l4.len() {
                return None;
            }
            (key.src_port, key.dst_port) = (udp.src_port(), udp.dst_port());
            let payload = l4.len() - udp::HEADER_LEN;
            Some(Parsed {
                key,
                ack: 0,
                ip_shared,
                tcp_shared: 0,
                ip_hlen,
                l4_hlen: udp::HEADER_LEN,
                payload,
                seq: 0,
                psh: false,
                // A zero UDP checksum (IPv4: none sent) cannot be verified.
                mergeable: payload > 0 && udp.checksum() != 0,
            })
        }
        _ => None,
    }
}

// Checksums are tun-rs's (AVX2 where the CPU has it; the read path's
// splitting uses the same): `checksum` sums big-endian 16-bit words
// (RFC 1071) onto an initial sum and folds to 16 bits (not complemented).
use tun_rs::checksum;

/// Whether the packet's TCP or UDP checksum is right.
fn l4_csum_ok(p: &[u8], h: &Parsed) -> bool {
    let l4 = &p[h.ip_hlen..];
    // A transport length past 16 bits never reaches here: the packet's IP
    // length field bounds it.
    checksum(l4, u64::from(h.key.pseudo_header(l4.len() as u32))) == 0xffff
}

/// Whether `p` may follow the head `hp` as far as IP and transport headers
/// go (not the sequence or sizes).
fn headers_agree(hp: &[u8], h: &Parsed, p: &[u8], c: &Parsed) -> bool {
    if h.ip_shared != c.ip_shared || h.tcp_shared != c.tcp_shared || h.l4_hlen != c.l4_hlen {
        return false;
    }
    // TCP: the same options, byte for byte (timestamps included). Both
    // segments were parsed ([`parse`]): the views are made unchecked.
    h.key.proto != proto::TCP || tcp_options(hp, h) == tcp_options(p, c)
}

/// The options of a parsed TCP packet.
fn tcp_options<'a>(p: &'a [u8], h: &Parsed) -> &'a [u8] {
    tcp::Packet::new_unchecked(&p[h.ip_hlen..]).options()
}

/// An open head: the first packet of a super-packet in the making.
#[derive(Debug, Clone, Copy)]
struct Head {
    pkt: u32,
    hdr: Parsed,
    /// Payload of the first segment: every segment but the last has it.
    gso_size: usize,
    /// Payload bytes of all segments so far.
    payload: usize,
    segs: usize,
    /// TCP: the sequence number the next segment must have.
    next_seq: u32,
    /// Last packet of the chain.
    last: u32,
    /// No further segment may join.
    closed: bool,
    /// The head's own checksum was verified.
    verified: bool,
    /// The last segment had PSH.
    psh: bool,
}

/// Reusable GRO state of one TUN queue (sized on first use, then no
/// allocation). [`crate::tun::TunQueue::send_batch`] drives it; it is
/// public for the fuzz target.
#[derive(Debug, Default)]
pub struct Gro {
    heads: Vec<Head>,
    /// Next packet of the chain starting at a head, per packet.
    next: Vec<u32>,
    /// Packet was merged into an earlier one (not written by itself).
    merged: Vec<bool>,
    /// Payload offset in the slot of each merged packet.
    payload_at: Vec<u32>,
}

/// Counters of one [`Gro::plan`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// Writes the batch takes (super-packets and single packets).
    pub writes: usize,
    /// Packets that failed a checksum check and were written alone.
    pub bad_csum: usize,
}

impl Gro {
    /// Decide what merges into what, and rewrite the heads' headers (IP
    /// length and checksum, transport length and pseudo-header checksum,
    /// the virtio-net header in front). Every other packet gets an empty
    /// virtio-net header. `udp`: the device accepts USO. A batch whose
    /// headroom cannot hold the virtio-net header, or whose packets do not
    /// all start right after it ([`TxBatch::uniform`]), is left alone (and
    /// [`Gro::write`] refuses it).
    pub fn plan(&mut self, batch: &mut TxBatch, udp: bool) -> Plan {
        let n = batch.len;
        let headroom = batch.headroom;
        self.heads.clear();
        self.next.clear();
        self.next.resize(n, NONE);
        self.merged.clear();
        self.merged.resize(n, false);
        self.payload_at.clear();
        self.payload_at.resize(n, 0);
        let mut plan = Plan::default();
        if headroom < VNET_HDR_LEN || !batch.uniform() {
            plan.writes = n;
            return plan;
        }
        for i in 0..n {
            let slot = batch.slots[i].as_mut();
            slot[headroom - VNET_HDR_LEN..headroom].fill(0);
            let Some(c) = parse(&slot[headroom..]) else {
                continue;
            };
            let candidate = c.mergeable && (c.key.proto == proto::TCP || udp);
            let found = self.heads.iter().position(|h| h.hdr.key == c.key);
            if !candidate {
                if let Some(k) = found {
                    self.heads[k].closed = true;
                }
                continue;
            }
            if let Some(k) = found {
                match self.try_join(batch, k, i, &c) {
                    Join::Joined => continue,
                    Join::Bad => {
                        plan.bad_csum += 1;
                        self.heads[k].closed = true;
                        continue;
                    }
                    Join::No => {
                        let old = self.heads.swap_remove(k);
                        finish(batch, &old);
                    }
                }
            }
            if self.heads.len() < MAX_HEADS {
                self.heads.push(Head {
                    pkt: i as u32,
                    hdr: c,
                    gso_size: c.payload,
                    payload: c.payload,
                    segs: 1,
                    next_seq: c.seq.wrapping_add(c.payload as u32),
                    last: i as u32,
                    // PSH ends a super-packet: nothing may follow it.
                    closed: c.psh,
                    verified: false,
                    psh: c.psh,
                });
            }
        }
        for h in self.heads.drain(..) {
            finish(batch, &h);
        }
        plan.writes = self.merged.iter().filter(|m| !**m).count();
        plan
    }

    fn try_join(&mut self, batch: &TxBatch, k: usize, i: usize, c: &Parsed) -> Join {
        let headroom = batch.headroom;
        let h = &self.heads[k];
        let hp = &batch.slots[h.pkt as usize].as_ref()[headroom..];
        let p = &batch.slots[i].as_ref()[headroom..];
        let fits = !h.closed
            && h.hdr.ack == c.ack
            && c.payload <= h.gso_size
            && h.segs < MAX_SEGMENTS
            && h.hdr.ip_hlen + h.hdr.l4_hlen + h.payload + c.payload <= MAX_LEN
            && (c.key.proto != proto::TCP || c.seq == h.next_seq)
            && headers_agree(hp, &h.hdr, p, c);
        if !fits {
            return Join::No;
        }
        if !h.verified {
            if !l4_csum_ok(hp, &h.hdr) {
                return Join::No;
            }
            self.heads[k].verified = true;
        }
        if !l4_csum_ok(p, c) {
            return Join::Bad;
        }
        let h = &mut self.heads[k];
        self.next[h.last as usize] = i as u32;
        self.merged[i] = true;
        self.payload_at[i] = (headroom + c.ip_hlen + c.l4_hlen) as u32;
        h.last = i as u32;
        h.payload += c.payload;
        h.segs += 1;
        h.next_seq = h.next_seq.wrapping_add(c.payload as u32);
        h.psh = c.psh;
        if c.payload < h.gso_size || c.psh {
            h.closed = true;
        }
        Join::Joined
    }

    /// Write every packet of the planned batch: each head with the payloads
    /// of its chain in one `writev`, the rest one by one. Returns the bytes
    /// written; on errors, the others are still written and the last error
    /// is returned. `failed` grows by the packets of every failed write.
    pub fn write(&self, batch: &TxBatch, dev: &tun_rs::SyncDevice, failed: &mut usize) -> io::Result<usize> {
        if batch.headroom < VNET_HDR_LEN || !batch.uniform() || self.merged.len() < batch.len {
            *failed += batch.len;
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "batch not planned for a virtio-net TUN"));
        }
        let mut total = 0;
        let mut err = None;
        let mut gone = false;
        let mut iov = [IoSlice::new(&[]); MAX_SEGMENTS];
        for i in 0..batch.len {
            if self.merged[i] {
                continue;
            }
            let mut k = 0;
            for (slot, piece) in iov.iter_mut().zip(self.pieces(batch, i)) {
                *slot = IoSlice::new(piece);
                k += 1;
            }
            if gone {
                // The device is gone: the rest is lost unwritten.
                *failed += k;
                continue;
            }
            match dev.send_vectored(&iov[..k]) {
                Ok(b) => total += b,
                Err(e) => {
                    // One piece per packet: the head, then each merged one.
                    *failed += k;
                    gone = e.raw_os_error() == Some(libc::EBADFD);
                    err = Some(e);
                }
            }
        }
        match err {
            Some(e) => Err(e),
            None => Ok(total),
        }
    }

    /// The bytes write `i` hands the kernel (virtio-net header first), or
    /// `None` when packet `i` was merged into an earlier one. Allocates: for
    /// tests and fuzzing.
    pub fn gathered(&self, batch: &TxBatch, i: usize) -> Option<Vec<u8>> {
        if i >= batch.len || batch.headroom < VNET_HDR_LEN || !batch.uniform() || *self.merged.get(i)? {
            return None;
        }
        Some(self.pieces(batch, i).collect::<Vec<_>>().concat())
    }

    /// What write `i` is made of, in order: the virtio-net header and
    /// packet `i`, then the payload of each packet merged into it.
    fn pieces<'a>(&'a self, batch: &'a TxBatch, i: usize) -> impl Iterator<Item = &'a [u8]> + 'a {
        let head = &batch.slots[i].as_ref()[batch.headroom - VNET_HDR_LEN..];
        let link = |j: u32| (j != NONE).then_some(j);
        let chain = std::iter::successors(link(self.next[i]), move |&j| link(self.next[j as usize]))
            .map(|j| &batch.slots[j as usize].as_ref()[self.payload_at[j as usize] as usize..]);
        std::iter::once(head).chain(chain)
    }
}

enum Join {
    Joined,
    /// The packet's checksum is wrong: write it alone.
    Bad,
    /// Not with this head: the packet starts a new one.
    No,
}

/// Rewrite a head's headers for the whole super-packet (nothing to do for a
/// head that stayed alone).
fn finish(batch: &mut TxBatch, h: &Head) {
    if h.segs < 2 {
        return;
    }
    let headroom = batch.headroom;
    let slot = batch.slots[h.pkt as usize].as_mut();
    let (vnet, p) = slot[headroom - VNET_HDR_LEN..].split_at_mut(VNET_HDR_LEN);
    let ip_hlen = h.hdr.ip_hlen;
    // At most MAX_LEN (checked as segments joined): fits the length fields.
    let l4_len = h.hdr.l4_hlen + h.payload;
    // The head was parsed ([`parse`]) and its slot holds it whole: the
    // views are made unchecked.
    if h.hdr.key.v6 {
        ipv6::Packet::new_unchecked(&mut *p).set_payload_len(l4_len as u16);
    } else {
        let mut ip = ipv4::Packet::new_unchecked(&mut *p);
        ip.set_total_len((ip_hlen + l4_len) as u16);
        ip.fill_checksum();
    }
    // CHECKSUM_PARTIAL: the checksum field holds the pseudo-header sum;
    // the kernel (or the NIC) adds the rest and complements.
    let pseudo = h.hdr.key.pseudo_header(l4_len as u32);
    let l4 = &mut p[ip_hlen..];
    let (gso_type, csum_offset) = if h.hdr.key.proto == proto::TCP {
        let mut tcp = tcp::Packet::new_unchecked(l4);
        if h.psh {
            tcp.set_flags(tcp.flags() | tcp::flags::PSH);
        }
        tcp.set_checksum(pseudo);
        let t = if h.hdr.key.v6 { VIRTIO_NET_HDR_GSO_TCPV6 } else { VIRTIO_NET_HDR_GSO_TCPV4 };
        (t, tcp::field::CHECKSUM)
    } else {
        let mut udp = udp::Packet::new_unchecked(l4);
        udp.set_len(l4_len as u16);
        udp.set_checksum(pseudo);
        (VIRTIO_NET_HDR_GSO_UDP_L4, udp::field::CHECKSUM)
    };
    let hdr = VirtioNetHdr {
        flags: VIRTIO_NET_HDR_F_NEEDS_CSUM,
        gso_type,
        hdr_len: (ip_hlen + h.hdr.l4_hlen) as u16,
        gso_size: h.gso_size as u16,
        csum_start: ip_hlen as u16,
        csum_offset: csum_offset as u16,
    };
    // The slice is exactly VNET_HDR_LEN long: encode cannot fail.
    let _ = hdr.encode(vnet);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const HEADROOM: usize = 16;
    const TCP: u8 = proto::TCP;
    const UDP: u8 = proto::UDP;
    const TCP_FLAG_ACK: u8 = tcp::flags::ACK;
    const TCP_FLAG_PSH: u8 = tcp::flags::PSH;
    const A4: [u8; 4] = [10, 1, 0, 10];
    const B4: [u8; 4] = [10, 2, 0, 10];

    /// RFC 1071, sixteen bits at a time: the reference the fast sum is
    /// checked against.
    fn ref_sum(parts: &[&[u8]]) -> u16 {
        let mut acc: u32 = 0;
        for p in parts {
            for w in p.chunks(2) {
                let v = if w.len() == 2 { u16::from_be_bytes([w[0], w[1]]) } else { u16::from(w[0]) << 8 };
                acc += u32::from(v);
                acc = (acc & 0xffff) + (acc >> 16);
            }
        }
        acc as u16
    }

    fn pseudo_bytes(src: &[u8], dst: &[u8], proto: u8, len: usize) -> Vec<u8> {
        let mut v = [src, dst].concat();
        if src.len() == 4 {
            v.extend_from_slice(&[0, proto]);
            v.extend_from_slice(&(len as u16).to_be_bytes());
        } else {
            v.extend_from_slice(&(len as u32).to_be_bytes());
            v.extend_from_slice(&[0, 0, 0, proto]);
        }
        v
    }

    struct Seg<'a> {
        src: &'a [u8],
        dst: &'a [u8],
        proto: u8,
        id: u16,
        seq: u32,
        ack: u32,
        flags: u8,
        opts: &'a [u8],
        payload: Vec<u8>,
    }

    fn seg(proto: u8, seq: u32, payload: usize, fill: u8) -> Seg<'static> {
        Seg {
            src: &A4,
            dst: &B4,
            proto,
            id: 100,
            seq,
            ack: 7,
            flags: TCP_FLAG_ACK,
            opts: &[],
            payload: (0..payload).map(|k| (k as u8).wrapping_mul(31) ^ fill).collect(),
        }
    }

    /// An IP packet with a valid transport checksum.
    fn build(s: &Seg) -> Vec<u8> {
        let mut l4 = Vec::new();
        l4.extend_from_slice(&4000u16.to_be_bytes());
        l4.extend_from_slice(&5001u16.to_be_bytes());
        if s.proto == TCP {
            l4.extend_from_slice(&s.seq.to_be_bytes());
            l4.extend_from_slice(&s.ack.to_be_bytes());
            l4.push((((20 + s.opts.len()) / 4) as u8) << 4);
            l4.push(s.flags);
            l4.extend_from_slice(&[0xff, 0xff, 0, 0, 0, 0]);
            l4.extend_from_slice(s.opts);
        } else {
            l4.extend_from_slice(&((8 + s.payload.len()) as u16).to_be_bytes());
            l4.extend_from_slice(&[0, 0]);
        }
        let csum_at = if s.proto == TCP { 16 } else { 6 };
        l4.extend_from_slice(&s.payload);
        let ph = pseudo_bytes(s.src, s.dst, s.proto, l4.len());
        let c = !ref_sum(&[&ph, &l4]);
        l4[csum_at..csum_at + 2].copy_from_slice(&c.to_be_bytes());
        let mut ip = if s.src.len() == 4 {
            let mut h = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, s.proto, 0, 0];
            h[2..4].copy_from_slice(&((20 + l4.len()) as u16).to_be_bytes());
            h[4..6].copy_from_slice(&s.id.to_be_bytes());
            h.extend_from_slice(s.src);
            h.extend_from_slice(s.dst);
            let c = !ref_sum(&[&h]);
            h[10..12].copy_from_slice(&c.to_be_bytes());
            h
        } else {
            let mut h = vec![0x60, 0, 0, 0, 0, 0, s.proto, 64];
            h[4..6].copy_from_slice(&(l4.len() as u16).to_be_bytes());
            h.extend_from_slice(s.src);
            h.extend_from_slice(s.dst);
            h
        };
        ip.extend_from_slice(&l4);
        ip
    }

    /// Recompute the IPv4 header checksum and the TCP checksum of an IPv4
    /// TCP packet after an edit.
    fn reseal(p: &mut [u8]) {
        p[10..12].fill(0);
        let c = !ref_sum(&[&p[..20]]);
        p[10..12].copy_from_slice(&c.to_be_bytes());
        p[36..38].fill(0);
        let ph = pseudo_bytes(&p[12..16], &p[16..20], TCP, p.len() - 20);
        let c = !ref_sum(&[&ph, &p[20..]]);
        p[36..38].copy_from_slice(&c.to_be_bytes());
    }

    fn batch_of(pkts: &[Vec<u8>]) -> TxBatch {
        let mut b = TxBatch::new(pkts.len().max(1), HEADROOM, 1600);
        for p in pkts {
            b.push(None, p).unwrap();
        }
        b
    }

    /// Plan, then every write as the kernel gets it.
    fn run(pkts: &[Vec<u8>], udp: bool) -> (Plan, Vec<Vec<u8>>) {
        let mut b = batch_of(pkts);
        let mut g = Gro::default();
        let plan = g.plan(&mut b, udp);
        let writes: Vec<Vec<u8>> = (0..b.len()).filter_map(|i| g.gathered(&b, i)).collect();
        assert_eq!(writes.len(), plan.writes);
        (plan, writes)
    }

    fn vnet(w: &[u8]) -> VirtioNetHdr {
        VirtioNetHdr::decode(&w[..VNET_HDR_LEN]).unwrap()
    }

    /// What a device does with `NEEDS_CSUM`: sum from `csum_start` to the
    /// end (the field holding the pseudo-header sum) and store the
    /// complement. The result must be the packet's true checksum.
    fn assert_partial_csum_right(w: &[u8]) {
        let h = vnet(w);
        let p = &w[VNET_HDR_LEN..];
        let start = usize::from(h.csum_start);
        let at = start + usize::from(h.csum_offset);
        let device = !ref_sum(&[&p[start..]]);
        let mut zeroed = p[start..].to_vec();
        zeroed[at - start..at - start + 2].fill(0);
        let v6 = p[0] >> 4 == 6;
        let (src, dst) = if v6 { (&p[8..24], &p[24..40]) } else { (&p[12..16], &p[16..20]) };
        let proto = if v6 { p[6] } else { p[9] };
        let ph = pseudo_bytes(src, dst, proto, zeroed.len());
        assert_eq!(device, !ref_sum(&[&ph, &zeroed]), "partial checksum");
        if !v6 {
            assert_eq!(ref_sum(&[&p[..20]]), 0xffff, "IPv4 header checksum");
        }
    }

    /// Segment a super-packet back (tun-rs's splitter, which the read path
    /// uses) and compare with what went in.
    fn split(w: &[u8]) -> Vec<Vec<u8>> {
        let h = vnet(w);
        let mut input = w[VNET_HDR_LEN..].to_vec();
        let v6 = input[0] >> 4 == 6;
        let mut out = vec![vec![0u8; 1600]; 70];
        let mut sizes = vec![0usize; 70];
        let n = tun_rs::gso_split(&mut input, h, &mut out, &mut sizes, 0, v6).unwrap();
        (0..n).map(|i| out[i][..sizes[i]].to_vec()).collect()
    }

    #[test]
    fn fast_sum_matches_rfc1071() {
        let data: Vec<u8> = (0..1503u32).map(|k| (k * 7 + k / 3) as u8).collect();
        for len in [0, 1, 2, 7, 8, 9, 63, 64, 65, 1500, 1503] {
            assert_eq!(checksum(&data[..len], 0), ref_sum(&[&data[..len]]), "len {len}");
        }
        assert_eq!(checksum(&[0xff; 4096], 0), 0xffff);
    }

    #[test]
    fn tcp4_segments_become_one_super_packet_that_splits_back() {
        let opts = [1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2]; // NOP NOP timestamps
        let mut segs = Vec::new();
        let mut seq = 1000u32;
        for k in 0..9 {
            let len = if k == 8 { 500 } else { 1000 };
            let mut s = seg(TCP, seq, len, k);
            s.id = 100 + u16::from(k);
            s.opts = &opts;
            if k == 8 {
                s.flags |= TCP_FLAG_PSH;
            }
            seq += len as u32;
            segs.push(build(&s));
        }
        let (plan, writes) = run(&segs, true);
        assert_eq!(plan, Plan { writes: 1, bad_csum: 0 });
        let h = vnet(&writes[0]);
        assert_eq!(h.flags, VIRTIO_NET_HDR_F_NEEDS_CSUM);
        assert_eq!(h.gso_type, VIRTIO_NET_HDR_GSO_TCPV4);
        assert_eq!((h.hdr_len, h.gso_size, h.csum_start, h.csum_offset), (52, 1000, 20, 16));
        assert_eq!(writes[0].len(), VNET_HDR_LEN + 52 + 8500);
        assert_partial_csum_right(&writes[0]);
        assert_eq!(split(&writes[0]), segs);
    }

    #[test]
    fn tcp6_segments_merge() {
        let a6 = [0xfd, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10];
        let b6 = [0xfd, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10];
        let segs: Vec<Vec<u8>> = (0..5u8)
            .map(|k| {
                let mut s = seg(TCP, 1 + 1200 * u32::from(k), 1200, k);
                s.src = &a6;
                s.dst = &b6;
                build(&s)
            })
            .collect();
        let (plan, writes) = run(&segs, false);
        assert_eq!(plan.writes, 1);
        let h = vnet(&writes[0]);
        assert_eq!((h.gso_type, h.hdr_len, h.gso_size, h.csum_start), (VIRTIO_NET_HDR_GSO_TCPV6, 60, 1200, 40));
        assert_partial_csum_right(&writes[0]);
        assert_eq!(split(&writes[0]), segs);
    }

    #[test]
    fn udp_datagrams_merge_only_with_uso() {
        let segs: Vec<Vec<u8>> = (0..6u8)
            .map(|k| {
                let mut s = seg(UDP, 0, if k == 5 { 300 } else { 1000 }, k);
                s.id = 100 + u16::from(k);
                build(&s)
            })
            .collect();
        let (plan, writes) = run(&segs, false);
        assert_eq!(plan.writes, 6);
        for (w, s) in writes.iter().zip(&segs) {
            assert_eq!(w[..VNET_HDR_LEN], [0u8; VNET_HDR_LEN]);
            assert_eq!(&w[VNET_HDR_LEN..], &s[..]);
        }
        let (plan, writes) = run(&segs, true);
        assert_eq!(plan.writes, 1);
        let h = vnet(&writes[0]);
        assert_eq!((h.gso_type, h.hdr_len, h.gso_size, h.csum_offset), (VIRTIO_NET_HDR_GSO_UDP_L4, 28, 1000, 6));
        assert_partial_csum_right(&writes[0]);
        assert_eq!(split(&writes[0]), segs);
    }

    #[test]
    fn interleaved_flows_each_merge() {
        let mut segs = Vec::new();
        for k in 0..4u8 {
            segs.push(build(&seg(TCP, 1000 * u32::from(k), 1000, k)));
            let mut s = seg(TCP, 50_000 + 900 * u32::from(k), 900, k);
            s.dst = &[10, 2, 0, 11];
            segs.push(build(&s));
        }
        let (plan, writes) = run(&segs, true);
        assert_eq!(plan.writes, 2);
        assert_eq!(vnet(&writes[0]).gso_size, 1000);
        assert_eq!(vnet(&writes[1]).gso_size, 900);
        for w in &writes {
            assert_partial_csum_right(w);
        }
    }

    #[test]
    fn what_must_not_merge_does_not() {
        // A sequence gap.
        let a = build(&seg(TCP, 0, 1000, 1));
        let gap = build(&seg(TCP, 2000, 1000, 2));
        assert_eq!(run(&[a.clone(), gap], true).0.writes, 2);
        // Another ACK number.
        let mut s = seg(TCP, 1000, 1000, 2);
        s.ack = 8;
        assert_eq!(run(&[a.clone(), build(&s)], true).0.writes, 2);
        // A larger segment after a smaller one; then nothing after a short one.
        let small = build(&seg(TCP, 1000, 500, 2));
        let after = build(&seg(TCP, 1500, 500, 3));
        assert_eq!(run(&[small.clone(), build(&seg(TCP, 1500, 1000, 3))], true).0.writes, 2);
        assert_eq!(run(&[a.clone(), small, after], true).0.writes, 2);
        // Other TCP flags (FIN), another TTL, another TOS.
        let mut s = seg(TCP, 1000, 1000, 2);
        s.flags |= 0x01;
        assert_eq!(run(&[a.clone(), build(&s)], true).0.writes, 2);
        // Another TTL, TOS, window, urgent pointer; the IPv4 reserved flag:
        // each (checksums right) keeps the segment out.
        let b = build(&seg(TCP, 1000, 1000, 2));
        assert_eq!(run(&[a.clone(), b.clone()], true).0.writes, 1);
        // Also the bits between Data Offset and the flags (AE, reserved):
        // segmentation copies the head's into every segment.
        for (at, bits) in [(8, 1), (1, 4), (20 + 14, 1), (20 + 19, 1), (6, 0x80), (20 + 12, 0x01), (20 + 12, 0x04)] {
            let mut p = b.clone();
            p[at] ^= bits;
            reseal(&mut p);
            let (plan, _) = run(&[a.clone(), p], true);
            assert_eq!(plan, Plan { writes: 2, bad_csum: 0 }, "byte {at}");
        }
        // A pure ACK of the flow closes its head: the next segment does not
        // overtake it.
        let ack = build(&seg(TCP, 1000, 0, 0));
        let next = build(&seg(TCP, 1000, 1000, 2));
        let (plan, writes) = run(&[a.clone(), ack.clone(), next.clone()], true);
        assert_eq!(plan.writes, 3);
        assert_eq!(&writes[1][VNET_HDR_LEN..], &ack[..]);
        // Not IP, ICMP, truncated: written alone, untouched.
        let odd = vec![vec![0u8; 1], vec![0x45; 20], a[..30].to_vec(), vec![0x60; 39]];
        let (plan, writes) = run(&odd, true);
        assert_eq!(plan.writes, 4);
        for (w, o) in writes.iter().zip(&odd) {
            assert_eq!(&w[VNET_HDR_LEN..], &o[..]);
        }
    }

    #[test]
    fn a_corrupt_segment_is_written_alone_as_it_came() {
        let a = build(&seg(TCP, 0, 1000, 1));
        let mut bad = build(&seg(TCP, 1000, 1000, 2));
        bad[500] ^= 0x40;
        let c = build(&seg(TCP, 2000, 1000, 3));
        let d = build(&seg(TCP, 3000, 1000, 4));
        let (plan, writes) = run(&[a.clone(), bad.clone(), c, d], true);
        assert_eq!(plan, Plan { writes: 3, bad_csum: 1 });
        assert_eq!(&writes[0][VNET_HDR_LEN..], &a[..]);
        assert_eq!(&writes[1][VNET_HDR_LEN..], &bad[..]);
        assert_eq!(vnet(&writes[2]).gso_type, VIRTIO_NET_HDR_GSO_TCPV4);
        // A corrupt head is not merged into either.
        let mut bad_head = a.clone();
        bad_head[100] ^= 1;
        let (plan, writes) = run(&[bad_head.clone(), build(&seg(TCP, 1000, 1000, 2))], true);
        assert_eq!(plan.writes, 2);
        assert_eq!(&writes[0][VNET_HDR_LEN..], &bad_head[..]);
    }

    #[test]
    fn super_packets_stop_at_64_segments_and_64_kib() {
        let many: Vec<Vec<u8>> = (0..70u32).map(|k| build(&seg(TCP, 100 * k, 100, k as u8))).collect();
        let (plan, writes) = run(&many, true);
        assert_eq!(plan.writes, 2);
        assert_eq!(split(&writes[0]).len(), MAX_SEGMENTS);
        let big: Vec<Vec<u8>> = (0..50u32).map(|k| build(&seg(TCP, 1400 * k, 1400, k as u8))).collect();
        let (plan, writes) = run(&big, true);
        assert_eq!(plan.writes, 2);
        assert!(writes[0].len() - VNET_HDR_LEN <= MAX_LEN);
        assert_eq!(split(&writes[0]).len() + split(&writes[1]).len(), 50);
    }
}
