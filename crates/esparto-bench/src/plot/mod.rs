//! Charts of the benchmarks, as SVG files: the figures an operator puts in
//! a report, drawn from the same numbers the tables print.
//!
//! Three charts, each from plain data so that any benchmark (this binary's
//! or the test bed's) can feed it, whether just measured or read back from
//! a saved results file:
//!
//! - [`packet_sizes`]: throughput (Mbit/s) and zero-loss packet rate (kpps)
//!   against the inner packet size, one line per system — the LANCOM
//!   paper's Figure 1 (`esparto-testbed bench tunnel --svg`);
//! - [`active_sas`]: ESP rate (Mpps and Gbit/s) against the number of
//!   active SAs per worker on a log axis, one line per packet size and SA
//!   mix (`esparto bench dataplane --sas … --svg`);
//! - [`voip_calls`]: full-duplex calls per codec, Esparto beside strongSwan,
//!   at zero loss and at MOS ≥ 4.0, as grouped bars.
//!
//! The rates span decades (strongSwan's beside Esparto's, 64-byte packets
//! beside 1420-byte ones), so their axes are logarithmic: a ratio is the
//! same distance wherever it lies. A figure that is only a lower bound (the
//! generator or the search's cap, not the gateway, set it) is drawn with a
//! triangle instead of a dot, as the tables print it with `≥`. A zero (no
//! rate found) has no place on a log axis and is left out. Bars stay on a
//! linear axis: a bar's length is its count. The legend sits beside the
//! plots, never over a point, and a long footnote wraps.
//!
//! The drawing is plotters' with its SVG backend alone: text is written as
//! SVG `<text>` for the viewer to lay out, so no font files or font
//! libraries are needed to draw. Every chart carries a footnote naming where
//! its figures came from (machine, date, command).
//!
//! This module holds the charts; `draw` the frame, lines, axes and labels
//! they share.

mod draw;

use std::path::Path;

use anyhow::{Context, Result, bail};
use plotters::prelude::*;

use draw::{
    BAR_GROUP_WIDTH, BAR_HEIGHT, FONT, LEGEND_WIDTH, PALETTE, PANEL_HEIGHT, Panel, Swatch, WIDTH, check_series, frame,
    line, log_axis, number, text_above,
};

use crate::bench::dataplane::AgilityRow;

/// Most series one chart draws: beyond it lines cannot be told apart.
pub const MAX_SERIES: usize = PALETTE.len();
/// Most codecs one bar chart draws.
pub const MAX_CODECS: usize = 24;

/// One measured point of [`packet_sizes`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SizePoint {
    /// Inner IP packet size, bytes.
    pub ip_size: usize,
    /// Throughput at that size, Mbit/s of inner IP packets.
    pub mbps: f64,
    /// Zero-loss packet rate, packets/s.
    pub pps: f64,
    /// The figure is a lower bound (the generator or the cap set it).
    pub lower_bound: bool,
}

/// One system's line in [`packet_sizes`].
#[derive(Debug, Clone, PartialEq)]
pub struct SizeSeries {
    /// The legend: "Esparto", "strongSwan 5.9.8", "routed (no IPsec)".
    pub name: String,
    /// Points in any order (drawn by size).
    pub points: Vec<SizePoint>,
}

/// One measured point of [`active_sas`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SaPoint {
    /// Active SA pairs per worker.
    pub sas: usize,
    /// ESP round trips per second, all workers, millions.
    pub mpps: f64,
    /// The same in Gbit/s of inner packets.
    pub gbps: f64,
}

/// One line of [`active_sas`]: a packet size and SA mix.
#[derive(Debug, Clone, PartialEq)]
pub struct SaSeries {
    /// The legend: "64 B, round-robin".
    pub name: String,
    /// Points in any order (drawn by SA count).
    pub points: Vec<SaPoint>,
}

/// One codec's group of bars in [`voip_calls`]: the largest number of
/// concurrent full-duplex calls each gateway carried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodecCalls {
    /// "G.711/20 ms".
    pub codec: String,
    /// Esparto, with no packet lost.
    pub esparto_zero_loss: u64,
    /// Esparto, with every call at MOS ≥ 4.0.
    pub esparto_mos4: u64,
    /// strongSwan, with no packet lost.
    pub strongswan_zero_loss: u64,
    /// strongSwan, with every call at MOS ≥ 4.0.
    pub strongswan_mos4: u64,
}

/// Writes the packet-size chart (throughput above, packet rate below) to `path`.
pub fn packet_sizes(path: &Path, title: &str, note: &str, series: &[SizeSeries]) -> Result<()> {
    write(path, &packet_sizes_svg(title, note, series)?)
}

/// Writes the active-SAs chart (Mpps above, Gbit/s below) to `path`.
pub fn active_sas(path: &Path, title: &str, note: &str, series: &[SaSeries]) -> Result<()> {
    write(path, &active_sas_svg(title, note, series)?)
}

/// Writes the calls-per-codec bar chart to `path`; `note` names where the
/// figures came from.
pub fn voip_calls(path: &Path, note: &str, calls: &[CodecCalls]) -> Result<()> {
    write(path, &voip_calls_svg(note, calls)?)
}

/// Fails if a chart could not be written to `path` (its directory is
/// missing): checked before a benchmark runs, not after.
pub fn check_destination(path: &Path) -> Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !dir.is_dir() {
        bail!("--svg {}: no directory {}", path.display(), dir.display());
    }
    Ok(())
}

/// The lines of [`active_sas`] from `bench dataplane --sas` rows: one per
/// packet size and SA mix, in the order they first appear.
pub fn agility_series(rows: &[AgilityRow]) -> Vec<SaSeries> {
    let mut out: Vec<(usize, &str, SaSeries)> = Vec::new();
    for r in rows {
        let mix = r.mix.label();
        let point = SaPoint { sas: r.sas, mpps: r.mpps, gbps: r.gbps };
        match out.iter_mut().find(|(s, m, _)| *s == r.size && *m == mix) {
            Some((_, _, series)) => series.points.push(point),
            None => {
                let name = format!("{} B, {mix}", r.size);
                out.push((r.size, mix, SaSeries { name, points: vec![point] }));
            }
        }
    }
    out.into_iter().map(|(_, _, s)| s).collect()
}

/// The SVG text of [`packet_sizes`].
pub fn packet_sizes_svg(title: &str, note: &str, series: &[SizeSeries]) -> Result<String> {
    let series: Vec<&SizeSeries> = series.iter().filter(|s| s.points.iter().any(|p| p.pps > 0.0)).collect();
    check_series(series.len())?;
    let all = || series.iter().flat_map(|s| s.points.iter());
    let max_size = all().map(|p| p.ip_size).max().unwrap_or(1500) as f64;
    let x = 0.0..(max_size * 1.08).max(100.0);
    let panels: [Panel<SizePoint>; 2] = [
        ("throughput, Mbit/s of inner IP packets (log)", |p| p.mbps),
        ("zero-loss packet rate, kpps (log)", |p| p.pps / 1e3),
    ];
    let mut entries: Vec<(String, Swatch)> = series.iter().zip(PALETTE).map(|(s, c)| (s.name.clone(), Swatch::Line(c))).collect();
    if all().any(|p| p.lower_bound && p.pps > 0.0) {
        entries.push(("lower bound: the generator or the search's cap, not the gateway, set it".into(), Swatch::Triangle));
    }
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, 2 * PANEL_HEIGHT)).into_drawing_area();
        let plots = frame(&root, title, note, &entries)?;
        for (area, (desc, value)) in plots.split_evenly((2, 1)).iter().zip(panels) {
            let mut chart = ChartBuilder::on(area)
                .margin(12)
                .x_label_area_size(40)
                .y_label_area_size(70)
                .build_cartesian_2d(x.clone(), log_axis(all().map(value))?)?;
            chart
                .configure_mesh()
                .x_desc("inner IP packet size, bytes")
                .y_desc(desc)
                .x_label_formatter(&|v| format!("{v:.0}"))
                .y_label_formatter(&|v| number(*v))
                .axis_desc_style((FONT, 15))
                .label_style((FONT, 13))
                .draw()?;
            for (s, color) in series.iter().zip(PALETTE) {
                let pts = s.points.iter().map(|p| (p.ip_size as f64, value(p), p.lower_bound));
                line(&mut chart, pts, color)?;
            }
        }
        root.present()?;
    }
    Ok(svg)
}

/// The SVG text of [`active_sas`].
pub fn active_sas_svg(title: &str, note: &str, series: &[SaSeries]) -> Result<String> {
    let series: Vec<&SaSeries> = series.iter().filter(|s| s.points.iter().any(|p| p.mpps > 0.0)).collect();
    check_series(series.len())?;
    let all = || series.iter().flat_map(|s| s.points.iter());
    let decades = (all().map(|p| p.sas).max().unwrap_or(1).max(10) as f64).log10().ceil() as i32;
    let x = 1.0..10f64.powi(decades);
    let keys: Vec<f64> = (0..=decades).map(|e| 10f64.powi(e)).collect();
    let panels: [Panel<SaPoint>; 2] =
        [("ESP round trips, Mpps (log)", |p| p.mpps), ("Gbit/s of inner packets (log)", |p| p.gbps)];
    let entries: Vec<(String, Swatch)> = series.iter().zip(PALETTE).map(|(s, c)| (s.name.clone(), Swatch::Line(c))).collect();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, 2 * PANEL_HEIGHT)).into_drawing_area();
        let plots = frame(&root, title, note, &entries)?;
        for (area, (desc, value)) in plots.split_evenly((2, 1)).iter().zip(panels) {
            let mut chart = ChartBuilder::on(area)
                .margin(12)
                .x_label_area_size(40)
                .y_label_area_size(70)
                .build_cartesian_2d(x.clone().log_scale().with_key_points(keys.clone()), log_axis(all().map(value))?)?;
            chart
                .configure_mesh()
                .x_desc("active SA pairs per worker (log)")
                .y_desc(desc)
                .x_label_formatter(&|v| number(*v))
                .y_label_formatter(&|v| number(*v))
                .axis_desc_style((FONT, 15))
                .label_style((FONT, 13))
                .draw()?;
            for (s, color) in series.iter().zip(PALETTE) {
                line(&mut chart, s.points.iter().map(|p| (p.sas.max(1) as f64, value(p), false)), color)?;
            }
        }
        root.present()?;
    }
    Ok(svg)
}

/// The SVG text of [`voip_calls`].
pub fn voip_calls_svg(note: &str, calls: &[CodecCalls]) -> Result<String> {
    if calls.is_empty() {
        bail!("no codec to plot");
    }
    if calls.len() > MAX_CODECS {
        bail!("{} codecs: one chart draws at most {MAX_CODECS}", calls.len());
    }
    // The x axis counts in thousandths of a codec's slot (plotters labels
    // chosen points of an integer axis, not of a real one).
    const SLOT: i32 = 1000;
    type Bar = (&'static str, RGBColor, fn(&CodecCalls) -> u64);
    let light = |c: RGBColor| RGBColor(c.0 / 2 + 128, c.1 / 2 + 128, c.2 / 2 + 128);
    let bars: [Bar; 4] = [
        ("Esparto, zero loss", PALETTE[0], |c| c.esparto_zero_loss),
        ("Esparto, MOS ≥ 4.0", light(PALETTE[0]), |c| c.esparto_mos4),
        ("strongSwan, zero loss", PALETTE[1], |c| c.strongswan_zero_loss),
        ("strongSwan, MOS ≥ 4.0", light(PALETTE[1]), |c| c.strongswan_mos4),
    ];
    let most = calls.iter().flat_map(|c| bars.iter().map(move |b| (b.2)(c))).max().unwrap_or(0).max(1) as f64;
    let n = calls.len();
    let names: Vec<&str> = calls.iter().map(|c| c.codec.as_str()).collect();
    let width = WIDTH.max(BAR_GROUP_WIDTH * n as u32 + LEGEND_WIDTH + 80);
    let entries: Vec<(String, Swatch)> = bars.iter().map(|b| (b.0.to_string(), Swatch::Bar(b.1))).collect();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, BAR_HEIGHT)).into_drawing_area();
        let plot = frame(&root, "Full-duplex VoIP calls per gateway, by codec", note, &entries)?;
        let mut chart = ChartBuilder::on(&plot)
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(
                (-SLOT / 2..n as i32 * SLOT - SLOT / 2).with_key_points((0..n as i32).map(|i| i * SLOT).collect()),
                0.0..most * 1.15,
            )?;
        let label = |v: &i32| {
            usize::try_from((v + SLOT / 2).div_euclid(SLOT))
                .ok()
                .and_then(|i| names.get(i))
                .map_or_else(String::new, |s| s.to_string())
        };
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_desc("codec (packetisation)")
            .y_desc("concurrent full-duplex calls")
            .x_label_formatter(&label)
            .y_label_formatter(&|v| format!("{v:.0}"))
            .axis_desc_style((FONT, 15))
            .label_style((FONT, 13))
            .draw()?;
        // A group takes 84 % of its codec's slot; a bar 92 % of its share.
        let w = SLOT * 84 / 100 / bars.len() as i32;
        for (k, &(_, color, value)) in bars.iter().enumerate() {
            let left = |i: usize| i as i32 * SLOT - SLOT * 42 / 100 + k as i32 * w;
            chart.draw_series(calls.iter().enumerate().map(|(i, c)| {
                Rectangle::new([(left(i), 0.0), (left(i) + w * 92 / 100, value(c) as f64)], color.filled())
            }))?;
            chart.draw_series(calls.iter().enumerate().map(|(i, c)| {
                Text::new(
                    value(c).to_string(),
                    (left(i) + w * 46 / 100, value(c) as f64),
                    (FONT, 11).into_font().color(&BLACK).pos(text_above()),
                )
            }))?;
        }
        root.present()?;
    }
    Ok(svg)
}

/// The file written whole; its name in the error.
fn write(path: &Path, svg: &str) -> Result<()> {
    std::fs::write(path, svg).with_context(|| format!("writing the chart {}", path.display()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::bench::dataplane::SaMix;
    use draw::wrap;

    /// A parsed chart: every text node, and the elements by name and colour.
    struct Svg {
        texts: Vec<String>,
        /// (element name, its fill or stroke colour)
        shapes: Vec<(String, String)>,
    }

    impl Svg {
        /// Parses `svg`, which must be XML with an `<svg>` root.
        fn parse(svg: &str) -> Self {
            let doc = roxmltree::Document::parse(svg).unwrap();
            assert_eq!(doc.root_element().tag_name().name(), "svg");
            let texts = doc
                .descendants()
                .filter(|n| n.has_tag_name("text"))
                .filter_map(|n| n.text().map(|t| t.trim().to_string()))
                .collect();
            let shapes = doc
                .descendants()
                .filter(|n| n.is_element())
                .map(|n| {
                    let colour = [n.attribute("stroke"), n.attribute("fill")]
                        .into_iter()
                        .flatten()
                        .find(|c| *c != "none")
                        .unwrap_or_default();
                    (n.tag_name().name().to_string(), colour.to_string())
                })
                .collect();
            Svg { texts, shapes }
        }

        /// `<name>` elements drawn in `colour`.
        fn count(&self, name: &str, colour: RGBColor) -> usize {
            let c = format!("#{:02X}{:02X}{:02X}", colour.0, colour.1, colour.2);
            self.shapes.iter().filter(|(n, k)| n == name && *k == c).count()
        }

        fn has(&self, s: &str) -> bool {
            self.texts.iter().any(|t| t.contains(s))
        }
    }

    fn p(ip_size: usize, pps: f64, lower_bound: bool) -> SizePoint {
        SizePoint { ip_size, mbps: pps * ip_size as f64 * 8.0 / 1e6, pps, lower_bound }
    }

    #[test]
    fn packet_sizes_draws_every_series_on_both_panels() {
        let series = vec![
            SizeSeries { name: "Esparto".into(), points: vec![p(1400, 300_000.0, false), p(64, 900_000.0, true)] },
            SizeSeries { name: "strongSwan".into(), points: vec![p(64, 30_000.0, false), p(1400, 25_000.0, false)] },
            SizeSeries { name: "routed (no IPsec)".into(), points: vec![p(64, 0.0, false), p(1400, 800_000.0, false)] },
        ];
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tunnel.svg");
        packet_sizes(&path, "Zero-loss rate by packet size", "machine: test", &series).unwrap();
        let svg = Svg::parse(&std::fs::read_to_string(&path).unwrap());
        for s in [
            "Esparto",
            "strongSwan",
            "routed (no IPsec)",
            "inner IP packet size, bytes",
            "throughput, Mbit/s of inner IP packets",
            "zero-loss packet rate, kpps",
            "Zero-loss rate by packet size",
            "machine: test",
            "lower bound",
        ] {
            assert!(svg.has(s), "{s:?} missing from {:?}", svg.texts);
        }
        // Each series: its line on each panel and its legend swatch (a line
        // with a dot); a dot per exact non-zero figure (the routed 64 B zero
        // is left out), a triangle per lower bound.
        let [esparto, swan, routed] = [PALETTE[0], PALETTE[1], PALETTE[2]];
        for c in [esparto, swan, routed] {
            assert_eq!(svg.count("polyline", c), 2 + 1);
        }
        assert_eq!(svg.count("circle", esparto), 2 + 1);
        assert_eq!(svg.count("polygon", esparto), 2);
        assert_eq!(svg.count("circle", swan), 2 * 2 + 1);
        assert_eq!(svg.count("circle", routed), 2 + 1);
        // The lower bounds' legend entry.
        assert_eq!(svg.count("polygon", BLACK), 1);
        // Without a lower bound, no such entry.
        let exact: Vec<SizeSeries> = series[1..].to_vec();
        let svg = Svg::parse(&packet_sizes_svg("t", "n", &exact).unwrap());
        assert!(!svg.has("lower bound") && svg.count("polygon", BLACK) == 0);
    }

    #[test]
    fn empty_or_zero_figures_are_refused() {
        assert!(packet_sizes_svg("t", "n", &[]).is_err());
        let zero = SizeSeries { name: "x".into(), points: vec![p(64, 0.0, false)] };
        assert!(packet_sizes_svg("t", "n", &[zero]).unwrap_err().to_string().contains("no figure"));
        let many: Vec<SizeSeries> =
            (0..=MAX_SERIES).map(|i| SizeSeries { name: i.to_string(), points: vec![p(64, 1.0, false)] }).collect();
        assert!(packet_sizes_svg("t", "n", &many).is_err());
        assert!(voip_calls_svg("n", &[]).is_err());
        // An unwritable path names the file.
        let e = voip_calls(Path::new("/nonexistent-dir/x.svg"), "n", &calls()).unwrap_err();
        assert!(format!("{e:#}").contains("/nonexistent-dir/x.svg"), "{e:#}");
    }

    fn row(size: usize, sas: usize, mix: SaMix, mpps: f64) -> AgilityRow {
        AgilityRow {
            size,
            sas,
            mix,
            workers: 2,
            suite: "aes256gcm16".into(),
            mpps,
            gbps: mpps * size as f64 * 8.0 / 1e3,
            mpps_1: 1.0,
            ratio: 1.0,
            packets: 1,
            sas_used: sas,
            out_bytes_per_sa: None,
            in_bytes_per_sa: None,
            out_heap_per_sa: None,
            in_heap_per_sa: None,
            prefetch: true,
        }
    }

    #[test]
    fn active_sas_draws_a_line_per_size_and_mix() {
        let rows = vec![
            row(64, 1, SaMix::RoundRobin, 1.2),
            row(1420, 1, SaMix::RoundRobin, 0.5),
            row(64, 100_000, SaMix::RoundRobin, 0.8),
            row(1420, 100_000, SaMix::RoundRobin, 0.45),
            row(64, 100_000, SaMix::Zipf, 1.0),
        ];
        let series = agility_series(&rows);
        assert_eq!(
            series.iter().map(|s| (s.name.as_str(), s.points.len())).collect::<Vec<_>>(),
            [("64 B, round-robin", 2), ("1420 B, round-robin", 2), ("64 B, zipf", 1)]
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sas.svg");
        active_sas(&path, "Key agility", "aes256gcm16, 2 workers", &series).unwrap();
        let svg = Svg::parse(&std::fs::read_to_string(&path).unwrap());
        for s in ["64 B, round-robin", "1420 B, round-robin", "64 B, zipf", "active SA pairs per worker", "Mpps", "Gbit/s"] {
            assert!(svg.has(s), "{s:?} missing from {:?}", svg.texts);
        }
        assert!(!svg.has("1420 B, zipf"));
        // The log axis is labelled by decade up to 100k.
        assert!(svg.has("100k") && svg.has("1k"), "{:?}", svg.texts);
        for (c, dots) in [(PALETTE[0], 2), (PALETTE[1], 2), (PALETTE[2], 1)] {
            assert_eq!(svg.count("polyline", c), 2 + 1);
            assert_eq!(svg.count("circle", c), 2 * dots + 1);
        }
    }

    fn calls() -> Vec<CodecCalls> {
        vec![
            CodecCalls {
                codec: "G.711/20 ms".into(),
                esparto_zero_loss: 2400,
                esparto_mos4: 2300,
                strongswan_zero_loss: 210,
                strongswan_mos4: 190,
            },
            CodecCalls {
                codec: "G.729/30 ms".into(),
                esparto_zero_loss: 3100,
                esparto_mos4: 3000,
                strongswan_zero_loss: 250,
                strongswan_mos4: 0,
            },
        ]
    }

    #[test]
    fn voip_calls_draws_four_bars_per_codec() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("voip.svg");
        voip_calls(&path, "bench voip, test", &calls()).unwrap();
        let svg = Svg::parse(&std::fs::read_to_string(&path).unwrap());
        for s in [
            "G.711/20 ms",
            "G.729/30 ms",
            "Esparto, zero loss",
            "Esparto, MOS ≥ 4.0",
            "strongSwan, zero loss",
            "strongSwan, MOS ≥ 4.0",
            "concurrent full-duplex calls",
            "3100",
            "190",
        ] {
            assert!(svg.has(s), "{s:?} missing from {:?}", svg.texts);
        }
        // Per kind of bar: one per codec, and its legend swatch.
        assert_eq!(svg.count("rect", PALETTE[0]), 2 + 1);
        assert_eq!(svg.count("rect", PALETTE[1]), 2 + 1);
    }

    #[test]
    fn long_notes_wrap_at_spaces() {
        assert_eq!(wrap("a bb ccc dddd", 6), ["a bb", "ccc", "dddd"]);
        assert_eq!(wrap("averyveryverylongword x", 4), ["averyveryverylongword", "x"]);
        assert_eq!(wrap("", 4), [""]);
        // A long footnote becomes several <text> lines, none of them lost.
        let note = (0..60).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" ");
        let svg = Svg::parse(&voip_calls_svg(&note, &calls()).unwrap());
        let lines: Vec<&String> = svg.texts.iter().filter(|t| t.starts_with('w')).collect();
        assert!(lines.len() >= 2, "{lines:?}");
        assert_eq!(lines.iter().map(|l| l.split(' ').count()).sum::<usize>(), 60);
    }
}
