//! A traffic selector in its two forms, and the conversions between them.
//!
//! The IKE engine negotiates [`esparto_ike::TrafficSelector`]s (RFC 7296
//! §3.13.1: addresses as `IpAddr`, narrowed by intersection); the data
//! plane matches packets against [`esparto_esp::Selector`]s (RFC 4301
//! §4.4.1.1: addresses as integers, for two comparisons per packet). The
//! two crates do not know each other, so the daemon converts: a configured
//! fixed selector into the engine's form when it builds the engine's
//! configuration, a negotiated one into the data plane's when it installs
//! a Child SA. Both carry the same fields, so neither conversion loses
//! anything.

use esparto_esp::{IpRange, Selector};
use esparto_ike::TrafficSelector;

/// The data plane's selector as the IKE engine's.
pub(crate) fn to_ike(s: &Selector) -> TrafficSelector {
    TrafficSelector {
        protocol: s.proto,
        start_port: s.port_start,
        end_port: s.port_end,
        start: s.addrs.start(),
        end: s.addrs.end(),
    }
}

/// The IKE engine's selector as the data plane's.
pub(crate) fn to_esp(ts: &TrafficSelector) -> Selector {
    let addrs = IpRange::new(ts.start, ts.end).unwrap_or_else(|_| {
        // The engine only produces ranges with both ends of one family and
        // in order; fall back to the start host rather than panic.
        IpRange::host(ts.start)
    });
    Selector {
        addrs,
        proto: ts.protocol,
        port_start: ts.start_port,
        port_end: ts.end_port,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn both_ways_lose_nothing() {
        for s in [
            "10.1.0.0/16[tcp/443]",
            "fd00::/64[udp/500-600]",
            "192.0.2.1-192.0.2.9",
            "0.0.0.0/0",
        ] {
            let esp: Selector = s.parse().unwrap();
            let ike = to_ike(&esp);
            assert_eq!(to_esp(&ike), esp, "{s}");
        }
        let ike = to_ike(&"10.1.0.0/16[tcp/443]".parse().unwrap());
        assert_eq!(ike.to_string(), "10.1.0.0/16[6/443]");
    }
}
