//! What a refused negotiation logs: the proposals or traffic selectors
//! received beside those configured, written as strongSwan writes them so
//! the two ends' logs read alike:
//!
//! ```text
//! received proposals: IKE:AES_GCM_16_256/PRF_HMAC_SHA2_256/CURVE_25519, configured proposals: IKE:AES_CBC_128/HMAC_SHA2_256_128/PRF_HMAC_SHA2_256/MODP_2048
//! received TS 10.9.0.0/16 === 10.1.0.0/24, configured 10.2.0.0/16 === 10.1.0.0/24
//! ```
//!
//! A proposal prints as `PROTOCOL:` and its transforms by type — encryption
//! (with `_BITS` when it carries a Key Length attribute), integrity, PRF,
//! key exchange, extended sequence numbers — each under its strongSwan
//! name, or its number in parentheses when it has none (strongSwan's `%N`
//! for an unknown value). Selectors print as the configuration writes them
//! (`10.1.0.0/16`, `10.0.0.1-10.0.0.9`, `10.1.0.0/16[6/443]`), the
//! initiator's side first, as TSi === TSr.
//!
//! What a peer sends is bounded when it is printed: at most
//! [`MAX_PROPOSALS_SHOWN`] proposals of at most [`MAX_TRANSFORMS_SHOWN`]
//! transforms and [`MAX_SELECTORS_SHOWN`] selectors a side, then how many
//! more, so a forged IKE_SA_INIT cannot make a 100 KB log line. Every
//! type here formats lazily (`Display`), so a line the daemon's log
//! limiter drops costs no formatting.

use core::fmt;

use esparto_wire::ike::{ProposalRepr, ProtocolId, Spi, TransformRepr, TransformType};

use crate::proposal::Proposal;
use crate::ts::TrafficSelector;

/// Proposals printed of one list; the rest are counted.
pub const MAX_PROPOSALS_SHOWN: usize = 16;
/// Transforms printed of one proposal; the rest are counted.
pub const MAX_TRANSFORMS_SHOWN: usize = 24;
/// Selectors printed of one side; the rest are counted.
pub const MAX_SELECTORS_SHOWN: usize = 16;

/// A list of proposals, comma-separated, in strongSwan's syntax.
pub(crate) struct Proposals<'a>(pub(crate) &'a [ProposalRepr]);

impl fmt::Display for Proposals<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("none");
        }
        for (i, p) in self.0.iter().take(MAX_PROPOSALS_SHOWN).enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{}", OneProposal(p))?;
        }
        if self.0.len() > MAX_PROPOSALS_SHOWN {
            write!(f, " and {} more", self.0.len() - MAX_PROPOSALS_SHOWN)?;
        }
        Ok(())
    }
}

pub(crate) struct OneProposal<'a>(pub(crate) &'a ProposalRepr);

/// The order strongSwan prints transform types in.
const TYPE_ORDER: [TransformType; 5] = [
    TransformType::ENCR,
    TransformType::INTEG,
    TransformType::PRF,
    TransformType::KE,
    TransformType::ESN,
];

impl fmt::Display for OneProposal<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = self.0;
        match p.protocol {
            ProtocolId::IKE => f.write_str("IKE:")?,
            ProtocolId::AH => f.write_str("AH:")?,
            ProtocolId::ESP => f.write_str("ESP:")?,
            ProtocolId(n) => write!(f, "({n}):")?,
        }
        // Known types in strongSwan's order, then any others (RFC 9370's
        // additional key exchanges, unknown types) in the order sent.
        let known = |t: &TransformRepr| TYPE_ORDER.contains(&t.kind);
        let ordered = TYPE_ORDER
            .iter()
            .flat_map(|k| p.transforms.iter().filter(move |t| t.kind == *k))
            .chain(p.transforms.iter().filter(|t| !known(t)));
        let mut shown = 0;
        for t in ordered.take(MAX_TRANSFORMS_SHOWN) {
            if shown > 0 {
                f.write_str("/")?;
            }
            transform(f, t)?;
            shown += 1;
        }
        if p.transforms.len() > shown {
            write!(f, "/… {} more", p.transforms.len() - shown)?;
        }
        Ok(())
    }
}

fn transform(f: &mut fmt::Formatter<'_>, t: &TransformRepr) -> fmt::Result {
    let name = match t.kind {
        TransformType::ENCR => encr_name(t.id),
        TransformType::INTEG => integ_name(t.id),
        TransformType::PRF => prf_name(t.id),
        TransformType::KE => ke_name(t.id),
        TransformType::ESN => match t.id {
            0 => Some("NO_EXT_SEQ"),
            1 => Some("EXT_SEQ"),
            _ => None,
        },
        // RFC 9370: additional key exchanges 1–7 are types 6–12.
        TransformType(k @ 6..=12) => {
            write!(f, "KE{}_", k - 5)?;
            ke_name(t.id)
        }
        TransformType(k) => {
            write!(f, "({k})_")?;
            None
        }
    };
    match name {
        Some(n) => f.write_str(n)?,
        None => write!(f, "({})", t.id)?,
    }
    if let Some(bits) = t.key_length {
        write!(f, "_{bits}")?;
    }
    Ok(())
}

/// strongSwan's `encryption_algorithm_names` (IKEv2 IDs).
fn encr_name(id: u16) -> Option<&'static str> {
    Some(match id {
        1 => "DES_IV64",
        2 => "DES_CBC",
        3 => "3DES_CBC",
        4 => "RC5_CBC",
        5 => "IDEA_CBC",
        6 => "CAST_CBC",
        7 => "BLOWFISH_CBC",
        8 => "3IDEA",
        9 => "DES_IV32",
        11 => "NULL",
        12 => "AES_CBC",
        13 => "AES_CTR",
        14 => "AES_CCM_8",
        15 => "AES_CCM_12",
        16 => "AES_CCM_16",
        18 => "AES_GCM_8",
        19 => "AES_GCM_12",
        20 => "AES_GCM_16",
        21 => "NULL_AES_GMAC",
        23 => "CAMELLIA_CBC",
        24 => "CAMELLIA_CTR",
        25 => "CAMELLIA_CCM_8",
        26 => "CAMELLIA_CCM_12",
        27 => "CAMELLIA_CCM_16",
        28 => "CHACHA20_POLY1305",
        _ => return None,
    })
}

/// strongSwan's `integrity_algorithm_names`.
fn integ_name(id: u16) -> Option<&'static str> {
    Some(match id {
        0 => "NONE",
        1 => "HMAC_MD5_96",
        2 => "HMAC_SHA1_96",
        3 => "DES_MAC",
        4 => "KPDK_MD5",
        5 => "AES_XCBC_96",
        6 => "HMAC_MD5_128",
        7 => "HMAC_SHA1_160",
        8 => "AES_CMAC_96",
        9 => "AES_128_GMAC",
        10 => "AES_192_GMAC",
        11 => "AES_256_GMAC",
        12 => "HMAC_SHA2_256_128",
        13 => "HMAC_SHA2_384_192",
        14 => "HMAC_SHA2_512_256",
        _ => return None,
    })
}

/// strongSwan's `pseudo_random_function_names`.
fn prf_name(id: u16) -> Option<&'static str> {
    Some(match id {
        1 => "PRF_HMAC_MD5",
        2 => "PRF_HMAC_SHA1",
        3 => "PRF_HMAC_TIGER",
        4 => "PRF_AES128_XCBC",
        5 => "PRF_HMAC_SHA2_256",
        6 => "PRF_HMAC_SHA2_384",
        7 => "PRF_HMAC_SHA2_512",
        8 => "PRF_AES128_CMAC",
        _ => return None,
    })
}

/// strongSwan's `key_exchange_method_names`.
fn ke_name(id: u16) -> Option<&'static str> {
    Some(match id {
        0 => "NONE",
        1 => "MODP_768",
        2 => "MODP_1024",
        5 => "MODP_1536",
        14 => "MODP_2048",
        15 => "MODP_3072",
        16 => "MODP_4096",
        17 => "MODP_6144",
        18 => "MODP_8192",
        19 => "ECP_256",
        20 => "ECP_384",
        21 => "ECP_521",
        22 => "MODP_1024_160",
        23 => "MODP_2048_224",
        24 => "MODP_2048_256",
        25 => "ECP_192",
        26 => "ECP_224",
        27 => "ECP_224_BP",
        28 => "ECP_256_BP",
        29 => "ECP_384_BP",
        30 => "ECP_512_BP",
        31 => "CURVE_25519",
        32 => "CURVE_448",
        35 => "ML_KEM_512",
        36 => "ML_KEM_768",
        37 => "ML_KEM_1024",
        _ => return None,
    })
}

/// The wire form of configured proposals, numbered from 1, each distinct
/// one once (a hub's connections usually share theirs), at most
/// [`MAX_PROPOSALS_SHOWN`]. `with_ke = false` leaves out key exchanges
/// (the first Child SA, RFC 7296 §1.2).
pub(crate) fn configured<'a>(proposals: impl IntoIterator<Item = &'a Proposal>, with_ke: bool) -> Vec<ProposalRepr> {
    let mut distinct: Vec<&Proposal> = Vec::new();
    for p in proposals {
        if !distinct.contains(&p) {
            distinct.push(p);
            if distinct.len() == MAX_PROPOSALS_SHOWN {
                break;
            }
        }
    }
    distinct
        .iter()
        .zip(1u8..)
        .map(|(p, n)| p.to_wire(n, Spi::None, with_ke))
        .collect()
}

/// Each of `proposals` in strongSwan's syntax (`IKE:AES_GCM_16_256/…`),
/// as `swanctl --list-conns` lists them; `with_ke = false` leaves out key
/// exchanges.
pub fn proposal_names(proposals: &[Proposal], with_ke: bool) -> Vec<String> {
    proposals
        .iter()
        .map(|p| OneProposal(&p.to_wire(1, Spi::None, with_ke)).to_string())
        .collect()
}

/// `received proposals: …, configured proposals: …`.
pub(crate) struct ProposalMismatch<'a> {
    /// What the peer offered (or, to an initiator, answered with).
    pub(crate) received: &'a [ProposalRepr],
    /// What we would accept (or offered).
    pub(crate) configured: &'a [ProposalRepr],
}

impl fmt::Display for ProposalMismatch<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "received proposals: {}, configured proposals: {}",
            Proposals(self.received),
            Proposals(self.configured)
        )
    }
}

/// One side's selectors, space-separated (strongSwan's list form).
pub(crate) struct Selectors<'a>(pub(crate) &'a [TrafficSelector]);

impl fmt::Display for Selectors<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("none");
        }
        for (i, ts) in self.0.iter().take(MAX_SELECTORS_SHOWN).enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{ts}")?;
        }
        if self.0.len() > MAX_SELECTORS_SHOWN {
            write!(f, " and {} more", self.0.len() - MAX_SELECTORS_SHOWN)?;
        }
        Ok(())
    }
}

/// `received TS TSi === TSr, configured I === R[, I === R (child)…]`:
/// what the peer asked for beside each child configuration it could
/// have matched, both written initiator side first.
pub(crate) struct TsMismatch<'a> {
    /// TSi, TSr as received.
    pub(crate) received: (&'a [TrafficSelector], &'a [TrafficSelector]),
    /// Per child configuration: its name and its (initiator side,
    /// responder side) selectors.
    pub(crate) configured: &'a [(&'a str, Vec<TrafficSelector>, Vec<TrafficSelector>)],
}

impl fmt::Display for TsMismatch<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (i, r) = self.received;
        write!(f, "received TS {} === {}, configured ", Selectors(i), Selectors(r))?;
        if self.configured.is_empty() {
            return f.write_str("none");
        }
        let named = self.configured.len() > 1;
        for (k, (name, i, r)) in self.configured.iter().enumerate() {
            if k > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{} === {}", Selectors(i), Selectors(r))?;
            if named {
                write!(f, " ({name})")?;
            }
        }
        Ok(())
    }
}

/// Edit distance over characters, a swap of two neighbours counting as
/// one edit (optimal string alignment: `debgu` is one edit from `debug`),
/// for "did you mean" hints. Words are short; O(n·m) is fine.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, v) in d[0].iter_mut().enumerate() {
        *v = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[i - 1][j] + 1).min(d[i][j - 1] + 1).min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = v;
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::proposal::Protocol;

    fn wire(protocol: Protocol, s: &str) -> Vec<ProposalRepr> {
        Proposal::parse_list(protocol, s)
            .unwrap()
            .iter()
            .enumerate()
            .map(|(i, p)| p.to_wire(i as u8 + 1, Spi::None, true))
            .collect()
    }

    fn ts(s: &str) -> TrafficSelector {
        crate::ts::TsConfig::parse(s).unwrap().resolve("192.0.2.1".parse().unwrap())
    }

    #[test]
    fn ike_proposals_print_as_strongswan_logs_them() {
        let received = wire(Protocol::Ike, "aes256gcm16-prfsha256-x25519");
        let configured = wire(Protocol::Ike, "aes128-sha256-modp2048");
        assert_eq!(
            ProposalMismatch { received: &received, configured: &configured }.to_string(),
            "received proposals: IKE:AES_GCM_16_256/PRF_HMAC_SHA2_256/CURVE_25519, configured proposals: IKE:AES_CBC_128/HMAC_SHA2_256_128/PRF_HMAC_SHA2_256/MODP_2048"
        );
        // Alternatives of one type follow each other; several proposals
        // are comma-separated.
        let two = wire(Protocol::Ike, "aes128-aes256-sha256-ecp256-x25519,chacha20poly1305-prfsha384-ecp384");
        assert_eq!(
            Proposals(&two).to_string(),
            "IKE:AES_CBC_128/AES_CBC_256/HMAC_SHA2_256_128/PRF_HMAC_SHA2_256/ECP_256/CURVE_25519, IKE:CHACHA20_POLY1305/PRF_HMAC_SHA2_384/ECP_384"
        );
    }

    #[test]
    fn configured_proposals_are_listed_once_each() {
        let a = Proposal::parse_list(Protocol::Esp, "aes256gcm16-x25519,aes128gcm16").unwrap();
        let b = Proposal::parse_list(Protocol::Esp, "aes128gcm16").unwrap();
        let w = configured(a.iter().chain(&b).chain(&a), false);
        assert_eq!(Proposals(&w).to_string(), "ESP:AES_GCM_16_256/NO_EXT_SEQ, ESP:AES_GCM_16_128/NO_EXT_SEQ");
        assert_eq!(w.iter().map(|p| p.number).collect::<Vec<_>>(), [1, 2]);
    }

    #[test]
    fn proposal_names_list_one_string_each() {
        let p = Proposal::parse_list(Protocol::Esp, "aes256gcm16-x25519,chacha20poly1305").unwrap();
        assert_eq!(proposal_names(&p, true), ["ESP:AES_GCM_16_256/CURVE_25519/NO_EXT_SEQ", "ESP:CHACHA20_POLY1305/NO_EXT_SEQ"]);
        assert_eq!(proposal_names(&p, false)[0], "ESP:AES_GCM_16_256/NO_EXT_SEQ");
    }

    #[test]
    fn esp_proposals_show_extended_sequence_numbers() {
        let esp = wire(Protocol::Esp, "aes256gcm16,aes128-sha256-modp3072");
        assert_eq!(
            Proposals(&esp).to_string(),
            "ESP:AES_GCM_16_256/NO_EXT_SEQ, ESP:AES_CBC_128/HMAC_SHA2_256_128/MODP_3072/NO_EXT_SEQ"
        );
    }

    #[test]
    fn unknown_values_print_as_numbers_and_floods_are_cut() {
        let p = ProposalRepr {
            number: 1,
            protocol: ProtocolId(9),
            spi: Spi::None,
            transforms: vec![
                TransformRepr::new(TransformType::KE, 31),
                TransformRepr::with_key_length(TransformType::ENCR, 1024, 128),
                TransformRepr::new(TransformType(6), 36),
                TransformRepr::new(TransformType(99), 3),
            ],
        };
        assert_eq!(Proposals(std::slice::from_ref(&p)).to_string(), "(9):(1024)_128/CURVE_25519/KE1_ML_KEM_768/(99)_(3)");
        let many = vec![p; MAX_PROPOSALS_SHOWN + 3];
        let s = Proposals(&many).to_string();
        assert!(s.ends_with(" and 3 more"), "{s}");
        assert_eq!(s.matches("(9):").count(), MAX_PROPOSALS_SHOWN);
        let long = ProposalRepr {
            number: 1,
            protocol: ProtocolId::IKE,
            spi: Spi::None,
            transforms: vec![TransformRepr::new(TransformType::ENCR, 12); MAX_TRANSFORMS_SHOWN + 5],
        };
        let s = Proposals(&[long]).to_string();
        assert!(s.ends_with("/… 5 more"), "{s}");
        assert_eq!(s.matches("AES_CBC").count(), MAX_TRANSFORMS_SHOWN);
        assert_eq!(Proposals(&[]).to_string(), "none");
    }

    #[test]
    fn selectors_print_initiator_side_first() {
        let m = TsMismatch {
            received: (&[ts("10.9.0.0/16")], &[ts("10.1.0.0/24")]),
            configured: &[("lan", vec![ts("10.2.0.0/16")], vec![ts("10.1.0.0/24")])],
        };
        assert_eq!(m.to_string(), "received TS 10.9.0.0/16 === 10.1.0.0/24, configured 10.2.0.0/16 === 10.1.0.0/24");
        // Several children are named; ports, ranges and `dynamic` resolved.
        let m = TsMismatch {
            received: (&[ts("10.9.0.0/16"), ts("fd00:9::/64")], &[ts("dynamic")]),
            configured: &[
                ("lan", vec![ts("10.2.0.0/16[tcp/443]")], vec![ts("10.1.0.0/24")]),
                ("dmz", vec![ts("10.3.0.1-10.3.0.9")], vec![]),
            ],
        };
        assert_eq!(
            m.to_string(),
            "received TS 10.9.0.0/16 fd00:9::/64 === 192.0.2.1/32, configured 10.2.0.0/16[6/443] === 10.1.0.0/24 (lan), 10.3.0.1-10.3.0.9 === none (dmz)"
        );
        let many = vec![ts("10.0.0.0/8"); MAX_SELECTORS_SHOWN + 2];
        assert!(Selectors(&many).to_string().ends_with("10.0.0.0/8 and 2 more"));
    }
}
