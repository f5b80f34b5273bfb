//! Traffic selectors: configuration syntax, resolution of `dynamic`, and
//! narrowing (RFC 7296 §2.9).
//!
//! A [`TrafficSelector`] is one address range with an IP protocol and a
//! port range, exactly what a TS payload carries (§3.13.1). Configuration
//! ([`TsConfig`]) uses swanctl's syntax: `10.1.0.0/16`, `10.1.0.0/16[tcp/443]`,
//! `192.0.2.10-192.0.2.20`, `dynamic` (the IKE SA's own address, resolved
//! once the addresses are known) and `dynamic[udp]`.
//!
//! Narrowing is intersection. The responder intersects every selector the
//! initiator proposed with every selector of its own policy and keeps the
//! non-empty results ([`narrow`]); if nothing is left for TSi or for TSr,
//! the answer is TS_UNACCEPTABLE (§2.9: "If the responder's policy does not
//! allow it to accept any part of the proposed Traffic Selectors, it
//! responds with a TS_UNACCEPTABLE Notify message"). The initiator checks
//! that what comes back is inside what it proposed ([`is_subset_of_any`]):
//! a responder may narrow, never widen.
//!
//! Ports: §3.13.1 encodes "OPAQUE" ports as start 65535, end 0. We never
//! propose them and an opaque selector intersects with nothing, which makes
//! such a proposal unacceptable rather than silently widened.

use core::fmt;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use esparto_wire::ike::TrafficSelectorRepr;

/// One traffic selector (§3.13.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TrafficSelector {
    /// IP protocol, 0 = any.
    pub protocol: u8,
    /// First port.
    pub start_port: u16,
    /// Last port.
    pub end_port: u16,
    /// First address.
    pub start: IpAddr,
    /// Last address (same family).
    pub end: IpAddr,
}

fn to_u128(a: IpAddr) -> (bool, u128) {
    match a {
        IpAddr::V4(v) => (false, u128::from(u32::from(v))),
        IpAddr::V6(v) => (true, u128::from(v)),
    }
}

fn from_u128(v6: bool, x: u128) -> IpAddr {
    if v6 {
        IpAddr::V6(Ipv6Addr::from(x))
    } else {
        // `x` came from an IPv4 address, so it fits in 32 bits.
        IpAddr::V4(Ipv4Addr::from(x as u32))
    }
}

impl TrafficSelector {
    /// A selector covering exactly one host, any protocol and port.
    pub fn host(a: IpAddr) -> Self {
        TrafficSelector {
            protocol: 0,
            start_port: 0,
            end_port: 65535,
            start: a,
            end: a,
        }
    }

    /// A selector covering `addr/prefix`, any protocol and port.
    pub fn subnet(addr: IpAddr, prefix: u8) -> Option<Self> {
        let (v6, x) = to_u128(addr);
        let bits: u32 = if v6 { 128 } else { 32 };
        let prefix = u32::from(prefix);
        if prefix > bits {
            return None;
        }
        let host_bits = bits - prefix;
        let mask: u128 = if host_bits == 128 {
            u128::MAX
        } else {
            (1u128 << host_bits) - 1
        };
        let start = x & !mask;
        let end = if v6 {
            start | mask
        } else {
            (start | mask) & u128::from(u32::MAX)
        };
        Some(TrafficSelector {
            protocol: 0,
            start_port: 0,
            end_port: 65535,
            start: from_u128(v6, start),
            end: from_u128(v6, end),
        })
    }

    /// Both ends are of the same family, start ≤ end, ports in order.
    pub fn is_valid(&self) -> bool {
        let (a6, a) = to_u128(self.start);
        let (b6, b) = to_u128(self.end);
        a6 == b6 && a <= b && self.start_port <= self.end_port
    }

    /// True if this is an IPv6 selector.
    pub fn is_ipv6(&self) -> bool {
        self.start.is_ipv6()
    }

    /// The intersection, if not empty.
    pub fn intersect(&self, other: &TrafficSelector) -> Option<TrafficSelector> {
        if !self.is_valid() || !other.is_valid() || self.is_ipv6() != other.is_ipv6() {
            return None;
        }
        let protocol = match (self.protocol, other.protocol) {
            (0, p) | (p, 0) => p,
            (a, b) if a == b => a,
            _ => return None,
        };
        let start_port = self.start_port.max(other.start_port);
        let end_port = self.end_port.min(other.end_port);
        if start_port > end_port {
            return None;
        }
        let (v6, s1) = to_u128(self.start);
        let (_, e1) = to_u128(self.end);
        let (_, s2) = to_u128(other.start);
        let (_, e2) = to_u128(other.end);
        let (s, e) = (s1.max(s2), e1.min(e2));
        if s > e {
            return None;
        }
        Some(TrafficSelector {
            protocol,
            start_port,
            end_port,
            start: from_u128(v6, s),
            end: from_u128(v6, e),
        })
    }

    /// Is `self` entirely inside `other`?
    pub fn is_subset_of(&self, other: &TrafficSelector) -> bool {
        self.intersect(other).as_ref() == Some(self)
    }
}

impl From<TrafficSelectorRepr> for TrafficSelector {
    fn from(r: TrafficSelectorRepr) -> Self {
        TrafficSelector {
            protocol: r.ip_protocol,
            start_port: r.start_port,
            end_port: r.end_port,
            start: r.start_addr,
            end: r.end_addr,
        }
    }
}

impl From<TrafficSelector> for TrafficSelectorRepr {
    fn from(t: TrafficSelector) -> Self {
        TrafficSelectorRepr {
            ip_protocol: t.protocol,
            start_port: t.start_port,
            end_port: t.end_port,
            start_addr: t.start,
            end_addr: t.end,
        }
    }
}

impl fmt::Display for TrafficSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Print as a prefix when the range is one, else as a range.
        let (v6, s) = to_u128(self.start);
        let (_, e) = to_u128(self.end);
        let bits = if v6 { 128 } else { 32 };
        let span = e.wrapping_sub(s);
        let prefix = if span == u128::MAX {
            Some(0) // all of IPv6
        } else if (span + 1).is_power_of_two() && s & span == 0 {
            Some(bits - (span + 1).trailing_zeros())
        } else {
            None
        };
        match prefix {
            Some(p) => write!(f, "{}/{}", self.start, p)?,
            None => write!(f, "{}-{}", self.start, self.end)?,
        }
        if self.protocol != 0 || self.start_port != 0 || self.end_port != 65535 {
            write!(f, "[{}", self.protocol)?;
            if self.start_port != 0 || self.end_port != 65535 {
                if self.start_port == self.end_port {
                    write!(f, "/{}", self.start_port)?;
                } else {
                    write!(f, "/{}-{}", self.start_port, self.end_port)?;
                }
            }
            f.write_str("]")?;
        }
        Ok(())
    }
}

/// A configured selector: a fixed range, or `dynamic` (the IKE SA's own
/// address, known only when the SA runs), each with optional protocol/ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TsConfig {
    /// A fixed selector.
    Fixed(TrafficSelector),
    /// The local (for local_ts) or remote (for remote_ts) IKE address.
    Dynamic {
        /// IP protocol, 0 = any.
        protocol: u8,
        /// First port.
        start_port: u16,
        /// Last port.
        end_port: u16,
    },
}

/// A selector string that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TsError(pub String);

impl fmt::Display for TsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid traffic selector {:?}", self.0)
    }
}

impl std::error::Error for TsError {}

fn protocol_number(s: &str) -> Option<u8> {
    Some(match s {
        "" | "%any" | "any" => 0,
        "icmp" => 1,
        "tcp" => 6,
        "udp" => 17,
        "ipv6-icmp" | "icmpv6" => 58,
        "sctp" => 132,
        n => n.parse().ok()?,
    })
}

fn port_range(s: &str) -> Option<(u16, u16)> {
    match s {
        "" | "%any" | "any" => Some((0, 65535)),
        _ => match s.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (a.parse().ok()?, b.parse().ok()?);
                (a <= b).then_some((a, b))
            }
            None => {
                let p = s.parse().ok()?;
                Some((p, p))
            }
        },
    }
}

impl TsConfig {
    /// Parse swanctl syntax: `net/prefix`, `addr`, `from-to` or `dynamic`,
    /// optionally followed by `[proto]` or `[proto/port]` / `[proto/a-b]`.
    pub fn parse(s: &str) -> Result<Self, TsError> {
        let err = || TsError(s.to_string());
        let s = s.trim();
        let (base, (protocol, (start_port, end_port))) = match s.split_once('[') {
            Some((b, rest)) => {
                let inner = rest.strip_suffix(']').ok_or_else(err)?;
                let (proto, ports) = inner.split_once('/').unwrap_or((inner, ""));
                (
                    b,
                    (
                        protocol_number(proto).ok_or_else(err)?,
                        port_range(ports).ok_or_else(err)?,
                    ),
                )
            }
            None => (s, (0, (0, 65535))),
        };
        if base == "dynamic" {
            return Ok(TsConfig::Dynamic {
                protocol,
                start_port,
                end_port,
            });
        }
        let mut ts = if let Some((a, p)) = base.split_once('/') {
            let a: IpAddr = a.parse().map_err(|_| err())?;
            let p: u8 = p.parse().map_err(|_| err())?;
            TrafficSelector::subnet(a, p).ok_or_else(err)?
        } else if let Some((a, b)) = base.split_once('-') {
            let (a, b): (IpAddr, IpAddr) =
                (a.parse().map_err(|_| err())?, b.parse().map_err(|_| err())?);
            TrafficSelector {
                protocol: 0,
                start_port: 0,
                end_port: 65535,
                start: a,
                end: b,
            }
        } else {
            TrafficSelector::host(base.parse().map_err(|_| err())?)
        };
        ts.protocol = protocol;
        ts.start_port = start_port;
        ts.end_port = end_port;
        if !ts.is_valid() {
            return Err(err());
        }
        Ok(TsConfig::Fixed(ts))
    }

    /// Resolve against the IKE address of this side.
    pub fn resolve(&self, own: IpAddr) -> TrafficSelector {
        match *self {
            TsConfig::Fixed(t) => t,
            TsConfig::Dynamic {
                protocol,
                start_port,
                end_port,
            } => TrafficSelector {
                protocol,
                start_port,
                end_port,
                start: own,
                end: own,
            },
        }
    }
}

/// Responder narrowing (§2.9): every non-empty intersection of a proposed
/// selector with a configured one, without duplicates, in proposal order.
pub fn narrow(proposed: &[TrafficSelector], policy: &[TrafficSelector]) -> Vec<TrafficSelector> {
    let mut out: Vec<TrafficSelector> = Vec::new();
    for p in proposed {
        for c in policy {
            if let Some(i) = p.intersect(c) {
                if !out.contains(&i) {
                    out.push(i);
                }
            }
        }
    }
    out
}

/// Initiator check: every returned selector lies inside one we proposed.
pub fn is_subset_of_any(returned: &[TrafficSelector], proposed: &[TrafficSelector]) -> bool {
    !returned.is_empty()
        && returned
            .iter()
            .all(|r| proposed.iter().any(|p| r.is_subset_of(p)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn ts(s: &str) -> TrafficSelector {
        match TsConfig::parse(s).unwrap() {
            TsConfig::Fixed(t) => t,
            TsConfig::Dynamic { .. } => panic!("dynamic"),
        }
    }

    #[test]
    fn parses_swanctl_syntax() {
        let t = ts("10.1.0.0/16");
        assert_eq!(t.start, "10.1.0.0".parse::<IpAddr>().unwrap());
        assert_eq!(t.end, "10.1.255.255".parse::<IpAddr>().unwrap());
        let t = ts("10.1.2.3/16[tcp/443]");
        assert_eq!(t.start, "10.1.0.0".parse::<IpAddr>().unwrap());
        assert_eq!((t.protocol, t.start_port, t.end_port), (6, 443, 443));
        let t = ts("0.0.0.0/0");
        assert_eq!(t.end, "255.255.255.255".parse::<IpAddr>().unwrap());
        let t = ts("::/0");
        assert_eq!(t.end, IpAddr::V6(Ipv6Addr::from(u128::MAX)));
        let t = ts("192.0.2.10-192.0.2.20[udp/1000-2000]");
        assert_eq!((t.protocol, t.start_port, t.end_port), (17, 1000, 2000));
        assert_eq!(
            TsConfig::parse("dynamic[udp/500]").unwrap(),
            TsConfig::Dynamic {
                protocol: 17,
                start_port: 500,
                end_port: 500
            }
        );
        for bad in [
            "10.0.0.0/33",
            "10.0.0.9-10.0.0.1",
            "10.0.0.0/8[tcp",
            "x",
            "1.1.1.1-::1",
            "1.1.1.1[tcp/9-1]",
        ] {
            assert!(TsConfig::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn dynamic_resolves_to_host() {
        let d = TsConfig::parse("dynamic").unwrap();
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        assert_eq!(d.resolve(a), TrafficSelector::host(a));
    }

    #[test]
    fn intersections() {
        let a = ts("10.0.0.0/8");
        let b = ts("10.1.0.0/16[tcp]");
        assert_eq!(a.intersect(&b), Some(b));
        assert!(b.is_subset_of(&a));
        assert!(!a.is_subset_of(&b));
        assert_eq!(
            ts("10.0.0.0/8[tcp]").intersect(&ts("10.0.0.0/8[udp]")),
            None
        );
        assert_eq!(ts("10.0.0.0/8").intersect(&ts("11.0.0.0/8")), None);
        assert_eq!(ts("10.0.0.0/8").intersect(&ts("::/0")), None);
        assert_eq!(
            ts("0.0.0.0/0[tcp/1-100]").intersect(&ts("0.0.0.0/0[tcp/50-200]")),
            Some(ts("0.0.0.0/0[tcp/50-100]"))
        );
        let opaque = TrafficSelector {
            start_port: 65535,
            end_port: 0,
            ..a
        };
        assert_eq!(opaque.intersect(&a), None);
    }

    #[test]
    fn narrowing_cases() {
        // Initiator wants 0.0.0.0/0, responder allows 10.1.0.0/16: narrowed.
        let got = narrow(&[ts("0.0.0.0/0")], &[ts("10.1.0.0/16")]);
        assert_eq!(got, [ts("10.1.0.0/16")]);
        // Initiator wants a host inside the policy: kept as is.
        let got = narrow(&[ts("10.1.2.3/32"), ts("10.1.0.0/16")], &[ts("10.0.0.0/8")]);
        assert_eq!(got, [ts("10.1.2.3/32"), ts("10.1.0.0/16")]);
        // Two policy subnets both overlapping one proposal: two results.
        let got = narrow(&[ts("10.0.0.0/8")], &[ts("10.1.0.0/16"), ts("10.2.0.0/16")]);
        assert_eq!(got.len(), 2);
        // Nothing overlaps: empty, i.e. TS_UNACCEPTABLE.
        assert!(narrow(&[ts("192.168.0.0/16")], &[ts("10.0.0.0/8")]).is_empty());
        assert!(is_subset_of_any(&[ts("10.1.0.0/16")], &[ts("0.0.0.0/0")]));
        assert!(!is_subset_of_any(&[ts("0.0.0.0/0")], &[ts("10.1.0.0/16")]));
        assert!(!is_subset_of_any(&[], &[ts("10.1.0.0/16")]));
    }

    #[test]
    fn display() {
        assert_eq!(ts("10.1.0.0/16").to_string(), "10.1.0.0/16");
        assert_eq!(ts("0.0.0.0/0").to_string(), "0.0.0.0/0");
        assert_eq!(
            ts("10.1.0.5-10.1.0.9[6/80]").to_string(),
            "10.1.0.5-10.1.0.9[6/80]"
        );
    }
}
