//! TCP options (RFC 9293 §3.1, RFC 7323, RFC 2018): a non-allocating
//! iterator, and MSS clamping.
//!
//! Options are a TLV list, except that kinds 0 (End of Option List) and 1
//! (No-Operation) are a single octet. The iterator validates each option's
//! length before yielding it and stops at the first error or at End of
//! Option List, so that a hostile list costs at most one pass over ≤ 40
//! bytes.
//!
//! MSS clamping is what a tunnel gateway does to TCP SYNs so that the
//! endpoints pick segments that fit after ESP overhead, instead of relying
//! on PMTUD through ICMP that middleboxes often drop. It rewrites the option
//! in place and patches the checksum incrementally (RFC 1624).

use super::{HEADER_LEN, Packet};
use crate::bytes::{put_u16, u16_at};
use crate::checksum;
use crate::{Error, Result};

/// Option kinds.
pub mod kind {
    /// End of Option List.
    pub const END: u8 = 0;
    /// No-Operation.
    pub const NOP: u8 = 1;
    /// Maximum Segment Size.
    pub const MSS: u8 = 2;
    /// Window Scale (RFC 7323 §2).
    pub const WINDOW_SCALE: u8 = 3;
    /// SACK Permitted (RFC 2018).
    pub const SACK_PERMITTED: u8 = 4;
    /// SACK (RFC 2018).
    pub const SACK: u8 = 5;
    /// Timestamps (RFC 7323 §3).
    pub const TIMESTAMPS: u8 = 8;
}

/// One TCP option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcpOption<'a> {
    /// End of Option List: nothing after it is an option.
    EndOfList,
    /// No-Operation (padding between options).
    NoOperation,
    /// Maximum Segment Size.
    MaxSegmentSize(u16),
    /// Window Scale shift count.
    WindowScale(u8),
    /// SACK Permitted.
    SackPermitted,
    /// SACK blocks, raw (pairs of 32-bit left/right edges).
    Sack(&'a [u8]),
    /// Timestamps.
    Timestamps {
        /// TSval.
        tsval: u32,
        /// TSecr.
        tsecr: u32,
    },
    /// Any other option, raw data after kind and length.
    Unknown {
        /// Option kind.
        kind: u8,
        /// Option data.
        data: &'a [u8],
    },
}

/// Iterator over the options of a TCP header.
#[derive(Debug, Clone)]
pub struct Options<'a> {
    rest: &'a [u8],
}

impl<'a> Options<'a> {
    /// Iterates over `bytes`, the option area of a TCP header.
    #[inline]
    pub const fn new(bytes: &'a [u8]) -> Self {
        Options { rest: bytes }
    }
}

impl<'a> Iterator for Options<'a> {
    type Item = Result<TcpOption<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        let (&k, after_kind) = self.rest.split_first()?;
        match k {
            kind::END => {
                self.rest = &[];
                return Some(Ok(TcpOption::EndOfList));
            }
            kind::NOP => {
                self.rest = after_kind;
                return Some(Ok(TcpOption::NoOperation));
            }
            _ => {}
        }
        let r = parse_tlv(k, self.rest);
        match r {
            Ok((opt, len)) => {
                self.rest = &self.rest[len..];
                Some(Ok(opt))
            }
            Err(e) => {
                self.rest = &[];
                Some(Err(e))
            }
        }
    }
}

/// Parses a TLV option at the start of `b` (kind `k` = `b[0]`); returns the
/// option and its total length.
fn parse_tlv(k: u8, b: &[u8]) -> Result<(TcpOption<'_>, usize)> {
    let len = usize::from(*b.get(1).ok_or(Error::Truncated)?);
    if len < 2 {
        return Err(Error::Malformed("tcp option length < 2"));
    }
    let data = b.get(2..len).ok_or(Error::Truncated)?;
    let opt = match (k, data.len()) {
        (kind::MSS, 2) => TcpOption::MaxSegmentSize(u16_at(data, 0)),
        (kind::MSS, _) => return Err(Error::Malformed("tcp mss option length")),
        (kind::WINDOW_SCALE, 1) => TcpOption::WindowScale(data[0]),
        (kind::WINDOW_SCALE, _) => return Err(Error::Malformed("tcp window scale option length")),
        (kind::SACK_PERMITTED, 0) => TcpOption::SackPermitted,
        (kind::SACK_PERMITTED, _) => {
            return Err(Error::Malformed("tcp sack-permitted option length"));
        }
        (kind::SACK, n) if n % 8 == 0 && n > 0 => TcpOption::Sack(data),
        (kind::SACK, _) => return Err(Error::Malformed("tcp sack option length")),
        (kind::TIMESTAMPS, 8) => TcpOption::Timestamps {
            tsval: u32::from_be_bytes([data[0], data[1], data[2], data[3]]),
            tsecr: u32::from_be_bytes([data[4], data[5], data[6], data[7]]),
        },
        (kind::TIMESTAMPS, _) => return Err(Error::Malformed("tcp timestamps option length")),
        (kind, _) => TcpOption::Unknown { kind, data },
    };
    Ok((opt, len))
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// The MSS option's value, if the header has a well-formed one.
    #[inline]
    pub fn mss(&self) -> Option<u16> {
        let opts = &self.buffer.as_ref()[HEADER_LEN..self.header_len()];
        mss_offset(opts).map(|o| u16_at(opts, o))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Lowers the MSS option to `max` if it is larger, patching the checksum
    /// incrementally (RFC 1624); returns whether it changed anything. Only
    /// SYN segments carry MSS (RFC 9293 §3.7.1), so others are left alone.
    pub fn clamp_mss(&mut self, max: u16) -> bool {
        if !self.syn() {
            return false;
        }
        let hl = self.header_len();
        let Some(off) = mss_offset(&self.buffer.as_ref()[HEADER_LEN..hl]) else {
            return false;
        };
        let at = HEADER_LEN + off;
        let old = u16_at(self.buffer.as_ref(), at);
        if old <= max {
            return false;
        }
        put_u16(self.buffer.as_mut(), at, max);
        // A 16-bit field at an odd offset straddles two checksum words: its
        // contribution to the sum is its byte-swapped value.
        let (o, n) = if at % 2 == 0 {
            (old, max)
        } else {
            (old.swap_bytes(), max.swap_bytes())
        };
        let c = checksum::update(self.checksum(), o, n);
        self.set_checksum(c);
        true
    }
}

/// Checks that every option in `bytes` is well formed.
pub(super) fn validate(bytes: &[u8]) -> Result<()> {
    Options::new(bytes).try_for_each(|o| o.map(|_| ()))
}

/// Offset of the MSS value within `options`, if an MSS option is present
/// (and the list is well formed up to it).
fn mss_offset(options: &[u8]) -> Option<usize> {
    let mut off = 0;
    while let Some(&k) = options.get(off) {
        match k {
            kind::END => return None,
            kind::NOP => off += 1,
            _ => {
                let (opt, len) = parse_tlv(k, &options[off..]).ok()?;
                if let TcpOption::MaxSegmentSize(_) = opt {
                    return Some(off + 2);
                }
                off += len;
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::ipv4;
    use crate::tcp::{Repr, flags};
    use crate::testutil::hex;

    fn syn() -> Vec<u8> {
        hex(include_str!("../../testdata/ipv4_tcp_syn_options.hex"))
    }

    #[test]
    fn clamp_mss_even_and_odd_offsets() {
        let bytes = syn();
        let ip = ipv4::Packet::new_checked(&bytes[..]).unwrap();
        let (src, dst) = (ip.src_addr(), ip.dst_addr());
        let mut seg = ip.payload().to_vec();
        let mut p = Packet::new_checked(&mut seg[..]).unwrap();
        assert!(p.clamp_mss(1360));
        assert_eq!(p.mss(), Some(1360));
        assert!(p.verify_checksum_v4(src, dst));
        assert!(!p.clamp_mss(1400), "already below");

        // Put the MSS at an odd offset behind a NOP.
        let opts = [1u8, 2, 4, 0x05, 0xb4, 1, 1, 1];
        let r = Repr {
            src_port: 1,
            dst_port: 2,
            seq_number: 3,
            ack_number: 0,
            flags: flags::SYN,
            window: 1000,
            urgent_ptr: 0,
            options: &opts,
            payload_len: 0,
        };
        let mut b = vec![0u8; r.buffer_len()];
        r.emit(&mut Packet::new_unchecked(&mut b[..])).unwrap();
        let mut p = Packet::new_checked(&mut b[..]).unwrap();
        p.fill_checksum_v4(src, dst).unwrap();
        assert!(p.clamp_mss(1200));
        assert_eq!(p.mss(), Some(1200));
        assert!(p.verify_checksum_v4(src, dst));
        // Not a SYN: untouched.
        p.set_flags(flags::ACK);
        assert!(!p.clamp_mss(100));
    }

    #[test]
    fn linux_syn_options() {
        let b = [
            2, 4, 0x05, 0xb4, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7,
        ];
        let v: Vec<_> = Options::new(&b).map(|o| o.unwrap()).collect();
        assert_eq!(
            v,
            [
                TcpOption::MaxSegmentSize(1460),
                TcpOption::SackPermitted,
                TcpOption::Timestamps { tsval: 1, tsecr: 0 },
                TcpOption::NoOperation,
                TcpOption::WindowScale(7),
            ]
        );
        assert_eq!(mss_offset(&b), Some(2));
    }

    #[test]
    fn end_of_list_stops() {
        let b = [1, 0, 2, 4, 5, 0];
        let v: Vec<_> = Options::new(&b).map(|o| o.unwrap()).collect();
        assert_eq!(v, [TcpOption::NoOperation, TcpOption::EndOfList]);
        assert_eq!(mss_offset(&b), None);
    }

    #[test]
    fn bad_lengths() {
        assert_eq!(Options::new(&[2]).next(), Some(Err(Error::Truncated)));
        assert_eq!(
            Options::new(&[2, 1]).next(),
            Some(Err(Error::Malformed("tcp option length < 2")))
        );
        assert_eq!(Options::new(&[2, 4, 5]).next(), Some(Err(Error::Truncated)));
        assert_eq!(
            Options::new(&[2, 3, 5]).next(),
            Some(Err(Error::Malformed("tcp mss option length")))
        );
        assert_eq!(
            Options::new(&[5, 6, 0, 0, 0, 0]).next(),
            Some(Err(Error::Malformed("tcp sack option length")))
        );
        // After an error the iterator ends.
        let mut it = Options::new(&[2, 0, 1, 1]);
        assert!(it.next().unwrap().is_err());
        assert!(it.next().is_none());
        assert!(validate(&[1, 1, 254, 4, 0xab, 0xcd]).is_ok());
        assert_eq!(
            Options::new(&[254, 4, 0xab, 0xcd]).next(),
            Some(Ok(TcpOption::Unknown {
                kind: 254,
                data: &[0xab, 0xcd]
            }))
        );
    }

    #[test]
    fn sack_blocks() {
        let mut b = vec![1, 1, 5, 18];
        b.extend([0u8; 16]);
        assert_eq!(
            Options::new(&b).nth(2),
            Some(Ok(TcpOption::Sack(&[0u8; 16])))
        );
    }
}
