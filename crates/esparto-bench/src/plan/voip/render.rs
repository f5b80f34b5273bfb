//! `esparto plan voip`'s table as text: the sources, one line per codec
//! (bytes and bit rates, then the zero-loss rate and the calls, the link's
//! calls and which limits, and whether `--calls N` fit), and the notes.

use std::fmt::Write as _;

use super::calls::{Fit, Limit, Plan, Row, whole};
use crate::plan::thousands;

/// The plan as text.
pub fn render(p: &Plan) -> String {
    let mut o = String::new();
    head(&mut o, p);
    let _ = writeln!(o, "{}", columns(p));
    for r in &p.rows {
        let _ = writeln!(o, "{}", line(p, r));
    }
    if !p.notes.is_empty() {
        let _ = writeln!(o);
        for n in &p.notes {
            let _ = writeln!(o, "note: {n}");
        }
    }
    o
}

/// What the plan is of and where its figures came from.
fn head(o: &mut String, p: &Plan) {
    let _ = writeln!(
        o,
        "esparto plan voip: {} ({}), {}; voice over IPv{}/UDP/RTP",
        p.suite, p.suite_from, p.framing, p.inner_ip
    );
    if let Some(g) = &p.framing_gap {
        let _ = writeln!(o, "note: a framing Esparto does not send: {g}; the sizes are the model's");
    }
    match (&p.zero_loss_from, &p.in_process_from) {
        (Some(z), _) => {
            let _ = writeln!(o, "zero-loss rates: {z}");
        }
        (None, Some(d)) => {
            let _ = writeln!(o, "in-process figures: {d}");
        }
        (None, None) => {}
    }
    let _ = writeln!(
        o,
        "calls = zero-loss packets/s at the IP packet's size ÷ (2 × packets/s per call), whole calls; bit rates one way"
    );
    let _ = writeln!(o);
}

/// Whether the table has the zero-loss columns, else the in-process bound's.
fn rated(p: &Plan) -> bool {
    p.zero_loss_from.is_some()
}

fn bounded(p: &Plan) -> bool {
    p.rows.iter().any(|r| r.in_process_bound.is_some())
}

/// The column headings.
fn columns(p: &Plan) -> String {
    let mut head = format!(
        "{:<19} {:>7} {:>7} {:>7} {:>5} {:>7} {:>6} {:>7}",
        "codec", "pkt/s", "voice B", "kbit/s", "IP B", "kbit/s", "IPsec B", "kbit/s"
    );
    if rated(p) {
        let calls = if p.link_mbps.is_some() { "gateway" } else { "calls" };
        let _ = write!(head, "  {:<38} {calls:>9}", "zero-loss pkt/s at IP size");
    } else if bounded(p) {
        let _ = write!(head, "  {:>17}", "in-process bound");
    }
    if p.link_mbps.is_some() {
        let _ = write!(head, " {:>9} {:>9} {:>8}", "link", "calls", "limit");
    }
    if let Some(n) = p.calls_wanted {
        let _ = write!(head, "  {n} calls?");
    }
    head
}

/// One codec's line.
fn line(p: &Plan, r: &Row) -> String {
    let mut o = format!(
        "{:<19} {:>7.1} {:>7} {:>7.1} {:>5} {:>7.1} {:>6} {:>7.1}",
        r.codec.name, r.pps_per_call, r.voice_bytes, r.voice_kbps, r.ip_bytes, r.ip_kbps, r.ipsec_bytes, r.ipsec_kbps
    );
    if rated(p) {
        let (rate, gw) = match (r.zero_loss_pps, r.gateway_calls) {
            (Some(e), Some(g)) => {
                let ge = if e.lower_bound { "≥ " } else { "" };
                (
                    format!("{ge}{} ({})", thousands(e.value), e.source.describe()),
                    format!("{ge}{}", thousands(whole(g, Limit::Gateway) as f64)),
                )
            }
            _ => ("—".into(), "—".into()),
        };
        let _ = write!(o, "  {rate:<38} {gw:>9}");
    } else if bounded(p) {
        let b = r.in_process_bound.map_or("—".into(), |b| format!("≤ {}", thousands(whole(b, Limit::Gateway) as f64)));
        let _ = write!(o, "  {b:>17}");
    }
    if p.link_mbps.is_some() {
        let link = r.link_calls.map_or("—".into(), |l| thousands(whole(l, Limit::Link) as f64));
        let calls = r
            .calls
            .map_or("—".into(), |c| format!("{}{}", if r.calls_lower_bound { "≥ " } else { "" }, thousands(c as f64)));
        let limit = match r.limit {
            Some(Limit::Link) => "link",
            Some(Limit::Gateway) => "gateway",
            None => "—",
        };
        let _ = write!(o, " {link:>9} {calls:>9} {limit:>8}");
    }
    if p.calls_wanted.is_some() {
        let _ = write!(o, "  {}", fit_text(r));
    }
    o
}

/// Whether `--calls N` fit, in words.
fn fit_text(r: &Row) -> String {
    match (r.fit, r.calls) {
        (None, Some(c)) if r.calls_upper_bound => format!(
            "at most {}: an upper bound (measure call traffic: esparto-testbed bench voip --save)",
            thousands(c as f64)
        ),
        (Some(Fit { fits: true, headroom }), _) if headroom < 0.0 => {
            format!("yes, rounded ({:.1} % short of the measured rate)", -headroom * 100.0)
        }
        (Some(Fit { fits: true, headroom }), _) => format!("yes, {:.0} % headroom", headroom * 100.0),
        (Some(Fit { fits: false, .. }), Some(c)) => format!("no, {} fit", thousands(c as f64)),
        (Some(Fit { fits: false, .. }), None) => "no".into(),
        (None, _) => "unknown (no end-to-end figure)".into(),
    }
}
