//! Voice codecs as RTP carries them: how many bytes of voice per packet and
//! how many packets per second, each way, for one call.
//!
//! A packet carries `ptime` milliseconds of speech (RFC 3551 §4.5), so a
//! call sends `1000 / ptime` packets per second in each direction, each
//! with the codec's bytes for that time behind a 12-byte RTP header
//! (RFC 3550 §5.1), an 8-byte UDP header and an IP header (20 bytes IPv4,
//! 40 IPv6): the "IP packet" the gateway encrypts.
//!
//! | codec | bytes per packet |
//! | --- | --- |
//! | G.711 (RFC 3551 §4.5.14) | 8 per ms: 80, 160, 240 at 10, 20, 30 ms |
//! | G.729 (§4.5.6) | 10 per 10-ms frame: 20, 30 at 20, 30 ms |
//! | G.726-32 (§4.5.4) | 4 per ms: 80, 120 at 20, 30 ms |
//! | G.722 (§4.5.2) | 64 kbit/s: 160 at 20 ms |
//! | Opus (RFC 7587), constant bit rate | rate × 20 ms: 60, 80, 160 at 24, 32, 64 kbit/s |
//! | AMR-WB 23.85 (RFC 4867 §4.3, bandwidth-efficient) | 4-bit CMR + 6-bit ToC + 477 bits of speech = 487 bits: 61 |
//!
//! The payload's bit rate can exceed the codec's nominal one (AMR-WB's
//! header bits): what is on the wire counts.

use serde::Serialize;

/// RTP's fixed header (RFC 3550 §5.1), no CSRCs or extensions.
pub const RTP_HEADER: usize = 12;
/// UDP's header.
pub const UDP_HEADER: usize = 8;

/// One codec at one packetisation time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Codec {
    /// What `--codecs` takes: the codec, its bit rate where it has
    /// several (`k`: kbit/s), and its packet time (`ms`).
    pub key: &'static str,
    /// The earlier name, still accepted.
    #[serde(skip)]
    pub alias: &'static str,
    /// As printed.
    pub name: &'static str,
    /// Milliseconds of speech per packet.
    pub ptime_ms: u32,
    /// The codec's nominal bit rate, bits/s.
    pub nominal_bps: u32,
    /// RTP payload bytes per packet.
    pub payload: usize,
}

impl Codec {
    /// Packets per second, each way, for one call.
    pub fn pps(&self) -> f64 {
        1000.0 / f64::from(self.ptime_ms)
    }

    /// The IP packet: voice, RTP, UDP and an IP header of `ip_header` bytes.
    pub fn ip_bytes(&self, ip_header: usize) -> usize {
        self.payload + RTP_HEADER + UDP_HEADER + ip_header
    }
}

const fn codec(key: &'static str, alias: &'static str, name: &'static str, ptime_ms: u32, nominal_bps: u32, payload: usize) -> Codec {
    Codec { key, alias, name, ptime_ms, nominal_bps, payload }
}

/// Every codec `esparto plan voip` knows, in the order it prints them.
pub const CODECS: &[Codec] = &[
    codec("g711-10ms", "g711-10", "G.711 10 ms", 10, 64_000, 80),
    codec("g711-20ms", "g711-20", "G.711 20 ms", 20, 64_000, 160),
    codec("g711-30ms", "g711-30", "G.711 30 ms", 30, 64_000, 240),
    codec("g729-20ms", "g729-20", "G.729 20 ms", 20, 8_000, 20),
    codec("g729-30ms", "g729-30", "G.729 30 ms", 30, 8_000, 30),
    codec("g726-32k-20ms", "g726-20", "G.726-32 20 ms", 20, 32_000, 80),
    codec("g726-32k-30ms", "g726-30", "G.726-32 30 ms", 30, 32_000, 120),
    codec("g722-20ms", "g722-20", "G.722 20 ms", 20, 64_000, 160),
    codec("opus-24k-20ms", "opus-24", "Opus 24k 20 ms", 20, 24_000, 60),
    codec("opus-32k-20ms", "opus-32", "Opus 32k 20 ms", 20, 32_000, 80),
    codec("opus-64k-20ms", "opus-64", "Opus 64k 20 ms", 20, 64_000, 160),
    codec("amrwb-23.85k-20ms", "amrwb-23.85", "AMR-WB 23.85 20 ms", 20, 23_850, 61),
];

/// The codecs named in `keys` (all of them for none), or an error listing
/// the known names.
pub fn select(keys: &[String]) -> Result<Vec<Codec>, String> {
    if keys.is_empty() {
        return Ok(CODECS.to_vec());
    }
    keys.iter()
        .map(|k| {
            let k = k.trim();
            CODECS.iter().find(|c| c.key.eq_ignore_ascii_case(k) || c.alias.eq_ignore_ascii_case(k)).copied().ok_or_else(|| {
                let known: Vec<&str> = CODECS.iter().map(|c| c.key).collect();
                format!("unknown codec '{k}'; known: {}", known.join(", "))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn by(key: &str) -> Codec {
        select(&[key.to_string()]).unwrap()[0]
    }

    #[test]
    fn payloads_follow_from_rate_and_packet_time() {
        for c in CODECS {
            let kbps = c.payload as f64 * 8.0 * c.pps() / 1000.0;
            if c.key.starts_with("amrwb") {
                // 61 bytes every 20 ms: 24.4 kbit/s for the 23.85 kbit/s mode
                // (header bits and the padding to a whole byte).
                assert!((kbps - 24.4).abs() < 1e-9, "{kbps}");
                assert_eq!(c.payload, (4 + 6 + 477usize).div_ceil(8));
            } else {
                assert!((kbps * 1000.0 - f64::from(c.nominal_bps)).abs() < 1e-6, "{}", c.name);
            }
        }
        let keys: std::collections::HashSet<_> = CODECS.iter().flat_map(|c| [c.key, c.alias]).collect();
        assert_eq!(keys.len(), 2 * CODECS.len(), "names and aliases are unique");
        // The earlier names still select the same codecs.
        assert_eq!(select(&["g711-20".into(), "opus-24".into()]).unwrap(), select(&["g711-20ms".into(), "opus-24k-20ms".into()]).unwrap());
    }

    /// The LANCOM techpaper's Table 1: voice bytes, packets per second and
    /// the IP packet (40 bytes of IPv4, UDP and RTP headers).
    #[test]
    fn lancom_table_1_voice_and_ip() {
        for (key, pps, voice, ip, ip_kbps) in [
            ("g729-30ms", 33.3, 30, 70, 18.7),
            ("g726-32k-30ms", 33.3, 120, 160, 42.7),
            ("g711-30ms", 33.3, 240, 280, 74.7),
            ("g711-20ms", 50.0, 160, 200, 80.0),
        ] {
            let c = by(key);
            assert_eq!((c.payload, c.ip_bytes(20)), (voice, ip), "{key}");
            assert!((c.pps() - pps).abs() < 0.05, "{key}");
            let kbps = c.ip_bytes(20) as f64 * 8.0 * c.pps() / 1000.0;
            assert!((kbps - ip_kbps).abs() < 0.05, "{key}: {kbps}");
        }
        assert_eq!(by("g711-20ms").ip_bytes(40), 220);
    }

    #[test]
    fn unknown_codecs_list_the_known_ones() {
        assert_eq!(select(&[]).unwrap().len(), CODECS.len());
        assert_eq!(by("G711-20").name, "G.711 20 ms");
        let e = select(&["g711-20ms".into(), "speex".into()]).unwrap_err();
        assert!(e.starts_with("unknown codec 'speex'; known: g711-10ms, g711-20ms"), "{e}");
        assert!(e.contains("amrwb-23.85k-20ms"), "{e}");
    }
}
