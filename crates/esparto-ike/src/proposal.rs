//! Proposals: strongSwan's proposal syntax, the wire form, and selection
//! (RFC 7296 §2.7, §3.3).
//!
//! A configured [`Proposal`] is a set of acceptable algorithms per
//! transform type, written the way swanctl.conf writes it:
//! `aes256gcm16-prfsha256-x25519`, `aes128-sha256-ecp256`,
//! `aes256-sha256-modp2048` for IKE; `aes256gcm16`, `aes128-sha256`,
//! `chacha20poly1305-x25519` (a group means PFS) for ESP. As in strongSwan,
//! an IKE proposal without a `prf…` keyword takes its PRFs from its
//! integrity algorithms (`sha256` gives HMAC-SHA2-256-128 *and*
//! PRF-HMAC-SHA2-256), and several keywords of one type in one string are
//! alternatives (`aes128-aes256-sha256-x25519-ecp256`).
//!
//! Selection follows §2.7: the responder walks the initiator's proposals
//! in order and takes the first one that every
//! required transform type can be satisfied from its own set, picking, per
//! type, the first offered transform it accepts (the initiator lists them
//! in its order of preference). The answer is one proposal with exactly
//! one transform per type, carrying the initiator's proposal number. The
//! initiator checks a response with the same code plus "exactly one of
//! each" ([`Proposal::accept_response`]).
//!
//! Hybrid key exchange (RFC 9370): `keN_` words (N = 1…7, strongSwan's
//! syntax) add ADDITIONAL_KEY_EXCHANGE_N transforms to an IKE proposal:
//! `aes256gcm16-prfsha384-x25519-ke1_mlkem768` runs X25519 in
//! IKE_SA_INIT and ML-KEM-768 in an IKE_INTERMEDIATE exchange, and both
//! secrets go into the keys. `keN_none` makes slot N optional
//! (`…-ke1_mlkem768-ke1_none`); without it a peer that does not offer
//! the method gets no IKE SA from this proposal, never a silent fall back
//! to the classical group. Additional exchanges take ML-KEM only, and
//! Child SA proposals take none yet (IKE_FOLLOWUP_KE).

use core::fmt;
use esparto_crypto::Integ;
use esparto_crypto::ike::{IkeEncr, KeGroup, MlKem, Prf};
use esparto_wire::ike::consts::{esn, integ};
use esparto_wire::ike::{ProposalRepr, ProtocolId, Spi, TransformRepr, TransformType};

fn encr_transform(e: IkeEncr) -> TransformRepr {
    match e.key_bits() {
        Some(bits) => TransformRepr::with_key_length(TransformType::ENCR, e.iana_id(), bits),
        // RFC 7634 §2: ChaCha20-Poly1305 has a fixed key size and takes no
        // Key Length attribute.
        None => TransformRepr::new(TransformType::ENCR, e.iana_id()),
    }
}

/// The PRF strongSwan derives from an integrity keyword when an IKE
/// proposal names no PRF (`aes128-sha256-…` means PRF-HMAC-SHA2-256 too).
fn integ_as_prf(i: Integ) -> Prf {
    match i {
        Integ::HmacSha1_96 => Prf::HmacSha1,
        Integ::HmacSha256_128 => Prf::HmacSha256,
        Integ::HmacSha384_192 => Prf::HmacSha384,
        Integ::HmacSha512_256 => Prf::HmacSha512,
    }
}

/// Which SA a proposal is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// The IKE SA.
    Ike,
    /// An ESP Child SA.
    Esp,
}

impl Protocol {
    fn id(self) -> ProtocolId {
        match self {
            Protocol::Ike => ProtocolId::IKE,
            Protocol::Esp => ProtocolId::ESP,
        }
    }
}

/// A configured proposal: acceptable algorithms per transform type, each
/// list in order of preference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proposal {
    /// IKE or ESP.
    pub protocol: Protocol,
    /// Encryption algorithms (all AEAD or all not, as strongSwan requires).
    pub encr: Vec<IkeEncr>,
    /// PRFs (IKE only).
    pub prf: Vec<Prf>,
    /// Integrity algorithms (empty for AEAD).
    pub integ: Vec<Integ>,
    /// Key exchange methods (IKE: at least one; ESP: empty unless PFS).
    pub ke: Vec<KeGroup>,
    /// Extended sequence numbers acceptable (ESP only): `[false]` unless configured.
    pub esn: Vec<bool>,
    /// Additional key exchanges (RFC 9370), slot N-1 for
    /// ADDITIONAL_KEY_EXCHANGE_N: the acceptable methods in order, `None`
    /// for NONE (the slot is optional); an empty slot is not used.
    pub ake: [Vec<Option<MlKem>>; MAX_AKE],
}

/// Additional key exchanges an IKE SA may have (RFC 9370 §2.2.1).
pub const MAX_AKE: usize = 7;

/// Transform type of additional key exchange slot `n` (0-based).
fn ake_type(n: usize) -> TransformType {
    TransformType(TransformType::ADDITIONAL_KE_1.0 + n as u8)
}

/// Why a proposal string was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProposalError {
    /// The string as given.
    pub proposal: String,
    /// What is wrong with it.
    pub reason: &'static str,
    /// The offending word and the valid ones, where that helps ("" if not).
    pub detail: String,
}

impl fmt::Display for ProposalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "proposal {:?}: {}{}", self.proposal, self.reason, self.detail)
    }
}

/// Every algorithm keyword a proposal takes, by strongSwan's names.
pub fn keywords() -> Vec<&'static str> {
    let mut k: Vec<&'static str> = IkeEncr::ALL.iter().map(|e| e.name()).collect();
    k.extend(Integ::ALL.iter().map(|i| i.name()));
    k.extend(Prf::ALL.iter().map(|p| p.name()));
    k.extend(KeGroup::ALL.iter().map(|g| g.name()));
    k.extend(["x25519", "esn", "noesn"]);
    k.extend(["ke1_mlkem512", "ke1_mlkem768", "ke1_mlkem1024", "ke1_none"]);
    k
}

/// ` 'WORD' (did you mean 'W'?); known: …` for an unknown keyword.
fn unknown_detail(word: &str) -> String {
    let known = keywords();
    let close = known
        .iter()
        .map(|k| (crate::diag::edit_distance(word, k), *k))
        .filter(|(d, k)| *d <= 2 && *d < k.len() / 2 + 1)
        .min_by_key(|(d, _)| *d)
        .map_or_else(String::new, |(_, k)| format!(" (did you mean '{k}'?)"));
    format!(" '{word}'{close}; known: {}", known.join(", "))
}


impl std::error::Error for ProposalError {}

enum Keyword {
    Encr(IkeEncr),
    Integ(Integ),
    Prf(Prf),
    Ke(KeGroup),
    Esn(bool),
}

/// `keN_mlkem768` / `keN_none` (N = 1…7); `Err` for a `keN_` word whose
/// method or number is not one we take.
fn ake_keyword(k: &str) -> Option<Result<(usize, Option<MlKem>), &'static str>> {
    let rest = k.strip_prefix("ke")?;
    let (n, method) = rest.split_once('_')?;
    let n: usize = n.parse().ok()?;
    if !(1..=MAX_AKE).contains(&n) {
        return Some(Err("additional key exchanges are ke1_ to ke7_"));
    }
    if method == "none" {
        return Some(Ok((n - 1, None)));
    }
    Some(match MlKem::from_keyword(method) {
        Some(m) => Ok((n - 1, Some(m))),
        None => Err("additional key exchanges take mlkem512, mlkem768, mlkem1024 or none"),
    })
}

fn keyword(k: &str) -> Option<Keyword> {
    if let Some(e) = IkeEncr::from_keyword(k) {
        return Some(Keyword::Encr(e));
    }
    if let Some(i) = Integ::from_keyword(k) {
        return Some(Keyword::Integ(i));
    }
    if let Some(p) = Prf::from_keyword(k) {
        return Some(Keyword::Prf(p));
    }
    if let Some(g) = KeGroup::from_keyword(k) {
        return Some(Keyword::Ke(g));
    }
    match k {
        "esn" => Some(Keyword::Esn(true)),
        "noesn" => Some(Keyword::Esn(false)),
        _ => None,
    }
}

fn push_unique<T: PartialEq>(v: &mut Vec<T>, x: T) {
    if !v.contains(&x) {
        v.push(x);
    }
}

impl Proposal {
    /// Parse one proposal in strongSwan syntax for `protocol`.
    pub fn parse(protocol: Protocol, s: &str) -> Result<Self, ProposalError> {
        let err = |reason| ProposalError {
            proposal: s.to_string(),
            reason,
            detail: String::new(),
        };
        let mut p = Proposal {
            protocol,
            encr: vec![],
            prf: vec![],
            integ: vec![],
            ke: vec![],
            esn: vec![],
            ake: Default::default(),
        };
        for word in s.trim().split('-') {
            let unknown = || ProposalError { detail: unknown_detail(word), ..err("unknown algorithm") };
            let lower = word.to_ascii_lowercase();
            if let Some(a) = ake_keyword(&lower) {
                let (n, m) = a.map_err(|reason| ProposalError { detail: format!(": '{word}'"), ..err(reason) })?;
                push_unique(&mut p.ake[n], m);
                continue;
            }
            match keyword(&lower).ok_or_else(unknown)? {
                Keyword::Encr(e) => push_unique(&mut p.encr, e),
                Keyword::Integ(i) => push_unique(&mut p.integ, i),
                Keyword::Prf(f) => push_unique(&mut p.prf, f),
                Keyword::Ke(k) => push_unique(&mut p.ke, k),
                Keyword::Esn(e) => push_unique(&mut p.esn, e),
            }
        }
        if p.encr.is_empty() {
            return Err(err("no encryption algorithm"));
        }
        let aead = p.encr[0].is_aead();
        if p.encr.iter().any(|e| e.is_aead() != aead) {
            return Err(err("AEAD and non-AEAD encryption in one proposal"));
        }
        if aead && !p.integ.is_empty() {
            return Err(err("integrity algorithm with an AEAD cipher"));
        }
        if !aead && p.integ.is_empty() {
            return Err(err("no integrity algorithm"));
        }
        match protocol {
            Protocol::Ike => {
                if p.prf.is_empty() {
                    if aead {
                        return Err(err("AEAD IKE proposal needs a prf keyword"));
                    }
                    p.prf = p.integ.iter().map(|&i| integ_as_prf(i)).collect();
                }
                if p.ke.is_empty() {
                    return Err(err("no key exchange method"));
                }
                if !p.esn.is_empty() {
                    return Err(err("esn in an IKE proposal"));
                }
            }
            Protocol::Esp => {
                if !p.prf.is_empty() {
                    return Err(err("prf in an ESP proposal"));
                }
                if p.ake.iter().any(|s| !s.is_empty()) {
                    return Err(err("additional key exchanges (keN_) are not supported for Child SAs yet"));
                }
                if p.esn.is_empty() {
                    p.esn.push(false);
                }
            }
        }
        Ok(p)
    }

    /// `proposals` without their additional key exchanges: what an IKE SA
    /// rekey offers and accepts. RFC 9370 runs those in IKE_FOLLOWUP_KE
    /// exchanges, which are not implemented; the rekeyed SA's SKEYSEED
    /// still depends on them through the old SK_d (RFC 7296 §2.18).
    pub fn without_additional(proposals: &[Proposal]) -> Vec<Proposal> {
        proposals
            .iter()
            .map(|p| Proposal { ake: Default::default(), ..p.clone() })
            .collect()
    }

    /// Parse a comma-separated list of proposals (swanctl's `proposals = a, b`).
    pub fn parse_list(protocol: Protocol, s: &str) -> Result<Vec<Self>, ProposalError> {
        s.split(',')
            .filter(|w| !w.trim().is_empty())
            .map(|w| Self::parse(protocol, w))
            .collect()
    }

    /// The wire form, numbered `number`, with `spi`. `with_ke = false`
    /// drops the KE transforms (the first Child SA in IKE_AUTH has no KE
    /// of its own, RFC 7296 §1.2).
    pub fn to_wire(&self, number: u8, spi: Spi, with_ke: bool) -> ProposalRepr {
        let mut t = Vec::new();
        t.extend(self.encr.iter().map(|&e| encr_transform(e)));
        t.extend(
            self.prf
                .iter()
                .map(|p| TransformRepr::new(TransformType::PRF, p.iana_id())),
        );
        t.extend(
            self.integ
                .iter()
                .map(|i| TransformRepr::new(TransformType::INTEG, i.iana_id())),
        );
        if with_ke {
            t.extend(
                self.ke
                    .iter()
                    .map(|k| TransformRepr::new(TransformType::KE, k.iana_id())),
            );
            for (n, slot) in self.ake.iter().enumerate() {
                t.extend(
                    slot.iter()
                        .map(|m| TransformRepr::new(ake_type(n), m.map_or(0, MlKem::iana_id))),
                );
            }
        }
        t.extend(
            self.esn.iter().map(|&e| {
                TransformRepr::new(TransformType::ESN, if e { esn::YES } else { esn::NO })
            }),
        );
        ProposalRepr {
            number,
            protocol: self.protocol.id(),
            spi,
            transforms: t,
        }
    }

    /// Try to satisfy this configured proposal from one offered proposal.
    /// `ignore_ke` skips key exchange transforms entirely (IKE_AUTH).
    fn select_from(
        &self,
        offered: &ProposalRepr,
        ignore_ke: bool,
        prefer_ke: Option<KeGroup>,
    ) -> Option<Selected> {
        if offered.protocol != self.protocol.id() {
            return None;
        }
        // §3.3.6: a proposal with a Transform Type we do not understand is
        // unacceptable; a transform with an attribute we do not understand
        // is unacceptable, "other transforms with the same Transform Type are
        // processed as usual".
        if offered
            .transforms
            .iter()
            .any(|t| !(1..=5 + MAX_AKE as u8).contains(&t.kind.0))
        {
            return None;
        }
        let of = |k| offered.transforms_of(k).filter(|t| !t.unknown_attribute);
        let e = of(TransformType::ENCR).find_map(|t| {
            IkeEncr::from_iana(t.id, t.key_length).filter(|e| self.encr.contains(e))
        })?;
        let prf = match self.protocol {
            Protocol::Ike => Some(
                of(TransformType::PRF)
                    .find_map(|t| Prf::from_iana(t.id).filter(|p| self.prf.contains(p)))?,
            ),
            Protocol::Esp => {
                if of(TransformType::PRF).next().is_some() {
                    return None;
                }
                None
            }
        };
        let integ = if e.is_aead() {
            // RFC 7296 §3.3: with a combined-mode cipher, the integrity
            // transform is absent or "NONE".
            if of(TransformType::INTEG).any(|t| t.id != integ::NONE) {
                return None;
            }
            None
        } else {
            Some(
                of(TransformType::INTEG)
                    .find_map(|t| Integ::from_iana(t.id).filter(|i| self.integ.contains(i)))?,
            )
        };
        let ke_offered: Vec<_> = of(TransformType::KE).collect();
        let ke = if ignore_ke {
            None
        } else if self.ke.is_empty() {
            // No PFS configured: acceptable if the peer offers none or NONE (0).
            if ke_offered.is_empty() || ke_offered.iter().any(|t| t.id == 0) {
                None
            } else {
                return None;
            }
        } else {
            // §1.2: if the group of the KE payload is acceptable, take it
            // rather than asking for another (INVALID_KE_PAYLOAD).
            let acceptable: Vec<KeGroup> = ke_offered
                .iter()
                .filter_map(|t| KeGroup::from_iana(t.id))
                .filter(|k| self.ke.contains(k))
                .collect();
            let preferred = prefer_ke.filter(|g| acceptable.contains(g));
            Some(preferred.or_else(|| acceptable.first().copied())?)
        };
        let mut ake = [None; MAX_AKE];
        for (n, ours) in self.ake.iter().enumerate() {
            let offered_n: Vec<_> = of(ake_type(n)).collect();
            ake[n] = if ignore_ke || (ours.is_empty() && offered_n.is_empty()) {
                None
            } else if ours.is_empty() {
                // Not configured: only NONE among the offered will do.
                if offered_n.iter().any(|t| t.id == 0) {
                    None
                } else {
                    return None;
                }
            } else {
                let pick = offered_n.iter().find_map(|t| match t.id {
                    0 => ours.contains(&None).then_some(None),
                    id => MlKem::from_iana(id).filter(|m| ours.contains(&Some(*m))).map(Some),
                });
                match pick {
                    Some(m) => m,
                    // An optional slot the peer did not offer at all.
                    None if offered_n.is_empty() && ours.contains(&None) => None,
                    None => return None,
                }
            };
        }
        let esn = match self.protocol {
            Protocol::Ike => false,
            Protocol::Esp => {
                let offered_esn: Vec<_> = of(TransformType::ESN).collect();
                if offered_esn.is_empty() {
                    // Lenient: a missing ESN transform means no ESN.
                    if !self.esn.contains(&false) {
                        return None;
                    }
                    false
                } else {
                    offered_esn.iter().find_map(|t| match t.id {
                        esn::NO if self.esn.contains(&false) => Some(false),
                        esn::YES if self.esn.contains(&true) => Some(true),
                        _ => None,
                    })?
                }
            }
        };
        Some(Selected {
            number: offered.number,
            spi: offered.spi,
            encr: e,
            prf,
            integ,
            ke,
            esn,
            ake,
        })
    }

    /// Responder side (§2.7): the first offered proposal, in the initiator's
    /// order, that one of `ours` can satisfy. `prefer_ke` is the group of
    /// the initiator's KE payload, chosen when acceptable.
    pub fn select(
        ours: &[Proposal],
        offered: &[ProposalRepr],
        ignore_ke: bool,
        prefer_ke: Option<KeGroup>,
    ) -> Option<Selected> {
        offered.iter().find_map(|o| {
            ours.iter()
                .find_map(|p| p.select_from(o, ignore_ke, prefer_ke))
        })
    }

    /// Initiator side: the responder's answer must be a single proposal with
    /// exactly one transform of each type, all of which we offered.
    pub fn accept_response(
        ours: &[Proposal],
        response: &[ProposalRepr],
        ignore_ke: bool,
    ) -> Option<Selected> {
        let [answer] = response else { return None };
        let kinds = [
            TransformType::ENCR,
            TransformType::PRF,
            TransformType::INTEG,
            TransformType::KE,
            TransformType::ESN,
        ];
        for kind in kinds.into_iter().chain((0..MAX_AKE).map(ake_type)) {
            if answer.transforms_of(kind).count() > 1 {
                return None;
            }
        }
        // The answer must carry the number of one of our proposals (§3.3.1)
        // and fit that proposal.
        let idx = usize::from(answer.number).checked_sub(1)?;
        ours.get(idx)?.select_from(answer, ignore_ke, None)
    }
}

/// The outcome of negotiation: one algorithm per type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Selected {
    /// The proposal number to echo.
    pub number: u8,
    /// The SPI the proposer put in its proposal (its inbound SPI for ESP).
    pub spi: Spi,
    /// Encryption.
    pub encr: IkeEncr,
    /// PRF (IKE only).
    pub prf: Option<Prf>,
    /// Integrity (non-AEAD only).
    pub integ: Option<Integ>,
    /// Key exchange (IKE; ESP with PFS).
    pub ke: Option<KeGroup>,
    /// Extended sequence numbers (ESP).
    pub esn: bool,
    /// Additional key exchanges, by slot (`None`: unused or NONE).
    pub ake: [Option<MlKem>; MAX_AKE],
}

impl Selected {
    /// The additional key exchanges to run, in slot order (RFC 9370
    /// §2.2.1: one IKE_INTERMEDIATE exchange each).
    pub fn additional(&self) -> impl Iterator<Item = MlKem> + '_ {
        self.ake.iter().flatten().copied()
    }

    /// The single-proposal answer to send back, with our own SPI.
    pub fn to_wire(&self, protocol: Protocol, spi: Spi) -> ProposalRepr {
        let p = Proposal {
            protocol,
            encr: vec![self.encr],
            prf: self.prf.into_iter().collect(),
            integ: self.integ.into_iter().collect(),
            ke: self.ke.into_iter().collect(),
            esn: if protocol == Protocol::Esp {
                vec![self.esn]
            } else {
                vec![]
            },
            ake: core::array::from_fn(|n| match self.ake[n] {
                Some(m) => vec![Some(m)],
                None => vec![],
            }),
        };
        p.to_wire(self.number, spi, true)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn ike(s: &str) -> Proposal {
        Proposal::parse(Protocol::Ike, s).unwrap()
    }

    #[test]
    fn parses_strongswan_spellings() {
        let p = ike("aes256gcm16-prfsha256-x25519");
        assert_eq!(p.encr, [IkeEncr::AesGcm16 { key_bits: 256 }]);
        assert_eq!(p.prf, [Prf::HmacSha256]);
        assert!(p.integ.is_empty());
        assert_eq!(p.ke, [KeGroup::Curve25519]);
        let p = ike("aes128-sha256-ecp256");
        assert_eq!(p.integ, [Integ::HmacSha256_128]);
        assert_eq!(p.prf, [Prf::HmacSha256], "PRF derived from integrity");
        let p = ike("aes256-sha256-modp2048");
        assert_eq!(p.ke, [KeGroup::Modp2048]);
        let e = Proposal::parse(Protocol::Esp, "aes128-sha256").unwrap();
        assert_eq!(e.esn, [false]);
        assert!(e.ke.is_empty());
        let e = Proposal::parse(Protocol::Esp, "chacha20poly1305-x25519-esn").unwrap();
        assert_eq!(e.ke, [KeGroup::Curve25519]);
        assert_eq!(e.esn, [true]);
        assert_eq!(
            Proposal::parse_list(Protocol::Esp, "aes256gcm16, aes128gcm16")
                .unwrap()
                .len(),
            2
        );
    }

    #[test]
    fn refuses_bad_proposals() {
        for (proto, s) in [
            (Protocol::Ike, "aes256gcm16-x25519"),
            (Protocol::Ike, "aes128-prfsha256-x25519"),
            (Protocol::Ike, "aes128-sha256"),
            (Protocol::Ike, "aes128-aes128gcm16-sha256-x25519"),
            (Protocol::Ike, "3des-sha1-modp1024"),
            (Protocol::Esp, "aes128gcm16-sha256"),
            (Protocol::Esp, "aes128-prfsha256-sha256"),
            (Protocol::Ike, ""),
        ] {
            assert!(Proposal::parse(proto, s).is_err(), "{s}");
        }
    }

    #[test]
    fn responder_takes_initiators_first_acceptable() {
        let offered = [
            ike("aes128-sha1-modp2048").to_wire(1, Spi::None, true),
            ike("aes256gcm16-prfsha384-ecp384-x25519").to_wire(2, Spi::None, true),
            ike("aes128gcm16-prfsha256-x25519").to_wire(3, Spi::None, true),
        ];
        let ours = [ike("aes128gcm16-aes256gcm16-prfsha256-prfsha384-x25519")];
        let s = Proposal::select(&ours, &offered, false, None).unwrap();
        assert_eq!(s.number, 2);
        assert_eq!(s.encr, IkeEncr::AesGcm16 { key_bits: 256 });
        assert_eq!(s.prf, Some(Prf::HmacSha384));
        assert_eq!(
            s.ke,
            Some(KeGroup::Curve25519),
            "first offered group we accept"
        );
        // The answer is accepted by the initiator.
        let ans = s.to_wire(Protocol::Ike, Spi::None);
        let mine: Vec<_> = [
            "aes128-sha1-modp2048",
            "aes256gcm16-prfsha384-ecp384-x25519",
            "aes128gcm16-prfsha256-x25519",
        ]
        .iter()
        .map(|s| ike(s))
        .collect();
        assert_eq!(Proposal::accept_response(&mine, &[ans], false), Some(s));
    }

    #[test]
    fn no_match_is_none() {
        let offered = [ike("aes128-sha256-ecp256").to_wire(1, Spi::None, true)];
        assert_eq!(
            Proposal::select(
                &[ike("aes256gcm16-prfsha256-x25519")],
                &offered,
                false,
                None
            ),
            None
        );
        // Same algorithms, wrong key length.
        let offered = [ike("aes128-sha256-ecp256").to_wire(1, Spi::None, true)];
        assert_eq!(
            Proposal::select(&[ike("aes256-sha256-ecp256")], &offered, false, None),
            None
        );
    }

    #[test]
    fn esp_pfs_and_ke_ignoring() {
        let esp = |s| Proposal::parse(Protocol::Esp, s).unwrap();
        let offered = [esp("aes256gcm16-x25519").to_wire(1, Spi::U32(0x1000), true)];
        // Without PFS configured, a KE-only offer does not match...
        assert_eq!(
            Proposal::select(&[esp("aes256gcm16")], &offered, false, None),
            None
        );
        // ...unless KE is ignored (IKE_AUTH).
        let s = Proposal::select(&[esp("aes256gcm16")], &offered, true, None).unwrap();
        assert_eq!(s.spi, Spi::U32(0x1000));
        assert_eq!(s.ke, None);
        let s = Proposal::select(&[esp("aes256gcm16-x25519")], &offered, false, None).unwrap();
        assert_eq!(s.ke, Some(KeGroup::Curve25519));
    }

    #[test]
    fn accept_response_refuses_multiple_or_foreign() {
        let mine = [ike("aes128gcm16-aes256gcm16-prfsha256-x25519")];
        // Responder echoed our whole proposal (two ENCR): refused.
        assert_eq!(
            Proposal::accept_response(&mine, &[mine[0].to_wire(1, Spi::None, true)], false),
            None
        );
        // A proposal number we never sent: refused.
        let s =
            Proposal::select(&mine, &[mine[0].to_wire(1, Spi::None, true)], false, None).unwrap();
        let mut ans = s.to_wire(Protocol::Ike, Spi::None);
        ans.number = 2;
        assert_eq!(Proposal::accept_response(&mine, &[ans], false), None);
    }

    #[test]
    fn unknown_attribute_rejects_the_transform_unknown_type_the_proposal() {
        let ours = [ike("aes128-aes256-sha256-ecp256")];
        let mut o = ike("aes128-aes256-sha256-ecp256").to_wire(1, Spi::None, true);
        o.transforms[0].unknown_attribute = true;
        let s = Proposal::select(&ours, std::slice::from_ref(&o), false, None).unwrap();
        assert_eq!(
            s.encr,
            IkeEncr::AesCbc { key_bits: 256 },
            "the next ENCR transform"
        );
        o.transforms[1].unknown_attribute = true;
        assert_eq!(
            Proposal::select(&ours, std::slice::from_ref(&o), false, None),
            None
        );
        let mut o = ike("aes128-sha256-ecp256").to_wire(1, Spi::None, true);
        o.transforms.push(TransformRepr::new(TransformType(9), 1));
        assert_eq!(Proposal::select(&ours, &[o], false, None), None);
    }

    #[test]
    fn additional_key_exchanges_parse_go_on_the_wire_and_are_selected_per_slot() {
        let p = ike("aes256gcm16-prfsha384-x25519-ke1_mlkem768-ke1_none-ke2_mlkem1024");
        assert_eq!(p.ake[0], vec![Some(MlKem::MlKem768), None]);
        assert_eq!(p.ake[1], vec![Some(MlKem::MlKem1024)]);
        assert!(p.ake[2..].iter().all(Vec::is_empty));
        let w = p.to_wire(1, Spi::None, true);
        let ids = |n: u8| w.transforms_of(TransformType(n)).map(|t| t.id).collect::<Vec<_>>();
        assert_eq!((ids(6), ids(7)), (vec![36, 0], vec![37]));
        // A responder requiring ke1 and ke2 takes both; one without ke2
        // refuses the offer (ke2 has no NONE), one with neither too.
        let both = Proposal::select(std::slice::from_ref(&p), std::slice::from_ref(&w), false, None).unwrap();
        assert_eq!(both.additional().collect::<Vec<_>>(), [MlKem::MlKem768, MlKem::MlKem1024]);
        let ke1 = ike("aes256gcm16-prfsha384-x25519-ke1_mlkem768");
        assert!(Proposal::select(&[ke1], std::slice::from_ref(&w), false, None).is_none());
        let plain = ike("aes256gcm16-prfsha384-x25519");
        assert!(Proposal::select(std::slice::from_ref(&plain), std::slice::from_ref(&w), false, None).is_none());
        // ke1 optional, ke2 absent: a classical offer gets the classical SA.
        let opt = ike("aes256gcm16-prfsha384-x25519-ke1_mlkem768-ke1_none");
        let offer = plain.to_wire(1, Spi::None, true);
        let sel = Proposal::select(&[opt], &[offer], false, None).unwrap();
        assert_eq!(sel.additional().count(), 0);
        // The answer names the chosen method once; Child SA proposals take none.
        let answer = both.to_wire(Protocol::Ike, Spi::None);
        assert_eq!(answer.transforms_of(TransformType(6)).count(), 1);
        assert!(Proposal::parse(Protocol::Esp, "aes256gcm16-ke1_mlkem768").is_err());
        assert!(Proposal::parse(Protocol::Ike, "aes256gcm16-prfsha256-x25519-ke0_mlkem768").is_err());
    }
}
