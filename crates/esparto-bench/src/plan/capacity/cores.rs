//! The cores a link needs, per measurement: a row of the capacity table
//! from the in-process cost of a round trip ([`in_process`]) or from the
//! gateways' CPU seconds per GB end to end ([`end_to_end`]), with the cells
//! marked that go beyond what was measured.

use serde::Serialize;

use super::mix::Mix;
use crate::plan::curve::{Curve, Point, Shape};
use crate::plan::thousands;
use crate::results::{DataplaneData, Loaded, TunnelData};

/// The cores one link rate needs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LinkCores {
    /// Mbit/s each way.
    pub mbps: f64,
    /// Cores at the measured clock.
    pub cores: f64,
    /// The same in MHz of that clock.
    pub mhz: f64,
    /// Beyond what was measured (see the row's notes).
    pub extrapolated: bool,
}

/// One measurement's row of the table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// The suite.
    pub suite: String,
    /// "ESP in process", "end to end, UDP", "end to end, TCP 4 streams".
    pub measurement: String,
    /// The file and date.
    pub from: String,
    /// The clock the cycles are counted at, Hz.
    pub clock_hz: f64,
    /// Mean cost of a packet of the mix (one round trip), cycles.
    pub cycles_per_packet: f64,
    /// The same per byte.
    pub cycles_per_byte: f64,
    /// MHz per Mbit/s each way (FreeS/WAN's factor, 25 in 2002).
    pub mhz_per_mbps: f64,
    /// Cores per link rate.
    pub links: Vec<LinkCores>,
    /// Where the figures go beyond the measurement, and other caveats.
    pub notes: Vec<String>,
}

/// The in-process row of one suite.
pub fn in_process(d: &Loaded<DataplaneData>, mix: &Mix, mbps: &[f64]) -> Option<Row> {
    let data = &d.saved.data;
    let clock = d.saved.clock_hz;
    let mut notes = Vec::new();
    let imix_row = data.rows.iter().find(|r| r.size == "imix");
    let cpp = match imix_row {
        Some(r) if mix.name == "imix" => r.cycles_per_byte * r.bytes,
        _ => {
            let points = data.rows.iter().filter_map(|r| {
                let size = r.size.parse().ok()?;
                Some(Point { size, value: r.cycles_per_byte * r.bytes, lower_bound: false })
            });
            let curve = Curve::new(points, Shape::Cost)?;
            mix_cost(&curve, mix, &mut notes)
        }
    };
    let scaling = crate::bench::median(&data.rows.iter().map(|r| r.scaling).collect::<Vec<_>>());
    let workers = data.workers;
    let links = cores_per_link(mbps, mix.mean_bytes(), cpp, clock, |_, cores| cores > workers as f64);
    if links.iter().any(|l| l.extrapolated) {
        notes.push(format!(
            "*: more than the {workers} cores measured: assumes every added core carries what one does (measured: {workers} workers {scaling:.2} × one)"
        ));
    }
    notes.push("ESP code alone, no kernel I/O: a floor the gateway does not reach".into());
    let head = Head { suite: &data.suite, measurement: "ESP in process".into(), from: d.provenance(), clock_hz: clock };
    Some(row(head, mix, cpp, links, notes))
}

/// The end-to-end rows: UDP by size for the mix, and each TCP figure.
pub fn end_to_end(t: &Loaded<TunnelData>, mix: &Mix, mbps: &[f64]) -> Vec<Row> {
    let data = &t.saved.data;
    let clock = t.saved.clock_hz;
    let workers = data.workers as f64;
    let mut rows = Vec::new();
    let common = "the gateway processes' CPU (both ends of a packet's way), the kernel's forwarding not included";
    // CPU seconds per packet at each size, at the zero-loss rate.
    let points = data.zero_loss.iter().filter_map(|z| {
        let s = z.gateway_s_per_gb?;
        (z.pps > 0.0).then(|| Point { size: z.ip_size, value: s * z.ip_size as f64 / 1e9 * clock, lower_bound: false })
    });
    if let Some(curve) = Curve::new(points, Shape::Cost) {
        let mut notes = Vec::new();
        let cpp = mix_cost(&curve, mix, &mut notes);
        // What the test bed carried at the mix's sizes, Mbit/s.
        let rates = crate::plan::voip::zero_loss_curve(data);
        let carried = rates.map_or(0.0, |r| mix.mean_of(|s| r.at(s).value) * mix.mean_bytes() * 8.0 / 1e6);
        let links = cores_per_link(mbps, mix.mean_bytes(), cpp, clock, |m, cores| m > carried || cores > workers);
        if links.iter().any(|l| l.extrapolated) {
            notes.push(format!(
                "*: beyond the measurement ({} Mbit/s of this mix on {} workers per gateway): assumes the cost per packet holds",
                thousands(carried),
                data.workers
            ));
        }
        notes.push(format!("{common}; at the zero-loss rate (lower rates batch less and cost more per packet)"));
        let head =
            Head { suite: &data.suite, measurement: "end to end, UDP".into(), from: t.provenance(), clock_hz: clock };
        rows.push(row(head, mix, cpp, links, notes));
    }
    for tcp in &data.tcp {
        let Some(s) = tcp.gateway_s_per_gb else { continue };
        // TCP moves in TSO/GRO super-packets: its cost is per byte, whatever the mix.
        let cpp = s / 1e9 * clock * mix.mean_bytes();
        let links = cores_per_link(mbps, mix.mean_bytes(), cpp, clock, |m, cores| m > tcp.mbps || cores > workers);
        let mut notes = Vec::new();
        if links.iter().any(|l| l.extrapolated) {
            notes.push(format!(
                "*: beyond the measured {} Mbit/s: assumes the cost per byte holds",
                thousands(tcp.mbps)
            ));
        }
        notes.push(format!("{common}; TCP in TSO/GRO super-packets, per byte: the mix does not apply"));
        let streams = if tcp.streams == 1 { "1 stream".to_string() } else { format!("{} streams", tcp.streams) };
        let head = Head {
            suite: &data.suite,
            measurement: format!("end to end, TCP {streams}"),
            from: t.provenance(),
            clock_hz: clock,
        };
        rows.push(row(head, mix, cpp, links, notes));
    }
    rows
}

/// The cost of the mix from a curve of cost per packet by size; notes
/// where the mix leaves the measured sizes.
fn mix_cost(curve: &Curve, mix: &Mix, notes: &mut Vec<String>) -> f64 {
    let mut outside = Vec::new();
    let mean = mix.mean_of(|s| {
        let e = curve.at(s);
        if e.source.extrapolated() {
            outside.push(s);
        }
        e.value
    });
    if !outside.is_empty() {
        let sizes = curve.sizes();
        notes.push(format!(
            "sizes {} outside the measured {}–{} B: cost extrapolated",
            outside.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(", "),
            sizes[0],
            sizes[sizes.len() - 1]
        ));
    }
    mean
}

/// Cores for each link rate, at `cycles_per_packet` and `clock_hz`;
/// `beyond(mbps, cores)` says whether a cell leaves the measurement.
fn cores_per_link(
    mbps: &[f64],
    mix_bytes: f64,
    cycles_per_packet: f64,
    clock_hz: f64,
    beyond: impl Fn(f64, f64) -> bool,
) -> Vec<LinkCores> {
    mbps.iter()
        .map(|&m| {
            let cycles = m * 1e6 / 8.0 / mix_bytes * cycles_per_packet;
            let cores = cycles / clock_hz;
            LinkCores { mbps: m, cores, mhz: cycles / 1e6, extrapolated: beyond(m, cores) }
        })
        .collect()
}

/// What a row measured and where: suite, measurement, file, clock.
struct Head<'a> {
    suite: &'a str,
    measurement: String,
    from: String,
    clock_hz: f64,
}

fn row(head: Head<'_>, mix: &Mix, cpp: f64, links: Vec<LinkCores>, notes: Vec<String>) -> Row {
    let cpb = cpp / mix.mean_bytes();
    Row {
        suite: head.suite.into(),
        measurement: head.measurement,
        from: head.from,
        clock_hz: head.clock_hz,
        cycles_per_packet: cpp,
        cycles_per_byte: cpb,
        mhz_per_mbps: cpb / 8.0,
        links,
        notes,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::path::PathBuf;

    use super::*;
    use crate::plan::capacity::{LINKS_MBPS, Plan, render};
    use crate::results::fixtures::{dataplane_data, row as dp_row, tunnel_data};
    use crate::results::{Kind, TcpThroughput, envelope};

    fn loaded<T>(kind: Kind, data: T) -> Loaded<T> {
        Loaded { path: PathBuf::from(format!("/results/{kind}.json")), saved: envelope(kind, data) }
    }

    /// FreeS/WAN's rule, exactly: 140 cycles per byte at a given clock make
    /// C × 140 / 8 MHz for C Mbit/s.
    #[test]
    fn freeswan_rule() {
        let mut data = dataplane_data("aes256gcm16");
        data.rows = vec![dp_row(64, 140.0), dp_row(1420, 140.0)];
        data.workers = 1;
        let mut d = loaded(Kind::Dataplane, data);
        d.saved.clock_hz = 1e9;
        let r = in_process(&d, &Mix::fixed(1000), &LINKS_MBPS).unwrap();
        assert!((r.cycles_per_byte - 140.0).abs() < 1e-9);
        assert!((r.mhz_per_mbps - 17.5).abs() < 1e-9);
        let l10 = r.links[0];
        assert!((l10.mhz - 175.0).abs() < 1e-6 && (l10.cores - 0.175).abs() < 1e-9, "{l10:?}");
        assert!(!l10.extrapolated);
        // 100 Mbit/s: 1,750 MHz, more than the one core measured.
        assert!(r.links[1].extrapolated);
        assert!(r.notes.iter().any(|n| n.contains("more than the 1 cores measured")), "{:?}", r.notes);
        assert!(r.from.contains("/results/dataplane.json"));
    }

    #[test]
    fn the_imix_row_is_used_for_imix_and_sizes_outside_are_said() {
        let mut data = dataplane_data("aes256gcm16");
        let mut imix = dp_row(347, 3.0);
        imix.size = "imix".into();
        imix.bytes = Mix::imix().mean_bytes();
        data.rows.push(imix);
        let d = loaded(Kind::Dataplane, data);
        let r = in_process(&d, &Mix::imix(), &LINKS_MBPS).unwrap();
        assert!((r.cycles_per_byte - 3.0).abs() < 1e-9, "{r:?}");
        let r = in_process(&d, &Mix::fixed(40), &LINKS_MBPS).unwrap();
        assert!(r.notes.iter().any(|n| n.contains("sizes 40 outside the measured 64–1420 B")), "{:?}", r.notes);
        // 40 B costs what 64 B does (12.88 cycles per byte × 64).
        assert!((r.cycles_per_packet - 12.88 * 64.0).abs() < 1e-6);
    }

    #[test]
    fn end_to_end_rows_from_cpu_per_gb() {
        // 10 s per GB at 1,000 and 2,000 pps: 10 ns per byte, 26 cycles per byte at 2.6 GHz.
        let mut data = tunnel_data(&[(64, 1_000.0), (1400, 2_000.0)]);
        data.tcp = vec![TcpThroughput { streams: 4, mbps: 5_000.0, gateway_s_per_gb: Some(2.0) }];
        let mut t = loaded(Kind::Tunnel, data);
        t.saved.clock_hz = 2.6e9;
        let rows = end_to_end(&t, &Mix::fixed(1400), &[1.0, 100.0]);
        assert_eq!(rows.len(), 2);
        let udp = &rows[0];
        assert!((udp.cycles_per_byte - 26.0).abs() < 1e-9, "{udp:?}");
        // 1 Mbit/s = 125,000 B/s × 10 ns = 0.125 % of a core; 2,000 pps × 1,400 B = 22.4 Mbit/s carried.
        assert!((udp.links[0].cores - 0.00125).abs() < 1e-12);
        assert!(!udp.links[0].extrapolated && udp.links[1].extrapolated);
        let tcp = &rows[1];
        assert_eq!(tcp.measurement, "end to end, TCP 4 streams");
        assert!((tcp.cycles_per_byte - 5.2).abs() < 1e-9);
        assert!(!tcp.links[1].extrapolated);
        let text =
            render(&Plan { mix: Mix::fixed(1400), links_mbps: vec![1.0, 100.0], rows, notes: vec![], ignored: vec![] });
        assert!(text.contains("[1] end to end, UDP: /results/tunnel.json"), "{text}");
        assert!(text.contains("0.00125 ") && text.contains('*'), "{text}");
    }
}
