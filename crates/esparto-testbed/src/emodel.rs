//! A call's quality from what the network did to it: the ITU-T G.107
//! E-model, reduced to the terms a gateway can change — delay and packet
//! loss — with every other factor at G.107's default values.
//!
//! ```text
//! R       = 93.2 − Id − Ie,eff                     (Ro − Is = 93.2, A = 0)
//! Id      = 0.024·Ta + 0.11·(Ta − 177.3)·H(Ta − 177.3)
//! Ie,eff  = Ie + (95 − Ie) · Ppl / (Ppl / BurstR + Bpl)
//! MOS     = 1 + 0.035·R + R·(R − 60)·(100 − R)·7·10⁻⁶   (0 < R < 100)
//! ```
//!
//! `Id` is the usual closed form of G.107's delay impairment with echo
//! fully cancelled (`Idte`, `Idle` ≈ 0), `Ta` the mouth-to-ear delay in
//! ms and `H` the step function; `Ppl` is the packet loss in percent and
//! `BurstR` = 1 (random loss). `Ie` and `Bpl` are the codec's equipment
//! impairment and loss robustness from ITU-T G.113 Appendix I.
//!
//! **Mouth-to-ear delay.** `Ta` = the codec's packetisation time (a
//! packet's worth of speech is buffered before it is sent) + its
//! look-ahead + the measured one-way network delay at the 99th percentile
//! (a jitter buffer that plays 99 % of packets on time has to wait that
//! long) + [`PLAYOUT_ALLOWANCE_MS`] for decoding and the phones themselves.
//! Packets later than the 99th percentile are not counted as lost.
//!
//! G.113 Appendix I has values for narrowband codecs only. The wideband
//! ones (G.722, Opus, AMR-WB) are rated on the same narrowband scale with
//! `Ie` = 0 and G.711's `Bpl` with loss concealment, which is an
//! assumption, and [`Impairment::source`] says so.

use serde::{Deserialize, Serialize};

/// Ro − Is at G.107's default values.
pub const R_DEFAULT: f64 = 93.2;

/// Decoding, the smallest jitter-buffer depth and the phones' own
/// processing, in ms, added to every call's mouth-to-ear delay.
pub const PLAYOUT_ALLOWANCE_MS: f64 = 20.0;

/// The MOS a call must reach to count as good ("toll quality").
pub const MOS_GOOD: f64 = 4.0;

const WIDEBAND_ASSUMED: &str = "assumed (wideband, no G.113 App. I value): Ie 0, Bpl of G.711 with PLC";

/// A codec's impairment figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Impairment {
    /// Equipment impairment factor `Ie`.
    pub ie: f64,
    /// Packet-loss robustness factor `Bpl`.
    pub bpl: f64,
    /// Algorithmic look-ahead beyond the packetisation time, ms.
    pub lookahead_ms: f64,
    /// Where the figures come from.
    pub source: String,
}

/// The impairment of a codec by its `esparto plan voip` key (`g711-20ms`,
/// `g729-30ms`, …), matched on the part before the dash.
pub fn impairment(codec_key: &str) -> Impairment {
    let family = codec_key.split('-').next().unwrap_or(codec_key).to_ascii_lowercase();
    match family.as_str() {
        "g711" => Impairment { ie: 0.0, bpl: 25.1, lookahead_ms: 0.0, source: "G.113 App. I: G.711 with PLC".into() },
        "g729" => Impairment { ie: 11.0, bpl: 19.0, lookahead_ms: 5.0, source: "G.113 App. I: G.729A + VAD".into() },
        "g726" => Impairment {
            ie: 7.0,
            bpl: 4.3,
            lookahead_ms: 0.0,
            source: "G.113 App. I: Ie of G.726 32 kbit/s; Bpl of a codec without PLC (G.711 without PLC)".into(),
        },
        "opus" => Impairment {
            ie: 0.0,
            bpl: 25.1,
            lookahead_ms: 6.5,
            source: WIDEBAND_ASSUMED.into(),
        },
        "amrwb" => Impairment {
            ie: 0.0,
            bpl: 25.1,
            lookahead_ms: 5.0,
            source: WIDEBAND_ASSUMED.into(),
        },
        _ => Impairment {
            ie: 0.0,
            bpl: 25.1,
            lookahead_ms: 0.0,
            source: WIDEBAND_ASSUMED.into(),
        },
    }
}

/// The delay impairment `Id` for a mouth-to-ear delay of `ta_ms`.
pub fn delay_impairment(ta_ms: f64) -> f64 {
    let ta = ta_ms.max(0.0);
    0.024 * ta + if ta > 177.3 { 0.11 * (ta - 177.3) } else { 0.0 }
}

/// `Ie,eff` for a loss of `loss_percent` (random loss, BurstR = 1).
pub fn effective_equipment_impairment(imp: &Impairment, loss_percent: f64) -> f64 {
    let ppl = loss_percent.clamp(0.0, 100.0);
    imp.ie + (95.0 - imp.ie) * ppl / (ppl + imp.bpl)
}

/// The R-factor for a mouth-to-ear delay and a loss.
pub fn r_factor(imp: &Impairment, ta_ms: f64, loss_percent: f64) -> f64 {
    R_DEFAULT - delay_impairment(ta_ms) - effective_equipment_impairment(imp, loss_percent)
}

/// G.107's MOS (conversational quality, estimated) for an R-factor.
pub fn mos(r: f64) -> f64 {
    if r <= 0.0 {
        1.0
    } else if r >= 100.0 {
        4.5
    } else {
        1.0 + 0.035 * r + r * (r - 60.0) * (100.0 - r) * 7e-6
    }
}

/// Mouth-to-ear delay, ms, for a codec with `ptime_ms` and `imp` over a
/// network whose one-way delay is `network_ms` (its 99th percentile).
pub fn mouth_to_ear_ms(ptime_ms: f64, imp: &Impairment, network_ms: f64) -> f64 {
    ptime_ms + imp.lookahead_ms + network_ms + PLAYOUT_ALLOWANCE_MS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mos_at_known_points() {
        // G.107: R = 93.2 is MOS 4.41; R = 50 is 2.58; the ends clamp.
        assert!((mos(93.2) - 4.41).abs() < 0.005, "{}", mos(93.2));
        assert!((mos(50.0) - 2.575).abs() < 0.005, "{}", mos(50.0));
        assert_eq!(mos(-3.0), 1.0);
        assert_eq!(mos(120.0), 4.5);
        // MOS 4.0 is reached near R = 79.4.
        assert!(mos(79.5) > MOS_GOOD && mos(79.2) < MOS_GOOD);
    }

    #[test]
    fn delay_impairment_bends_at_177_ms() {
        assert!((delay_impairment(100.0) - 2.4).abs() < 1e-9);
        assert!((delay_impairment(177.3) - 0.024 * 177.3).abs() < 1e-9);
        let at_300 = 0.024 * 300.0 + 0.11 * (300.0 - 177.3);
        assert!((delay_impairment(300.0) - at_300).abs() < 1e-9);
        assert_eq!(delay_impairment(-5.0), 0.0);
    }

    #[test]
    fn g711_and_g729_without_and_with_loss() {
        let g711 = impairment("g711-20ms");
        let g729 = impairment("G729-30");
        assert_eq!((g711.ie, g711.bpl), (0.0, 25.1));
        assert_eq!((g729.ie, g729.bpl), (11.0, 19.0));
        // No loss, 1 ms of network: G.711 20 ms is R ≈ 92.1, G.729 30 ms R ≈ 80.8.
        let ta711 = mouth_to_ear_ms(20.0, &g711, 1.0);
        let ta729 = mouth_to_ear_ms(30.0, &g729, 1.0);
        assert_eq!((ta711, ta729), (41.0, 56.0));
        assert!((r_factor(&g711, ta711, 0.0) - (93.2 - 0.984)).abs() < 1e-9);
        assert!(mos(r_factor(&g729, ta729, 0.0)) > MOS_GOOD);
        // 1 % random loss: Ie,eff = 95 · 1 / 26.1 for G.711, 11 + 84 / 20 for G.729.
        assert!((effective_equipment_impairment(&g711, 1.0) - 95.0 / 26.1).abs() < 1e-9);
        assert!((effective_equipment_impairment(&g729, 1.0) - (11.0 + 84.0 / 20.0)).abs() < 1e-9);
        // …which costs G.729 its MOS 4 but not G.711.
        assert!(mos(r_factor(&g729, ta729, 1.0)) < MOS_GOOD);
        assert!(mos(r_factor(&g711, ta711, 1.0)) > MOS_GOOD);
        // All packets lost: Ie,eff = 95, R far below zero.
        assert!((effective_equipment_impairment(&g711, 100.0) - 95.0 * 100.0 / 125.1).abs() < 1e-9);
        assert_eq!(mos(r_factor(&g729, 500.0, 100.0)), 1.0);
        assert!(impairment("opus-24k-20ms").source.starts_with("assumed"));
    }
}
