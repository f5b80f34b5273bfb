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
use super::sk::{FRAGMENT_FIELDS_LEN, Fragment, SkLayout, SkLocation};
use core::ops::Range;
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
                    fragment: None,
                });
            } else if raw.payload_type == PayloadType::SKF {
                sk = Some(parse_skf(&raw)?);
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

/// An SKF payload's location (RFC 7383 §2.5): "Fragment Number [...] MUST
/// be between 1 and Total Fragments"; past the first fragment, Next Payload
/// "MUST be set to zero" and is not looked at.
fn parse_skf(raw: &RawPayload<'_>) -> Result<SkLocation> {
    let f = raw.body.get(..FRAGMENT_FIELDS_LEN).ok_or(Error::Truncated)?;
    let number = u16::from_be_bytes([f[0], f[1]]);
    let total = u16::from_be_bytes([f[2], f[3]]);
    if number == 0 || total == 0 || number > total {
        return Err(Error::Malformed("fragment number not within 1 to Total Fragments"));
    }
    Ok(SkLocation {
        offset: HEADER_LEN + raw.offset + FRAGMENT_FIELDS_LEN,
        first_inner: if number == 1 { raw.next } else { PayloadType::NONE },
        body_len: raw.body.len() - FRAGMENT_FIELDS_LEN,
        fragment: Some(Fragment { number, total }),
    })
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

/// A message whose `inner` payloads travel as SKF fragments (RFC 7383
/// §2.5): the payload chain is cut into pieces, each sent as a message of
/// at most `max_len` octets with an SKF payload laid out as
/// [`emit_encrypted`] lays out SK (zeroed IV, the piece, zero padding, Pad
/// Length, zeroed ICV), back to back in `out`. Only the first fragment's
/// Next Payload names the first inner payload. Returns, per fragment, its
/// range in `out` and the offset within it to pass to `IkeCipher::seal_sk`
/// (the SK header as the cipher sees it: [`FRAGMENT_FIELDS_LEN`] past the
/// SKF generic header, see [`super::sk`]).
pub fn emit_fragments(
    header: &HeaderRepr,
    inner: &[PayloadRepr<'_>],
    layout: &SkLayout,
    max_len: usize,
    out: &mut Vec<u8>,
) -> Result<Vec<(Range<usize>, usize)>> {
    let inner_len = payloads_len(inner);
    if inner_len > limits::MAX_MESSAGE_LEN {
        return Err(Error::Limit("message longer than MAX_MESSAGE_LEN"));
    }
    let mut plain = vec![0u8; inner_len];
    emit_chain(inner, &mut plain, PayloadType::NONE)?;
    let head = HEADER_LEN + GENERIC_HEADER_LEN + FRAGMENT_FIELDS_LEN;
    let bs = layout.block_size.max(1);
    // A full fragment's piece and its Pad Length fill whole blocks.
    let room = max_len
        .saturating_sub(head + layout.iv_len + layout.icv_len)
        / bs
        * bs;
    if room < 2 {
        return Err(Error::Limit("fragment size too small for the cipher"));
    }
    let piece = room - 1;
    let total = inner_len.div_ceil(piece).max(1);
    if total > limits::MAX_FRAGMENTS {
        return Err(Error::Limit("more fragments than MAX_FRAGMENTS"));
    }
    let total16 = total as u16;
    let first = first_type(inner, PayloadType::NONE);
    out.clear();
    let mut frags = Vec::with_capacity(total);
    for i in 0..total {
        let part = &plain[(i * piece).min(inner_len)..((i + 1) * piece).min(inner_len)];
        let body = layout.body_len(part.len());
        let len = head + body;
        let start = out.len();
        out.resize(start + len, 0);
        let m = &mut out[start..];
        emit_header(header, PayloadType::SKF, len, m)?;
        let next = if i == 0 { first } else { PayloadType::NONE };
        emit_generic_header(&mut m[HEADER_LEN..], next, FRAGMENT_FIELDS_LEN + body)?;
        let number = (i + 1) as u16;
        m[HEADER_LEN + GENERIC_HEADER_LEN..head].copy_from_slice(&[
            (number >> 8) as u8,
            number as u8,
            (total16 >> 8) as u8,
            total16 as u8,
        ]);
        let p = head + layout.iv_len;
        m[p..p + part.len()].copy_from_slice(part);
        let pad = layout.padding_for(part.len());
        m[p + part.len() + pad] = pad as u8;
        frags.push((start..start + len, HEADER_LEN + FRAGMENT_FIELDS_LEN));
    }
    Ok(frags)
}

/// The messages in `packet`: one IKE message, or several back to back (a
/// fragmented one, [`emit_fragments`]), each as long as its header's
/// Length says. A length that does not fit ends the walk with the rest.
pub fn messages(packet: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = packet;
    core::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let len = rest
            .get(24..HEADER_LEN)
            .map(|l| u32::from_be_bytes([l[0], l[1], l[2], l[3]]) as usize)
            .filter(|l| (HEADER_LEN..=rest.len()).contains(l))
            .unwrap_or(rest.len());
        let (m, r) = rest.split_at(len);
        rest = r;
        Some(m)
    })
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

    /// Fragments: each a whole message within the size, numbered, only the
    /// first naming the inner chain's first payload; their plaintexts, in
    /// order, are the chain.
    #[test]
    fn fragments_round_trip() {
        let data = [0x5a_u8; 3000];
        let inner = vec![
            PayloadRepr::Notify(NotifyRepr::new(NotifyType::COOKIE, &data)),
            PayloadRepr::Notify(NotifyRepr::new(NotifyType::INITIAL_CONTACT, &[])),
        ];
        for (layout, max) in [
            (SkLayout { iv_len: 16, icv_len: 12, block_size: 16 }, 1000),
            (SkLayout { iv_len: 8, icv_len: 16, block_size: 1 }, 576),
        ] {
            let mut out = Vec::new();
            let frags = emit_fragments(&header(), &inner, &layout, max, &mut out).unwrap();
            let total = frags.len();
            assert_eq!(total, payloads_len(&inner).div_ceil(frags[0].0.len() - (28 + 8 + layout.iv_len + layout.icv_len + 1)));
            let walked: Vec<&[u8]> = messages(&out).collect();
            assert_eq!(walked.len(), total);
            let mut plain = Vec::new();
            for (i, ((range, off), m)) in frags.iter().zip(walked).enumerate() {
                assert_eq!(&out[range.clone()], m);
                assert!(m.len() <= max, "{} > {max}", m.len());
                let msg = Message::parse(m).unwrap();
                assert_eq!(msg.header.next_payload, PayloadType::SKF);
                let sk = msg.sk.unwrap();
                assert_eq!(sk.offset, *off);
                assert_eq!(sk.fragment, Some(Fragment { number: i as u16 + 1, total: total as u16 }));
                let first = if i == 0 { PayloadType::NOTIFY } else { PayloadType::NONE };
                assert_eq!((sk.first_inner, m[28]), (first, first.0));
                sk.check(&layout).unwrap();
                let start = sk.iv_offset() + layout.iv_len;
                plain.extend_from_slice(strip_padding(&m[start..m.len() - layout.icv_len]).unwrap());
            }
            assert_eq!(parse_payloads(PayloadType::NOTIFY, &plain).unwrap(), inner);
        }
    }

    #[test]
    fn fragment_numbers_are_checked() {
        let layout = SkLayout { iv_len: 8, icv_len: 16, block_size: 1 };
        let mut out = Vec::new();
        let inner = [PayloadRepr::Notify(NotifyRepr::new(NotifyType::COOKIE, &[1; 100]))];
        emit_fragments(&header(), &inner, &layout, 100, &mut out).unwrap();
        let first = messages(&out).next().unwrap().to_vec();
        assert!(Message::parse(&first).is_ok());
        for (number, total) in [(0u16, 3u16), (4, 3), (1, 0)] {
            let mut m = first.clone();
            m[32..34].copy_from_slice(&number.to_be_bytes());
            m[34..36].copy_from_slice(&total.to_be_bytes());
            assert!(Message::parse(&m).is_err(), "{number}/{total}");
        }
        // Too small a size for the cipher, too many fragments.
        assert!(emit_fragments(&header(), &inner, &layout, 40, &mut out).is_err());
        let big = [PayloadRepr::Notify(NotifyRepr::new(NotifyType::COOKIE, &[1; 9000]))];
        assert!(emit_fragments(&header(), &big, &layout, 100, &mut out).is_err());
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
