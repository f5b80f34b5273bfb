//! Routes into the TUN device: the remote side's selectors are routed to
//! `esparto0`, so the kernel hands their packets to the workers (strongSwan
//! uses table 220 for the same purpose).
//!
//! Installed with iproute2's `ip route replace … dev TUN` — present on
//! every Linux gateway, and its error messages are the ones operators know.
//! Routes through a device disappear with the device, so a stopped daemon
//! leaves none behind.

use std::io;
use std::net::IpAddr;
use std::process::Command;

/// Splits an inclusive address range into the fewest CIDR prefixes covering
/// exactly it (a selector need not be a prefix: `10.0.0.3-10.0.0.9`).
pub fn range_to_prefixes(start: IpAddr, end: IpAddr) -> Vec<(IpAddr, u8)> {
    let (width, s, e) = match (start, end) {
        (IpAddr::V4(a), IpAddr::V4(b)) => (32u32, u128::from(u32::from(a)), u128::from(u32::from(b))),
        (IpAddr::V6(a), IpAddr::V6(b)) => (128u32, u128::from(a), u128::from(b)),
        _ => return Vec::new(),
    };
    let mut out = Vec::new();
    let mut cur = s;
    while cur <= e {
        // The largest aligned block starting at `cur` that stays within `e`.
        let mut host_bits = if cur == 0 { width } else { cur.trailing_zeros().min(width) };
        while host_bits > 0 {
            let last = if host_bits == 128 { u128::MAX } else { cur | ((1u128 << host_bits) - 1) };
            if last <= e {
                break;
            }
            host_bits -= 1;
        }
        let addr = if width == 32 {
            IpAddr::V4(std::net::Ipv4Addr::from(cur as u32))
        } else {
            IpAddr::V6(std::net::Ipv6Addr::from(cur))
        };
        out.push((addr, (width - host_bits) as u8));
        let size_minus_one = if host_bits == 128 { u128::MAX } else { (1u128 << host_bits) - 1 };
        match cur.checked_add(size_minus_one).and_then(|l| l.checked_add(1)) {
            Some(next) => cur = next,
            None => break,
        }
    }
    out
}

/// Routes `addr/len` to `dev` (replacing any route for the same prefix).
pub fn add(dev: &str, addr: IpAddr, len: u8) -> io::Result<()> {
    let family = if addr.is_ipv4() { "-4" } else { "-6" };
    let prefix = format!("{addr}/{len}");
    let out = Command::new("ip").args([family, "route", "replace", &prefix, "dev", dev]).output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "ip route replace {prefix} dev {dev}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> IpAddr {
        s.parse().unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED))
    }

    #[test]
    fn prefixes_cover_ranges_exactly() {
        assert_eq!(range_to_prefixes(p("10.1.0.0"), p("10.1.255.255")), vec![(p("10.1.0.0"), 16)]);
        assert_eq!(range_to_prefixes(p("0.0.0.0"), p("255.255.255.255")), vec![(p("0.0.0.0"), 0)]);
        assert_eq!(range_to_prefixes(p("::"), p("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")), vec![(p("::"), 0)]);
        assert_eq!(
            range_to_prefixes(p("10.0.0.3"), p("10.0.0.9")),
            vec![(p("10.0.0.3"), 32), (p("10.0.0.4"), 30), (p("10.0.0.8"), 31)]
        );
        assert_eq!(range_to_prefixes(p("10.0.0.9"), p("10.0.0.9")), vec![(p("10.0.0.9"), 32)]);
        assert!(range_to_prefixes(p("10.0.0.9"), p("::1")).is_empty());
    }
}
