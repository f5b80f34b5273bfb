//! The drawing kit the charts share: the frame (white background, title,
//! wrapped footnote, legend on the right), a series' line with its dots and
//! lower-bound triangles, logarithmic axes over whole decades, axis labels,
//! the palette and the layout's sizes.

use anyhow::{Result, bail};
use plotters::coord::Shift;
use plotters::coord::combinators::WithKeyPoints;
use plotters::prelude::*;

use super::MAX_SERIES;

/// Width of a chart, pixels.
pub(super) const WIDTH: u32 = 1000;
/// Height of one panel of a two-panel chart, pixels.
pub(super) const PANEL_HEIGHT: u32 = 360;
/// Height of a line of the footnote, pixels.
pub(super) const FOOT_LINE: u32 = 16;
/// Characters per line of the footnote (12-pixel text across [`WIDTH`]).
pub(super) const NOTE_CHARS: usize = 150;
/// Width of the legend on the right, pixels.
pub(super) const LEGEND_WIDTH: u32 = 270;
/// Characters per line of a legend entry.
pub(super) const LEGEND_CHARS: usize = 34;
/// Height of the bar chart, pixels.
pub(super) const BAR_HEIGHT: u32 = 560;
/// Width per codec group of the bar chart, pixels (at least [`WIDTH`] in all).
pub(super) const BAR_GROUP_WIDTH: u32 = 110;

/// Series colours, in order (colour-blind safe, after Okabe and Ito).
pub(super) const PALETTE: [RGBColor; 7] = [
    RGBColor(0, 114, 178),   // blue
    RGBColor(213, 94, 0),    // vermilion
    RGBColor(0, 158, 115),   // green
    RGBColor(204, 121, 167), // purple
    RGBColor(230, 159, 0),   // orange
    RGBColor(86, 180, 233),  // sky blue
    RGBColor(90, 90, 90),    // grey
];

pub(super) const FONT: &str = "sans-serif";

/// Text anchored by its bottom centre, a few pixels above the point.
pub(super) fn text_above() -> plotters::style::text_anchor::Pos {
    use plotters::style::text_anchor::{HPos, Pos, VPos};
    Pos::new(HPos::Center, VPos::Bottom)
}

pub(super) fn check_series(n: usize) -> Result<()> {
    if n == 0 {
        bail!("no figure to plot (every series is empty or zero)");
    }
    if n > MAX_SERIES {
        bail!("{n} series: one chart draws at most {MAX_SERIES}");
    }
    Ok(())
}

/// A panel of a two-panel chart: its y axis and what it shows of a point.
pub(super) type Panel<P> = (&'static str, fn(&P) -> f64);

pub(super) type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

/// How a legend entry is marked.
#[derive(Debug, Clone, Copy)]
pub(super) enum Swatch {
    /// A series' line with its dot.
    Line(RGBColor),
    /// The lower-bound marker.
    Triangle,
    /// A bar's colour.
    Bar(RGBColor),
}

/// White background, the title on top, the footnote (wrapped) at the
/// bottom, the legend on the right; returns the area left for the plots.
pub(super) fn frame<'a>(root: &Area<'a>, title: &str, note: &str, legend: &[(String, Swatch)]) -> Result<Area<'a>> {
    root.fill(&WHITE)?;
    let (w, h) = root.dim_in_pixel();
    let note = wrap(note, NOTE_CHARS);
    let (body, foot) = root.split_vertically(h - FOOT_LINE * note.len() as u32 - 10);
    let grey = (FONT, 12).into_font().color(&RGBColor(80, 80, 80));
    for (k, l) in note.iter().enumerate() {
        foot.draw(&Text::new(l.clone(), (10, 4 + FOOT_LINE as i32 * k as i32), grey.clone()))?;
    }
    let body = body.titled(title, (FONT, 20))?;
    let (plots, side) = body.split_horizontally(w - LEGEND_WIDTH);
    let mut y = 24;
    for (label, swatch) in legend {
        let mid = y + 8;
        match *swatch {
            Swatch::Line(c) => {
                side.draw(&PathElement::new(vec![(4, mid), (30, mid)], c.stroke_width(2)))?;
                side.draw(&Circle::new((17, mid), 4, c.filled()))?;
            }
            Swatch::Triangle => side.draw(&TriangleMarker::new((17, mid), 6, BLACK.filled()))?,
            Swatch::Bar(c) => side.draw(&Rectangle::new([(9, mid - 7), (25, mid + 7)], c.filled()))?,
        }
        let lines = wrap(label, LEGEND_CHARS);
        for (k, l) in lines.iter().enumerate() {
            side.draw(&Text::new(l.clone(), (38, y + 17 * k as i32), (FONT, 13)))?;
        }
        y += 17 * lines.len() as i32 + 10;
    }
    Ok(plots)
}

/// `text` in lines of at most `width` characters, broken at spaces (a
/// longer word gets a line of its own).
pub(super) fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() || lines.is_empty() {
        lines.push(line);
    }
    lines
}

/// One series' line through its points (in x order, zeros left out), a
/// dot per exact figure and a triangle per lower bound.
pub(super) fn line<'a, X, Y>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, Y>>,
    pts: impl Iterator<Item = (f64, f64, bool)>,
    color: RGBColor,
) -> Result<()>
where
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    let mut pts: Vec<(f64, f64, bool)> = pts.filter(|p| p.1 > 0.0 && p.1.is_finite()).collect();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    chart.draw_series(LineSeries::new(pts.iter().map(|&(x, y, _)| (x, y)), color.stroke_width(2)))?;
    chart.draw_series(pts.iter().filter(|p| !p.2).map(|&(x, y, _)| Circle::new((x, y), 4, color.filled())))?;
    chart.draw_series(pts.iter().filter(|p| p.2).map(|&(x, y, _)| TriangleMarker::new((x, y), 6, color.filled())))?;
    Ok(())
}

/// A log axis over whole decades around the positive values, labelled at
/// 1, 2 and 5 times each power of ten when it spans three decades or
/// fewer, else at the powers of ten.
pub(super) fn log_axis(values: impl Iterator<Item = f64>) -> Result<WithKeyPoints<LogCoord<f64>>> {
    let r = log_range(values)?;
    let (lo, hi) = (r.start.log10().round() as i32, r.end.log10().round() as i32);
    let steps: &[f64] = if hi - lo <= 3 { &[1.0, 2.0, 5.0] } else { &[1.0] };
    let keys = (lo..=hi).flat_map(|e| steps.iter().map(move |m| m * 10f64.powi(e))).filter(|v| *v <= r.end * 1.000_001).collect();
    Ok(r.log_scale().with_key_points(keys))
}

/// Whole decades around the positive values (a log axis shows no zero).
fn log_range(values: impl Iterator<Item = f64>) -> Result<std::ops::Range<f64>> {
    let (mut lo, mut hi) = (f64::INFINITY, 0.0f64);
    for v in values.filter(|v| v.is_finite() && *v > 0.0) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if hi <= 0.0 {
        bail!("no positive figure to plot");
    }
    let lo = 10f64.powf(lo.log10().floor());
    let hi = 10f64.powf(hi.log10().ceil()).max(lo * 10.0);
    Ok(lo..hi)
}

/// An axis label: 1, 20, 300, 1k, 10k, 100k, 1M; 0.5, 0.02 below one.
pub(super) fn number(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 && (v / 1e6).fract() == 0.0 {
        format!("{}M", v / 1e6)
    } else if a >= 1e3 && (v / 1e3).fract() == 0.0 {
        format!("{}k", v / 1e3)
    } else if a >= 1.0 || a == 0.0 {
        format!("{v:.0}")
    } else {
        let digits = (-a.log10().floor()) as usize;
        format!("{v:.digits$}")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn axis_numbers() {
        assert_eq!(number(1.0), "1");
        assert_eq!(number(100_000.0), "100k");
        assert_eq!(number(2_000_000.0), "2M");
        assert_eq!(number(1500.0), "1500");
        assert_eq!(number(0.01), "0.01");
        assert_eq!(log_range([0.0, 3.0, 250.0].into_iter()).unwrap(), 1.0..1000.0);
        assert_eq!(log_range([10.0].into_iter()).unwrap(), 10.0..100.0);
        assert!(log_range([0.0, f64::NAN].into_iter()).is_err());
        // Labels at 1-2-5 over three decades or fewer, the lowest included.
        let k = log_axis([0.37, 17.9].into_iter()).unwrap().bold_points().to_vec();
        let want = [0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0];
        assert_eq!(k.len(), want.len(), "{k:?}");
        assert!(k.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-9), "{k:?}");
        let k = log_axis([1.0, 20_000.0].into_iter()).unwrap().bold_points().to_vec();
        assert_eq!(k, [1.0, 10.0, 100.0, 1e3, 1e4, 1e5]);
    }
}
