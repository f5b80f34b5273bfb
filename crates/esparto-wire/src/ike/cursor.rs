//! A bounds-checked reader and a writer over byte slices, shared by the
//! payload parsers. Every read returns `Error::Truncated` instead of
//! indexing out of bounds, so the parsers contain no raw indexing of
//! untrusted data.

use super::error::{Error, Result};

/// Reads big-endian fields from the front of a slice.
#[derive(Debug, Clone)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.buf.len() < n {
            return Err(Error::Truncated);
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    pub(crate) fn rest(&mut self) -> &'a [u8] {
        core::mem::take(&mut self.buf)
    }

    pub(crate) fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    pub(crate) fn u16(&mut self) -> Result<u16> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    pub(crate) fn u32(&mut self) -> Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(crate) fn u64(&mut self) -> Result<u64> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }
}

/// Writes big-endian fields into the front of a mutable slice. Callers size
/// the slice with the Repr's `buffer_len`, so running out is a caller bug
/// reported as `Error::Truncated` rather than a panic.
#[derive(Debug)]
pub(crate) struct Writer<'a> {
    buf: &'a mut [u8],
    pos: usize,
}

impl<'a> Writer<'a> {
    pub(crate) fn new(buf: &'a mut [u8]) -> Self {
        Writer { buf, pos: 0 }
    }

    pub(crate) fn put(&mut self, b: &[u8]) -> Result<()> {
        let end = self.pos.checked_add(b.len()).ok_or(Error::Truncated)?;
        self.buf
            .get_mut(self.pos..end)
            .ok_or(Error::Truncated)?
            .copy_from_slice(b);
        self.pos = end;
        Ok(())
    }

    pub(crate) fn u8(&mut self, v: u8) -> Result<()> {
        self.put(&[v])
    }

    pub(crate) fn u16(&mut self, v: u16) -> Result<()> {
        self.put(&v.to_be_bytes())
    }

    pub(crate) fn u32(&mut self, v: u32) -> Result<()> {
        self.put(&v.to_be_bytes())
    }

    pub(crate) fn u64(&mut self, v: u64) -> Result<()> {
        self.put(&v.to_be_bytes())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn reader_never_overreads() {
        let mut r = Reader::new(&[1, 2, 3]);
        assert_eq!(r.u16().unwrap(), 0x0102);
        assert_eq!(r.u16(), Err(Error::Truncated));
        assert_eq!(r.u8().unwrap(), 3);
        assert!(r.is_empty());
    }

    #[test]
    fn writer_never_overwrites() {
        let mut b = [0u8; 3];
        let mut w = Writer::new(&mut b);
        w.u16(0xabcd).unwrap();
        assert_eq!(w.u16(1), Err(Error::Truncated));
        w.u8(7).unwrap();
        assert_eq!(b, [0xab, 0xcd, 7]);
    }
}
