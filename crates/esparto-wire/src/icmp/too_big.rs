//! Originating "Fragmentation Needed" (ICMPv4) and "Packet Too Big"
//! (ICMPv6) for packets that do not fit the tunnel.
//!
//! Both functions take the offending packet as received (a full IP packet),
//! the MTU to advertise, the source address the gateway answers from, and a
//! caller buffer; they write a complete IP + ICMP packet addressed to the
//! offending packet's source and return its length. No allocation.
//!
//! Quoting: RFC 1812 §4.3.2.3 — the ICMP error "SHOULD contain as much of
//! the original datagram as possible without the length of the ICMP datagram
//! exceeding 576 bytes"; RFC 4443 §2.4 (c) — "as much of the invoking packet
//! as possible without the ICMPv6 packet exceeding the minimum IPv6 MTU". A
//! caller buffer smaller than those limits quotes less, down to what RFC 792
//! requires ("the internet header plus the first 64 bits of the original
//! datagram's data").
//!
//! Suppression: RFC 1122 §3.2.2 / RFC 1812 §4.3.2.7 and RFC 4443 §2.4 (e)
//! list packets that must not provoke an error. Those that can be decided
//! from the packet alone are refused here with [`Error::Unsupported`]: ICMP
//! error messages (and ICMPv6 Redirects), non-initial fragments, and sources
//! that do not name a single host (unspecified, multicast, loopback, IPv4
//! broadcast and Class E). Packet Too Big is expressly allowed for multicast
//! destinations (RFC 4443 §2.4 (e.3)); for IPv4, packets to multicast or
//! limited broadcast get no error. Rate limiting (RFC 4443 §2.4 (f)) is the caller's
//! job: it has the clock.

use core::net::{Ipv4Addr, Ipv6Addr};

use crate::ip::proto;
use crate::{Error, Result, ipv4, ipv6};

use super::{HEADER_LEN, v4, v6};

/// RFC 1812 §4.3.2.3: an ICMPv4 error datagram stays within 576 bytes.
pub const MAX_V4_ERROR_LEN: usize = 576;
/// RFC 4443 §2.4 (c): an ICMPv6 error stays within the minimum MTU, 1280.
pub const MAX_V6_ERROR_LEN: usize = ipv6::MIN_MTU;
/// TTL / Hop Limit of originated errors (the IANA-recommended default, 64).
pub const DEFAULT_HOP_LIMIT: u8 = 64;
/// RFC 791: "Every internet module must be able to forward a datagram of 68
/// octets without further fragmentation"; no smaller MTU is meaningful.
pub const MIN_V4_MTU: u16 = 68;
/// RFC 1812 §4.3.2.5: errors other than Source Quench "SHOULD have their
/// precedence value set to 6 (INTERNETWORK CONTROL)": DSCP CS6.
const DSCP_CS6: u8 = 48;

/// Writes an IPv4 "Destination Unreachable, Fragmentation Needed and DF
/// set" (RFC 792 type 3 code 4) with next-hop MTU `mtu` (RFC 1191 §4) about
/// `offending`, from `src`, into `out`; returns the packet length.
pub fn frag_needed_v4(offending: &[u8], mtu: u16, src: Ipv4Addr, out: &mut [u8]) -> Result<usize> {
    let orig = ipv4::Packet::new_checked(offending)?;
    if orig.version() != 4 {
        return Err(Error::Malformed("ipv4 version != 4"));
    }
    if mtu < MIN_V4_MTU {
        return Err(Error::Malformed("ipv4 mtu < 68"));
    }
    if orig.frag_offset() != 0 {
        return Err(Error::Unsupported(
            "no icmp error about a non-initial fragment",
        ));
    }
    if orig.protocol() == proto::ICMP && orig.payload().first().is_some_and(|&t| v4::is_error(t)) {
        return Err(Error::Unsupported("no icmp error about an icmp error"));
    }
    let to = orig.src_addr();
    // RFC 1812 §4.3.2.7: not to "a zero address, a loopback address, a
    // broadcast address, a multicast address, or a Class E address"
    // (240/4, which contains the limited broadcast address).
    let class_e = to.octets()[0] >= 240;
    if to.is_unspecified() || to.is_multicast() || class_e || to.is_loopback() {
        return Err(Error::Unsupported(
            "no icmp error to a source that is not one host",
        ));
    }
    let dst = orig.dst_addr();
    if dst.is_multicast() || dst.is_broadcast() {
        return Err(Error::Unsupported(
            "no icmp error about a multicast or broadcast packet",
        ));
    }

    let whole = orig.packet();
    let limit = out.len().min(MAX_V4_ERROR_LEN);
    let room = limit.saturating_sub(ipv4::HEADER_LEN + HEADER_LEN);
    // RFC 792: at least the IP header and 64 bits of data (or all of it).
    let needed = whole.len().min(orig.header_len() + 8);
    if room < needed {
        return Err(Error::Truncated);
    }
    let quote = &whole[..whole.len().min(room)];

    let icmp_len = HEADER_LEN + quote.len();
    let ip = ipv4::Repr {
        src_addr: src,
        dst_addr: to,
        protocol: proto::ICMP,
        payload_len: icmp_len,
        ttl: DEFAULT_HOP_LIMIT,
        dscp: DSCP_CS6,
        ecn: 0,
        // RFC 6864 §4.1: in an atomic datagram (DF set, not a fragment) the
        // Identification "MAY be set to any value".
        ident: 0,
        dont_frag: true,
        more_frags: false,
        frag_offset: 0,
    };
    let total = ip.buffer_len();
    let buf = &mut out[..total];
    ip.emit(&mut ipv4::Packet::new_unchecked(&mut *buf))?;
    let icmp = v4::Repr {
        msg_type: v4::msg_type::DEST_UNREACHABLE,
        code: v4::CODE_FRAG_NEEDED,
        // RFC 1191 §4: the high-order 16 bits are unused (zero), the
        // low-order 16 bits hold the Next-Hop MTU.
        rest_of_header: u32::from(mtu),
        data: quote,
    };
    icmp.emit(&mut v4::Packet::new_unchecked(&mut buf[ipv4::HEADER_LEN..]))?;
    Ok(total)
}

/// Writes an ICMPv6 "Packet Too Big" (RFC 4443 §3.2) with `mtu` about
/// `offending`, from `src`, into `out`; returns the packet length.
pub fn packet_too_big_v6(
    offending: &[u8],
    mtu: u32,
    src: Ipv6Addr,
    out: &mut [u8],
) -> Result<usize> {
    let orig = ipv6::Packet::new_checked(offending)?;
    if orig.version() != 6 {
        return Err(Error::Malformed("ipv6 version != 6"));
    }
    if (mtu as usize) < ipv6::MIN_MTU {
        // RFC 8200 §5: every link carries 1280 bytes; RFC 8021 deprecated the
        // atomic fragments a smaller value used to provoke.
        return Err(Error::Malformed("ipv6 mtu < 1280"));
    }
    // A chain we cannot walk still gets its PTB: the size problem is real.
    if let Ok(ul) = orig.upper_layer() {
        if ul.is_non_initial_fragment() {
            return Err(Error::Unsupported(
                "no icmp error about a non-initial fragment",
            ));
        }
        if ul.protocol == proto::ICMPV6 {
            let t = orig.payload().get(ul.offset).copied();
            if t.is_some_and(|t| v6::is_error(t) || t == v6::msg_type::REDIRECT) {
                return Err(Error::Unsupported("no icmp error about an icmp error"));
            }
        }
    }
    let to = orig.src_addr();
    if to.is_unspecified() || to.is_multicast() || to.is_loopback() {
        return Err(Error::Unsupported(
            "no icmp error to a source that is not one host",
        ));
    }

    let whole = orig.packet();
    let limit = out.len().min(MAX_V6_ERROR_LEN);
    let room = limit.saturating_sub(ipv6::HEADER_LEN + HEADER_LEN);
    // Quote at least the offending fixed header, so the sender can match it.
    if room < whole.len().min(ipv6::HEADER_LEN) {
        return Err(Error::Truncated);
    }
    let quote = &whole[..whole.len().min(room)];

    let icmp_len = HEADER_LEN + quote.len();
    let ip = ipv6::Repr {
        src_addr: src,
        dst_addr: to,
        next_header: proto::ICMPV6,
        payload_len: icmp_len,
        hop_limit: DEFAULT_HOP_LIMIT,
        traffic_class: 0,
        flow_label: 0,
    };
    let total = ip.buffer_len();
    let buf = &mut out[..total];
    ip.emit(&mut ipv6::Packet::new_unchecked(&mut *buf))?;
    let icmp = v6::Repr {
        msg_type: v6::msg_type::PACKET_TOO_BIG,
        code: 0,
        rest_of_header: mtu,
        data: quote,
    };
    icmp.emit(
        src,
        to,
        &mut v6::Packet::new_unchecked(&mut buf[ipv6::HEADER_LEN..]),
    )?;
    Ok(total)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::testutil::hex;

    const GW4: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 1);

    /// A 1500-byte IPv4/UDP packet with DF from 10.1.0.2.
    fn big_v4() -> Vec<u8> {
        let mut b = vec![0u8; 1500];
        ipv4::Repr {
            src_addr: Ipv4Addr::new(10, 1, 0, 2),
            dst_addr: Ipv4Addr::new(10, 2, 0, 3),
            protocol: proto::UDP,
            payload_len: 1480,
            ttl: 63,
            dscp: 0,
            ecn: 0,
            ident: 7,
            dont_frag: true,
            more_frags: false,
            frag_offset: 0,
        }
        .emit(&mut ipv4::Packet::new_unchecked(&mut b[..]))
        .unwrap();
        for (i, x) in b[20..].iter_mut().enumerate() {
            *x = i as u8;
        }
        b
    }

    #[test]
    fn frag_needed_quotes_up_to_576() {
        let orig = big_v4();
        let mut out = [0u8; 2000];
        let n = frag_needed_v4(&orig, 1400, GW4, &mut out).unwrap();
        assert_eq!(n, MAX_V4_ERROR_LEN);
        let ip = ipv4::Packet::new_checked(&out[..n]).unwrap();
        let r = ipv4::Repr::parse(&ip).unwrap();
        assert_eq!(r.src_addr, GW4);
        assert_eq!(r.dst_addr, Ipv4Addr::new(10, 1, 0, 2));
        assert_eq!(r.protocol, proto::ICMP);
        assert_eq!(r.dscp, 48);
        let icmp = v4::Packet::new_checked(ip.payload()).unwrap();
        assert!(icmp.verify_checksum());
        assert_eq!((icmp.msg_type(), icmp.code()), (3, 4));
        assert_eq!(icmp.next_hop_mtu(), 1400);
        assert_eq!(icmp.rest_of_header() >> 16, 0);
        assert_eq!(icmp.data(), &orig[..576 - 28]);
    }

    #[test]
    fn frag_needed_small_packet_quoted_whole() {
        let orig = hex(include_str!("../../testdata/ipv4_tcp_syn_options.hex"));
        let mut out = [0u8; 600];
        let n = frag_needed_v4(&orig, 576, GW4, &mut out).unwrap();
        assert_eq!(n, 28 + orig.len());
        assert_eq!(&out[28..n], &orig[..]);
    }

    #[test]
    fn frag_needed_small_buffer() {
        let orig = big_v4();
        let mut out = [0u8; 56]; // 20 + 8 + 20 + 8: the RFC 792 minimum
        assert_eq!(frag_needed_v4(&orig, 1400, GW4, &mut out).unwrap(), 56);
        let mut out = [0u8; 55];
        assert_eq!(
            frag_needed_v4(&orig, 1400, GW4, &mut out),
            Err(Error::Truncated)
        );
    }

    #[test]
    fn frag_needed_suppressed() {
        let mut out = [0u8; 600];
        let mut orig = big_v4();
        assert_eq!(
            frag_needed_v4(&orig, 67, GW4, &mut out),
            Err(Error::Malformed("ipv4 mtu < 68"))
        );
        // ICMP error inside.
        let mut p = ipv4::Packet::new_unchecked(&mut orig[..]);
        p.set_protocol(proto::ICMP);
        p.payload_mut()[0] = v4::msg_type::TIME_EXCEEDED;
        assert!(matches!(
            frag_needed_v4(&orig, 1400, GW4, &mut out),
            Err(Error::Unsupported(_))
        ));
        // An echo request is fine.
        ipv4::Packet::new_unchecked(&mut orig[..]).payload_mut()[0] = v4::msg_type::ECHO_REQUEST;
        assert!(frag_needed_v4(&orig, 1400, GW4, &mut out).is_ok());
        // Non-initial fragment.
        let mut orig = big_v4();
        ipv4::Packet::new_unchecked(&mut orig[..]).set_flags_offset(false, true, 1480);
        assert!(matches!(
            frag_needed_v4(&orig, 1400, GW4, &mut out),
            Err(Error::Unsupported(_))
        ));
        // Broadcast source, multicast destination.
        let mut orig = big_v4();
        ipv4::Packet::new_unchecked(&mut orig[..]).set_src_addr(Ipv4Addr::BROADCAST);
        assert!(matches!(
            frag_needed_v4(&orig, 1400, GW4, &mut out),
            Err(Error::Unsupported(_))
        ));
        let mut orig = big_v4();
        ipv4::Packet::new_unchecked(&mut orig[..]).set_src_addr(Ipv4Addr::new(240, 0, 0, 1));
        assert!(matches!(
            frag_needed_v4(&orig, 1400, GW4, &mut out),
            Err(Error::Unsupported(_))
        ));
        let mut orig = big_v4();
        ipv4::Packet::new_unchecked(&mut orig[..]).set_dst_addr(Ipv4Addr::new(239, 0, 0, 1));
        assert!(matches!(
            frag_needed_v4(&orig, 1400, GW4, &mut out),
            Err(Error::Unsupported(_))
        ));
        // Garbage.
        assert_eq!(
            frag_needed_v4(&[0x45, 0], 1400, GW4, &mut out),
            Err(Error::Truncated)
        );
        let mut v6ish = big_v4();
        v6ish[0] = 0x65;
        assert!(frag_needed_v4(&v6ish, 1400, GW4, &mut out).is_err());
    }

    fn gw6() -> Ipv6Addr {
        "2001:db8:1::1".parse().unwrap()
    }

    fn big_v6(next: u8, first_payload_byte: u8) -> Vec<u8> {
        let mut b = vec![0u8; 1500];
        ipv6::Repr {
            src_addr: "2001:db8:1::10".parse().unwrap(),
            dst_addr: "ff0e::1".parse().unwrap(),
            next_header: next,
            payload_len: 1460,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        }
        .emit(&mut ipv6::Packet::new_unchecked(&mut b[..]))
        .unwrap();
        b[40] = first_payload_byte;
        b
    }

    #[test]
    fn packet_too_big_quotes_up_to_1280() {
        // Multicast destination: PTB is still allowed (RFC 4443 §2.4 (e.3)).
        let orig = big_v6(proto::UDP, 0);
        let mut out = [0u8; 1500];
        let n = packet_too_big_v6(&orig, 1400, gw6(), &mut out).unwrap();
        assert_eq!(n, 1280);
        let ip = ipv6::Packet::new_checked(&out[..n]).unwrap();
        let r = ipv6::Repr::parse(&ip).unwrap();
        assert_eq!(r.dst_addr, "2001:db8:1::10".parse::<Ipv6Addr>().unwrap());
        assert_eq!(r.next_header, proto::ICMPV6);
        let icmp = v6::Packet::new_checked(ip.payload()).unwrap();
        assert!(icmp.verify_checksum(gw6(), r.dst_addr));
        assert_eq!((icmp.msg_type(), icmp.code(), icmp.mtu()), (2, 0, 1400));
        assert_eq!(icmp.data(), &orig[..1280 - 48]);
    }

    #[test]
    fn packet_too_big_captured_fragment() {
        let orig = hex(include_str!("../../testdata/ipv6_hbh_frag_udp.hex"));
        let mut out = [0u8; 1280];
        let n = packet_too_big_v6(&orig, 1280, gw6(), &mut out).unwrap();
        assert_eq!(n, 48 + orig.len());
        assert_eq!(&out[48..n], &orig[..]);
    }

    #[test]
    fn packet_too_big_suppressed() {
        let mut out = [0u8; 1280];
        let orig = big_v6(proto::UDP, 0);
        assert_eq!(
            packet_too_big_v6(&orig, 1279, gw6(), &mut out),
            Err(Error::Malformed("ipv6 mtu < 1280"))
        );
        let err = big_v6(proto::ICMPV6, v6::msg_type::DEST_UNREACHABLE);
        assert!(matches!(
            packet_too_big_v6(&err, 1400, gw6(), &mut out),
            Err(Error::Unsupported(_))
        ));
        let redirect = big_v6(proto::ICMPV6, v6::msg_type::REDIRECT);
        assert!(matches!(
            packet_too_big_v6(&redirect, 1400, gw6(), &mut out),
            Err(Error::Unsupported(_))
        ));
        let echo = big_v6(proto::ICMPV6, v6::msg_type::ECHO_REQUEST);
        assert!(packet_too_big_v6(&echo, 1400, gw6(), &mut out).is_ok());
        let mut unspec = big_v6(proto::UDP, 0);
        ipv6::Packet::new_unchecked(&mut unspec[..]).set_src_addr(Ipv6Addr::UNSPECIFIED);
        assert!(matches!(
            packet_too_big_v6(&unspec, 1400, gw6(), &mut out),
            Err(Error::Unsupported(_))
        ));
        // Non-initial fragment.
        let mut frag = big_v6(proto::IPV6_FRAG, proto::UDP);
        frag[42..44].copy_from_slice(&((185u16 << 3) | 1).to_be_bytes());
        assert!(matches!(
            packet_too_big_v6(&frag, 1400, gw6(), &mut out),
            Err(Error::Unsupported(_))
        ));
        assert_eq!(
            packet_too_big_v6(&orig, 1400, gw6(), &mut out[..87]),
            Err(Error::Truncated)
        );
        assert_eq!(
            packet_too_big_v6(&orig, 1400, gw6(), &mut out[..88]),
            Ok(88)
        );
    }
}
