//! The data plane's selectors (RFC 4301 §4.4.1.1; XFRM's `xfrm_selector`).
//!
//! A [`Selector`] is an address range, an IP protocol (0 = any) and a port
//! range, the same shape IKEv2 negotiates in TSi/TSr (RFC 7296 §3.13.1;
//! `esparto_ike::TrafficSelector` is that negotiated form, and the daemon
//! converts one into the other when it installs a Child SA). Here the
//! addresses of both families are held as `u128` (IPv4 in the low 32 bits)
//! with a family flag, so matching a packet is two integer comparisons and
//! never allocates.
//!
//! For ICMP and ICMPv6, RFC 4301 §4.4.1.1 puts the message type in the
//! "local port" and the code in the "remote port" position; the five-tuple
//! extracted from a packet follows the same convention, so the port ranges
//! work unchanged.

use core::fmt;
use core::str::FromStr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// An address family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

/// An inclusive range of addresses of one family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpRange {
    family: Family,
    start: u128,
    end: u128,
}

/// Converts an address to the `u128` form used for matching.
#[inline]
pub fn addr_bits(addr: IpAddr) -> (Family, u128) {
    match addr {
        IpAddr::V4(a) => (Family::V4, u128::from(u32::from(a))),
        IpAddr::V6(a) => (Family::V6, u128::from(a)),
    }
}

fn bits_addr(family: Family, bits: u128) -> IpAddr {
    match family {
        Family::V4 => IpAddr::V4(Ipv4Addr::from(bits as u32)),
        Family::V6 => IpAddr::V6(Ipv6Addr::from(bits)),
    }
}

/// Why a selector string or range was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelectorError(pub String);

impl fmt::Display for SelectorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SelectorError {}

impl IpRange {
    /// The range `start..=end`; both ends must be of one family and in order.
    pub fn new(start: IpAddr, end: IpAddr) -> Result<Self, SelectorError> {
        let (fs, s) = addr_bits(start);
        let (fe, e) = addr_bits(end);
        if fs != fe {
            return Err(SelectorError(format!("{start} and {end} are of different families")));
        }
        if s > e {
            return Err(SelectorError(format!("range {start}-{end} ends before it starts")));
        }
        Ok(Self { family: fs, start: s, end: e })
    }

    /// The prefix `addr/len`. Host bits set in `addr` are an error, as in
    /// strongSwan (a likely typo).
    pub fn prefix(addr: IpAddr, len: u8) -> Result<Self, SelectorError> {
        let (family, bits) = addr_bits(addr);
        let width: u32 = if family == Family::V4 { 32 } else { 128 };
        if u32::from(len) > width {
            return Err(SelectorError(format!("prefix length /{len} too long for {addr}")));
        }
        let host = if u32::from(len) == width {
            0
        } else {
            (u128::MAX >> (128 - width)) >> len
        };
        if bits & host != 0 {
            return Err(SelectorError(format!("{addr}/{len} has host bits set")));
        }
        Ok(Self { family, start: bits, end: bits | host })
    }

    /// Every address of a family (`0.0.0.0/0` or `::/0`).
    pub fn any(family: Family) -> Self {
        let end = if family == Family::V4 { u128::from(u32::MAX) } else { u128::MAX };
        Self { family, start: 0, end }
    }

    /// A single address.
    pub fn host(addr: IpAddr) -> Self {
        let (family, bits) = addr_bits(addr);
        Self { family, start: bits, end: bits }
    }

    /// The family of the range.
    pub fn family(&self) -> Family {
        self.family
    }

    /// The first address.
    pub fn start(&self) -> IpAddr {
        bits_addr(self.family, self.start)
    }

    /// The last address.
    pub fn end(&self) -> IpAddr {
        bits_addr(self.family, self.end)
    }

    /// The range in integer form.
    pub fn bits(&self) -> (u128, u128) {
        (self.start, self.end)
    }

    /// Whether `addr` (in integer form) lies in the range.
    #[inline]
    pub fn contains_bits(&self, family: Family, addr: u128) -> bool {
        self.family == family && self.start <= addr && addr <= self.end
    }

    /// Whether `addr` lies in the range.
    pub fn contains(&self, addr: IpAddr) -> bool {
        let (f, b) = addr_bits(addr);
        self.contains_bits(f, b)
    }

    /// The overlap of two ranges, if any.
    pub fn intersect(&self, other: &Self) -> Option<Self> {
        if self.family != other.family {
            return None;
        }
        let start = self.start.max(other.start);
        let end = self.end.min(other.end);
        (start <= end).then_some(Self { family: self.family, start, end })
    }

    /// Whether `other` lies entirely inside `self`.
    pub fn covers(&self, other: &Self) -> bool {
        self.family == other.family && self.start <= other.start && other.end <= self.end
    }

    /// The prefix length if the range is exactly a CIDR prefix.
    pub fn as_prefix(&self) -> Option<u8> {
        let width: u32 = if self.family == Family::V4 { 32 } else { 128 };
        let span = self.end - self.start;
        // A prefix: span is 2^k - 1 and start is aligned to 2^k.
        if span.checked_add(1).is_some_and(|n| !n.is_power_of_two()) || self.start & span != 0 {
            return None;
        }
        let host_bits = 128 - span.leading_zeros();
        Some((width - host_bits) as u8)
    }
}

impl fmt::Display for IpRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.as_prefix() {
            Some(len) => write!(f, "{}/{}", self.start(), len),
            None => write!(f, "{}-{}", self.start(), self.end()),
        }
    }
}

/// Parses `10.1.0.0/16`, `192.0.2.1`, `fd00::/8` or `10.0.0.1-10.0.0.9`.
impl FromStr for IpRange {
    type Err = SelectorError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let addr = |a: &str| {
            a.trim()
                .parse::<IpAddr>()
                .map_err(|_| SelectorError(format!("'{a}' is not an IP address")))
        };
        if let Some((a, len)) = s.split_once('/') {
            let len = len
                .trim()
                .parse::<u8>()
                .map_err(|_| SelectorError(format!("'{len}' is not a prefix length")))?;
            Self::prefix(addr(a)?, len)
        } else if let Some((a, b)) = s.split_once('-') {
            Self::new(addr(a)?, addr(b)?)
        } else {
            Ok(Self::host(addr(s)?))
        }
    }
}

/// One selector of a policy or an SA: addresses, protocol and ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Selector {
    /// The address range.
    pub addrs: IpRange,
    /// IP protocol number; 0 means any.
    pub proto: u8,
    /// First port (or ICMP type/code, see the module docs).
    pub port_start: u16,
    /// Last port, inclusive.
    pub port_end: u16,
}

impl Selector {
    /// Any protocol and port within `addrs`.
    pub fn addrs(addrs: IpRange) -> Self {
        Self { addrs, proto: 0, port_start: 0, port_end: u16::MAX }
    }

    /// Whether a packet's address, protocol and port fall in the selector.
    #[inline]
    pub fn matches(&self, family: Family, addr: u128, proto: u8, port: u16) -> bool {
        self.addrs.contains_bits(family, addr)
            && (self.proto == 0 || self.proto == proto)
            && self.port_start <= port
            && port <= self.port_end
    }

    /// The overlap of two selectors (RFC 7296 §2.9 narrowing), if any.
    pub fn intersect(&self, other: &Self) -> Option<Self> {
        let addrs = self.addrs.intersect(&other.addrs)?;
        let proto = match (self.proto, other.proto) {
            (0, p) | (p, 0) => p,
            (a, b) if a == b => a,
            _ => return None,
        };
        let port_start = self.port_start.max(other.port_start);
        let port_end = self.port_end.min(other.port_end);
        (port_start <= port_end).then_some(Self { addrs, proto, port_start, port_end })
    }

    /// Whether `other` is entirely inside `self`.
    pub fn covers(&self, other: &Self) -> bool {
        self.addrs.covers(&other.addrs)
            && (self.proto == 0 || self.proto == other.proto)
            && self.port_start <= other.port_start
            && other.port_end <= self.port_end
    }
}

/// Parses swanctl's syntax: `10.1.0.0/16`, `10.1.0.0/16[tcp/443]`,
/// `fd00::/64[udp]`, `10.0.0.1[icmp/8]`, `0.0.0.0/0[17/500-600]`.
impl FromStr for Selector {
    type Err = SelectorError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let Some((addrs, rest)) = s.split_once('[') else {
            return Ok(Self::addrs(s.parse()?));
        };
        let inner = rest
            .strip_suffix(']')
            .ok_or_else(|| SelectorError(format!("'{s}': missing ']'")))?;
        let mut ts = Self::addrs(addrs.parse()?);
        let (proto, port) = match inner.split_once('/') {
            Some((p, port)) => (p.trim(), Some(port.trim())),
            None => (inner.trim(), None),
        };
        ts.proto = match proto {
            "" | "any" => 0,
            "tcp" => 6,
            "udp" => 17,
            "icmp" => 1,
            "ipv6-icmp" | "icmp6" | "icmpv6" => 58,
            "sctp" => 132,
            p => p
                .parse()
                .map_err(|_| SelectorError(format!("'{p}' is not a protocol name or number")))?,
        };
        if let Some(port) = port {
            let num = |p: &str| {
                p.trim()
                    .parse::<u16>()
                    .map_err(|_| SelectorError(format!("'{p}' is not a port number")))
            };
            (ts.port_start, ts.port_end) = match port {
                "" | "any" => (0, u16::MAX),
                p => match p.split_once('-') {
                    Some((a, b)) => (num(a)?, num(b)?),
                    None => (num(p)?, num(p)?),
                },
            };
            if ts.port_start > ts.port_end {
                return Err(SelectorError(format!("port range '{port}' ends before it starts")));
            }
        }
        Ok(ts)
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.addrs)?;
        let any_port = self.port_start == 0 && self.port_end == u16::MAX;
        match (self.proto, any_port) {
            (0, true) => Ok(()),
            (p, true) => write!(f, "[{p}]"),
            (p, false) if self.port_start == self.port_end => write!(f, "[{p}/{}]", self.port_start),
            (p, false) => write!(f, "[{p}/{}-{}]", self.port_start, self.port_end),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn parses_and_prints_prefixes_and_ranges() {
        for s in ["10.1.0.0/16", "192.0.2.7/32", "fd00::/8", "::/0", "10.0.0.1-10.0.0.9"] {
            let r: IpRange = s.parse().unwrap();
            assert_eq!(r.to_string(), s);
        }
        assert_eq!("192.0.2.7".parse::<IpRange>().unwrap().to_string(), "192.0.2.7/32");
        assert!("10.1.0.1/16".parse::<IpRange>().is_err(), "host bits set");
        assert!("10.0.0.9-10.0.0.1".parse::<IpRange>().is_err());
        assert!("10.0.0.1-fd00::1".parse::<IpRange>().is_err());
        assert!("10.0.0.0/33".parse::<IpRange>().is_err());
        assert!("nonsense".parse::<IpRange>().is_err());
    }

    #[test]
    fn contains_respects_family() {
        let r: IpRange = "0.0.0.0/0".parse().unwrap();
        assert!(r.contains("198.51.100.1".parse().unwrap()));
        assert!(!r.contains("::1".parse().unwrap()));
        let v6: IpRange = "::/0".parse().unwrap();
        assert!(v6.contains("fd00::1".parse().unwrap()));
        assert!(!v6.contains("0.0.0.1".parse().unwrap()));
    }

    #[test]
    fn selector_syntax() {
        let ts: Selector = "10.1.0.0/16[tcp/443]".parse().unwrap();
        assert_eq!((ts.proto, ts.port_start, ts.port_end), (6, 443, 443));
        let ts: Selector = "0.0.0.0/0[17/500-600]".parse().unwrap();
        assert_eq!((ts.proto, ts.port_start, ts.port_end), (17, 500, 600));
        let ts: Selector = "fd00::/64[udp]".parse().unwrap();
        assert_eq!((ts.proto, ts.port_start, ts.port_end), (17, 0, u16::MAX));
        assert_eq!(ts.to_string(), "fd00::/64[17]");
        assert!("10.0.0.0/8[tcp/9-1]".parse::<Selector>().is_err());
        assert!("10.0.0.0/8[bogus]".parse::<Selector>().is_err());
        assert!("10.0.0.0/8[tcp".parse::<Selector>().is_err());
    }

    #[test]
    fn narrowing() {
        let wide: Selector = "10.0.0.0/8".parse().unwrap();
        let narrow: Selector = "10.1.0.0/16[tcp/80]".parse().unwrap();
        assert_eq!(wide.intersect(&narrow), Some(narrow));
        assert!(wide.covers(&narrow));
        assert!(!narrow.covers(&wide));
        let other: Selector = "192.0.2.0/24".parse().unwrap();
        assert_eq!(wide.intersect(&other), None);
        let udp: Selector = "10.0.0.0/8[udp]".parse().unwrap();
        assert_eq!(narrow.intersect(&udp), None);
    }
}
