//! The Security Association payload: proposals, transforms and transform
//! attributes (RFC 7296 §3.3).
//!
//! ```text
//! SA payload body  = Proposal+
//! Proposal         = Last(0|2) RESERVED Length(2) Num ProtocolID SPISize #Transforms SPI Transform+
//! Transform        = Last(0|3) RESERVED Length(2) Type RESERVED TransformID(2) Attribute*
//! Attribute (TV)   = 1|Type(15) Value(2)          Attribute (TLV) = 0|Type(15) Length(2) Value
//! ```
//!
//! The parsed form keeps what negotiation needs: the proposal number (the
//! responder echoes it, §3.3.1), the protocol, the SPI and a flat list of
//! transforms. The only attribute RFC 7296 defines is Key Length (§3.3.5);
//! §3.3.6 says a transform "that contains a Transform Attribute it does
//! not understand" must be considered unacceptable (other transforms of
//! the same type are processed as usual), so we record such an attribute
//! as a flag on the transform rather than failing the whole message.
//!
//! The "Last Substruc" values must agree with the lengths: a proposal that
//! says it is last but is followed by more bytes (or the reverse) is
//! malformed. Counts are bounded by [`super::limits`].

use super::consts::{ATTR_KEY_LENGTH, ProtocolId, TransformType};
use super::cursor::{Reader, Writer};
use super::error::{Error, Result};
use super::limits;

const LAST: u8 = 0;
const MORE_PROPOSALS: u8 = 2;
const MORE_TRANSFORMS: u8 = 3;
const PROPOSAL_HEADER_LEN: usize = 8;
const TRANSFORM_HEADER_LEN: usize = 8;
/// The AF bit: attribute in Type/Value (two-octet value) format.
const ATTR_TV: u16 = 0x8000;

/// An SPI as it appears in a proposal, notify or delete: empty, four octets
/// (ESP, AH) or eight octets (IKE, when rekeying an IKE SA).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Spi {
    /// SPI Size 0.
    None,
    /// A four-octet SPI (ESP/AH).
    U32(u32),
    /// An eight-octet SPI (IKE).
    U64(u64),
}

impl Spi {
    /// Number of octets on the wire.
    pub fn len(&self) -> usize {
        match self {
            Spi::None => 0,
            Spi::U32(_) => 4,
            Spi::U64(_) => 8,
        }
    }

    /// True for an empty SPI.
    pub fn is_empty(&self) -> bool {
        matches!(self, Spi::None)
    }

    /// Read an SPI of `size` octets. Other sizes are malformed: RFC 7296
    /// only defines SPIs of 0, 4 and 8 octets.
    pub(crate) fn read(r: &mut Reader<'_>, size: u8) -> Result<Spi> {
        match size {
            0 => Ok(Spi::None),
            4 => Ok(Spi::U32(r.u32()?)),
            8 => Ok(Spi::U64(r.u64()?)),
            _ => Err(Error::Malformed("SPI size")),
        }
    }

    pub(crate) fn write(&self, w: &mut Writer<'_>) -> Result<()> {
        match *self {
            Spi::None => Ok(()),
            Spi::U32(v) => w.u32(v),
            Spi::U64(v) => w.u64(v),
        }
    }
}

/// One transform of a proposal (RFC 7296 §3.3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TransformRepr {
    /// Transform type (ENCR, PRF, INTEG, KE, ESN).
    pub kind: TransformType,
    /// Transform ID within its type (see [`super::consts::encr`] etc.).
    pub id: u16,
    /// The Key Length attribute in bits, if present (§3.3.5).
    pub key_length: Option<u16>,
    /// The transform carried an attribute we do not understand; §3.3.6 makes
    /// the transform unacceptable. Never emitted.
    pub unknown_attribute: bool,
}

impl TransformRepr {
    /// A transform without attributes.
    pub const fn new(kind: TransformType, id: u16) -> Self {
        TransformRepr {
            kind,
            id,
            key_length: None,
            unknown_attribute: false,
        }
    }

    /// A transform with a Key Length attribute (bits).
    pub const fn with_key_length(kind: TransformType, id: u16, bits: u16) -> Self {
        TransformRepr {
            kind,
            id,
            key_length: Some(bits),
            unknown_attribute: false,
        }
    }

    fn parse(body: &[u8]) -> Result<Self> {
        // `body` starts at the Transform Type octet (after Last/RESERVED/Length).
        let mut r = Reader::new(body);
        let kind = TransformType(r.u8()?);
        let _reserved = r.u8()?;
        let id = r.u16()?;
        let mut key_length = None;
        let mut unknown_attribute = false;
        let mut n = 0;
        while !r.is_empty() {
            n += 1;
            if n > limits::MAX_ATTRIBUTES {
                return Err(Error::Limit("too many transform attributes"));
            }
            let t = r.u16()?;
            if t & ATTR_TV != 0 {
                let v = r.u16()?;
                if t & !ATTR_TV == ATTR_KEY_LENGTH {
                    if key_length.is_some() {
                        return Err(Error::Malformed("duplicate Key Length attribute"));
                    }
                    key_length = Some(v);
                } else {
                    unknown_attribute = true;
                }
            } else {
                // RFC 7296 §3.3.5: Key Length is a TV attribute; a TLV
                // attribute of any type is one we do not understand.
                let len = usize::from(r.u16()?);
                r.take(len)?;
                unknown_attribute = true;
            }
        }
        Ok(TransformRepr {
            kind,
            id,
            key_length,
            unknown_attribute,
        })
    }

    /// Octets on the wire, substructure header included.
    pub fn buffer_len(&self) -> usize {
        TRANSFORM_HEADER_LEN + if self.key_length.is_some() { 4 } else { 0 }
    }

    fn emit(&self, w: &mut Writer<'_>, last: bool) -> Result<()> {
        w.u8(if last { LAST } else { MORE_TRANSFORMS })?;
        w.u8(0)?;
        w.u16(self.buffer_len() as u16)?;
        w.u8(self.kind.0)?;
        w.u8(0)?;
        w.u16(self.id)?;
        if let Some(bits) = self.key_length {
            w.u16(ATTR_TV | ATTR_KEY_LENGTH)?;
            w.u16(bits)?;
        }
        Ok(())
    }
}

/// One proposal (RFC 7296 §3.3.1).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ProposalRepr {
    /// Proposal number: 1 for the first, one more for each next (§3.3.1);
    /// the responder's single proposal carries the number it accepted.
    pub number: u8,
    /// IKE, AH or ESP.
    pub protocol: ProtocolId,
    /// The sender's SPI for the SA (empty in the initial IKE_SA_INIT).
    pub spi: Spi,
    /// The transforms, in the order sent.
    pub transforms: Vec<TransformRepr>,
}

impl ProposalRepr {
    /// Octets on the wire, substructure header included.
    pub fn buffer_len(&self) -> usize {
        PROPOSAL_HEADER_LEN
            + self.spi.len()
            + self
                .transforms
                .iter()
                .map(TransformRepr::buffer_len)
                .sum::<usize>()
    }

    fn parse(body: &[u8]) -> Result<Self> {
        // `body` starts at the Proposal Num octet.
        let mut r = Reader::new(body);
        let number = r.u8()?;
        let protocol = ProtocolId(r.u8()?);
        let spi_size = r.u8()?;
        let count = usize::from(r.u8()?);
        let spi = Spi::read(&mut r, spi_size)?;
        if count == 0 {
            return Err(Error::Malformed("proposal without transforms"));
        }
        if count > limits::MAX_TRANSFORMS {
            return Err(Error::Limit("too many transforms"));
        }
        let mut transforms = Vec::with_capacity(count);
        for i in 0..count {
            let last = r.u8()?;
            let _reserved = r.u8()?;
            let len = usize::from(r.u16()?);
            if len < TRANSFORM_HEADER_LEN {
                return Err(Error::Malformed("transform length"));
            }
            let body = r.take(len - 4)?;
            let expect_last = i + 1 == count;
            match (last, expect_last) {
                (LAST, true) | (MORE_TRANSFORMS, false) => {}
                _ => return Err(Error::Malformed("transform Last Substruc")),
            }
            transforms.push(TransformRepr::parse(body)?);
        }
        if !r.is_empty() {
            return Err(Error::Malformed(
                "proposal length disagrees with transforms",
            ));
        }
        Ok(ProposalRepr {
            number,
            protocol,
            spi,
            transforms,
        })
    }

    fn emit(&self, w: &mut Writer<'_>, last: bool) -> Result<()> {
        let len = u16::try_from(self.buffer_len()).map_err(|_| Error::Limit("proposal length"))?;
        let count =
            u8::try_from(self.transforms.len()).map_err(|_| Error::Limit("too many transforms"))?;
        w.u8(if last { LAST } else { MORE_PROPOSALS })?;
        w.u8(0)?;
        w.u16(len)?;
        w.u8(self.number)?;
        w.u8(self.protocol.0)?;
        w.u8(self.spi.len() as u8)?;
        w.u8(count)?;
        self.spi.write(w)?;
        for (i, t) in self.transforms.iter().enumerate() {
            t.emit(w, i + 1 == self.transforms.len())?;
        }
        Ok(())
    }

    /// The transforms of one type, in order.
    pub fn transforms_of(&self, kind: TransformType) -> impl Iterator<Item = &TransformRepr> {
        self.transforms.iter().filter(move |t| t.kind == kind)
    }
}

/// The SA payload body: a list of proposals.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct SaRepr {
    /// Proposals in order of the sender's preference.
    pub proposals: Vec<ProposalRepr>,
}

impl SaRepr {
    /// Parse an SA payload body.
    pub fn parse(body: &[u8]) -> Result<Self> {
        let mut r = Reader::new(body);
        let mut proposals = Vec::new();
        loop {
            if proposals.len() >= limits::MAX_PROPOSALS {
                return Err(Error::Limit("too many proposals"));
            }
            let last = r.u8()?;
            let _reserved = r.u8()?;
            let len = usize::from(r.u16()?);
            if len < PROPOSAL_HEADER_LEN {
                return Err(Error::Malformed("proposal length"));
            }
            let body = r.take(len - 4)?;
            proposals.push(ProposalRepr::parse(body)?);
            match (last, r.is_empty()) {
                (LAST, true) => break,
                (MORE_PROPOSALS, false) => {}
                _ => return Err(Error::Malformed("proposal Last Substruc")),
            }
        }
        Ok(SaRepr { proposals })
    }

    /// Length of the body on the wire.
    pub fn buffer_len(&self) -> usize {
        self.proposals.iter().map(ProposalRepr::buffer_len).sum()
    }

    /// Write the body into `buf` (at least `buffer_len()` octets).
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        if self.proposals.is_empty() {
            return Err(Error::Malformed("SA payload without proposals"));
        }
        let mut w = Writer::new(buf);
        for (i, p) in self.proposals.iter().enumerate() {
            p.emit(&mut w, i + 1 == self.proposals.len())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::super::consts::{encr, integ, ke, prf};
    use super::*;

    fn ike_proposal() -> ProposalRepr {
        ProposalRepr {
            number: 1,
            protocol: ProtocolId::IKE,
            spi: Spi::None,
            transforms: vec![
                TransformRepr::with_key_length(TransformType::ENCR, encr::AES_CBC, 128),
                TransformRepr::new(TransformType::PRF, prf::HMAC_SHA2_256),
                TransformRepr::new(TransformType::INTEG, integ::HMAC_SHA2_256_128),
                TransformRepr::new(TransformType::KE, ke::ECP_256),
            ],
        }
    }

    #[test]
    fn known_bytes() {
        // aes128-sha256-ecp256 as one IKE proposal, byte by byte (RFC 7296 §3.3).
        let sa = SaRepr {
            proposals: vec![ike_proposal()],
        };
        let mut b = vec![0u8; sa.buffer_len()];
        sa.emit(&mut b).unwrap();
        #[rustfmt::skip]
        let want = [
            0, 0, 0, 44, 1, 1, 0, 4,
            3, 0, 0, 12, 1, 0, 0, 12, 0x80, 14, 0, 128,
            3, 0, 0, 8, 2, 0, 0, 5,
            3, 0, 0, 8, 3, 0, 0, 12,
            0, 0, 0, 8, 4, 0, 0, 19,
        ];
        assert_eq!(b, want);
        assert_eq!(SaRepr::parse(&b).unwrap(), sa);
    }

    #[test]
    fn esp_spi_and_two_proposals() {
        let mut p2 = ike_proposal();
        p2.number = 2;
        p2.protocol = ProtocolId::ESP;
        p2.spi = Spi::U32(0xc0ffee01);
        let sa = SaRepr {
            proposals: vec![ike_proposal(), p2],
        };
        let mut b = vec![0u8; sa.buffer_len()];
        sa.emit(&mut b).unwrap();
        assert_eq!(b[0], MORE_PROPOSALS);
        assert_eq!(SaRepr::parse(&b).unwrap(), sa);
    }

    #[test]
    fn unknown_attribute_is_flagged_not_fatal() {
        // One ENCR transform carrying a TLV attribute of type 99.
        let b = [
            0, 0, 0, 21, 1, 3, 0, 1, 0, 0, 0, 13, 1, 0, 0, 12, 0, 99, 0, 1, 0xff,
        ];
        let sa = SaRepr::parse(&b).unwrap();
        assert!(sa.proposals[0].transforms[0].unknown_attribute);
    }

    #[test]
    fn last_substruc_must_agree() {
        let sa = SaRepr {
            proposals: vec![ike_proposal()],
        };
        let mut b = vec![0u8; sa.buffer_len()];
        sa.emit(&mut b).unwrap();
        let mut bad = b.clone();
        bad[0] = MORE_PROPOSALS;
        assert!(SaRepr::parse(&bad).is_err());
        let mut bad = b.clone();
        bad[8] = LAST; // first transform claims to be the last
        assert!(SaRepr::parse(&bad).is_err());
        let mut bad = b;
        bad[6] = 3; // SPI size 3
        assert_eq!(SaRepr::parse(&bad), Err(Error::Malformed("SPI size")));
    }

    #[test]
    fn zero_transforms_rejected() {
        let b = [0, 0, 0, 8, 1, 1, 0, 0];
        assert!(SaRepr::parse(&b).is_err());
    }
}
