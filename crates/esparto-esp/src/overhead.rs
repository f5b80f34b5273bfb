//! The packet-overhead model: how many bytes an inner packet takes on the
//! wire once ESP has wrapped it.
//!
//! Capacity planning (how many calls, how much bandwidth) needs the exact
//! outer size of every packet, padding included: a G.729 voice packet of 70
//! bytes becomes 132 to 136 bytes, nearly twice its size, and a planner that
//! guessed a flat "50 bytes of overhead" would be wrong by a tenth. The
//! numbers come from the same constants and the same padding rule as
//! [`OutboundSa::encapsulate`](crate::OutboundSa::encapsulate), and a test
//! checks the model against [`Worker::encapsulate`](crate::Worker::encapsulate)
//! for every suite and a range of sizes.
//!
//! ```text
//!  tunnel mode:     [outer IP][UDP][SPI|Seq][IV][ inner IP packet ][pad|pl|nh][ICV]
//!  transport mode:  [   IP   ][UDP][SPI|Seq][IV][ inner payload   ][pad|pl|nh][ICV]
//!                                               '------ a multiple of the block ----'
//! ```
//!
//! - **Padding** (RFC 4303 §2.4): the inner packet plus the two trailer
//!   bytes are padded to the cipher's block (16 for AES-CBC, RFC 3602 §2.4)
//!   or to 4 bytes for the AEADs (RFC 4106 §3, RFC 7634 §3), with the least
//!   padding that does it (no TFC padding, RFC 4303 §2.7).
//! - **ESN** (RFC 4303 §2.2.1) changes nothing on the wire: the high 32 bits
//!   of the sequence number are authenticated but never sent.
//! - **ESP-in-UDP** (RFC 3948 §2.1) adds an 8-byte UDP header; the outer IP
//!   header is 20 bytes (IPv4, no options) or 40 (IPv6, no extension
//!   headers), as the kernel's UDP socket sends them.
//! - **IPComp** (RFC 3173) is not modelled: the data plane does not
//!   compress.
//!
//! Esparto's data plane always sends tunnel mode in ESP-in-UDP
//! ([`Framing::data_plane`]); the model also describes transport mode and
//! ESP straight over IP, so that figures from other gateways (which publish
//! them that way) can be reproduced. [`Framing::data_plane_gap`] says when a
//! framing is one the data plane does not send.

use std::net::SocketAddr;

use esparto_crypto::EspSuite;
use esparto_wire::esp as wesp;
use esparto_wire::{ipv4, ipv6, udp};

use crate::selector::Family;

/// IPsec mode (RFC 4301 §4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// The whole inner packet is protected behind a new IP header.
    Tunnel,
    /// The inner packet's own IP header stays in front; its payload is
    /// protected.
    Transport,
}

/// How an SA frames its packets: everything the outer size depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Framing {
    /// Encryption and integrity algorithms.
    pub suite: EspSuite,
    /// Extended sequence numbers (no effect on the size, see the module essay).
    pub esn: bool,
    /// Tunnel or transport mode.
    pub mode: Mode,
    /// ESP-in-UDP (RFC 3948) rather than ESP as IP protocol 50.
    pub udp_encap: bool,
    /// The family of the IP header on the wire (in transport mode, the
    /// inner packet's own).
    pub outer: Family,
}

/// An outer packet's size, part by part.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WireSize {
    /// The inner IP packet as handed to the gateway.
    pub inner: usize,
    /// The IP header on the wire (tunnel mode: the new outer header;
    /// transport mode: the inner packet's own).
    pub ip_header: usize,
    /// UDP header of ESP-in-UDP (0 without).
    pub udp_header: usize,
    /// SPI and sequence number.
    pub esp_header: usize,
    /// The explicit IV.
    pub iv: usize,
    /// What ESP protects: the inner packet (tunnel) or its payload (transport).
    pub protected: usize,
    /// Padding to the cipher's block.
    pub padding: usize,
    /// Pad Length and Next Header.
    pub trailer: usize,
    /// Integrity check value.
    pub icv: usize,
}

impl WireSize {
    /// The ESP packet: SPI through ICV (the UDP payload of ESP-in-UDP).
    pub fn esp_len(&self) -> usize {
        self.esp_header + self.iv + self.protected + self.padding + self.trailer + self.icv
    }

    /// The whole outer IP packet.
    pub fn total(&self) -> usize {
        self.ip_header + self.udp_header + self.esp_len()
    }

    /// Bytes the outer packet has beyond the inner one.
    pub fn overhead(&self) -> usize {
        self.total().saturating_sub(self.inner)
    }
}

/// The bytes of an IP header without options or extension headers.
pub fn ip_header_len(family: Family) -> usize {
    match family {
        Family::V4 => ipv4::HEADER_LEN,
        Family::V6 => ipv6::HEADER_LEN,
    }
}

impl Framing {
    /// What Esparto's data plane sends for an SA of `suite` to `peer`: tunnel
    /// mode, ESP-in-UDP, an outer header of the peer address's family.
    pub fn data_plane(suite: EspSuite, peer: &SocketAddr) -> Self {
        let outer = if peer.is_ipv4() { Family::V4 } else { Family::V6 };
        Self { suite, esn: false, mode: Mode::Tunnel, udp_encap: true, outer }
    }

    /// `None` if the data plane sends packets framed this way; else what it
    /// does differently. The model describes these framings all the same.
    pub fn data_plane_gap(&self) -> Option<&'static str> {
        match (self.mode, self.udp_encap) {
            (Mode::Tunnel, true) => None,
            (Mode::Tunnel, false) => Some("Esparto always sends ESP in UDP (RFC 3948), never as IP protocol 50"),
            (Mode::Transport, _) => Some("Esparto's data plane runs tunnel mode only"),
        }
    }

    /// Alignment of the encrypted part (RFC 4303 §2.4: at least 4 bytes).
    fn align(&self) -> usize {
        self.suite.block_size().max(4)
    }

    /// The outer packet of an `inner`-byte IP packet, part by part. In
    /// transport mode an inner packet shorter than its IP header is taken
    /// as the header alone.
    pub fn size(&self, inner: usize) -> WireSize {
        let ip_header = ip_header_len(self.outer);
        let protected = match self.mode {
            Mode::Tunnel => inner,
            Mode::Transport => inner.saturating_sub(ip_header),
        };
        WireSize {
            inner,
            ip_header,
            udp_header: if self.udp_encap { udp::HEADER_LEN } else { 0 },
            esp_header: wesp::HEADER_LEN,
            iv: self.suite.iv_len(),
            protected,
            padding: wesp::padding_for(protected, self.align()),
            trailer: wesp::TRAILER_LEN,
            icv: self.suite.icv_len(),
        }
    }

    /// The outer IP packet's length for an `inner`-byte IP packet.
    pub fn outer_len(&self, inner: usize) -> usize {
        self.size(inner).total()
    }

    /// The largest inner packet whose outer packet fits `path_mtu`.
    pub fn max_inner(&self, path_mtu: usize) -> usize {
        let s = self.size(0);
        let fixed = s.ip_header + s.udp_header + s.esp_header + s.iv + s.icv;
        let align = self.align();
        // The encrypted part is a multiple of the alignment and holds the
        // protected bytes plus at least the two trailer bytes.
        let protected = (path_mtu.saturating_sub(fixed) / align * align).saturating_sub(wesp::TRAILER_LEN);
        match self.mode {
            Mode::Tunnel => protected,
            Mode::Transport => protected + s.ip_header,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::net::{Ipv4Addr, Ipv6Addr};
    use std::time::Instant;

    use esparto_crypto::Integ;

    use super::*;
    use crate::counters::DropReason;
    use crate::sa::{HEADROOM, OutboundSa, SaConfig, TAILROOM, outer_overhead};
    use crate::spd::{Action, Policy};
    use crate::testutil::{config, udp4, udp6};
    use crate::worker::{Command, Worker};

    /// A worker that sends everything between the test subnets on one SA.
    fn sender(cfg: &SaConfig, now: Instant) -> Worker {
        let mut w = Worker::new(0);
        for (id, (local, remote)) in
            [("10.1.0.0/16", "10.2.0.0/16"), ("fd00:1::/32", "fd00:2::/32")].into_iter().enumerate()
        {
            let p = Policy {
                local: local.parse().unwrap(),
                remote: remote.parse().unwrap(),
                action: Action::Protect(1),
                priority: 100,
            };
            w.apply(Command::AddPolicy(id as u32, Box::new(p)));
        }
        w.apply(Command::AddGroup { id: 1, per_cpu: true });
        w.apply(Command::SetSub(1, Box::new(OutboundSa::owned(cfg, now).unwrap())));
        w
    }

    /// The outer datagram the kernel would send for `esp` (what
    /// [`OutboundSa`] made), built with the wire crate's emitters and
    /// parsed back: its IP total length.
    fn outer_datagram_len(outer: Family, esp: &[u8]) -> usize {
        let udp = udp::Repr { src_port: 4500, dst_port: 4500, payload_len: esp.len() };
        let mut dgram = vec![0u8; udp.buffer_len()];
        udp.emit(&mut udp::Packet::new_unchecked(&mut dgram[..])).unwrap();
        dgram[udp::HEADER_LEN..].copy_from_slice(esp);
        match outer {
            Family::V4 => {
                let ip = ipv4::Repr {
                    src_addr: Ipv4Addr::new(192, 0, 2, 1),
                    dst_addr: Ipv4Addr::new(192, 0, 2, 2),
                    protocol: 17,
                    payload_len: dgram.len(),
                    ttl: 64,
                    dscp: 0,
                    ecn: 0,
                    ident: 0,
                    dont_frag: true,
                    more_frags: false,
                    frag_offset: 0,
                };
                let mut p = vec![0u8; ip.buffer_len()];
                ip.emit(&mut ipv4::Packet::new_unchecked(&mut p[..])).unwrap();
                p[ipv4::HEADER_LEN..].copy_from_slice(&dgram);
                usize::from(ipv4::Packet::new_checked(&p[..]).unwrap().total_len())
            }
            Family::V6 => {
                let ip = ipv6::Repr {
                    src_addr: Ipv6Addr::LOCALHOST,
                    dst_addr: Ipv6Addr::LOCALHOST,
                    next_header: 17,
                    payload_len: dgram.len(),
                    hop_limit: 64,
                    traffic_class: 0,
                    flow_label: 0,
                };
                let mut p = vec![0u8; ip.buffer_len()];
                ip.emit(&mut ipv6::Packet::new_unchecked(&mut p[..])).unwrap();
                p[ipv6::HEADER_LEN..].copy_from_slice(&dgram);
                ipv6::HEADER_LEN + usize::from(ipv6::Packet::new_checked(&p[..]).unwrap().payload_len())
            }
        }
    }

    /// Inner sizes: every size across the smallest packets and a few
    /// alignment periods, then a stride up to a 1500-byte path's limit.
    fn inner_sizes() -> impl Iterator<Item = usize> {
        (48..=200).chain((201..=1400).step_by(37)).chain([1418, 1419, 1420])
    }

    #[test]
    fn model_matches_the_data_plane_for_every_suite() {
        let now = Instant::now();
        let mut checked = 0;
        for suite in EspSuite::ALL {
            for esn in [false, true] {
                for outer_v6 in [false, true] {
                    let cfg = config(suite, 0x1000_0001, esn, outer_v6);
                    let mut w = sender(&cfg, now);
                    let framing = Framing { esn, ..Framing::data_plane(suite, &cfg.peer) };
                    assert_eq!(framing.data_plane_gap(), None);
                    let max = framing.max_inner(usize::from(cfg.path_mtu));
                    for (n, inner_v6) in inner_sizes().flat_map(|n| [(n, false), (n, true)]) {
                        if n > max {
                            continue;
                        }
                        let inner = if inner_v6 { udp6(n - 48) } else { udp4(n - 28) };
                        let mut buf = vec![0u8; HEADROOM + n + TAILROOM];
                        buf[HEADROOM..HEADROOM + n].copy_from_slice(&inner);
                        let e = w.encapsulate(now, &mut buf, HEADROOM..HEADROOM + n).unwrap();
                        let model = framing.size(n);
                        let ctx = format!("{suite} esn {esn} outer v6 {outer_v6} inner v6 {inner_v6} {n} B");
                        assert_eq!(model.esp_len(), e.esp.len(), "ESP packet, {ctx}");
                        assert_eq!(
                            model.total(),
                            outer_datagram_len(framing.outer, &buf[e.esp.clone()]),
                            "outer packet, {ctx}"
                        );
                        assert_eq!(model.total(), framing.outer_len(n));
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 11 * 4 * 300, "{checked} packets checked");
    }

    #[test]
    fn max_inner_is_the_data_planes_limit() {
        let now = Instant::now();
        for suite in EspSuite::ALL {
            for outer_v6 in [false, true] {
                for mtu in [1280u16, 1400, 1500, 9000] {
                    let mut cfg = config(suite, 0x1000_0001, false, outer_v6);
                    cfg.path_mtu = mtu;
                    let framing = Framing::data_plane(suite, &cfg.peer);
                    let max = framing.max_inner(usize::from(mtu));
                    assert!(framing.outer_len(max) <= usize::from(mtu), "{suite} {mtu}");
                    assert!(framing.outer_len(max + 1) > usize::from(mtu), "{suite} {mtu}: {max} is not the largest");
                    // The SA sends the largest packet within the path MTU and
                    // refuses one byte more, naming the limit for the ICMP error.
                    let mut sa = OutboundSa::owned(&cfg, now).unwrap();
                    let mut send = |n: usize| {
                        let mut buf = vec![0u8; HEADROOM + n + TAILROOM];
                        buf[HEADROOM..HEADROOM + n].copy_from_slice(&udp4(n - 28));
                        sa.encapsulate(now, &mut buf, HEADROOM..HEADROOM + n, 4, &mut None).map(|esp| esp.len())
                    };
                    let esp = send(max).unwrap();
                    assert!(esp + outer_overhead(&cfg.peer) <= usize::from(mtu), "{suite} {mtu}");
                    let refused = send(max + 1).unwrap_err();
                    assert_eq!((refused.reason, usize::from(refused.mtu)), (DropReason::TooBig, max), "{suite} {mtu}");
                }
            }
        }
    }

    /// The LANCOM techpaper "Performance-Analyse der LANCOM Router" (LCOS
    /// 6.10), Table 1: AES-128-CBC with a 96-bit HMAC, tunnel mode, outer
    /// IPv4, no UDP encapsulation. IP packet → IPsec packet, bytes.
    #[test]
    fn lancom_table_1() {
        let framing = Framing {
            suite: EspSuite::AesCbc { key_bits: 128, integ: Integ::HmacSha1_96 },
            esn: false,
            mode: Mode::Tunnel,
            udp_encap: false,
            outer: Family::V4,
        };
        assert!(framing.data_plane_gap().is_some());
        for (codec, ip, ipsec) in
            [("G.729 30 ms", 70, 136), ("G.726 30 ms", 160, 232), ("G.711 30 ms", 280, 344), ("G.711 20 ms", 200, 264)]
        {
            assert_eq!(framing.outer_len(ip), ipsec, "{codec}");
        }
        // 70 + 2 trailer bytes padded to 80: 8 bytes of padding.
        let s = framing.size(70);
        assert_eq!(
            (s.ip_header, s.udp_header, s.esp_header, s.iv, s.padding, s.trailer, s.icv),
            (20, 0, 8, 16, 8, 2, 12)
        );
        assert_eq!(s.overhead(), 66);
    }

    #[test]
    fn esn_udp_family_and_mode() {
        let gcm = Framing::data_plane(EspSuite::Aes256Gcm16, &"192.0.2.2:4500".parse().unwrap());
        // 20 IP + 8 UDP + 8 ESP + 8 IV + 70 + 0 pad + 2 + 16 ICV.
        assert_eq!(gcm.outer_len(70), 132);
        assert_eq!(Framing { esn: true, ..gcm }.outer_len(70), 132);
        assert_eq!(Framing { udp_encap: false, ..gcm }.outer_len(70), 124);
        assert_eq!(Framing { outer: Family::V6, ..gcm }.outer_len(70), 152);
        // Transport: the 20-byte header stays, 50 bytes are protected (+2 → 52).
        let t = Framing { mode: Mode::Transport, ..gcm };
        assert_eq!(t.outer_len(70), 20 + 8 + 8 + 8 + 52 + 16);
        assert!(t.data_plane_gap().is_some());
        assert!(t.outer_len(t.max_inner(1500)) <= 1500 && t.outer_len(t.max_inner(1500) + 1) > 1500);
        // Padding never reaches the alignment.
        for n in 0..64 {
            let s = gcm.size(n);
            assert!(s.padding < 4 && (s.protected + s.padding + s.trailer) % 4 == 0, "{n}");
        }
    }
}
