//! Helpers over both IP versions: the version nibble, IANA protocol numbers,
//! and the [`FiveTuple`] the SPD looks packets up by.
//!
//! RFC 4301 §4.4.1.1 defines the selectors an IPsec policy matches on: local
//! and remote addresses, the "Next Layer Protocol" and, for protocols that
//! have them, local and remote ports. The data plane extracts these from
//! every inner packet twice — outbound to find the policy, inbound to check
//! that a decrypted packet matches the SA it came on (RFC 4301 §5.2, step
//! 4) — so [`FiveTuple::extract`] is a straight-line read of fixed offsets
//! behind one length check per header, with no allocation.
//!
//! Port semantics follow RFC 4301:
//! - TCP, UDP and SCTP: the source and destination ports.
//! - ICMP and ICMPv6 (§4.4.1.1): "ICMP message type (8 bits) and code
//!   (8 bits)" take the place of the ports — the type as source port, the
//!   code as destination port.
//! - Every other protocol, a non-initial fragment (whose ports are OPAQUE,
//!   §7), and an IPv6 packet with No Next Header: both ports 0.
//!
//! The protocol of an IPv6 packet is the one found after the extension
//! headers ([`crate::ipv6::ext::walk`]), not the fixed header's Next Header.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::bytes::u16_at;
use crate::{Error, Result, checksum, ipv4, ipv6};

/// IANA "Assigned Internet Protocol Numbers" used across the crate.
pub mod proto {
    /// IPv6 Hop-by-Hop Options.
    pub const HOPOPT: u8 = 0;
    /// ICMP for IPv4.
    pub const ICMP: u8 = 1;
    /// IPv4 encapsulation (IP-in-IP).
    pub const IPV4: u8 = 4;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// IPv6 encapsulation.
    pub const IPV6: u8 = 41;
    /// IPv6 Routing header.
    pub const IPV6_ROUTE: u8 = 43;
    /// IPv6 Fragment header.
    pub const IPV6_FRAG: u8 = 44;
    /// Encapsulating Security Payload.
    pub const ESP: u8 = 50;
    /// Authentication Header.
    pub const AH: u8 = 51;
    /// ICMP for IPv6.
    pub const ICMPV6: u8 = 58;
    /// IPv6 No Next Header.
    pub const IPV6_NONXT: u8 = 59;
    /// IPv6 Destination Options.
    pub const IPV6_OPTS: u8 = 60;
    /// IP Payload Compression.
    pub const IPCOMP: u8 = 108;
    /// SCTP.
    pub const SCTP: u8 = 132;
    /// IPv6 Mobility Header.
    pub const MH: u8 = 135;
}

/// IP version, from the first nibble of a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpVersion {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

impl IpVersion {
    /// The version of `packet` from its first nibble (empty: `Truncated`,
    /// neither 4 nor 6: `Malformed`).
    #[inline]
    pub fn of(packet: &[u8]) -> Result<IpVersion> {
        match packet.first().map(|b| b >> 4) {
            Some(4) => Ok(IpVersion::V4),
            Some(6) => Ok(IpVersion::V6),
            Some(_) => Err(Error::Malformed("ip version")),
            None => Err(Error::Truncated),
        }
    }
}

/// The length of the IP packet at the start of `packet`, by its own header
/// (IPv4 Total Length; IPv6 fixed header plus Payload Length), after the
/// checks of [`ipv4::Packet::new_checked`] / [`ipv6::Packet::new_checked`]:
/// whatever follows it in `packet` is not part of it (the TFC padding of
/// an ESP payload, RFC 4303 §2.7).
#[inline]
pub fn packet_len(packet: &[u8]) -> Result<usize> {
    match IpVersion::of(packet)? {
        IpVersion::V4 => ipv4::Packet::new_checked(packet).map(|p| usize::from(p.total_len())),
        IpVersion::V6 => ipv6::Packet::new_checked(packet).map(|p| p.total_len()),
    }
}

/// The RFC 4301 selector fields of one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FiveTuple {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Upper-layer protocol (after IPv6 extension headers).
    pub proto: u8,
    /// Source port; ICMP type; 0 when not applicable.
    pub src_port: u16,
    /// Destination port; ICMP code; 0 when not applicable.
    pub dst_port: u16,
}

impl FiveTuple {
    /// Extracts the selector fields from an IPv4 or IPv6 packet.
    ///
    /// Errors: bad IP lengths as in [`ipv4::Packet::new_checked`] /
    /// [`ipv6::Packet::new_checked`], extension-header walk errors, and a
    /// port-bearing upper-layer header too short for its ports
    /// (`Truncated`).
    #[inline]
    pub fn extract(packet: &[u8]) -> Result<FiveTuple> {
        match IpVersion::of(packet)? {
            IpVersion::V4 => Self::extract_v4(packet),
            IpVersion::V6 => Self::extract_v6(packet),
        }
    }

    /// [`FiveTuple::extract`] for a packet known to be IPv4.
    #[inline]
    pub fn extract_v4(packet: &[u8]) -> Result<FiveTuple> {
        FlowKey::extract_v4(packet).map(FiveTuple::from)
    }

    /// [`FiveTuple::extract`] for a packet known to be IPv6.
    #[inline]
    pub fn extract_v6(packet: &[u8]) -> Result<FiveTuple> {
        FlowKey::extract_v6(packet).map(FiveTuple::from)
    }
}

impl From<FlowKey> for FiveTuple {
    #[inline]
    fn from(k: FlowKey) -> Self {
        let addr = |bits: u128| {
            if k.v6 {
                IpAddr::V6(Ipv6Addr::from(bits))
            } else {
                // Built from an IPv4 address: fits in 32 bits.
                IpAddr::V4(Ipv4Addr::from(bits as u32))
            }
        };
        FiveTuple { src: addr(k.src), dst: addr(k.dst), proto: k.proto, src_port: k.src_port, dst_port: k.dst_port }
    }
}

/// The selector fields of one packet in integer form, as a policy lookup
/// compares them: addresses as `u128` (IPv4 in the low 32 bits), so the
/// data plane's per-packet lookup never builds an [`IpAddr`].
/// [`FiveTuple`] is the same parse with addresses as `IpAddr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowKey {
    /// Whether the packet is IPv6 (else IPv4).
    pub v6: bool,
    /// Source address bits.
    pub src: u128,
    /// Destination address bits.
    pub dst: u128,
    /// Upper-layer protocol (after IPv6 extension headers).
    pub proto: u8,
    /// Source port; ICMP type; 0 when not applicable.
    pub src_port: u16,
    /// Destination port; ICMP code; 0 when not applicable.
    pub dst_port: u16,
}

impl FlowKey {
    /// Extracts the selector fields from an IPv4 or IPv6 packet, with the
    /// same checks and errors as [`FiveTuple::extract`].
    #[inline]
    pub fn extract(packet: &[u8]) -> Result<FlowKey> {
        match IpVersion::of(packet)? {
            IpVersion::V4 => Self::extract_v4(packet),
            IpVersion::V6 => Self::extract_v6(packet),
        }
    }

    /// The sum of the pseudo header that this packet's TCP or UDP checksum
    /// covers (RFC 768, RFC 9293 §3.1, RFC 8200 §8.1), for an upper-layer
    /// length of `len` bytes: folded, not complemented (see [`checksum`]).
    /// `len` is cut to 16 bits for IPv4, whose pseudo header has no room
    /// for more.
    #[inline]
    pub fn pseudo_header(&self, len: u32) -> u16 {
        if self.v6 {
            checksum::pseudo_header_v6(Ipv6Addr::from(self.src), Ipv6Addr::from(self.dst), self.proto, len)
        } else {
            // Built from an IPv4 address: fits in 32 bits.
            let (src, dst) = (Ipv4Addr::from(self.src as u32), Ipv4Addr::from(self.dst as u32));
            checksum::pseudo_header_v4(src, dst, self.proto, len as u16)
        }
    }

    /// [`FlowKey::extract`] for a packet known to be IPv4.
    ///
    /// Straight-line over one fixed-size copy of the header, with exactly
    /// the checks and errors of [`ipv4::Packet::check_len`] (a property
    /// test holds the two together): the data plane runs this twice per
    /// packet, and the view's per-accessor bounds checks cost more than the
    /// rest of the lookup.
    #[inline]
    pub fn extract_v4(packet: &[u8]) -> Result<FlowKey> {
        let h: [u8; ipv4::HEADER_LEN] = match packet.get(..ipv4::HEADER_LEN) {
            Some(b) => b.try_into().map_err(|_| Error::Truncated)?,
            None => return Err(Error::Truncated),
        };
        let header_len = usize::from(h[0] & 0x0f) * 4;
        if header_len < ipv4::HEADER_LEN {
            return Err(Error::Malformed("ipv4 ihl < 5"));
        }
        if header_len > packet.len() {
            return Err(Error::Truncated);
        }
        let total_len = usize::from(u16::from_be_bytes([h[2], h[3]]));
        if total_len < header_len {
            return Err(Error::Malformed("ipv4 total length < header length"));
        }
        if total_len > packet.len() {
            return Err(Error::Truncated);
        }
        let proto = h[9];
        let frag_offset = u16::from_be_bytes([h[6], h[7]]) & 0x1fff;
        // RFC 4301 §7: only the first fragment carries the ports.
        let (src_port, dst_port) =
            if frag_offset != 0 { (0, 0) } else { ports(proto, &packet[header_len..total_len])? };
        Ok(FlowKey {
            v6: false,
            src: u128::from(u32::from_be_bytes([h[12], h[13], h[14], h[15]])),
            dst: u128::from(u32::from_be_bytes([h[16], h[17], h[18], h[19]])),
            proto,
            src_port,
            dst_port,
        })
    }

    /// [`FlowKey::extract`] for a packet known to be IPv6.
    #[inline]
    pub fn extract_v6(packet: &[u8]) -> Result<FlowKey> {
        let p = ipv6::Packet::new_checked(packet)?;
        let payload = p.payload();
        let ul = ipv6::ext::walk(p.next_header(), payload)?;
        let (src_port, dst_port) =
            if ul.is_non_initial_fragment() { (0, 0) } else { ports(ul.protocol, &payload[ul.offset..])? };
        Ok(FlowKey {
            v6: true,
            src: u128::from(p.src_addr()),
            dst: u128::from(p.dst_addr()),
            proto: ul.protocol,
            src_port,
            dst_port,
        })
    }
}

/// The "port" selectors of an upper-layer header (see the module docs).
#[inline(always)]
fn ports(proto: u8, l4: &[u8]) -> Result<(u16, u16)> {
    match proto {
        proto::TCP | proto::UDP | proto::SCTP => {
            // All three start with source port, destination port.
            if l4.len() < 4 {
                return Err(Error::Truncated);
            }
            Ok((u16_at(l4, 0), u16_at(l4, 2)))
        }
        proto::ICMP | proto::ICMPV6 => match l4 {
            [ty, code, ..] => Ok((u16::from(*ty), u16::from(*code))),
            _ => Err(Error::Truncated),
        },
        _ => Ok((0, 0)),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::testutil::hex;

    #[test]
    fn version_nibble() {
        assert_eq!(IpVersion::of(&[0x45]).unwrap(), IpVersion::V4);
        assert_eq!(IpVersion::of(&[0x60]).unwrap(), IpVersion::V6);
        assert_eq!(IpVersion::of(&[0x50]), Err(Error::Malformed("ip version")));
        assert_eq!(IpVersion::of(&[]), Err(Error::Truncated));
    }

    #[test]
    fn udp_over_ipv4() {
        let b = hex(include_str!("../testdata/ipv4_udp_dns.hex"));
        let t = FiveTuple::extract(&b).unwrap();
        assert_eq!(
            t,
            FiveTuple {
                src: IpAddr::V4(Ipv4Addr::new(192, 168, 1, 10)),
                dst: IpAddr::V4(Ipv4Addr::new(192, 168, 1, 1)),
                proto: proto::UDP,
                src_port: 54321,
                dst_port: 53,
            }
        );
    }

    #[test]
    fn tcp_syn_over_ipv4() {
        let b = hex(include_str!("../testdata/ipv4_tcp_syn_options.hex"));
        let t = FiveTuple::extract(&b).unwrap();
        assert_eq!(t.proto, proto::TCP);
        assert_eq!((t.src_port, t.dst_port), (40000, 443));
    }

    #[test]
    fn icmp_type_code_as_ports() {
        let b = hex(include_str!("../testdata/ipv4_icmp_echo.hex"));
        let t = FiveTuple::extract(&b).unwrap();
        assert_eq!(t.proto, proto::ICMP);
        assert_eq!((t.src_port, t.dst_port), (8, 0));
    }

    #[test]
    fn ipv6_behind_extension_headers() {
        let b = hex(include_str!("../testdata/ipv6_hbh_frag_udp.hex"));
        let t = FiveTuple::extract(&b).unwrap();
        assert_eq!(
            t.src,
            IpAddr::V6("2001:db8:1::10".parse::<Ipv6Addr>().unwrap())
        );
        assert_eq!(t.proto, proto::UDP);
        assert_eq!((t.src_port, t.dst_port), (5060, 5061));
    }

    #[test]
    fn ipv4_non_initial_fragment_has_no_ports() {
        let mut b = hex(include_str!("../testdata/ipv4_udp_dns.hex"));
        b[6] = 0x00;
        b[7] = 0xb9; // offset 185 units = 1480 bytes
        let t = FiveTuple::extract(&b).unwrap();
        assert_eq!(t.proto, proto::UDP);
        assert_eq!((t.src_port, t.dst_port), (0, 0));
    }

    fn v6(next: u8, payload: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; 40];
        b[0] = 0x60;
        b[4..6].copy_from_slice(&(payload.len() as u16).to_be_bytes());
        b[6] = next;
        b[23] = 1;
        b[39] = 2;
        b.extend_from_slice(payload);
        b
    }

    #[test]
    fn ipv6_cases() {
        let t = FiveTuple::extract(&v6(58, &[128, 0, 0, 0])).unwrap();
        assert_eq!((t.proto, t.src_port, t.dst_port), (58, 128, 0));
        let t = FiveTuple::extract(&v6(50, &[0, 0, 1, 0, 0, 0, 0, 1])).unwrap();
        assert_eq!((t.proto, t.src_port, t.dst_port), (50, 0, 0));
        let t = FiveTuple::extract(&v6(59, &[])).unwrap();
        assert_eq!((t.proto, t.src_port, t.dst_port), (59, 0, 0));
        // Non-initial fragment of a TCP packet: proto from the Fragment header.
        let t = FiveTuple::extract(&v6(
            44,
            &[6, 0, 0x05, 0xa8, 0, 0, 0, 1, 0xaa, 0xbb, 0xcc, 0xdd],
        ))
        .unwrap();
        assert_eq!((t.proto, t.src_port, t.dst_port), (6, 0, 0));
        assert_eq!(
            FiveTuple::extract(&v6(17, &[0, 1, 0])),
            Err(Error::Truncated)
        );
        assert_eq!(FiveTuple::extract(&v6(58, &[1])), Err(Error::Truncated));
        assert_eq!(FiveTuple::extract(&v6(0, &[])), Err(Error::Truncated));
    }

    #[test]
    fn sctp_ports() {
        let t = FiveTuple::extract(&v6(132, &[0x0b, 0x59, 0x0b, 0x5a, 0, 0, 0, 0])).unwrap();
        assert_eq!((t.src_port, t.dst_port), (2905, 2906));
    }

    #[test]
    fn packet_len_by_the_header_not_the_buffer() {
        let mut b = hex(include_str!("../testdata/ipv4_udp_dns.hex"));
        let n = b.len();
        b.extend_from_slice(&[0xee; 7]); // TFC padding
        assert_eq!(packet_len(&b), Ok(n));
        let p = v6(17, &[0, 1, 0, 2, 0, 8, 0, 0]);
        assert_eq!(packet_len(&[&p[..], &[0u8; 3][..]].concat()), Ok(48));
        assert_eq!(packet_len(&p[..47]), Err(Error::Truncated));
        assert_eq!(packet_len(&[0x44; 20]), Err(Error::Malformed("ipv4 ihl < 5")));
        assert_eq!(packet_len(&[0x10; 40]), Err(Error::Malformed("ip version")));
    }

    #[test]
    fn pseudo_header_sums_as_the_checksum_module_does() {
        let b = hex(include_str!("../testdata/ipv4_udp_dns.hex"));
        let k = FlowKey::extract(&b).unwrap();
        let ip = ipv4::Packet::new_checked(&b[..]).unwrap();
        assert_eq!(k.pseudo_header(36), checksum::pseudo_header_v4(ip.src_addr(), ip.dst_addr(), proto::UDP, 36));
        let p = v6(17, &[0, 1, 0, 2, 0, 8, 0, 0]);
        let k = FlowKey::extract(&p).unwrap();
        let ip = ipv6::Packet::new_checked(&p[..]).unwrap();
        assert_eq!(k.pseudo_header(8), checksum::pseudo_header_v6(ip.src_addr(), ip.dst_addr(), proto::UDP, 8));
    }

    #[test]
    fn garbage() {
        assert_eq!(FiveTuple::extract(&[]), Err(Error::Truncated));
        assert_eq!(FiveTuple::extract(&[0x45, 0, 0]), Err(Error::Truncated));
        assert_eq!(FiveTuple::extract(&[0x60; 39]), Err(Error::Truncated));
        assert!(FiveTuple::extract(&[0x00; 60]).is_err());
    }
}
