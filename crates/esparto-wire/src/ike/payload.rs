//! The generic payload header and the walk along a payload chain
//! (RFC 7296 §3.2).
//!
//! ```text
//!                      1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! | Next Payload  |C|  RESERVED   |         Payload Length        |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! Every IKE message is a linked list: the header names the first payload's
//! type, each payload names the next. [`PayloadIter`] follows the list over
//! a byte slice, checking each length against what is left, counting
//! payloads against [`super::limits::MAX_PAYLOADS`], and stopping at the
//! Encrypted payload: RFC 7296 §3.14 makes SK the last payload of a message
//! and reuses its Next Payload field for the first payload *inside* the
//! ciphertext, so the walk cannot continue past it.

use super::consts::PayloadType;
use super::error::{Error, Result};
use super::limits;

/// Length of the generic payload header.
pub const GENERIC_HEADER_LEN: usize = 4;

/// The critical bit in the second octet of the generic header.
const CRITICAL: u8 = 0x80;

/// One payload found on a chain: its type (announced by the previous
/// payload or the header), the critical bit, its body (after the generic
/// header) and where its generic header starts within the walked slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawPayload<'a> {
    /// This payload's type.
    pub payload_type: PayloadType,
    /// RFC 7296 §2.5 critical bit.
    pub critical: bool,
    /// The type of the payload that follows (for SK: of the first inner payload).
    pub next: PayloadType,
    /// The payload body, without the generic header.
    pub body: &'a [u8],
    /// Offset of the generic header within the walked slice.
    pub offset: usize,
}

/// An iterator over a payload chain. Yields `Err` once, then stops.
#[derive(Debug, Clone)]
pub struct PayloadIter<'a> {
    buf: &'a [u8],
    pos: usize,
    next: PayloadType,
    count: usize,
    done: bool,
}

impl<'a> PayloadIter<'a> {
    /// Walk `buf` (the bytes after the IKE header, or an SK plaintext)
    /// starting with a payload of type `first`.
    pub fn new(first: PayloadType, buf: &'a [u8]) -> Self {
        PayloadIter {
            buf,
            pos: 0,
            next: first,
            count: 0,
            done: false,
        }
    }

    /// Offset just past the last payload yielded so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    fn step(&mut self) -> Result<Option<RawPayload<'a>>> {
        if self.next == PayloadType::NONE {
            // The chain says it is over: nothing may follow (a length that
            // disagrees with the chain is a malformed message).
            if self.pos != self.buf.len() {
                return Err(Error::Malformed("data after the last payload"));
            }
            return Ok(None);
        }
        self.count += 1;
        if self.count > limits::MAX_PAYLOADS {
            return Err(Error::Limit("too many payloads"));
        }
        let rest = self.buf.get(self.pos..).ok_or(Error::Truncated)?;
        if rest.len() < GENERIC_HEADER_LEN {
            return Err(Error::Truncated);
        }
        let next = PayloadType(rest[0]);
        let critical = rest[1] & CRITICAL != 0;
        let len = usize::from(u16::from_be_bytes([rest[2], rest[3]]));
        if len < GENERIC_HEADER_LEN {
            return Err(Error::Malformed(
                "payload length shorter than generic header",
            ));
        }
        let body = rest.get(GENERIC_HEADER_LEN..len).ok_or(Error::Truncated)?;
        let p = RawPayload {
            payload_type: self.next,
            critical,
            next,
            body,
            offset: self.pos,
        };
        self.pos += len;
        if self.next == PayloadType::SK || self.next == PayloadType::SKF {
            // RFC 7296 §3.14: "the Encrypted payload, if present in a message,
            // MUST be the last payload in the message"; RFC 7383 §2.5 the
            // same of the Encrypted Fragment payload.
            if self.pos != self.buf.len() {
                return Err(Error::Malformed(
                    "Encrypted payload is not the last payload",
                ));
            }
            self.next = PayloadType::NONE;
        } else {
            self.next = next;
        }
        Ok(Some(p))
    }
}

impl<'a> Iterator for PayloadIter<'a> {
    type Item = Result<RawPayload<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.step() {
            Ok(Some(p)) => Some(Ok(p)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// Write a generic payload header into the first four octets of `buf`.
/// `body_len` is the length of the payload body (the header adds four).
///
/// RFC 7296 §3.2: the critical bit "MUST be set to zero" by senders for the
/// payload types defined in RFC 7296 — we never set it.
pub fn emit_generic_header(buf: &mut [u8], next: PayloadType, body_len: usize) -> Result<()> {
    let total = body_len + GENERIC_HEADER_LEN;
    let len = u16::try_from(total).map_err(|_| Error::Limit("payload longer than 65535"))?;
    let h = buf.get_mut(..GENERIC_HEADER_LEN).ok_or(Error::Truncated)?;
    h[0] = next.0;
    h[1] = 0;
    h[2..4].copy_from_slice(&len.to_be_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn walks_two_payloads() {
        // Nonce (4-octet body) then Vendor ID (empty), then end.
        let b = [43, 0, 0, 8, 1, 2, 3, 4, 0, 0, 0, 4];
        let v: Vec<_> = PayloadIter::new(PayloadType::NONCE, &b)
            .collect::<Result<_>>()
            .unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].payload_type, PayloadType::NONCE);
        assert_eq!(v[0].body, &[1, 2, 3, 4]);
        assert_eq!(v[1].payload_type, PayloadType::VENDOR_ID);
        assert_eq!(v[1].offset, 8);
        assert!(v[1].body.is_empty());
    }

    #[test]
    fn rejects_bad_lengths() {
        let short = [0, 0, 0, 3];
        assert!(matches!(
            PayloadIter::new(PayloadType::NONCE, &short).next(),
            Some(Err(Error::Malformed(_)))
        ));
        let long = [0, 0, 0, 9, 1, 2, 3, 4];
        assert_eq!(
            PayloadIter::new(PayloadType::NONCE, &long).next(),
            Some(Err(Error::Truncated))
        );
        let trailing = [0, 0, 0, 4, 9];
        let r: Result<Vec<_>> = PayloadIter::new(PayloadType::NONCE, &trailing).collect();
        assert!(matches!(r, Err(Error::Malformed(_))));
    }

    #[test]
    fn stops_at_sk_and_requires_it_last() {
        // SK announcing an inner Nonce, 2 octets of ciphertext.
        let b = [40, 0, 0, 6, 0xaa, 0xbb];
        let v: Vec<_> = PayloadIter::new(PayloadType::SK, &b)
            .collect::<Result<_>>()
            .unwrap();
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].next, PayloadType::NONCE);
        let b2 = [40, 0, 0, 6, 0xaa, 0xbb, 0, 0, 0, 4];
        let r: Result<Vec<_>> = PayloadIter::new(PayloadType::SK, &b2).collect();
        assert!(matches!(r, Err(Error::Malformed(_))));
    }

    #[test]
    fn limits_payload_count() {
        // An endless-looking chain of empty Vendor ID payloads.
        let mut b = Vec::new();
        for _ in 0..(limits::MAX_PAYLOADS + 1) {
            b.extend_from_slice(&[43, 0, 0, 4]);
        }
        let r: Result<Vec<_>> = PayloadIter::new(PayloadType::VENDOR_ID, &b).collect();
        assert_eq!(r.unwrap_err(), Error::Limit("too many payloads"));
    }

    #[test]
    fn critical_bit_is_reported() {
        let b = [0, 0x80, 0, 4];
        let p = PayloadIter::new(PayloadType(250), &b)
            .next()
            .unwrap()
            .unwrap();
        assert!(p.critical);
    }
}
