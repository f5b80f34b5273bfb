//! A figure measured at a few packet sizes, read at any size.
//!
//! Benchmarks measure at 64, 128, … 1400 bytes; a G.729 packet is 70. Between
//! two measured sizes the planner interpolates, and says so; outside them it
//! extrapolates, says so, and leans to the safe side:
//!
//! - a **rate** (packets per second) is interpolated in its inverse, the time
//!   a packet takes, which grows about linearly with its size (a fixed cost
//!   plus a cost per byte); above the largest size the time keeps the
//!   slope of the last two sizes but never falls (a bigger packet is never
//!   taken to be faster), below the smallest the smallest's rate holds;
//! - a **cost** per packet (cycles, CPU seconds) is interpolated as it is,
//!   and extrapolated the same way.
//!
//! A measured value that was only a lower bound (the generator, not the
//! gateway, ran out) makes every estimate drawn from it a lower bound.

use serde::Serialize;

/// One measured size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    /// Packet size, bytes.
    pub size: usize,
    /// The figure there (> 0).
    pub value: f64,
    /// The true value may be higher.
    pub lower_bound: bool,
}

/// Where an estimate comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "how")]
pub enum Source {
    /// Measured at exactly this size.
    Measured,
    /// Between two measured sizes.
    Interpolated {
        /// The measured size below.
        below: usize,
        /// The measured size above.
        above: usize,
    },
    /// Smaller than every measured size: the smallest's value.
    BelowRange {
        /// The smallest measured size.
        smallest: usize,
    },
    /// Larger than every measured size: extrapolated from the largest.
    AboveRange {
        /// The largest measured size.
        largest: usize,
    },
}

impl Source {
    /// Whether the estimate goes beyond the measured sizes.
    pub fn extrapolated(&self) -> bool {
        matches!(self, Source::BelowRange { .. } | Source::AboveRange { .. })
    }

    /// "measured", "interpolated 64–128 B", "extrapolated above 1400 B".
    pub fn describe(&self) -> String {
        match *self {
            Source::Measured => "measured".into(),
            Source::Interpolated { below, above } => format!("interpolated {below}–{above} B"),
            Source::BelowRange { smallest } => format!("below {smallest} B: its value"),
            Source::AboveRange { largest } => format!("extrapolated above {largest} B"),
        }
    }
}

/// A figure read off a [`Curve`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Estimate {
    /// The value.
    pub value: f64,
    /// The true value may be higher.
    pub lower_bound: bool,
    /// How it was obtained.
    pub source: Source,
}

/// How values between sizes behave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Packets per second: linear in the time per packet.
    Rate,
    /// A cost per packet: linear.
    Cost,
}

/// Measured points by size, at least one.
#[derive(Debug, Clone, PartialEq)]
pub struct Curve {
    points: Vec<Point>,
    shape: Shape,
}

impl Curve {
    /// The points with a positive, finite value, by size (of two at one size,
    /// the later). `None` if none is left.
    pub fn new(points: impl IntoIterator<Item = Point>, shape: Shape) -> Option<Self> {
        let mut points: Vec<Point> =
            points.into_iter().filter(|p| p.value.is_finite() && p.value > 0.0 && p.size > 0).collect();
        points.sort_by_key(|p| p.size);
        points.dedup_by(|later, earlier| {
            if later.size == earlier.size {
                *earlier = *later;
                true
            } else {
                false
            }
        });
        (!points.is_empty()).then_some(Self { points, shape })
    }

    /// The measured sizes.
    pub fn sizes(&self) -> Vec<usize> {
        self.points.iter().map(|p| p.size).collect()
    }

    /// The largest measured value (the rate a measurement reached).
    pub fn max_value(&self) -> f64 {
        self.points.iter().map(|p| p.value).fold(0.0, f64::max)
    }

    /// The value in the space interpolation is linear in.
    fn lin(&self, v: f64) -> f64 {
        match self.shape {
            Shape::Rate => 1.0 / v,
            Shape::Cost => v,
        }
    }

    /// The figure at `size`.
    pub fn at(&self, size: usize) -> Estimate {
        let ps = &self.points;
        let (first, last) = (ps[0], ps[ps.len() - 1]);
        if let Some(p) = ps.iter().find(|p| p.size == size) {
            return Estimate { value: p.value, lower_bound: p.lower_bound, source: Source::Measured };
        }
        if size < first.size {
            return Estimate {
                value: first.value,
                lower_bound: first.lower_bound,
                source: Source::BelowRange { smallest: first.size },
            };
        }
        let (a, b, source) = match ps.windows(2).find(|w| w[0].size < size && size < w[1].size) {
            Some(w) => (w[0], w[1], Source::Interpolated { below: w[0].size, above: w[1].size }),
            None if ps.len() >= 2 => (ps[ps.len() - 2], last, Source::AboveRange { largest: last.size }),
            None => (last, last, Source::AboveRange { largest: last.size }),
        };
        let (ya, yb) = (self.lin(a.value), self.lin(b.value));
        let y = if a.size == b.size {
            yb
        } else {
            let t = (size - a.size) as f64 / (b.size - a.size) as f64;
            let y = ya + t * (yb - ya);
            // Beyond the largest size: never cheaper per packet than there.
            if source.extrapolated() { y.max(yb) } else { y }
        };
        let value = match self.shape {
            Shape::Rate => 1.0 / y,
            Shape::Cost => y,
        };
        Estimate { value, lower_bound: a.lower_bound || b.lower_bound, source }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn p(size: usize, value: f64) -> Point {
        Point { size, value, lower_bound: false }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn rates_interpolate_in_time_per_packet() {
        // LANCOM 8011, zero loss: 8,192 pps at 64 B and 9,216 at 128 B.
        let c = Curve::new([p(128, 9216.0), p(64, 8192.0)], Shape::Rate).unwrap();
        assert_eq!(c.sizes(), [64, 128]);
        let e = c.at(70);
        let t = 1.0 / 8192.0 + 6.0 / 64.0 * (1.0 / 9216.0 - 1.0 / 8192.0);
        assert!(close(e.value, 1.0 / t), "{e:?}");
        assert_eq!(e.source, Source::Interpolated { below: 64, above: 128 });
        assert!(!e.source.extrapolated());
        assert_eq!(c.at(64), Estimate { value: 8192.0, lower_bound: false, source: Source::Measured });
        // Below: the smallest size's rate.
        assert_eq!(c.at(40).value, 8192.0);
        assert!(c.at(40).source.extrapolated());
        // Above: rising here, but never taken to rise beyond the largest.
        let above = c.at(200);
        assert_eq!(above.value, 9216.0);
        assert_eq!(above.source, Source::AboveRange { largest: 128 });
        // Falling rates keep falling.
        let falling = Curve::new([p(512, 9216.0), p(1024, 7322.0)], Shape::Rate).unwrap();
        let t = 1.0 / 7322.0 + (1.0 / 7322.0 - 1.0 / 9216.0) * (1364.0 - 1024.0) / 512.0;
        assert!(close(falling.at(1364).value, 1.0 / t));
    }

    #[test]
    fn costs_interpolate_linearly_and_bounds_propagate() {
        let c =
            Curve::new([p(64, 800.0), Point { size: 1420, value: 1600.0, lower_bound: true }], Shape::Cost).unwrap();
        let e = c.at(742);
        assert!(close(e.value, 1200.0), "{e:?}");
        assert!(e.lower_bound);
        assert!(!c.at(64).lower_bound);
        assert_eq!(c.max_value(), 1600.0);
        // One point: its value everywhere, extrapolated beyond it.
        let one = Curve::new([p(64, 8192.0)], Shape::Rate).unwrap();
        assert_eq!(
            one.at(70),
            Estimate { value: 8192.0, lower_bound: false, source: Source::AboveRange { largest: 64 } }
        );
    }

    #[test]
    fn unusable_points_are_dropped() {
        assert!(Curve::new([p(64, 0.0), p(128, f64::NAN), p(0, 5.0)], Shape::Rate).is_none());
        let c = Curve::new([p(64, 1.0), p(64, 2.0)], Shape::Cost).unwrap();
        assert_eq!(c.at(64).value, 2.0);
    }
}
