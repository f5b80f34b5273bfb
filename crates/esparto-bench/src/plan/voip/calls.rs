//! The calls: the LANCOM method's arithmetic ([`full_duplex_calls`],
//! [`link_calls`], [`whole`], [`fit`]) and the plan it makes of the saved
//! figures ([`plan`]) — which rates to read (call-like traffic's, else
//! `bench tunnel`'s, else only an in-process bound), each codec's bytes,
//! bit rates and calls, and the notes a reader needs.

use esparto_esp::{Family, Framing, Mode};
use serde::Serialize;

use crate::plan::codec::Codec;
use crate::plan::curve::{Curve, Estimate, Point, Shape};
use crate::results::{CallRateData, DataplaneData, Ignored, Loaded, TunnelData, ZeroLoss};

/// Full-duplex calls a zero-loss rate carries (the LANCOM method): each
/// call is a flow each way of `pps_per_call` packets per second.
pub fn full_duplex_calls(zero_loss_pps: f64, pps_per_call: f64) -> f64 {
    zero_loss_pps / (2.0 * pps_per_call)
}

/// Calls a link of `mbps` each way holds: one direction of every call on
/// each direction of the link, `wire_bytes` per packet.
pub fn link_calls(mbps: f64, wire_bytes: usize, pps_per_call: f64) -> f64 {
    mbps * 1e6 / (wire_bytes as f64 * 8.0 * pps_per_call)
}

/// The whole calls in a capacity of `exact` calls limited by `limit`. A
/// measured gateway rate rounds to the nearest call, as the LANCOM method
/// rounds; a link's bandwidth is a hard ceiling, so its calls round down.
pub fn whole(exact: f64, limit: Limit) -> u64 {
    let w = match limit {
        Limit::Gateway => exact.round(),
        // A hair of tolerance, so that 95.0 computed as 94.99999 stays 95.
        Limit::Link => (exact + 1e-9).floor(),
    };
    w.max(0.0) as u64
}

/// Whether `wanted` calls fit a capacity of `exact` calls.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Fit {
    /// They fit.
    pub fits: bool,
    /// Unused share of the capacity (negative: how far short it falls).
    pub headroom: f64,
}

/// Whether `wanted` calls fit a capacity of `exact` calls.
pub fn fit(wanted: u64, exact: f64, limit: Limit) -> Fit {
    let headroom = if exact > 0.0 { 1.0 - wanted as f64 / exact } else { f64::NEG_INFINITY };
    Fit { fits: wanted <= whole(exact, limit), headroom }
}

/// What limits the calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Limit {
    /// The gateway's zero-loss packet rate.
    Gateway,
    /// The link's bandwidth.
    Link,
}

/// The calls one codec gets.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// The codec.
    pub codec: Codec,
    /// Packets per second each way, one call.
    pub pps_per_call: f64,
    /// Voice bytes per packet.
    pub voice_bytes: usize,
    /// Voice kbit/s one way.
    pub voice_kbps: f64,
    /// IP packet bytes (voice, RTP, UDP, IP).
    pub ip_bytes: usize,
    /// IP kbit/s one way.
    pub ip_kbps: f64,
    /// IPsec packet bytes on the wire.
    pub ipsec_bytes: usize,
    /// Of which padding.
    pub ipsec_padding: usize,
    /// IPsec kbit/s one way.
    pub ipsec_kbps: f64,
    /// The zero-loss rate at the IP packet's size, measured end to end.
    pub zero_loss_pps: Option<Estimate>,
    /// Calls the gateway carries (exact quotient; whole calls round it).
    pub gateway_calls: Option<f64>,
    /// Calls the link holds.
    pub link_calls: Option<f64>,
    /// Whole calls: the lower of gateway and link.
    pub calls: Option<u64>,
    /// The lower bound of the rate makes `calls` a lower bound.
    pub calls_lower_bound: bool,
    /// The rate is bench tunnel's, not one measured with call traffic:
    /// for calls `calls` is an upper bound, and `--calls N` at or below
    /// it is not answered "yes" (`fit` is `None`).
    pub calls_upper_bound: bool,
    /// Which of the two set `calls`.
    pub limit: Option<Limit>,
    /// `--calls N`: whether they fit.
    pub fit: Option<Fit>,
    /// Without an end-to-end figure: calls the ESP data plane alone could
    /// process in process (no kernel I/O at all): an upper bound.
    pub in_process_bound: Option<f64>,
}

/// The whole plan.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    /// The suite.
    pub suite: String,
    /// Where the suite came from.
    pub suite_from: String,
    /// "tunnel mode, ESP-in-UDP, outer IPv4".
    pub framing: String,
    /// How this framing differs from what the data plane sends, if it does.
    pub framing_gap: Option<String>,
    /// The voice packets' IP version.
    pub inner_ip: u8,
    /// The zero-loss rates: which file.
    pub zero_loss_from: Option<String>,
    /// The in-process figures: which file (only without end-to-end ones).
    pub in_process_from: Option<String>,
    /// `--calls N`.
    pub calls_wanted: Option<u64>,
    /// `--link-mbps`.
    pub link_mbps: Option<f64>,
    /// One per codec.
    pub rows: Vec<Row>,
    /// What the reader must know about the figures.
    pub notes: Vec<String>,
    /// Results files set aside.
    pub ignored: Vec<Ignored>,
}

/// Everything the table is computed from.
#[derive(Debug, Clone)]
pub struct Inputs<'a> {
    /// Suite and framing.
    pub framing: Framing,
    /// The voice packets' IP family.
    pub inner: Family,
    /// Codecs to show.
    pub codecs: Vec<Codec>,
    /// End-to-end results.
    pub tunnel: Option<&'a Loaded<TunnelData>>,
    /// End-to-end zero-loss rates of call-like traffic (preferred).
    pub call_rate: Option<&'a Loaded<CallRateData>>,
    /// In-process results for the suite.
    pub dataplane: Option<&'a Loaded<DataplaneData>>,
    /// `--calls N`.
    pub calls: Option<u64>,
    /// `--link-mbps`.
    pub link_mbps: Option<f64>,
}

/// The zero-loss rate by inner packet size of a tunnel measurement.
pub fn zero_loss_curve(t: &TunnelData) -> Option<Curve> {
    rate_curve(&t.zero_loss)
}

/// The zero-loss rate by inner packet size of a call-traffic measurement.
pub fn call_rate_curve(c: &CallRateData) -> Option<Curve> {
    rate_curve(&c.zero_loss)
}

/// Computes the plan.
pub fn plan(inp: &Inputs<'_>, suite_from: &str) -> Plan {
    let mut notes = Vec::new();
    let suite = inp.framing.suite.name().to_string();
    let src = Sources::choose(inp, &suite, &mut notes);
    let ip_header = esparto_esp::ip_header_len(inp.inner);
    let rows: Vec<Row> = inp.codecs.iter().map(|c| codec_row(inp, c, ip_header, &src)).collect();
    row_notes(inp, &rows, &src, &mut notes);
    Plan {
        suite,
        suite_from: suite_from.to_string(),
        framing: describe(&inp.framing),
        framing_gap: inp.framing.data_plane_gap().map(str::to_string),
        inner_ip: if inp.inner == Family::V4 { 4 } else { 6 },
        zero_loss_from: zero_loss_from(inp, &src),
        in_process_from: if src.bound.is_some() {
            inp.dataplane.map(|d| format!("{}: in process", d.provenance()))
        } else {
            None
        },
        calls_wanted: inp.calls,
        link_mbps: inp.link_mbps,
        rows,
        notes,
        ignored: Vec::new(),
    }
}

/// What the calls are read from: the zero-loss rate by IP size of
/// call-like traffic if there is one, else `bench tunnel`'s; without
/// either, the in-process round-trip rate, as a bound.
struct Sources {
    /// The call-traffic rates, when they are the ones used.
    call_rates: Option<Curve>,
    /// The zero-loss rates used (call traffic's or bench tunnel's).
    rates: Option<Curve>,
    /// The in-process bound, only without rates.
    bound: Option<Curve>,
}

impl Sources {
    /// Picks the figures, noting what the reader must know of each.
    fn choose(inp: &Inputs<'_>, suite: &str, notes: &mut Vec<String>) -> Self {
        let call_rates = inp.call_rate.and_then(|c| call_rate_curve(&c.saved.data));
        if let (Some(c), None) = (inp.call_rate, &call_rates) {
            notes.push(format!("{}: no call-traffic zero-loss rate above 0 pps: not used", c.path.display()));
        }
        if let Some(c) = inp.call_rate.filter(|_| call_rates.is_some()) {
            let d = &c.saved.data;
            if d.suite != suite {
                notes.push(format!(
                    "the call-traffic rates were measured with {}, not {suite}: the calls are {}'s (measure {suite} for its own)",
                    d.suite, d.suite
                ));
            }
        }
        let tunnel_rates = if call_rates.is_none() { inp.tunnel.and_then(|t| zero_loss_curve(&t.saved.data)) } else { None };
        let rates = call_rates.clone().or(tunnel_rates);
        let bound = if rates.is_none() { inp.dataplane.and_then(|d| round_trip_curve(&d.saved.data)) } else { None };
        if let Some(t) = inp.tunnel.filter(|_| call_rates.is_none()) {
            if rates.is_none() {
                notes.push(format!("{}: no zero-loss rate above 0 pps: no calls computed", t.path.display()));
            } else {
                notes.push(format!(
                    "no call-traffic rate for this machine (`esparto-testbed bench voip --rates 70,200,280 --save`): the \
                     rates are bench tunnel's, {} bursty UDP flows that the receiving kernel coalesces (GRO); calls are \
                     hundreds of interleaved flows that are not coalesced, so for calls these figures are an upper bound",
                    t.saved.data.flows
                ));
            }
            if t.saved.data.suite != suite {
                notes.push(format!(
                    "the zero-loss rates were measured with {}, not {suite}: the calls are {}'s (measure {suite} end to end for its own)",
                    t.saved.data.suite, t.saved.data.suite
                ));
            }
        }
        Self { call_rates, rates, bound }
    }
}

/// One codec's row: its bytes and bit rates, and the calls the rates and
/// the link allow.
fn codec_row(inp: &Inputs<'_>, c: &Codec, ip_header: usize, src: &Sources) -> Row {
    let pps = c.pps();
    let kbps = |bytes: usize| bytes as f64 * 8.0 * pps / 1000.0;
    let ip_bytes = c.ip_bytes(ip_header);
    let wire = inp.framing.size(ip_bytes);
    let zero_loss = src.rates.as_ref().map(|r| r.at(ip_bytes));
    let gateway_calls = zero_loss.map(|e| full_duplex_calls(e.value, pps));
    let link = inp.link_mbps.map(|m| link_calls(m, wire.total(), pps));
    let (calls_exact, limit) = match (gateway_calls, link) {
        (Some(g), Some(l)) if l < g => (Some(l), Some(Limit::Link)),
        (Some(g), _) => (Some(g), Some(Limit::Gateway)),
        (None, Some(l)) => (Some(l), Some(Limit::Link)),
        (None, None) => (None, None),
    };
    let calls_lower_bound = limit == Some(Limit::Gateway) && zero_loss.is_some_and(|e| e.lower_bound);
    let calls_upper_bound = limit == Some(Limit::Gateway) && zero_loss.is_some() && src.call_rates.is_none();
    // `--calls N`: settled by a figure that is not an upper bound, or by
    // an upper bound (the gateway's, or the link's alone) that N exceeds.
    let fit = match (inp.calls, calls_exact.zip(limit)) {
        (Some(n), Some((e, l))) if gateway_calls.is_some() => {
            let f = fit(n, e, l);
            (!(calls_upper_bound && f.fits)).then_some(f)
        }
        (Some(n), Some((e, Limit::Link))) if n > whole(e, Limit::Link) => Some(fit(n, e, Limit::Link)),
        _ => None,
    };
    Row {
        codec: *c,
        pps_per_call: pps,
        voice_bytes: c.payload,
        voice_kbps: kbps(c.payload),
        ip_bytes,
        ip_kbps: kbps(ip_bytes),
        ipsec_bytes: wire.total(),
        ipsec_padding: wire.padding,
        ipsec_kbps: kbps(wire.total()),
        zero_loss_pps: zero_loss,
        gateway_calls,
        link_calls: link,
        calls: calls_exact.zip(limit).map(|(e, l)| whole(e, l)),
        calls_lower_bound,
        calls_upper_bound,
        limit,
        fit,
        in_process_bound: src.bound.as_ref().map(|b| b.at(ip_bytes).value / pps),
    }
}

/// The notes the rows call for: extrapolated rates, lower bounds, no
/// end-to-end figure, the link layer's framing.
fn row_notes(inp: &Inputs<'_>, rows: &[Row], src: &Sources, notes: &mut Vec<String>) {
    if rows.iter().any(|r| r.zero_loss_pps.is_some_and(|e| e.source.extrapolated())) {
        notes.push(
            "some IP packets are outside the measured sizes: their rates are extrapolated (see the rate column)".into(),
        );
    }
    if rows.iter().any(|r| r.calls_lower_bound) {
        notes.push(
            "≥ N calls, generator-limited: the measurement found no loss at the most its generator could offer, so the \
             gateway carries at least this"
                .into(),
        );
    }
    if inp.tunnel.is_none() && src.call_rates.is_none() {
        notes.push(
            "no end-to-end zero-loss rate for this machine: calls not computed (`esparto-testbed bench tunnel --save`, \
             or `esparto plan voip --calibrate`)"
                .into(),
        );
        if src.bound.is_some() {
            notes.push(
                "in-process bound: what the ESP code alone could process with every worker, without the kernel's TUN and \
                 UDP I/O, which costs far more per packet; the gateway carries much less"
                    .into(),
            );
        }
    }
    if inp.link_mbps.is_some() {
        notes.push("link calls count IP bytes: the link layer's framing comes on top".into());
    }
}

/// Where the zero-loss rates came from: the call-traffic measurement when
/// it is used, else `bench tunnel`'s.
fn zero_loss_from(inp: &Inputs<'_>, src: &Sources) -> Option<String> {
    if let Some(c) = inp.call_rate.filter(|_| src.call_rates.is_some()) {
        let d = &c.saved.data;
        let sizes: Vec<String> = d.zero_loss.iter().map(|z| z.ip_size.to_string()).collect();
        return Some(format!(
            "{}: call-like traffic, Esparto ↔ Esparto end to end, {}, {} workers, {} UDP 5-tuples each way, both \
             directions, paced every {} ms, zero-loss sizes {} B",
            c.provenance(),
            d.suite,
            d.workers,
            d.tuples,
            d.ptime_ms,
            sizes.join(", ")
        ));
    }
    inp.tunnel.map(|t| {
        let d = &t.saved.data;
        let sizes: Vec<String> = d.zero_loss.iter().map(|z| z.ip_size.to_string()).collect();
        format!(
            "{}: Esparto ↔ Esparto end to end, {}, {} workers, {} UDP flows, zero-loss sizes {} B",
            t.provenance(),
            d.suite,
            d.workers,
            d.flows,
            sizes.join(", ")
        )
    })
}

fn rate_curve(z: &[ZeroLoss]) -> Option<Curve> {
    Curve::new(z.iter().map(|z| Point { size: z.ip_size, value: z.pps, lower_bound: z.lower_bound }), Shape::Rate)
}

/// ESP round trips per second with all workers by packet size, in process.
fn round_trip_curve(d: &DataplaneData) -> Option<Curve> {
    Curve::new(
        d.rows.iter().filter_map(|r| {
            let size = r.size.parse().ok()?;
            Some(Point { size, value: r.esp_mpps * 1e6, lower_bound: false })
        }),
        Shape::Rate,
    )
}

fn describe(framing: &Framing) -> String {
    format!(
        "{} mode, {}, outer IPv{}",
        match framing.mode {
            Mode::Tunnel => "tunnel",
            Mode::Transport => "transport",
        },
        if framing.udp_encap { "ESP-in-UDP" } else { "ESP over IP (no UDP)" },
        if framing.outer == Family::V4 { 4 } else { 6 }
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::path::PathBuf;

    use esparto_crypto::{EspSuite, Integ};

    use super::*;
    use crate::plan::codec;
    use crate::plan::voip::render::render;
    use crate::results::fixtures::{call_rate_data, dataplane_data, tunnel_data};
    use crate::results::{Kind, envelope};

    fn loaded<T>(kind: Kind, data: T) -> Loaded<T> {
        Loaded { path: PathBuf::from(format!("/results/{kind}.json")), saved: envelope(kind, data) }
    }

    fn gcm() -> Framing {
        Framing { suite: EspSuite::Aes256Gcm16, esn: false, mode: Mode::Tunnel, udp_encap: true, outer: Family::V4 }
    }

    fn inputs<'a>(tunnel: Option<&'a Loaded<TunnelData>>, dataplane: Option<&'a Loaded<DataplaneData>>) -> Inputs<'a> {
        Inputs {
            framing: gcm(),
            inner: Family::V4,
            codecs: codec::CODECS.to_vec(),
            tunnel,
            call_rate: None,
            dataplane,
            calls: None,
            link_mbps: None,
        }
    }

    fn row<'p>(p: &'p Plan, key: &str) -> &'p Row {
        p.rows.iter().find(|r| r.codec.key == key).unwrap()
    }

    /// A call-traffic rate wins over bench tunnel's and is named; the
    /// calls are its packets/s at the IP size ÷ (2 × the codec's), between
    /// sizes interpolated; without it, bench tunnel's rate is used and
    /// called an upper bound for calls.
    #[test]
    fn call_traffic_rate_is_preferred_and_named() {
        let t = loaded(Kind::Tunnel, tunnel_data(&[(64, 200_000.0), (256, 200_000.0)]));
        let c = loaded(Kind::CallRate, call_rate_data(&[(70, 30_000.0, false), (280, 24_000.0, false)]));
        let p = plan(&Inputs { call_rate: Some(&c), ..inputs(Some(&t), None) }, "test");
        // G.729/30 ms is 70 B: 30,000 ÷ (2 × 33.3) = 450 calls.
        let g729 = row(&p, "g729-30ms");
        assert_eq!(g729.calls, Some(450));
        assert!(!g729.calls_lower_bound);
        // G.711/30 ms is 280 B: 24,000 ÷ (2 × 33.3) = 360.
        assert_eq!(row(&p, "g711-30ms").calls, Some(360));
        // G.711/20 ms is 200 B, between: below 70 B's rate, above 280 B's.
        let g711 = row(&p, "g711-20ms").gateway_calls.unwrap();
        assert!(g711 < 300.0 && g711 > 240.0, "{g711}");
        let text = render(&p);
        assert!(text.contains("/results/callrate.json") && text.contains("call-like traffic"), "{text}");
        assert!(!text.contains("upper bound"), "{text}");

        let p = plan(&inputs(Some(&t), None), "test");
        assert_eq!(row(&p, "g729-30ms").calls, Some(3000));
        let text = render(&p);
        assert!(text.contains("/results/tunnel.json") && text.contains("upper bound"), "{text}");
    }

    /// A generator-limited call-traffic rate makes every call figure a
    /// lower bound, and the plan says so.
    #[test]
    fn generator_limited_call_rate_gives_lower_bounds() {
        let c = loaded(Kind::CallRate, call_rate_data(&[(70, 30_000.0, true), (280, 24_000.0, false)]));
        let p = plan(&Inputs { call_rate: Some(&c), ..inputs(None, None) }, "test");
        assert!(row(&p, "g729-30ms").calls_lower_bound);
        assert!(!row(&p, "g711-30ms").calls_lower_bound);
        let text = render(&p);
        assert!(text.contains("≥ 450") && text.contains("generator-limited"), "{text}");
    }

    /// The LANCOM techpaper's Table 2, "Anzahl möglicher Full-Duplex
    /// VoIP-Verbindungen über IPSec", from its Tables 3–5 (zero-loss
    /// packets/s by UDP packet size) by its own method: the row of the
    /// largest measured size not above the IP packet, 33.3 packets/s for 30
    /// ms (as its Table 1 prints it), rounded to the nearest call. All 16
    /// figures come out.
    #[test]
    fn lancom_table_2() {
        // Sizes 64, 128, 256, 512 (the IP packets are 70, 160, 200, 280 B).
        let devices = [
            ("17xx SW VPN", [2048.0, 2560.0, 2304.0, 1920.0], [31, 38, 35, 26]),
            ("17xx HW VPN", [4096.0, 4096.0, 3072.0, 4352.0], [62, 62, 46, 41]),
            ("7111", [6144.0, 7168.0, 7680.0, 7424.0], [92, 108, 115, 72]),
            ("8011", [8192.0, 9216.0, 9267.0, 9216.0], [123, 138, 139, 92]),
        ];
        // G.729 30 ms, G.726 30 ms, G.711 30 ms, G.711 20 ms: (IP bytes, packets/s).
        let codecs = [(70, 33.3), (160, 33.3), (280, 33.3), (200, 50.0)];
        for (device, pps, calls) in devices {
            for ((ip, per_call), want) in codecs.into_iter().zip(calls) {
                let row = [64, 128, 256, 512].iter().rposition(|&s| s <= ip).unwrap();
                let got = full_duplex_calls(pps[row], per_call).round() as u64;
                assert_eq!(got, want, "{device}, {ip} B");
            }
        }
    }

    /// The known answer: 8,192 packets/s at 64 B carries 8,192 ÷ (2 × 33.3)
    /// = 122.9 G.729 30 ms calls, 123 rounded as LANCOM rounds; the 123rd
    /// call is 0.1 % short of its packets, which `--calls` shows.
    #[test]
    fn known_answer_8192_pps() {
        let g729 = codec::select(&["g729-30ms".into()]).unwrap()[0];
        let exact = full_duplex_calls(8192.0, g729.pps());
        assert!((exact - 122.88).abs() < 1e-9, "{exact}");
        assert_eq!(exact.round(), 123.0);
        assert_eq!(whole(exact, Limit::Gateway), 123);
        assert_eq!(whole(exact, Limit::Link), 122);
        let g = |n| fit(n, exact, Limit::Gateway);
        assert!(g(123).fits && !g(124).fits);
        assert!(g(123).headroom < 0.0 && g(122).headroom > 0.0);
        let t = loaded(Kind::Tunnel, tunnel_data(&[(64, 8192.0), (128, 8192.0)]));
        let p = plan(&inputs(Some(&t), None), "test");
        let r = row(&p, "g729-30ms");
        assert_eq!((r.ip_bytes, r.calls, r.limit), (70, Some(123), Some(Limit::Gateway)));
        assert!(render(&p).contains("/results/tunnel.json"));
    }

    /// LANCOM's Table 1 bit rates (AES-128-CBC, 96-bit HMAC, tunnel mode,
    /// IPv4, no UDP): 36, 62, 92, 106 kbit/s, as they round them.
    #[test]
    fn lancom_table_1_bit_rates() {
        let framing =
            Framing { suite: EspSuite::AesCbc { key_bits: 128, integ: Integ::HmacSha1_96 }, udp_encap: false, ..gcm() };
        let codecs = codec::select(&["g729-30ms".into(), "g726-32k-30ms".into(), "g711-30ms".into(), "g711-20ms".into()]).unwrap();
        let p = plan(&Inputs { framing, codecs, ..inputs(None, None) }, "test");
        let got: Vec<_> = p.rows.iter().map(|r| (r.ip_bytes, r.ipsec_bytes, r.ipsec_kbps.round())).collect();
        assert_eq!(got, [(70, 136, 36.0), (160, 232, 62.0), (280, 344, 92.0), (200, 264, 106.0)]);
        assert!(p.framing_gap.is_some());
        assert!(p.rows.iter().all(|r| r.calls.is_none()));
        assert!(render(&p).contains("a framing Esparto does not send"));
    }

    #[test]
    fn gateway_or_link_whichever_is_lower() {
        let t = loaded(Kind::Tunnel, tunnel_data(&[(64, 100_000.0), (256, 100_000.0)]));
        let inp = Inputs { link_mbps: Some(10.0), calls: Some(200), ..inputs(Some(&t), None) };
        let p = plan(&inp, "test");
        // G.711 20 ms: 200 B inner, 20 + 8 + 8 + 8 + 200 + 2 (pad) + 2 + 16 = 264 B on the
        // wire, 105.6 kbit/s each way: a 10 Mbit/s link holds 94 calls; the gateway 1,000.
        let r = row(&p, "g711-20ms");
        assert_eq!((r.ipsec_bytes, r.ipsec_padding), (264, 2));
        assert!((r.gateway_calls.unwrap() - 1000.0).abs() < 1e-9);
        assert!((r.link_calls.unwrap() - 10e6 / (264.0 * 8.0 * 50.0)).abs() < 1e-9);
        assert_eq!((r.calls, r.limit), (Some(94), Some(Limit::Link)));
        let f = r.fit.unwrap();
        assert!(!f.fits && f.headroom < 0.0);
        assert!(render(&p).contains("no, 94 fit"), "{}", render(&p));
        // Without the link the gateway limits: 1,000 calls from bench
        // tunnel's rate, an upper bound for calls, so 200 is no "yes".
        let p = plan(&Inputs { link_mbps: None, codecs: inp.codecs.clone(), ..inp }, "test");
        let r = row(&p, "g711-20ms");
        assert_eq!((r.calls, r.limit, r.calls_upper_bound), (Some(1000), Some(Limit::Gateway), true));
        assert_eq!(r.fit, None);
        let text = render(&p);
        assert!(text.contains("at most 1,000: an upper bound"), "{text}");
        assert!(!text.contains("yes,"), "{text}");
        // More than the upper bound: settled, no.
        let p = plan(&Inputs { link_mbps: None, calls: Some(1200), codecs: inp.codecs.clone(), ..inp }, "test");
        assert!(!row(&p, "g711-20ms").fit.unwrap().fits);
        // With a call-traffic rate the answer is yes, with its headroom.
        let c = loaded(Kind::CallRate, call_rate_data(&[(200, 100_000.0, false)]));
        let p = plan(&Inputs { link_mbps: None, call_rate: Some(&c), ..inp }, "test");
        let r = row(&p, "g711-20ms");
        assert!(!r.calls_upper_bound);
        let f = r.fit.unwrap();
        assert!(f.fits && (f.headroom - 0.8).abs() < 1e-9);
        assert!(render(&p).contains("yes, 80 % headroom"), "{}", render(&p));
    }

    #[test]
    fn a_link_that_settles_the_answer_settles_it() {
        // No gateway figure at all; a 2 Mbit/s link holds 18 G.711/20 ms calls.
        let inp = Inputs { link_mbps: Some(2.0), calls: Some(100), ..inputs(None, None) };
        let p = plan(&inp, "test");
        let r = row(&p, "g711-20ms");
        assert_eq!(r.gateway_calls, None);
        assert!(!r.fit.unwrap().fits, "the link alone says no");
        assert!(render(&p).contains("no, 18 fit"), "{}", render(&p));
        // Within the link, the unknown gateway leaves it open.
        let p = plan(&Inputs { calls: Some(10), codecs: inp.codecs.clone(), ..inp }, "test");
        assert_eq!(row(&p, "g711-20ms").fit, None);
    }

    #[test]
    fn lower_bounds_and_extrapolation_are_said() {
        let mut data = tunnel_data(&[(64, 900_000.0), (128, 850_000.0)]);
        data.zero_loss[0].lower_bound = true;
        let t = loaded(Kind::Tunnel, data);
        let p = plan(&inputs(Some(&t), None), "test");
        let r = row(&p, "g711-20ms");
        assert!(r.zero_loss_pps.unwrap().source.extrapolated());
        let r = row(&p, "g729-20ms");
        assert!(r.calls_lower_bound);
        let text = render(&p);
        assert!(text.contains("≥ "), "{text}");
        assert!(p.notes.iter().any(|n| n.contains("extrapolated")), "{:?}", p.notes);
        assert!(p.notes.iter().any(|n| n.starts_with("≥")), "{:?}", p.notes);
    }

    #[test]
    fn another_suite_is_said_and_without_end_to_end_figures_only_a_bound() {
        let t = loaded(Kind::Tunnel, tunnel_data(&[(64, 1000.0)]));
        let chacha =
            Inputs { framing: Framing { suite: EspSuite::ChaCha20Poly1305, ..gcm() }, ..inputs(Some(&t), None) };
        let p = plan(&chacha, "test");
        assert!(p.notes.iter().any(|n| n.contains("measured with aes256gcm16, not chacha20poly1305")), "{:?}", p.notes);

        let d = loaded(Kind::Dataplane, dataplane_data("aes256gcm16"));
        let p = plan(&inputs(None, Some(&d)), "test");
        assert!(p.rows.iter().all(|r| r.calls.is_none() && r.in_process_bound.is_some()));
        let text = render(&p);
        assert!(text.contains("in-process bound") && text.contains("/results/dataplane.json"), "{text}");
        assert!(p.notes.iter().any(|n| n.contains("no end-to-end zero-loss rate")), "{:?}", p.notes);
        // Nothing at all: bytes and bit rates only.
        let p = plan(&inputs(None, None), "test");
        assert!(p.rows.iter().all(|r| r.calls.is_none() && r.in_process_bound.is_none() && r.ipsec_bytes > r.ip_bytes));
    }
}
