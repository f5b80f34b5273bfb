//! A network device's own counters, as the kernel keeps them (`ip -s
//! link`), read from `/proc/thread-self/net/dev`.
//!
//! Not over rtnetlink: a `RTM_GETLINK` request may wait for the kernel's
//! routing lock (`rtnl_lock`), which other work — a network namespace
//! being torn down, a routing daemon loading a full table — can hold for
//! seconds, and the control thread that answers `esparto status` must not
//! wait on it. The procfs file is produced under RCU and answers at once;
//! `thread-self` makes it the calling thread's network namespace.

use std::io;

/// A device's counters. For a TUN device, *tx* is what the host sent into
/// it, towards the reader (the workers), and *rx* what the workers wrote,
/// towards the host.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceStats {
    /// Packets received.
    pub rx_packets: u64,
    /// Packets transmitted.
    pub tx_packets: u64,
    /// Received packets the kernel dropped (for a TUN device: written by
    /// a worker, then dropped on the way into the host's stack).
    pub rx_dropped: u64,
    /// Packets to transmit that the kernel dropped (for a TUN device: its
    /// queue towards the reader was full, or no queue was attached).
    pub tx_dropped: u64,
}

/// The counters of device `name` in the calling thread's network
/// namespace; `Ok(None)` if there is no such device.
pub fn stats(name: &str) -> io::Result<Option<DeviceStats>> {
    let text = std::fs::read_to_string("/proc/thread-self/net/dev")?;
    Ok(parse(&text, name))
}

/// The line of `name` in the text of `/proc/net/dev`: after `name:`,
/// received bytes, packets, errs, drop, fifo, frame, compressed,
/// multicast, then transmitted bytes, packets, errs, drop, …
fn parse(text: &str, name: &str) -> Option<DeviceStats> {
    text.lines().find_map(|line| {
        let (dev, rest) = line.split_once(':')?;
        if dev.trim() != name {
            return None;
        }
        let f: Vec<u64> = rest.split_ascii_whitespace().map(str::parse).collect::<Result<_, _>>().ok()?;
        if f.len() < 12 {
            return None;
        }
        Some(DeviceStats { rx_packets: f[1], rx_dropped: f[3], tx_packets: f[9], tx_dropped: f[11] })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo: 1809160    1554    0    0    0     0          0         0  1809160    1554    0    0    0     0       0          0
esparto0: 11323136   44231    0    7    0     0          0         0 12800000   50000    0 5769    0     0       0          0
";

    #[test]
    fn a_devices_line_is_found_by_name() {
        assert_eq!(
            parse(TEXT, "esparto0"),
            Some(DeviceStats { rx_packets: 44231, rx_dropped: 7, tx_packets: 50000, tx_dropped: 5769 })
        );
        assert_eq!(parse(TEXT, "lo").map(|s| s.tx_packets), Some(1554));
        assert_eq!(parse(TEXT, "esparto"), None);
        assert_eq!(parse("esparto0: 1 2 3\n", "esparto0"), None);
        assert_eq!(parse("esparto0: a b c d e f g h i j k l\n", "esparto0"), None);
    }

    #[test]
    fn loopback_is_there() {
        // Every network namespace has it.
        assert!(stats("lo").unwrap_or_default().is_some());
    }
}
