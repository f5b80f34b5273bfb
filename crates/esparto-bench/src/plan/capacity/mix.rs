//! Traffic mixes: the packet sizes a link carries and their weights — the
//! simple IMIX `esparto bench dataplane` measures, one fixed size, or a
//! histogram of the operator's own traffic (`--histogram FILE`).

use serde::Serialize;

use crate::bench::dataplane::IMIX;

/// Sizes a histogram may hold: an IPv4 header to a jumbo frame.
pub const SIZES: std::ops::RangeInclusive<usize> = 20..=9000;

/// Packet sizes and their weights.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Mix {
    /// "imix", "1420 B", or the histogram's file name.
    pub name: String,
    /// (size, weight), weights > 0.
    pub sizes: Vec<(usize, f64)>,
}

impl Mix {
    /// The simple IMIX `esparto bench dataplane` measures.
    pub fn imix() -> Self {
        let mut sizes: Vec<(usize, f64)> = Vec::new();
        for s in IMIX {
            match sizes.iter_mut().find(|(x, _)| *x == s) {
                Some((_, w)) => *w += 1.0,
                None => sizes.push((s, 1.0)),
            }
        }
        Self { name: "imix".into(), sizes }
    }

    /// Every packet `size` bytes.
    pub fn fixed(size: usize) -> Self {
        Self { name: format!("{size} B"), sizes: vec![(size, 1.0)] }
    }

    /// Parses a histogram: "SIZE COUNT" per line (whitespace or a comma
    /// between), "#" comments, blank lines; sizes may repeat (summed).
    pub fn parse_histogram(name: &str, text: &str) -> Result<Self, String> {
        let mut sizes: Vec<(usize, f64)> = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let fields: Vec<&str> =
                line.split(|c: char| c == ',' || c.is_whitespace()).filter(|f| !f.is_empty()).collect();
            let at = |m: String| format!("{name}:{}: {m}", i + 1);
            let [size, count] = fields[..] else {
                return Err(at(format!("expected \"SIZE COUNT\", found {line:?}")));
            };
            let size: usize = size.parse().map_err(|_| at(format!("size {size:?} is not a whole number of bytes")))?;
            if !SIZES.contains(&size) {
                return Err(at(format!("size {size} is outside {}..={} bytes", SIZES.start(), SIZES.end())));
            }
            let count: f64 = count.parse().map_err(|_| at(format!("count {count:?} is not a number")))?;
            if !(count.is_finite() && count >= 0.0) {
                return Err(at(format!("count {count} is not a non-negative number")));
            }
            match sizes.iter_mut().find(|(s, _)| *s == size) {
                Some((_, w)) => *w += count,
                None => sizes.push((size, count)),
            }
        }
        sizes.retain(|(_, w)| *w > 0.0);
        if sizes.is_empty() {
            return Err(format!("{name}: no packets in the histogram"));
        }
        sizes.sort_by_key(|(s, _)| *s);
        Ok(Self { name: name.into(), sizes })
    }

    fn total_weight(&self) -> f64 {
        self.sizes.iter().map(|(_, w)| w).sum()
    }

    /// Mean packet size, bytes.
    pub fn mean_bytes(&self) -> f64 {
        self.sizes.iter().map(|(s, w)| *s as f64 * w).sum::<f64>() / self.total_weight()
    }

    /// Mean of `f(size)` over packets.
    pub(super) fn mean_of(&self, mut f: impl FnMut(usize) -> f64) -> f64 {
        self.sizes.iter().map(|(s, w)| f(*s) * w).sum::<f64>() / self.total_weight()
    }

    /// "7 × 64, 4 × 576, 1 × 1420 B" (shortened for long histograms).
    pub fn describe(&self) -> String {
        const SHOWN: usize = 6;
        let parts: Vec<String> = self.sizes.iter().take(SHOWN).map(|(s, w)| format!("{} × {s}", trim(*w))).collect();
        let more = if self.sizes.len() > SHOWN { format!(", … ({} sizes)", self.sizes.len()) } else { String::new() };
        format!("{}{more} B; mean {:.1} B", parts.join(", "), self.mean_bytes())
    }
}

fn trim(w: f64) -> String {
    if w.fract() == 0.0 { format!("{w:.0}") } else { format!("{w}") }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn mixes() {
        let imix = Mix::imix();
        assert_eq!(imix.sizes, [(64, 7.0), (576, 4.0), (1420, 1.0)]);
        assert!((imix.mean_bytes() - (7.0 * 64.0 + 4.0 * 576.0 + 1420.0) / 12.0).abs() < 1e-9);
        assert_eq!(imix.describe(), "7 × 64, 4 × 576, 1 × 1420 B; mean 347.7 B");
        let h = Mix::parse_histogram("h.txt", "# size count\n64 7\n576,4\n\n1420 1  # big\n64 0\n").unwrap();
        assert_eq!(h.sizes, imix.sizes);
        for (bad, want) in [
            ("64", "expected \"SIZE COUNT\""),
            ("64 1 2", "expected"),
            ("x 1", "not a whole number"),
            ("10 1", "outside 20..=9000"),
            ("64 -1", "not a non-negative number"),
            ("64 nan", "not a non-negative number"),
            ("# nothing\n64 0", "no packets"),
        ] {
            let e = Mix::parse_histogram("h.txt", bad).unwrap_err();
            assert!(e.contains(want), "{bad:?}: {e}");
        }
        assert!(Mix::parse_histogram("h.txt", "1 x\n").unwrap_err().starts_with("h.txt:1: "));
    }
}
