//! TCP header (RFC 9293 §3.1): what the gateway needs for TSO segmentation,
//! selectors and MSS clamping — not a TCP stack.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |          Source Port          |       Destination Port        |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                        Sequence Number                        |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                    Acknowledgment Number                      |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  Data |       |C|E|U|A|P|R|S|F|                               |
//! | Offset| Rsrvd |W|C|R|C|S|S|Y|I|            Window             |
//! |       |       |R|E|G|K|H|T|N|N|                               |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |           Checksum            |         Urgent Pointer        |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                           [Options]                           |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! TCP has no length field: the segment is whatever the IP layer says its
//! payload is, so the view is made over exactly that slice.
//! [`Packet::new_checked`] validates the Data Offset (≥ 5, and the header
//! with options fits the buffer) once.
//!
//! When the I/O layer cuts a TSO super-packet into MSS-sized segments it
//! copies the header, advances the sequence number, clears FIN and PSH on all
//! but the last segment (as Linux's `tcp_gso_segment` does) and refills the
//! checksum: those are the setters here. The pseudo-header length is the
//! segment length (RFC 9293 §3.1, "TCP Length").

mod options;

pub use options::{Options, TcpOption, kind};

use core::net::{Ipv4Addr, Ipv6Addr};

use crate::bytes::{put_u16, put_u32, u16_at, u32_at};
use crate::checksum::{self, Checksum};
use crate::ip::proto;
use crate::{Error, Result};

/// Length of a header without options.
pub const HEADER_LEN: usize = 20;
/// Longest header (Data Offset 15).
pub const MAX_HEADER_LEN: usize = 60;

/// Control bits (the low byte of the flags word).
pub mod flags {
    /// No more data from sender.
    pub const FIN: u8 = 0x01;
    /// Synchronize sequence numbers.
    pub const SYN: u8 = 0x02;
    /// Reset the connection.
    pub const RST: u8 = 0x04;
    /// Push function.
    pub const PSH: u8 = 0x08;
    /// Acknowledgment field is significant.
    pub const ACK: u8 = 0x10;
    /// Urgent pointer field is significant.
    pub const URG: u8 = 0x20;
    /// ECN-Echo (RFC 3168).
    pub const ECE: u8 = 0x40;
    /// Congestion Window Reduced (RFC 3168).
    pub const CWR: u8 = 0x80;
}

/// Byte offsets of the header fields, for code that must name a position
/// rather than read a value: checksum offload (where the checksum field
/// lies), steering programs the kernel runs on the raw bytes.
pub mod field {
    /// Source Port.
    pub const SRC_PORT: usize = 0;
    /// Destination Port.
    pub const DST_PORT: usize = 2;
    /// Sequence Number.
    pub const SEQ: usize = 4;
    /// Acknowledgment Number.
    pub const ACK: usize = 8;
    /// Data Offset (high four bits) and reserved bits.
    pub const OFFSET: usize = 12;
    /// Control bits.
    pub const FLAGS: usize = 13;
    /// Window.
    pub const WINDOW: usize = 14;
    /// Checksum.
    pub const CHECKSUM: usize = 16;
    /// Urgent Pointer.
    pub const URGENT: usize = 18;
}

/// A view of a TCP segment (header, options, data).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking it. For input use
    /// [`Packet::new_checked`].
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wraps a buffer after [`Packet::check_len`].
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks the fixed header and the Data Offset against the buffer.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let hl = self.header_len();
        if hl < HEADER_LEN {
            return Err(Error::Malformed("tcp data offset < 5"));
        }
        if hl > len {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Gives the buffer back.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Source port.
    #[inline]
    pub fn src_port(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::SRC_PORT)
    }

    /// Destination port.
    #[inline]
    pub fn dst_port(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::DST_PORT)
    }

    /// Sequence Number.
    #[inline]
    pub fn seq_number(&self) -> u32 {
        u32_at(self.buffer.as_ref(), field::SEQ)
    }

    /// Acknowledgment Number.
    #[inline]
    pub fn ack_number(&self) -> u32 {
        u32_at(self.buffer.as_ref(), field::ACK)
    }

    /// Header length in bytes (Data Offset × 4), options included.
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::OFFSET] >> 4) * 4
    }

    /// The four bits between Data Offset and the control bits: reserved
    /// in RFC 9293 §3.1, but the lowest is a flag to ECN extensions (NS in
    /// RFC 3540, AE in Accurate ECN), so a receiver may read them.
    #[inline]
    pub fn reserved_bits(&self) -> u8 {
        self.buffer.as_ref()[field::OFFSET] & 0x0f
    }

    /// The eight control bits (see [`flags`]).
    #[inline]
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    /// FIN flag.
    #[inline]
    pub fn fin(&self) -> bool {
        self.flags() & flags::FIN != 0
    }

    /// SYN flag.
    #[inline]
    pub fn syn(&self) -> bool {
        self.flags() & flags::SYN != 0
    }

    /// RST flag.
    #[inline]
    pub fn rst(&self) -> bool {
        self.flags() & flags::RST != 0
    }

    /// PSH flag.
    #[inline]
    pub fn psh(&self) -> bool {
        self.flags() & flags::PSH != 0
    }

    /// ACK flag.
    #[inline]
    pub fn ack(&self) -> bool {
        self.flags() & flags::ACK != 0
    }

    /// URG flag.
    #[inline]
    pub fn urg(&self) -> bool {
        self.flags() & flags::URG != 0
    }

    /// ECE flag.
    #[inline]
    pub fn ece(&self) -> bool {
        self.flags() & flags::ECE != 0
    }

    /// CWR flag.
    #[inline]
    pub fn cwr(&self) -> bool {
        self.flags() & flags::CWR != 0
    }

    /// Window.
    #[inline]
    pub fn window(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::WINDOW)
    }

    /// Checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// Urgent Pointer.
    #[inline]
    pub fn urgent_ptr(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::URGENT)
    }

    /// Iterates over the options.
    #[inline]
    pub fn options_iter(&self) -> Options<'_> {
        Options::new(&self.buffer.as_ref()[HEADER_LEN..self.header_len()])
    }

    /// Verifies the checksum for an IPv4 packet from `src` to `dst`. A
    /// segment longer than 65535 bytes cannot be an IPv4 payload and fails.
    #[inline]
    pub fn verify_checksum_v4(&self, src: Ipv4Addr, dst: Ipv4Addr) -> bool {
        let b = self.buffer.as_ref();
        let Ok(len) = u16::try_from(b.len()) else {
            return false;
        };
        checksum::combine(&[
            checksum::pseudo_header_v4(src, dst, proto::TCP, len),
            checksum::data(b),
        ]) == 0xffff
    }

    /// Verifies the checksum for an IPv6 packet from `src` to `dst`.
    #[inline]
    pub fn verify_checksum_v6(&self, src: Ipv6Addr, dst: Ipv6Addr) -> bool {
        let b = self.buffer.as_ref();
        let Ok(len) = u32::try_from(b.len()) else {
            return false;
        };
        checksum::combine(&[
            checksum::pseudo_header_v6(src, dst, proto::TCP, len),
            checksum::data(b),
        ]) == 0xffff
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// Raw option bytes.
    #[inline]
    pub fn options(&self) -> &'a [u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.header_len()]
    }

    /// Segment data after the header.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the source port.
    #[inline]
    pub fn set_src_port(&mut self, port: u16) {
        put_u16(self.buffer.as_mut(), field::SRC_PORT, port);
    }

    /// Sets the destination port.
    #[inline]
    pub fn set_dst_port(&mut self, port: u16) {
        put_u16(self.buffer.as_mut(), field::DST_PORT, port);
    }

    /// Sets the Sequence Number.
    #[inline]
    pub fn set_seq_number(&mut self, seq: u32) {
        put_u32(self.buffer.as_mut(), field::SEQ, seq);
    }

    /// Sets the Acknowledgment Number.
    #[inline]
    pub fn set_ack_number(&mut self, ack: u32) {
        put_u32(self.buffer.as_mut(), field::ACK, ack);
    }

    /// Sets Data Offset from a header length in bytes (a multiple of 4,
    /// 20..=60); the reserved bits are cleared.
    #[inline]
    pub fn set_header_len(&mut self, len: usize) {
        self.buffer.as_mut()[field::OFFSET] = ((len / 4) as u8) << 4;
    }

    /// Sets all eight control bits.
    #[inline]
    pub fn set_flags(&mut self, f: u8) {
        self.buffer.as_mut()[field::FLAGS] = f;
    }

    /// Sets the Window.
    #[inline]
    pub fn set_window(&mut self, w: u16) {
        put_u16(self.buffer.as_mut(), field::WINDOW, w);
    }

    /// Sets the Checksum field.
    #[inline]
    pub fn set_checksum(&mut self, sum: u16) {
        put_u16(self.buffer.as_mut(), field::CHECKSUM, sum);
    }

    /// Sets the Urgent Pointer.
    #[inline]
    pub fn set_urgent_ptr(&mut self, p: u16) {
        put_u16(self.buffer.as_mut(), field::URGENT, p);
    }

    /// Option bytes, writable.
    #[inline]
    pub fn options_mut(&mut self) -> &mut [u8] {
        let end = self.header_len();
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }

    /// Segment data, writable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let start = self.header_len();
        &mut self.buffer.as_mut()[start..]
    }

    fn fill_with(&mut self, pseudo: u16) {
        self.set_checksum(0);
        let mut c = Checksum::new();
        c.add_sum(pseudo).add(self.buffer.as_ref());
        self.set_checksum(c.finish());
    }

    /// Computes and writes the checksum over the whole buffer for IPv4.
    /// Fails for a buffer longer than 65535 bytes (no IPv4 payload is).
    #[inline]
    pub fn fill_checksum_v4(&mut self, src: Ipv4Addr, dst: Ipv4Addr) -> Result<()> {
        let len = u16::try_from(self.buffer.as_ref().len())
            .map_err(|_| Error::Malformed("tcp segment too long"))?;
        self.fill_with(checksum::pseudo_header_v4(src, dst, proto::TCP, len));
        Ok(())
    }

    /// Computes and writes the checksum over the whole buffer for IPv6.
    #[inline]
    pub fn fill_checksum_v6(&mut self, src: Ipv6Addr, dst: Ipv6Addr) -> Result<()> {
        let len = u32::try_from(self.buffer.as_ref().len())
            .map_err(|_| Error::Malformed("tcp segment too long"))?;
        self.fill_with(checksum::pseudo_header_v6(src, dst, proto::TCP, len));
        Ok(())
    }
}

/// A TCP header. The options are kept raw (validated on parse); the data is
/// not part of the `Repr`, only its length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr<'a> {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Sequence Number.
    pub seq_number: u32,
    /// Acknowledgment Number.
    pub ack_number: u32,
    /// Control bits ([`flags`]).
    pub flags: u8,
    /// Window.
    pub window: u16,
    /// Urgent Pointer.
    pub urgent_ptr: u16,
    /// Raw option bytes: a multiple of 4, at most 40.
    pub options: &'a [u8],
    /// Bytes of data after the header.
    pub payload_len: usize,
}

impl<'a> Repr<'a> {
    /// Parses a checked view and validates its options. The checksum needs
    /// the IP addresses and is verified separately.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&'a T>) -> Result<Repr<'a>> {
        packet.check_len()?;
        let options = packet.options();
        options::validate(options)?;
        Ok(Repr {
            src_port: packet.src_port(),
            dst_port: packet.dst_port(),
            seq_number: packet.seq_number(),
            ack_number: packet.ack_number(),
            flags: packet.flags(),
            window: packet.window(),
            urgent_ptr: packet.urgent_ptr(),
            options,
            payload_len: packet.payload().len(),
        })
    }

    /// Header length (with options).
    #[inline]
    pub const fn header_len(&self) -> usize {
        HEADER_LEN + self.options.len()
    }

    /// Header, options and data.
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        self.header_len() + self.payload_len
    }

    /// Writes header and options with a zero checksum into a buffer of
    /// exactly [`Repr::buffer_len`] bytes (TCP has no length field: the
    /// buffer *is* the segment). Fill the data, then the checksum.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(
        &self,
        packet: &mut Packet<&mut T>,
    ) -> Result<()> {
        if self.options.len() % 4 != 0 || self.options.len() > MAX_HEADER_LEN - HEADER_LEN {
            return Err(Error::Malformed("tcp options length"));
        }
        if packet.buffer.as_ref().len() != self.buffer_len() {
            return Err(Error::Truncated);
        }
        packet.set_src_port(self.src_port);
        packet.set_dst_port(self.dst_port);
        packet.set_seq_number(self.seq_number);
        packet.set_ack_number(self.ack_number);
        packet.set_header_len(self.header_len());
        packet.set_flags(self.flags);
        packet.set_window(self.window);
        packet.set_checksum(0);
        packet.set_urgent_ptr(self.urgent_ptr);
        packet.options_mut().copy_from_slice(self.options);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::ipv4;
    use crate::testutil::hex;

    fn syn() -> Vec<u8> {
        hex(include_str!("../../testdata/ipv4_tcp_syn_options.hex"))
    }

    #[test]
    fn syn_with_options_captured() {
        let bytes = syn();
        let ip = ipv4::Packet::new_checked(&bytes[..]).unwrap();
        let tcp = Packet::new_checked(ip.payload()).unwrap();
        assert_eq!((tcp.src_port(), tcp.dst_port()), (40000, 443));
        assert_eq!(tcp.seq_number(), 0x1234_5678);
        assert_eq!(tcp.header_len(), 40);
        assert!(tcp.syn() && !tcp.ack() && !tcp.fin() && !tcp.rst() && !tcp.psh());
        assert_eq!(tcp.window(), 64240);
        assert!(tcp.verify_checksum_v4(ip.src_addr(), ip.dst_addr()));
        assert_eq!(tcp.mss(), Some(1460));
        let opts: Vec<_> = tcp.options_iter().map(|o| o.unwrap()).collect();
        assert_eq!(
            opts,
            [
                TcpOption::MaxSegmentSize(1460),
                TcpOption::SackPermitted,
                TcpOption::Timestamps {
                    tsval: 0x0a0b_0c0d,
                    tsecr: 0
                },
                TcpOption::NoOperation,
                TcpOption::WindowScale(7),
            ]
        );
        let r = Repr::parse(&tcp).unwrap();
        assert_eq!(r.payload_len, 0);
        assert_eq!(r.flags, flags::SYN);
        let mut out = vec![0u8; r.buffer_len()];
        r.emit(&mut Packet::new_unchecked(&mut out[..])).unwrap();
        Packet::new_unchecked(&mut out[..])
            .fill_checksum_v4(ip.src_addr(), ip.dst_addr())
            .unwrap();
        assert_eq!(&out[..], ip.payload());
    }

    #[test]
    fn reserved_bits_are_the_low_half_of_the_offset_octet() {
        let mut b = syn();
        let tcp_at = 20;
        assert_eq!(Packet::new_checked(&b[tcp_at..]).unwrap().reserved_bits(), 0);
        b[tcp_at + 12] |= 0x01;
        let p = Packet::new_checked(&b[tcp_at..]).unwrap();
        assert_eq!((p.reserved_bits(), p.header_len(), p.flags()), (0x01, 40, flags::SYN));
        b[tcp_at + 12] |= 0x0e;
        assert_eq!(Packet::new_checked(&b[tcp_at..]).unwrap().reserved_bits(), 0x0f);
    }

    #[test]
    fn length_checks() {
        let mut b = [0u8; 24];
        b[12] = 4 << 4;
        assert_eq!(
            Packet::new_checked(&b[..]).unwrap_err(),
            Error::Malformed("tcp data offset < 5")
        );
        b[12] = 7 << 4;
        assert_eq!(Packet::new_checked(&b[..]).unwrap_err(), Error::Truncated);
        b[12] = 6 << 4;
        assert_eq!(Packet::new_checked(&b[..]).unwrap().payload().len(), 0);
        assert_eq!(Packet::new_checked(&b[..19]).unwrap_err(), Error::Truncated);
    }

    #[test]
    fn bad_options_refused_by_repr() {
        let mut b = [0u8; 24];
        b[12] = 6 << 4;
        b[20..24].copy_from_slice(&[2, 4, 5, 0xb4]);
        assert!(Repr::parse(&Packet::new_checked(&b[..]).unwrap()).is_ok());
        b[20..24].copy_from_slice(&[2, 9, 5, 0xb4]);
        assert_eq!(
            Repr::parse(&Packet::new_checked(&b[..]).unwrap()),
            Err(Error::Truncated)
        );
    }

    #[test]
    fn emit_checks() {
        let r = Repr {
            src_port: 1,
            dst_port: 2,
            seq_number: 3,
            ack_number: 4,
            flags: flags::ACK | flags::PSH,
            window: 5,
            urgent_ptr: 0,
            options: &[1, 1, 1],
            payload_len: 0,
        };
        let mut b = [0u8; 23];
        assert_eq!(
            r.emit(&mut Packet::new_unchecked(&mut b[..])),
            Err(Error::Malformed("tcp options length"))
        );
        let r = Repr {
            options: &[],
            payload_len: 3,
            ..r
        };
        let mut b = [0u8; 22];
        assert_eq!(
            r.emit(&mut Packet::new_unchecked(&mut b[..])),
            Err(Error::Truncated)
        );
        let mut b = [0u8; 23];
        r.emit(&mut Packet::new_unchecked(&mut b[..])).unwrap();
        let p = Packet::new_checked(&b[..]).unwrap();
        assert!(p.ack() && p.psh());
        assert_eq!(p.ack_number(), 4);
    }

    #[test]
    fn segmentation_setters() {
        // What the I/O layer does per TSO segment.
        let bytes = syn();
        let ip = ipv4::Packet::new_checked(&bytes[..]).unwrap();
        let mut seg = ip.payload().to_vec();
        seg.extend_from_slice(&[0xaa; 100]);
        let mut p = Packet::new_checked(&mut seg[..]).unwrap();
        p.set_seq_number(p.seq_number().wrapping_add(1448));
        p.set_flags(p.flags() & !(flags::FIN | flags::PSH));
        p.fill_checksum_v4(ip.src_addr(), ip.dst_addr()).unwrap();
        assert!(p.verify_checksum_v4(ip.src_addr(), ip.dst_addr()));
        assert_eq!(p.payload_mut().len(), 100);
    }
}
