//! Whole IKE messages: the payload enum, parsing a datagram into header and
//! payloads, and emitting plain or SK-protected messages.
//!
//! Parsing is two-stage because of SK (RFC 7296 §3.14). [`Message::parse`]
//! reads the header and the cleartext payload chain up to the SK payload,
//! whose position it records ([`SkLocation`]). The core checks the header
//! (SPIs, message ID, window) *before* any crypto, decrypts in place with
//! the IKE SA's cipher, and then parses the inner chain with
//! [`parse_payloads`]. Every payload body goes through its Repr's checked
//! parser; an unrecognised payload type is kept as [`PayloadRepr::Other`]
//! unless its critical bit is set, which fails the parse with
//! [`Error::UnsupportedCriticalPayload`] (§2.5: "the message MUST be
//! rejected and the response ... MUST include a Notify payload
//! UNSUPPORTED_CRITICAL_PAYLOAD"). Which payloads may appear, and how
//! often, is the core's payload-rules table, not the parser's business.
//!
//! Emitting writes into a `Vec<u8>` the caller owns and reuses: the control
//! plane builds a handful of messages per SA, so a growable buffer is the
//! right tool; [`emit_encrypted`] leaves zeroed IV and ICV space and the
//! padding in place for `IkeCipher::seal_sk`.

use super::consts::PayloadType;
use super::delete::DeleteRepr;
use super::error::{Error, Result};
use super::header::{HEADER_LEN, Header, HeaderRepr};
use super::limits;
use super::notify::NotifyRepr;
use super::payload::{GENERIC_HEADER_LEN, PayloadIter, RawPayload, emit_generic_header};
use super::sa::SaRepr;
use super::simple::{AuthRepr, IdRepr, KeRepr, NonceRepr, VendorIdRepr};
use super::sk::{SkLayout, SkLocation};
use super::ts::TsRepr;

/// One parsed payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PayloadRepr<'a> {
    /// Security Association (§3.3).
    Sa(SaRepr),
    /// Key Exchange (§3.4).
    Ke(KeRepr<'a>),
    /// Identification - Initiator (§3.5).
    IdI(IdRepr<'a>),
    /// Identification - Responder (§3.5).
    IdR(IdRepr<'a>),
    /// Authentication (§3.8).
    Auth(AuthRepr<'a>),
    /// Nonce (§3.9).
    Nonce(NonceRepr<'a>),
    /// Notify (§3.10).
    Notify(NotifyRepr<'a>),
    /// Delete (§3.11).
    Delete(DeleteRepr),
    /// Vendor ID (§3.12).
    VendorId(VendorIdRepr<'a>),
    /// Traffic Selector - Initiator (§3.13).
    TsI(TsRepr),
    /// Traffic Selector - Responder (§3.13).
    TsR(TsRepr),
    /// A payload we do not interpret: a known type we do not use (CERT,
    /// CERTREQ, CP, EAP, SKF) or an unknown type without the critical bit
    /// (§2.5: such payloads "MUST be skipped").
    Other {
        /// The payload type.
        payload_type: PayloadType,
        /// The raw body.
        body: &'a [u8],
    },
}

impl<'a> PayloadRepr<'a> {
    /// The payload type code.
    pub fn payload_type(&self) -> PayloadType {
        match self {
            PayloadRepr::Sa(_) => PayloadType::SA,
            PayloadRepr::Ke(_) => PayloadType::KE,
            PayloadRepr::IdI(_) => PayloadType::IDI,
            PayloadRepr::IdR(_) => PayloadType::IDR,
            PayloadRepr::Auth(_) => PayloadType::AUTH,
            PayloadRepr::Nonce(_) => PayloadType::NONCE,
            PayloadRepr::Notify(_) => PayloadType::NOTIFY,
            PayloadRepr::Delete(_) => PayloadType::DELETE,
            PayloadRepr::VendorId(_) => PayloadType::VENDOR_ID,
            PayloadRepr::TsI(_) => PayloadType::TSI,
            PayloadRepr::TsR(_) => PayloadType::TSR,
            PayloadRepr::Other { payload_type, .. } => *payload_type,
        }
    }

    /// Parse one raw payload from a chain. SK is not a [`PayloadRepr`]:
    /// [`Message::parse`] handles it, and it may not appear inside itself.
    pub fn parse(raw: &RawPayload<'a>) -> Result<Self> {
        let b = raw.body;
        Ok(match raw.payload_type {
            PayloadType::SA => PayloadRepr::Sa(SaRepr::parse(b)?),
            PayloadType::KE => PayloadRepr::Ke(KeRepr::parse(b)?),
            PayloadType::IDI => PayloadRepr::IdI(IdRepr::parse(b)?),
            PayloadType::IDR => PayloadRepr::IdR(IdRepr::parse(b)?),
            PayloadType::AUTH => PayloadRepr::Auth(AuthRepr::parse(b)?),
            PayloadType::NONCE => PayloadRepr::Nonce(NonceRepr::parse(b)?),
            PayloadType::NOTIFY => PayloadRepr::Notify(NotifyRepr::parse(b)?),
            PayloadType::DELETE => PayloadRepr::Delete(DeleteRepr::parse(b)?),
            PayloadType::VENDOR_ID => PayloadRepr::VendorId(VendorIdRepr::parse(b)?),
            PayloadType::TSI => PayloadRepr::TsI(TsRepr::parse(b)?),
            PayloadType::TSR => PayloadRepr::TsR(TsRepr::parse(b)?),
            PayloadType::SK => return Err(Error::Malformed("Encrypted payload out of place")),
            t @ (PayloadType::CERT
            | PayloadType::CERTREQ
            | PayloadType::CP
            | PayloadType::EAP
            | PayloadType::SKF) => PayloadRepr::Other {
                payload_type: t,
                body: b,
            },
            t if raw.critical => return Err(Error::UnsupportedCriticalPayload(t.0)),
            t => PayloadRepr::Other {
                payload_type: t,
                body: b,
            },
        })
    }

    /// Body length (without the generic header).
    pub fn buffer_len(&self) -> usize {
        match self {
            PayloadRepr::Sa(p) => p.buffer_len(),
            PayloadRepr::Ke(p) => p.buffer_len(),
            PayloadRepr::IdI(p) | PayloadRepr::IdR(p) => p.buffer_len(),
            PayloadRepr::Auth(p) => p.buffer_len(),
            PayloadRepr::Nonce(p) => p.buffer_len(),
            PayloadRepr::Notify(p) => p.buffer_len(),
            PayloadRepr::Delete(p) => p.buffer_len(),
            PayloadRepr::VendorId(p) => p.buffer_len(),
            PayloadRepr::TsI(p) | PayloadRepr::TsR(p) => p.buffer_len(),
            PayloadRepr::Other { body, .. } => body.len(),
        }
    }

    /// Write the body (without the generic header).
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        match self {
            PayloadRepr::Sa(p) => p.emit(buf),
            PayloadRepr::Ke(p) => p.emit(buf),
            PayloadRepr::IdI(p) | PayloadRepr::IdR(p) => p.emit(buf),
            PayloadRepr::Auth(p) => p.emit(buf),
            PayloadRepr::Nonce(p) => p.emit(buf),
            PayloadRepr::Notify(p) => p.emit(buf),
            PayloadRepr::Delete(p) => p.emit(buf),
            PayloadRepr::VendorId(p) => p.emit(buf),
            PayloadRepr::TsI(p) | PayloadRepr::TsR(p) => p.emit(buf),
            PayloadRepr::Other { body, .. } => {
                buf.get_mut(..body.len())
                    .ok_or(Error::Truncated)?
                    .copy_from_slice(body);
                Ok(())
            }
        }
    }
}

/// Parse a payload chain that contains no SK payload (the plaintext of an
/// SK payload, after [`super::sk::strip_padding`]).
pub fn parse_payloads(first: PayloadType, data: &[u8]) -> Result<Vec<PayloadRepr<'_>>> {
    let mut out = Vec::new();
    for raw in PayloadIter::new(first, data) {
        out.push(PayloadRepr::parse(&raw?)?);
    }
    Ok(out)
}

/// A parsed IKE message: header, cleartext payloads, and where the SK
/// payload is if there is one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message<'a> {
    /// The header.
    pub header: HeaderRepr,
    /// Payloads outside SK (all of them in IKE_SA_INIT; usually none otherwise).
    pub payloads: Vec<PayloadRepr<'a>>,
    /// The SK payload's position, if present.
    pub sk: Option<SkLocation>,
}

impl<'a> Message<'a> {
    /// Parse a datagram (without the non-ESP marker) as an IKE message.
    ///
    /// The Length field must equal the datagram length; messages longer
    /// than [`limits::MAX_MESSAGE_LEN`] are refused before any payload is read.
    pub fn parse(data: &'a [u8]) -> Result<Self> {
        if data.len() > limits::MAX_MESSAGE_LEN {
            return Err(Error::Limit("message longer than MAX_MESSAGE_LEN"));
        }
        let view = Header::new_checked(data)?;
        let header = HeaderRepr::parse(&view)?;
        if header.length as usize != data.len() {
            return Err(Error::Malformed(
                "IKE header length differs from datagram length",
            ));
        }
        let body = &data[HEADER_LEN..];
        let mut payloads = Vec::new();
        let mut sk = None;
        for raw in PayloadIter::new(header.next_payload, body) {
            let raw = raw?;
            if raw.payload_type == PayloadType::SK {
                sk = Some(SkLocation {
                    offset: HEADER_LEN + raw.offset,
                    first_inner: raw.next,
                    body_len: raw.body.len(),
                });
            } else {
                payloads.push(PayloadRepr::parse(&raw)?);
            }
        }
        Ok(Message {
            header,
            payloads,
            sk,
        })
    }
}

/// Octets needed for a chain of payloads, generic headers included.
pub fn payloads_len(payloads: &[PayloadRepr<'_>]) -> usize {
    payloads
        .iter()
        .map(|p| GENERIC_HEADER_LEN + p.buffer_len())
        .sum()
}

/// Write a payload chain into `buf`; the last payload's Next Payload is `after`.
fn emit_chain(payloads: &[PayloadRepr<'_>], buf: &mut [u8], after: PayloadType) -> Result<usize> {
    let mut pos = 0;
    for (i, p) in payloads.iter().enumerate() {
        let next = payloads.get(i + 1).map_or(after, PayloadRepr::payload_type);
        let len = p.buffer_len();
        let dst = buf
            .get_mut(pos..pos + GENERIC_HEADER_LEN + len)
            .ok_or(Error::Truncated)?;
        emit_generic_header(dst, next, len)?;
        p.emit(&mut dst[GENERIC_HEADER_LEN..])?;
        pos += GENERIC_HEADER_LEN + len;
    }
    Ok(pos)
}

fn first_type(payloads: &[PayloadRepr<'_>], otherwise: PayloadType) -> PayloadType {
    payloads
        .first()
        .map_or(otherwise, PayloadRepr::payload_type)
}

fn emit_header(header: &HeaderRepr, next: PayloadType, len: usize, out: &mut [u8]) -> Result<()> {
    let length = u32::try_from(len).map_err(|_| Error::Limit("message length"))?;
    let h = HeaderRepr {
        next_payload: next,
        length,
        ..*header
    };
    let dst = out.get_mut(..HEADER_LEN).ok_or(Error::Truncated)?;
    h.emit(&mut Header::new_unchecked(dst));
    Ok(())
}

/// Emit a cleartext message (IKE_SA_INIT) into `out`, replacing its
/// contents. The header's `next_payload` and `length` are computed.
pub fn emit_message(
    header: &HeaderRepr,
    payloads: &[PayloadRepr<'_>],
    out: &mut Vec<u8>,
) -> Result<()> {
    let len = HEADER_LEN + payloads_len(payloads);
    if len > limits::MAX_MESSAGE_LEN {
        return Err(Error::Limit("message longer than MAX_MESSAGE_LEN"));
    }
    out.clear();
    out.resize(len, 0);
    emit_header(header, first_type(payloads, PayloadType::NONE), len, out)?;
    emit_chain(payloads, &mut out[HEADER_LEN..], PayloadType::NONE)?;
    Ok(())
}

/// Emit a message whose `inner` payloads go inside an SK payload laid out
/// for `layout`: header, SK generic header, zeroed IV, inner payloads,
/// zero padding, Pad Length, zeroed ICV. Returns the SK offset to pass to
/// `IkeCipher::seal_sk`, which fills IV, ciphertext and ICV in place.
/// An SK payload may be empty inside (a liveness check, §1.4); its first
/// inner type is then NONE.
pub fn emit_encrypted(
    header: &HeaderRepr,
    inner: &[PayloadRepr<'_>],
    layout: &SkLayout,
    out: &mut Vec<u8>,
) -> Result<usize> {
    let inner_len = payloads_len(inner);
    let sk_body = layout.body_len(inner_len);
    let sk_offset = HEADER_LEN;
    let len = sk_offset + GENERIC_HEADER_LEN + sk_body;
    if len > limits::MAX_MESSAGE_LEN {
        return Err(Error::Limit("message longer than MAX_MESSAGE_LEN"));
    }
    out.clear();
    out.resize(len, 0);
    emit_header(header, PayloadType::SK, len, out)?;
    emit_generic_header(
        &mut out[sk_offset..],
        first_type(inner, PayloadType::NONE),
        sk_body,
    )?;
    let plain = sk_offset + GENERIC_HEADER_LEN + layout.iv_len;
    emit_chain(inner, &mut out[plain..plain + inner_len], PayloadType::NONE)?;
    let pad = layout.padding_for(inner_len);
    // Padding octets are left zero; Pad Length follows them (§3.14).
    out[plain + inner_len + pad] = pad as u8;
    Ok(sk_offset)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::super::consts::{ExchangeType, NotifyType};
    use super::super::sk::strip_padding;
    use super::*;

    fn header() -> HeaderRepr {
        HeaderRepr {
            spi_i: 0x1111,
            spi_r: 0x2222,
            next_payload: PayloadType::NONE,
            exchange: ExchangeType::INFORMATIONAL,
            initiator: true,
            response: false,
            message_id: 5,
            length: 0,
        }
    }

    #[test]
    fn plain_round_trip() {
        let nonce = [7u8; 32];
        let payloads = vec![
            PayloadRepr::Nonce(NonceRepr { data: &nonce }),
            PayloadRepr::Notify(NotifyRepr::new(NotifyType::INITIAL_CONTACT, &[])),
        ];
        let mut out = Vec::new();
        emit_message(&header(), &payloads, &mut out).unwrap();
        let m = Message::parse(&out).unwrap();
        assert_eq!(m.payloads, payloads);
        assert_eq!(m.sk, None);
        assert_eq!(m.header.message_id, 5);
        assert_eq!(m.header.next_payload, PayloadType::NONCE);
        assert_eq!(m.header.length as usize, out.len());
    }

    #[test]
    fn encrypted_layout_then_inner_parse() {
        let layout = SkLayout {
            iv_len: 16,
            icv_len: 12,
            block_size: 16,
        };
        let inner = vec![PayloadRepr::Notify(NotifyRepr::new(
            NotifyType::COOKIE,
            &[1, 2, 3],
        ))];
        let mut out = Vec::new();
        let sk_offset = emit_encrypted(&header(), &inner, &layout, &mut out).unwrap();
        let m = Message::parse(&out).unwrap();
        assert!(m.payloads.is_empty());
        let sk = m.sk.unwrap();
        assert_eq!(sk.offset, sk_offset);
        assert_eq!(sk.first_inner, PayloadType::NOTIFY);
        sk.check(&layout).unwrap();
        // "Decrypt" with the identity cipher: the plaintext sits between IV and ICV.
        let start = sk.iv_offset() + layout.iv_len;
        let end = sk.offset + 4 + sk.body_len - layout.icv_len;
        let plain = strip_padding(&out[start..end]).unwrap();
        assert_eq!(parse_payloads(sk.first_inner, plain).unwrap(), inner);
    }

    #[test]
    fn empty_encrypted_message() {
        let layout = SkLayout {
            iv_len: 8,
            icv_len: 16,
            block_size: 1,
        };
        let mut out = Vec::new();
        emit_encrypted(&header(), &[], &layout, &mut out).unwrap();
        assert_eq!(out.len(), 28 + 4 + 8 + 1 + 16);
        let sk = Message::parse(&out).unwrap().sk.unwrap();
        assert_eq!(sk.first_inner, PayloadType::NONE);
    }

    #[test]
    fn critical_unknown_payload() {
        let mut out = Vec::new();
        emit_message(&header(), &[], &mut out).unwrap();
        out[16] = 200; // first payload: unknown type 200
        out.extend_from_slice(&[0, 0x80, 0, 4]);
        out[27] = out.len() as u8;
        assert_eq!(
            Message::parse(&out).unwrap_err(),
            Error::UnsupportedCriticalPayload(200)
        );
        out[29] = 0; // not critical: skipped
        let m = Message::parse(&out).unwrap();
        assert_eq!(m.payloads[0].payload_type(), PayloadType(200));
    }

    #[test]
    fn length_must_match_datagram() {
        let mut out = Vec::new();
        emit_message(&header(), &[], &mut out).unwrap();
        out.push(0);
        assert!(Message::parse(&out).is_err());
    }
}
