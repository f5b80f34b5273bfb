//! Scalar values of the configuration: durations, hex key material,
//! addresses, traffic selectors and ESP proposals, each turned from a
//! string into a typed value or a precise message.
//!
//! Spellings follow `swanctl.conf`: durations are a number with an optional
//! `s`/`m`/`h`/`d` suffix (seconds by default), keys are hex with an
//! optional `0x`, selectors are `10.1.0.0/16[tcp/443]`, ranges
//! `10.0.0.1-10.0.0.9` or `dynamic`, proposals are strongSwan proposal
//! strings. The selector and proposal grammars are not written again here:
//! fixed selectors go through `esparto-esp`'s parser (which refuses host
//! bits and mixed-family ranges and says why), `dynamic` through
//! `esparto-ike`'s [`TsConfig`], proposals through `esparto-ike`'s
//! [`Proposal`].
//!
//! Functions that see key material never put it in an error message: they
//! report lengths and positions only.

use std::net::IpAddr;
use std::time::Duration;

use esparto_crypto::{EspSuite, SecretBytes};
use esparto_ike::TsConfig;
use esparto_ike::proposal::{Proposal, Protocol, Selected};
use esparto_wire::ike::Spi;

/// Longest duration accepted anywhere (ten years): beyond it a typo is likelier than intent.
pub(crate) const MAX_DURATION: Duration = Duration::from_secs(10 * 365 * 86_400);

/// Parse a swanctl duration: `"30s"`, `"4h"`, `"1h30m"`, `"2d"`, `"90"` (seconds).
pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let bad = || format!("'{s}' is not a duration (examples: 30s, 90m, 4h, 1d, 1h30m, or seconds)");
    if t.is_empty() {
        return Err(bad());
    }
    let mut total: u64 = 0;
    let mut rest = t;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(bad());
        }
        let n: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit = match rest.chars().next() {
            None => 1,
            Some('s') => 1,
            Some('m') => 60,
            Some('h') => 3600,
            Some('d') => 86_400,
            Some(_) => return Err(bad()),
        };
        if !rest.is_empty() {
            rest = &rest[1..];
        } else if total != 0 {
            // "1h30" is ambiguous: a bare number only stands alone.
            return Err(bad());
        }
        total = n
            .checked_mul(unit)
            .and_then(|v| total.checked_add(v))
            .ok_or_else(|| format!("'{s}' is too long (at most 10 years)"))?;
    }
    let d = Duration::from_secs(total);
    if d > MAX_DURATION {
        return Err(format!("'{s}' is too long (at most 10 years)"));
    }
    Ok(d)
}

/// Render a duration the way the file would write it (`"4h"`, `"66m"`, `"90s"`).
pub(crate) fn fmt_duration(d: Duration) -> String {
    let s = d.as_secs();
    if s != 0 && s % 86_400 == 0 {
        format!("{}d", s / 86_400)
    } else if s != 0 && s % 3600 == 0 {
        format!("{}h", s / 3600)
    } else if s != 0 && s % 60 == 0 {
        format!("{}m", s / 60)
    } else {
        format!("{s}s")
    }
}

/// Decode hex key material: optional `0x`, optional `:` between octets,
/// surrounding whitespace ignored. The error never quotes the input.
pub(crate) fn parse_hex_secret(s: &str) -> Result<SecretBytes, String> {
    let t = s.trim();
    let prefix = if t.starts_with("0x") || t.starts_with("0X") {
        2
    } else {
        0
    };
    let t = &t[prefix..];
    let mut out = SecretBytes::zeroed(t.len() / 2);
    let mut n = 0usize;
    let mut high: Option<u8> = None;
    for (i, c) in t.chars().enumerate() {
        if c == ':' && high.is_none() {
            continue;
        }
        let Some(v) = c.to_digit(16) else {
            return Err(format!(
                "not hexadecimal (character {} is not a hex digit)",
                prefix + i + 1
            ));
        };
        let v = v as u8; // a hex digit is < 16
        match high.take() {
            None => high = Some(v),
            Some(h) => {
                // n < t.len() / 2: every output byte consumed two input characters.
                if let Some(slot) = out.as_mut_slice().get_mut(n) {
                    *slot = (h << 4) | v;
                }
                n += 1;
            }
        }
    }
    if high.is_some() {
        return Err("odd number of hex digits".into());
    }
    if n == 0 {
        return Err("empty key".into());
    }
    Ok(SecretBytes::from_slice(&out.as_slice()[..n]))
}

/// Parse a PSK the way swanctl does: `0x…` is hex, anything else is the
/// literal string. (`0s…` base64 is not supported; it is refused rather
/// than taken literally.)
pub(crate) fn parse_psk(s: &str) -> Result<SecretBytes, String> {
    if s.starts_with("0x") || s.starts_with("0X") {
        return parse_hex_secret(s);
    }
    if s.starts_with("0s") {
        return Err("base64 secrets (0s…) are not supported; write the secret as 0x hex".into());
    }
    if s.is_empty() {
        return Err("empty secret".into());
    }
    Ok(SecretBytes::from_slice(s.as_bytes()))
}

/// An IP address literal.
pub(crate) fn parse_addr(s: &str) -> Result<IpAddr, String> {
    s.trim().parse().map_err(|_| {
        if s.contains('/') || s.contains('-') {
            format!(
                "'{s}' is not an IP address (ranges and subnets are not accepted for addresses)"
            )
        } else {
            format!("'{s}' is not an IP address")
        }
    })
}

/// Parse one selector in swanctl syntax: a fixed one through the data
/// plane's parser (for its messages), `dynamic` through the engine's.
pub(crate) fn parse_selector(s: &str) -> Result<TsConfig, String> {
    if s.trim_start().starts_with("dynamic") {
        return TsConfig::parse(s).map_err(|e| e.to_string());
    }
    s.parse::<esparto_esp::Selector>()
        .map(|t| TsConfig::Fixed(crate::selector::to_ike(&t)))
        .map_err(|e| format!("'{s}': {e}"))
}

/// The selector the SPD will hold: `dynamic` resolved against `addr` (the
/// IKE address of its side), `None` while that is unknown.
pub(crate) fn resolve_selector(
    s: &TsConfig,
    addr: Option<IpAddr>,
) -> Option<esparto_esp::Selector> {
    match s {
        TsConfig::Fixed(t) => Some(crate::selector::to_esp(t)),
        TsConfig::Dynamic { .. } => addr.map(|a| crate::selector::to_esp(&s.resolve(a))),
    }
}

/// Parse an ESP proposal (strongSwan syntax).
pub(crate) fn parse_esp_proposal(s: &str) -> Result<Proposal, String> {
    Proposal::parse(Protocol::Esp, s).map_err(|e| e.to_string())
}

/// Parse an IKE proposal (strongSwan syntax).
pub(crate) fn parse_ike_proposal(s: &str) -> Result<Proposal, String> {
    Proposal::parse(Protocol::Ike, s).map_err(|e| e.to_string())
}

/// The single suite and ESN setting of a proposal for a statically keyed
/// SA: nothing is negotiated, so the proposal must name exactly one
/// algorithm of each kind and no key exchange.
pub(crate) fn static_suite(text: &str, p: &Proposal) -> Result<(EspSuite, bool), String> {
    if !p.ke.is_empty() {
        return Err(format!(
            "'{text}': a key exchange method (PFS) means nothing for statically keyed SAs"
        ));
    }
    if p.encr.len() != 1 || p.integ.len() > 1 || p.esn.len() != 1 {
        return Err(format!(
            "'{text}': statically keyed SAs need exactly one algorithm of each kind (nothing is negotiated)"
        ));
    }
    let sel = Selected {
        number: 1,
        spi: Spi::None,
        encr: p.encr[0],
        prf: None,
        integ: p.integ.first().copied(),
        ke: None,
        esn: p.esn[0],
        ake: Default::default(),
    };
    let suite = esparto_ike::keys::esp_suite(&sel)
        .ok_or_else(|| format!("'{text}': no ESP implementation for this combination"))?;
    Ok((suite, p.esn[0]))
}

/// What a suite's KEYMAT consists of, for "needs N bytes (…)" messages.
pub(crate) fn keymat_layout(suite: &EspSuite) -> String {
    let integ = suite.integ_key_len();
    if integ == 0 {
        let key = suite.encr_key_len().saturating_sub(4);
        format!("{key}-byte key + 4-byte salt")
    } else {
        format!(
            "{}-byte AES key + {integ}-byte HMAC key",
            suite.encr_key_len()
        )
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("90").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("4h").unwrap(), Duration::from_secs(4 * 3600));
        assert_eq!(parse_duration("66m").unwrap(), Duration::from_secs(66 * 60));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(
            parse_duration("2d").unwrap(),
            Duration::from_secs(2 * 86_400)
        );
        for bad in ["", "h", "4x", "1h30", "-5s", "1.5h", "s4"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert!(parse_duration("99999999999999999999h").is_err());
        assert!(parse_duration("3651d").unwrap_err().contains("too long"));
        assert_eq!(fmt_duration(Duration::from_secs(3960)), "66m");
        assert_eq!(fmt_duration(Duration::from_secs(7200)), "2h");
        assert_eq!(fmt_duration(Duration::from_secs(61)), "61s");
    }

    #[test]
    fn hex_keys_and_errors_that_do_not_leak() {
        assert_eq!(
            parse_hex_secret("0x0a0B").unwrap().as_slice(),
            &[0x0a, 0x0b]
        );
        assert_eq!(
            parse_hex_secret(" 0a:0b:ff \n").unwrap().as_slice(),
            &[0x0a, 0x0b, 0xff]
        );
        let e = parse_hex_secret("0xdeadbeefzz").unwrap_err();
        assert_eq!(e, "not hexadecimal (character 11 is not a hex digit)");
        assert!(!e.contains("dead"));
        assert_eq!(
            parse_hex_secret("abc").unwrap_err(),
            "odd number of hex digits"
        );
        assert_eq!(parse_hex_secret("0x").unwrap_err(), "empty key");
    }

    #[test]
    fn psks() {
        assert_eq!(parse_psk("hunter2").unwrap().as_slice(), b"hunter2");
        assert_eq!(parse_psk("0x4142").unwrap().as_slice(), b"AB");
        assert!(parse_psk("0sQUI=").is_err());
        assert!(parse_psk("").is_err());
    }

    #[test]
    fn selectors() {
        let TsConfig::Fixed(t) = parse_selector("10.1.0.0/16[tcp/443]").unwrap() else {
            panic!()
        };
        assert_eq!((t.protocol, t.start_port, t.end_port), (6, 443, 443));
        assert_eq!(t.to_string(), "10.1.0.0/16[6/443]");
        assert!(matches!(
            parse_selector("dynamic[udp]").unwrap(),
            TsConfig::Dynamic { protocol: 17, .. }
        ));
        assert_eq!(
            parse_selector("10.2.0.0/33").unwrap_err(),
            "'10.2.0.0/33': prefix length /33 too long for 10.2.0.0"
        );
        assert!(
            parse_selector("10.0.0.1-fd00::1")
                .unwrap_err()
                .contains("different families")
        );
        let d = parse_selector("dynamic").unwrap();
        let r = resolve_selector(&d, Some("192.0.2.1".parse().unwrap())).unwrap();
        assert_eq!(r.to_string(), "192.0.2.1/32");
        assert_eq!(resolve_selector(&d, None), None);
    }

    #[test]
    fn static_suites() {
        let p = |s| parse_esp_proposal(s).unwrap();
        assert_eq!(
            static_suite("x", &p("aes256gcm16")).unwrap(),
            (EspSuite::Aes256Gcm16, false)
        );
        assert_eq!(
            static_suite("x", &p("aes256gcm16-esn")).unwrap(),
            (EspSuite::Aes256Gcm16, true)
        );
        assert_eq!(
            static_suite("x", &p("aes128-sha256")).unwrap().0.name(),
            "aes128-sha256"
        );
        assert!(
            static_suite("x", &p("aes256gcm16-x25519"))
                .unwrap_err()
                .contains("PFS")
        );
        assert!(static_suite("x", &p("aes128gcm16-aes256gcm16")).is_err());
        assert!(static_suite("x", &p("aes256gcm16-esn-noesn")).is_err());
        assert_eq!(
            keymat_layout(&EspSuite::Aes256Gcm16),
            "32-byte key + 4-byte salt"
        );
        let cbc = static_suite("x", &p("aes128-sha256")).unwrap().0;
        assert_eq!(keymat_layout(&cbc), "16-byte AES key + 32-byte HMAC key");
    }
}
