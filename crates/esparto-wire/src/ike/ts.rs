//! Traffic Selector payloads, TSi and TSr (RFC 7296 §3.13).
//!
//! ```text
//! | Number of TSs |                 RESERVED                      |
//! ~                       <Traffic Selectors>                     ~
//!
//! one selector:
//! |   TS Type     |IP Protocol ID*|       Selector Length         |
//! |           Start Port*         |           End Port*           |
//! ~                         Starting Address*                     ~
//! ~                         Ending Address*                       ~
//! ```
//!
//! A selector is an address range, an IP protocol (0 = any) and a port
//! range (0..65535 = any; §3.13.1 encodes OPAQUE ports as start 65535, end
//! 0, which this layer keeps as is). The two types we know are the IPv4 and
//! IPv6 address ranges; a selector of another type (Fibre Channel, RFC 4595;
//! security labels, RFC 9478) is skipped over rather than failing the whole
//! message, so the core answers TS_UNACCEPTABLE if nothing usable remains.

use super::consts::TsType;
use super::cursor::{Reader, Writer};
use super::error::{Error, Result};
use super::limits;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

const IPV4_SELECTOR_LEN: usize = 16;
const IPV6_SELECTOR_LEN: usize = 40;

/// One traffic selector (§3.13.1), IPv4 or IPv6 by the address family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TrafficSelectorRepr {
    /// IP protocol number, 0 for any.
    pub ip_protocol: u8,
    /// First port of the range.
    pub start_port: u16,
    /// Last port of the range.
    pub end_port: u16,
    /// First address of the range.
    pub start_addr: IpAddr,
    /// Last address of the range (same family as `start_addr`).
    pub end_addr: IpAddr,
}

impl TrafficSelectorRepr {
    /// The TS Type for this selector's address family.
    pub fn ts_type(&self) -> TsType {
        match self.start_addr {
            IpAddr::V4(_) => TsType::IPV4_ADDR_RANGE,
            IpAddr::V6(_) => TsType::IPV6_ADDR_RANGE,
        }
    }

    /// Octets on the wire.
    pub fn buffer_len(&self) -> usize {
        match self.start_addr {
            IpAddr::V4(_) => IPV4_SELECTOR_LEN,
            IpAddr::V6(_) => IPV6_SELECTOR_LEN,
        }
    }

    fn emit(&self, w: &mut Writer<'_>) -> Result<()> {
        w.u8(self.ts_type().0)?;
        w.u8(self.ip_protocol)?;
        w.u16(self.buffer_len() as u16)?;
        w.u16(self.start_port)?;
        w.u16(self.end_port)?;
        match (self.start_addr, self.end_addr) {
            (IpAddr::V4(s), IpAddr::V4(e)) => {
                w.put(&s.octets())?;
                w.put(&e.octets())
            }
            (IpAddr::V6(s), IpAddr::V6(e)) => {
                w.put(&s.octets())?;
                w.put(&e.octets())
            }
            _ => Err(Error::Malformed("traffic selector mixes address families")),
        }
    }
}

/// A TSi or TSr payload body: the list of selectors.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TsRepr {
    /// Selectors in the order sent (§2.9: the first may be the packet that
    /// triggered the request).
    pub selectors: Vec<TrafficSelectorRepr>,
}

impl TsRepr {
    /// Parse the body.
    pub fn parse(body: &[u8]) -> Result<Self> {
        let mut r = Reader::new(body);
        let count = usize::from(r.u8()?);
        r.take(3)?;
        if count == 0 {
            // A TS payload with no selectors can never be narrowed (§2.9)
            // and no implementation sends one; treat it as malformed.
            return Err(Error::Malformed("TS payload without selectors"));
        }
        if count > limits::MAX_TRAFFIC_SELECTORS {
            return Err(Error::Limit("too many traffic selectors"));
        }
        let mut selectors = Vec::with_capacity(count);
        for _ in 0..count {
            let ts_type = TsType(r.u8()?);
            let ip_protocol = r.u8()?;
            let len = usize::from(r.u16()?);
            if len < 4 {
                return Err(Error::Malformed("selector length"));
            }
            let mut s = Reader::new(r.take(len - 4)?);
            let known = matches!(ts_type, TsType::IPV4_ADDR_RANGE | TsType::IPV6_ADDR_RANGE);
            if !known {
                // Unknown selector type: skip it (see the module comment).
                continue;
            }
            let start_port = s.u16()?;
            let end_port = s.u16()?;
            let (start_addr, end_addr) = match (ts_type, len) {
                (TsType::IPV4_ADDR_RANGE, IPV4_SELECTOR_LEN) => (
                    IpAddr::V4(Ipv4Addr::from(s.u32()?)),
                    IpAddr::V4(Ipv4Addr::from(s.u32()?)),
                ),
                (TsType::IPV6_ADDR_RANGE, IPV6_SELECTOR_LEN) => (
                    IpAddr::V6(Ipv6Addr::from(u128_be(s.take(16)?))),
                    IpAddr::V6(Ipv6Addr::from(u128_be(s.take(16)?))),
                ),
                _ => return Err(Error::Malformed("selector length for its type")),
            };
            selectors.push(TrafficSelectorRepr {
                ip_protocol,
                start_port,
                end_port,
                start_addr,
                end_addr,
            });
        }
        if !r.is_empty() {
            return Err(Error::Malformed(
                "TS payload length disagrees with selector count",
            ));
        }
        Ok(TsRepr { selectors })
    }

    /// Body length.
    pub fn buffer_len(&self) -> usize {
        4 + self
            .selectors
            .iter()
            .map(TrafficSelectorRepr::buffer_len)
            .sum::<usize>()
    }

    /// Write the body.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let count =
            u8::try_from(self.selectors.len()).map_err(|_| Error::Limit("too many selectors"))?;
        if count == 0 {
            return Err(Error::Malformed("TS payload without selectors"));
        }
        let mut w = Writer::new(buf);
        w.u8(count)?;
        w.put(&[0, 0, 0])?;
        for ts in &self.selectors {
            ts.emit(&mut w)?;
        }
        Ok(())
    }
}

fn u128_be(b: &[u8]) -> u128 {
    let mut a = [0u8; 16];
    a.copy_from_slice(b);
    u128::from_be_bytes(a)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn v4(a: [u8; 4]) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(a))
    }

    #[test]
    fn ipv4_subnet_bytes() {
        // 10.1.0.0/16, any protocol, any port.
        let ts = TsRepr {
            selectors: vec![TrafficSelectorRepr {
                ip_protocol: 0,
                start_port: 0,
                end_port: 65535,
                start_addr: v4([10, 1, 0, 0]),
                end_addr: v4([10, 1, 255, 255]),
            }],
        };
        let mut b = vec![0u8; ts.buffer_len()];
        ts.emit(&mut b).unwrap();
        #[rustfmt::skip]
        let want = [1, 0, 0, 0, 7, 0, 0, 16, 0, 0, 0xff, 0xff, 10, 1, 0, 0, 10, 1, 255, 255];
        assert_eq!(b, want);
        assert_eq!(TsRepr::parse(&b).unwrap(), ts);
    }

    #[test]
    fn ipv6_and_ports_round_trip() {
        let ts = TsRepr {
            selectors: vec![TrafficSelectorRepr {
                ip_protocol: 6,
                start_port: 443,
                end_port: 443,
                start_addr: "2001:db8::".parse().unwrap(),
                end_addr: "2001:db8::ffff".parse().unwrap(),
            }],
        };
        let mut b = vec![0u8; ts.buffer_len()];
        ts.emit(&mut b).unwrap();
        assert_eq!(b.len(), 44);
        assert_eq!(TsRepr::parse(&b).unwrap(), ts);
    }

    #[test]
    fn unknown_type_skipped_wrong_length_rejected() {
        // Two selectors: an unknown type 9 of 8 octets, then IPv4.
        let mut b = vec![2, 0, 0, 0, 9, 0, 0, 8, 1, 2, 3, 4];
        b.extend_from_slice(&[7, 17, 0, 16, 0, 53, 0, 53, 1, 1, 1, 1, 1, 1, 1, 1]);
        let ts = TsRepr::parse(&b).unwrap();
        assert_eq!(ts.selectors.len(), 1);
        assert_eq!(ts.selectors[0].start_port, 53);
        let bad = [1, 0, 0, 0, 7, 0, 0, 12, 0, 0, 0, 0, 1, 1, 1, 1];
        assert!(TsRepr::parse(&bad).is_err());
        assert!(TsRepr::parse(&[0, 0, 0, 0]).is_err());
        assert!(TsRepr::parse(&[1, 0, 0, 0, 7, 0, 0, 2]).is_err());
    }

    #[test]
    fn mixed_families_refused_on_emit() {
        let ts = TsRepr {
            selectors: vec![TrafficSelectorRepr {
                ip_protocol: 0,
                start_port: 0,
                end_port: 65535,
                start_addr: v4([1, 1, 1, 1]),
                end_addr: "::1".parse().unwrap(),
            }],
        };
        let mut b = vec![0u8; ts.buffer_len()];
        assert!(ts.emit(&mut b).is_err());
    }
}
