//! `esparto-testbed bench setup`'s report as text: the tunnel run as a two-column
//! table (initiator, responder), then the X25519 ceiling and SPI costs, then
//! the config load table.

use super::{Report, peer, tunnels};

/// `12345.6` → `"12,346"`.
fn thousands(x: f64) -> String {
    let s = format!("{:.0}", x.abs());
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if x < 0.0 && s != "0" {
        format!("-{out}")
    } else {
        out
    }
}

/// The report as text.
pub fn render(r: &Report) -> String {
    let mut s = String::new();
    // Writing to a String cannot fail.
    let _ = render_into(&mut s, r);
    s
}

fn render_into(s: &mut String, r: &Report) -> std::fmt::Result {
    use std::fmt::Write as _;
    writeln!(
        s,
        "esparto-testbed bench setup — IKE {}, auth {}, ESP {}, one Child SA per IKE SA",
        r.ike_proposal, r.auth, r.esp_proposal
    )?;
    if let Some(t) = &r.tunnels {
        let (i, p) = (&t.initiator, &t.responder);
        let cpu = |c: Option<usize>| c.map_or("-".to_string(), |c| c.to_string());
        writeln!(
            s,
            "{} tunnels over {} connection{}, {} in flight, {}, initiator on CPU {}, responder on CPU {}",
            thousands(t.tunnels as f64),
            thousands(t.connections as f64),
            if t.connections == 1 { "" } else { "s" },
            t.concurrency,
            match t.topology {
                tunnels::PeerLink::Veth => "veth between two namespaces",
                tunnels::PeerLink::Loopback => "loopback in one namespace",
            },
            cpu(i.cpu),
            cpu(p.cpu),
        )?;
        writeln!(s, "{}.\n", r.note)?;
        writeln!(
            s,
            "tunnels up               {} of {} in {:.3} s: {} tunnels/s (wall clock){}",
            thousands(i.tunnels as f64),
            thousands(t.tunnels as f64),
            t.seconds,
            thousands(t.tunnels_per_second),
            if t.clean {
                ""
            } else {
                "  ** NOT CLEAN: see failures, retransmissions, drops **"
            }
        )?;
        writeln!(s, "{:<24} {:>16} {:>16}", "", "initiator", "responder")?;
        let row = |s: &mut String, name: &str, a: String, b: String| {
            writeln!(s, "{name:<24} {a:>16} {b:>16}")
        };
        row(
            s,
            "Child SAs counted",
            thousands(i.tunnels as f64),
            thousands(p.tunnels as f64),
        )?;
        row(
            s,
            "CPU seconds",
            format!("{:.3}", i.cpu_seconds),
            format!("{:.3}", p.cpu_seconds),
        )?;
        row(
            s,
            "  user / system",
            format!("{:.2} / {:.2}", i.user_seconds, i.system_seconds),
            format!("{:.2} / {:.2}", p.user_seconds, p.system_seconds),
        )?;
        row(
            s,
            "tunnels per CPU-second",
            thousands(i.tunnels_per_cpu_second),
            thousands(p.tunnels_per_cpu_second),
        )?;
        row(
            s,
            "RSS per tunnel, bytes",
            thousands(i.rss_per_tunnel),
            thousands(p.rss_per_tunnel),
        )?;
        row(
            s,
            "RSS before → after, MiB",
            format!("{:.1} → {:.1}", mib(i.rss_before), mib(i.rss_after)),
            format!("{:.1} → {:.1}", mib(p.rss_before), mib(p.rss_after)),
        )?;
        let heap = |h: Option<f64>| h.map_or("-".to_string(), thousands);
        row(
            s,
            "heap per tunnel, bytes",
            heap(i.heap_per_tunnel),
            heap(p.heap_per_tunnel),
        )?;
        row(
            s,
            "datagrams sent / recv",
            format!("{} / {}", i.datagrams_sent, i.datagrams_received),
            format!("{} / {}", p.datagrams_sent, p.datagrams_received),
        )?;
        row(
            s,
            "retransmissions",
            i.retransmissions.to_string(),
            p.retransmissions.to_string(),
        )?;
        row(
            s,
            "socket drops",
            i.socket_drops.to_string(),
            p.socket_drops.to_string(),
        )?;
        row(
            s,
            "failures",
            i.failures.to_string(),
            p.failures.to_string(),
        )?;
        for why in i.failure_reasons.iter().chain(&p.failure_reasons) {
            writeln!(s, "  {why}")?;
        }
        if let Some(l) = &i.latency {
            writeln!(
                s,
                "handshake latency        median {:.1} ms, p99 {:.1} ms, max {:.1} ms (initiate → Child SA, queueing included)",
                l.median_ms, l.p99_ms, l.max_ms
            )?;
        }
        if !i.deciles.is_empty() {
            let d: Vec<String> = i.deciles.iter().map(|x| format!("{x:.2}")).collect();
            writeln!(s, "10 %, 20 %, … 100 % up at {} s", d.join(", "))?;
        }
        if !r.heap_counted {
            writeln!(
                s,
                "(heap per tunnel: build with `--features count-alloc` to count it)"
            )?;
        }
    }
    writeln!(
        s,
        "\nX25519 keygen+agree on one core: {}/CPU-s — the ceiling for tunnels per CPU-second per side",
        thousands(r.x25519.per_second)
    )?;
    let c = &r.spi;
    writeln!(
        s,
        "SPIs ({} live): CSPRNG 8 bytes {:.0} ns; IKE SPI {:.0} ns; ESP SPI steering ({} workers) {:.0} ns, random {:.0} ns; {:.0} ns per tunnel per side",
        thousands(c.live as f64),
        c.csprng_8_bytes_ns,
        c.ike_spi_ns,
        c.workers,
        c.esp_spi_steering_ns,
        c.esp_spi_random_ns,
        c.per_tunnel_per_side_ns,
    )?;
    if let Some(t) = &r.tunnels {
        let per_tunnel_ns = |p: &peer::PeerReport| {
            if p.tunnels > 0 {
                p.cpu_seconds * 1e9 / p.tunnels as f64
            } else {
                0.0
            }
        };
        let (a, b) = (per_tunnel_ns(&t.initiator), per_tunnel_ns(&t.responder));
        if a > 0.0 && b > 0.0 {
            writeln!(
                s,
                "  = {:.2} % of the initiator's and {:.2} % of the responder's CPU time per tunnel ({:.1} µs, {:.1} µs)",
                100.0 * c.per_tunnel_per_side_ns / a,
                100.0 * c.per_tunnel_per_side_ns / b,
                a / 1e3,
                b / 1e3
            )?;
        }
    }
    if !r.config_load.is_empty() {
        writeln!(
            s,
            "\nconfig load (config::parse_str, then every connection and PSK into an IKE endpoint)"
        )?;
        writeln!(
            s,
            "{:>12} {:>10} {:>11} {:>12} {:>16}",
            "connections", "file KiB", "parse ms", "endpoint ms", "µs/connection"
        )?;
        for row in &r.config_load {
            writeln!(
                s,
                "{:>12} {:>10} {:>11.1} {:>12.1} {:>16.1}",
                thousands(row.connections as f64),
                row.file_bytes / 1024,
                row.parse_ms,
                row.endpoint_ms,
                row.us_per_connection
            )?;
        }
        if let Some(g) = &r.config_load_growth {
            writeln!(
                s,
                "time per connection, largest over smallest size: ×{:.2} (loader ×{:.2}, endpoint ×{:.2}; 1.00 = linear)",
                g.total, g.parse, g.endpoint
            )?;
        }
    }
    Ok(())
}

fn mib(b: u64) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0.0), "0");
        assert_eq!(thousands(999.4), "999");
        assert_eq!(thousands(1000.0), "1,000");
        assert_eq!(thousands(1234567.8), "1,234,568");
        assert_eq!(thousands(-4096.0), "-4,096");
    }
}
