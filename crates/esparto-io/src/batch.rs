//! Pre-allocated packet batches: the currency between the kernel and the data path.
//!
//! Kernel I/O costs microseconds per call, crypto a couple of hundred
//! nanoseconds per packet, so every syscall here moves a *batch*. Batches are
//! allocated once, when a worker starts, and reused forever: nothing on the
//! per-packet path allocates.
//!
//! - [`RxBatch`] holds what a receive call produced. Its storage is a set of
//!   fixed-size slots ([`PacketBuf`]); an *entry* is a byte range inside one
//!   slot. A TUN read gives one entry per slot (a TSO/USO super-packet is split
//!   into MTU-sized packets, one per slot, each placed after `headroom` bytes);
//!   a UDP read with `UDP_GRO` may give many entries in one slot (one GRO'd
//!   buffer holds several datagrams, split by the segment size).
//! - [`TxBatch`] holds what will be sent: entry *i* lives in slot *i*, after
//!   `headroom` bytes, with an optional destination address (UDP) or none
//!   (TUN). The writer fills a slot in place through [`TxBatch::push_with`].
//!
//! Out-of-place processing (read an [`RxBatch`], write a [`TxBatch`]) is the
//! intended shape: AES-GCM encrypts or decrypts out of place at the same cost
//! as in place, and it leaves the kernel-facing layouts independent. One
//! exception saves a copy per packet: a TUN read batch has one packet per
//! slot, so a packet encapsulated in place in its read slot moves to the
//! UDP send batch with its slot ([`TxBatch::push_from_rx`], a buffer
//! swap; the send batch's packet then starts where the datapath's header
//! begins in that slot, not at the headroom).

use std::net::{IpAddr, SocketAddr};

/// One fixed-capacity packet buffer whose visible length can change without
/// reallocating.
#[derive(Debug)]
pub struct PacketBuf {
    data: Box<[u8]>,
    len: usize,
}

impl PacketBuf {
    /// A zeroed buffer of `capacity` bytes whose visible length is `capacity`.
    pub fn new(capacity: usize) -> Self {
        Self {
            data: vec![0u8; capacity].into_boxed_slice(),
            len: capacity,
        }
    }

    /// Total bytes the buffer can hold.
    pub fn capacity(&self) -> usize {
        self.data.len()
    }

    /// Visible length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the visible length is zero.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Set the visible length, clamped to the capacity (never reallocates).
    pub fn set_len(&mut self, len: usize) {
        self.len = len.min(self.data.len());
    }

    /// The whole storage, regardless of the visible length.
    pub fn storage_mut(&mut self) -> &mut [u8] {
        &mut self.data
    }
}

impl AsRef<[u8]> for PacketBuf {
    fn as_ref(&self) -> &[u8] {
        &self.data[..self.len]
    }
}

impl AsMut<[u8]> for PacketBuf {
    fn as_mut(&mut self) -> &mut [u8] {
        &mut self.data[..self.len]
    }
}

/// Where one received packet or datagram lives, and where it came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RxEntry {
    /// Index of the slot holding the bytes.
    pub slot: u32,
    /// Offset of the first byte inside the slot.
    pub start: u32,
    /// Length in bytes.
    pub len: u32,
    /// Source address (UDP); `None` for TUN packets.
    pub peer: Option<SocketAddr>,
}

/// A batch of received packets (see the module essay).
#[derive(Debug)]
pub struct RxBatch {
    pub(crate) slots: Vec<PacketBuf>,
    pub(crate) sizes: Vec<usize>,
    pub(crate) entries: Vec<RxEntry>,
    /// Per slot: the destination address the datagram in it was sent to,
    /// when the socket reports it (`UdpConfig::pktinfo`); every datagram
    /// of a GRO buffer shares it.
    pub(crate) locals: Vec<Option<IpAddr>>,
    pub(crate) headroom: usize,
    /// Every entry has a slot of its own (TUN reads), so a slot may be
    /// handed to a [`TxBatch`] once its entry is processed
    /// ([`TxBatch::push_from_rx`]). False for UDP reads, where one GRO
    /// buffer holds many datagrams.
    pub(crate) exclusive: bool,
}

impl RxBatch {
    /// `slots` buffers of `headroom + slot_len` bytes each. Entries may hold up
    /// to `max_entries` packets (a GRO'd UDP buffer splits into many).
    pub fn new(slots: usize, headroom: usize, slot_len: usize, max_entries: usize) -> Self {
        let slots = slots.max(1);
        Self {
            slots: (0..slots)
                .map(|_| PacketBuf::new(headroom + slot_len))
                .collect(),
            sizes: vec![0; slots],
            entries: Vec::with_capacity(max_entries.max(slots)),
            locals: vec![None; slots],
            headroom,
            exclusive: false,
        }
    }

    /// Number of packets in the batch.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the batch is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Number of slots.
    pub fn slot_count(&self) -> usize {
        self.slots.len()
    }

    /// Bytes reserved in front of each TUN packet.
    pub fn headroom(&self) -> usize {
        self.headroom
    }

    /// Forget all entries.
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// The entry descriptors.
    pub fn entries(&self) -> &[RxEntry] {
        &self.entries
    }

    /// Bytes of packet `i`, or `None` past the end.
    pub fn packet(&self, i: usize) -> Option<&[u8]> {
        let e = self.entries.get(i)?;
        let slot = self.slots.get(e.slot as usize)?;
        let start = e.start as usize;
        slot.data.get(start..start + e.len as usize)
    }

    /// Mutable bytes of packet `i` (for in-place processing).
    pub fn packet_mut(&mut self, i: usize) -> Option<&mut [u8]> {
        let e = *self.entries.get(i)?;
        let slot = self.slots.get_mut(e.slot as usize)?;
        let start = e.start as usize;
        slot.data.get_mut(start..start + e.len as usize)
    }

    /// Entry `i` with its whole slot, mutably: `(slot, range of the packet
    /// within it)`. For processing in place with the slot's headroom and
    /// tailroom (encapsulation may grow a packet at both ends).
    pub fn slot_mut(&mut self, i: usize) -> Option<(&mut [u8], core::ops::Range<usize>)> {
        let e = *self.entries.get(i)?;
        let slot = self.slots.get_mut(e.slot as usize)?;
        let start = e.start as usize;
        let end = start + e.len as usize;
        let data = &mut slot.data[..];
        (end <= data.len()).then_some((data, start..end))
    }

    /// The source address of entry `i` (datagrams only).
    pub fn peer(&self, i: usize) -> Option<SocketAddr> {
        self.entries.get(i)?.peer
    }


    /// The local address datagram `i` was sent to: known when the socket
    /// reports it (`UdpConfig::pktinfo`), which a socket bound to a
    /// wildcard address needs to tell its addresses apart.
    pub fn local(&self, i: usize) -> Option<IpAddr> {
        let e = self.entries.get(i)?;
        self.locals.get(e.slot as usize).copied().flatten()
    }

    /// Iterate over `(bytes, peer)` of every packet.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], Option<SocketAddr>)> + '_ {
        (0..self.entries.len()).filter_map(move |i| Some((self.packet(i)?, self.entries[i].peer)))
    }

    /// Appends one read as the kernel would have left it, into the next
    /// unused slot: `segments` back to back after the headroom, one entry
    /// each, from `peer` — a TUN read is one segment, a UDP GRO read may be
    /// many. For datapaths' tests and benchmarks, which run without a
    /// device; refuses (and adds nothing) when the slots, a slot's room or
    /// the entries run out.
    pub fn push_read(&mut self, segments: &[&[u8]], peer: Option<SocketAddr>) -> Result<(), BatchFull> {
        let slot = self.entries.last().map_or(0, |e| e.slot as usize + 1);
        let headroom = self.headroom;
        let Some(buf) = self.slots.get_mut(slot) else {
            return Err(BatchFull);
        };
        let total: usize = segments.iter().map(|s| s.len()).sum();
        if headroom + total > buf.capacity() || self.entries.len() + segments.len() > self.entries.capacity() {
            return Err(BatchFull);
        }
        // Only one packet per slot lets a slot move on to a send batch.
        let single = segments.len() == 1;
        self.exclusive = single && (self.entries.is_empty() || self.exclusive);
        let mut at = headroom;
        for s in segments {
            buf.storage_mut()[at..at + s.len()].copy_from_slice(s);
            self.entries.push(RxEntry { slot: slot as u32, start: at as u32, len: s.len() as u32, peer });
            at += s.len();
        }
        Ok(())
    }

    /// Restore every slot to full length before a receive call.
    pub(crate) fn reset_slots(&mut self) {
        for s in &mut self.slots {
            let cap = s.capacity();
            s.set_len(cap);
        }
    }
}

/// The batch was full; the packet was not added.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchFull;

impl std::fmt::Display for BatchFull {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("batch full")
    }
}

impl std::error::Error for BatchFull {}

/// A batch of packets to send (see the module essay).
#[derive(Debug)]
pub struct TxBatch {
    pub(crate) slots: Vec<PacketBuf>,
    pub(crate) dsts: Vec<Option<SocketAddr>>,
    /// The source address to send packet *i* from (`IP_PKTINFO`);
    /// `None`: the one the routing table picks.
    pub(crate) srcs: Vec<Option<IpAddr>>,
    /// Where packet *i* starts in its slot: `headroom`, except for a slot
    /// taken over from an [`RxBatch`], where the packet was built in place.
    starts: Vec<usize>,
    pub(crate) len: usize,
    pub(crate) headroom: usize,
}

impl TxBatch {
    /// `slots` buffers, each with `headroom` bytes in front of up to
    /// `slot_len` bytes of packet. For a TUN batch, `headroom` must be at least
    /// [`crate::tun::VNET_HDR_LEN`] and `slot_len` bounds how far GRO may
    /// coalesce (64 KiB lets a whole TSO super-packet form).
    pub fn new(slots: usize, headroom: usize, slot_len: usize) -> Self {
        let slots = slots.max(1);
        Self {
            slots: (0..slots)
                .map(|_| PacketBuf::new(headroom + slot_len))
                .collect(),
            dsts: vec![None; slots],
            srcs: vec![None; slots],
            starts: vec![headroom; slots],
            len: 0,
            headroom,
        }
    }

    /// Number of packets queued.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no packet is queued.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether no further packet fits.
    pub fn is_full(&self) -> bool {
        self.len == self.slots.len()
    }

    /// Maximum number of packets.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Headroom in front of each packet.
    pub fn headroom(&self) -> usize {
        self.headroom
    }

    /// Drop all queued packets.
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Whether every packet starts right after the headroom (what the TUN
    /// writer needs: it puts the virtio-net header in the headroom). Only
    /// [`TxBatch::push_from_rx`] makes a batch non-uniform.
    pub fn uniform(&self) -> bool {
        self.starts[..self.len].iter().all(|&s| s == self.headroom)
    }

    /// Append a packet: `fill` gets the slot after the headroom and returns
    /// how many bytes it wrote (clamped to the slot). Returning 0 discards
    /// the slot (for example when encapsulation failed).
    pub fn push_with(
        &mut self,
        dst: Option<SocketAddr>,
        fill: impl FnOnce(&mut [u8]) -> usize,
    ) -> Result<(), BatchFull> {
        let headroom = self.headroom;
        let Some(slot) = self.slots.get_mut(self.len) else {
            return Err(BatchFull);
        };
        let storage = slot.storage_mut();
        let room = storage.len().saturating_sub(headroom);
        let n = fill(&mut storage[headroom..]).min(room);
        if n == 0 {
            return Ok(());
        }
        slot.set_len(headroom + n);
        self.dsts[self.len] = dst;
        self.srcs[self.len] = None;
        self.starts[self.len] = headroom;
        self.len += 1;
        Ok(())
    }

    /// Append bytes `range` of the slot holding `rx`'s entry `i`, built in
    /// place there (encapsulation in the TUN read slot): when `rx`'s
    /// slots are exclusive and as large as ours, the two buffers are
    /// swapped — no copy — and the entry must not be read from `rx` again;
    /// otherwise the bytes are copied as by [`TxBatch::push`].
    pub fn push_from_rx(
        &mut self,
        dst: Option<SocketAddr>,
        rx: &mut RxBatch,
        i: usize,
        range: core::ops::Range<usize>,
    ) -> Result<(), BatchFull> {
        let Some(e) = rx.entries.get(i).copied() else {
            return Ok(());
        };
        let Some(src) = rx.slots.get_mut(e.slot as usize) else {
            return Ok(());
        };
        if range.is_empty() || range.end > src.capacity() {
            return Ok(());
        }
        let Some(dst_slot) = self.slots.get_mut(self.len) else {
            return Err(BatchFull);
        };
        if !rx.exclusive || src.capacity() != dst_slot.capacity() {
            return self.push(dst, &src.storage_mut()[range]);
        }
        std::mem::swap(src, dst_slot);
        dst_slot.set_len(range.end);
        self.dsts[self.len] = dst;
        self.srcs[self.len] = None;
        self.starts[self.len] = range.start;
        self.len += 1;
        Ok(())
    }

    /// Append a copy of `pkt`.
    pub fn push(&mut self, dst: Option<SocketAddr>, pkt: &[u8]) -> Result<(), BatchFull> {
        if pkt.is_empty() {
            return Ok(());
        }
        if self.is_full() {
            return Err(BatchFull);
        }
        let room = self.slots[self.len]
            .capacity()
            .saturating_sub(self.headroom);
        if pkt.len() > room {
            return Err(BatchFull);
        }
        self.push_with(dst, |buf| {
            buf[..pkt.len()].copy_from_slice(pkt);
            pkt.len()
        })
    }

    /// Bytes of queued packet `i`.
    pub fn packet(&self, i: usize) -> Option<&[u8]> {
        if i >= self.len {
            return None;
        }
        self.slots[i].as_ref().get(self.starts[i]..)
    }

    /// Length of queued packet `i` (0 past the end).
    pub(crate) fn packet_len(&self, i: usize) -> usize {
        self.packet(i).map_or(0, <[u8]>::len)
    }

    /// Bytes of all queued packets.
    pub fn bytes(&self) -> usize {
        (0..self.len).map(|i| self.packet_len(i)).sum()
    }

    /// Sends the packet queued last from `src` rather than from the
    /// address the routing table picks (a socket bound to a wildcard
    /// address answering from the address it was asked at).
    pub fn set_last_source(&mut self, src: Option<IpAddr>) {
        if let Some(i) = self.len.checked_sub(1) {
            self.srcs[i] = src;
        }
    }

    /// Source address of queued packet `i`, if set.
    pub fn source(&self, i: usize) -> Option<IpAddr> {
        if i >= self.len { None } else { self.srcs[i] }
    }

    /// Destination of queued packet `i`.
    pub fn dst(&self, i: usize) -> Option<SocketAddr> {
        if i >= self.len { None } else { self.dsts[i] }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn reads_pushed_as_the_kernel_leaves_them() {
        let peer: SocketAddr = "192.0.2.1:4500".parse().unwrap();
        let mut b = RxBatch::new(2, 4, 8, 4);
        b.push_read(&[b"abc", b"de"], Some(peer)).unwrap();
        assert!(!b.exclusive, "a GRO read shares its slot");
        b.push_read(&[b"fgh"], None).unwrap();
        assert_eq!(b.push_read(&[b"x"], None), Err(BatchFull), "no slot left");
        let got: Vec<_> = b.iter().collect();
        assert_eq!(got, [(&b"abc"[..], Some(peer)), (&b"de"[..], Some(peer)), (&b"fgh"[..], None)]);
        assert_eq!((b.entries()[1].slot, b.entries()[1].start, b.entries()[2].slot), (0, 7, 1));
        let mut tun = RxBatch::new(2, 4, 8, 4);
        tun.push_read(&[b"abc"], None).unwrap();
        assert!(tun.exclusive, "one packet per slot");
        assert_eq!(tun.push_read(&[b"123456789"], None), Err(BatchFull), "longer than a slot");
        assert_eq!(tun.len(), 1);
    }

    #[test]
    fn tx_push_and_read_back() {
        let mut b = TxBatch::new(2, 16, 100);
        let a: SocketAddr = "192.0.2.1:4500".parse().unwrap();
        b.push(Some(a), b"hello").unwrap();
        b.push_with(None, |buf| {
            buf[..3].copy_from_slice(b"abc");
            3
        })
        .unwrap();
        assert_eq!(b.push(None, b"x"), Err(BatchFull));
        assert_eq!(b.packet(0).unwrap(), b"hello");
        assert_eq!(b.packet(1).unwrap(), b"abc");
        assert_eq!(b.dst(0), Some(a));
        assert_eq!(b.dst(1), None);
        assert!(b.packet(2).is_none());
        b.clear();
        assert!(b.is_empty());
    }

    #[test]
    fn tx_rejects_oversized_and_skips_empty() {
        let mut b = TxBatch::new(2, 4, 8);
        assert_eq!(b.push(None, &[0u8; 9]), Err(BatchFull));
        b.push_with(None, |_| 0).unwrap();
        assert_eq!(b.len(), 0);
        // A fill that claims more than the slot is clamped.
        b.push_with(None, |_| 1000).unwrap();
        assert_eq!(b.packet(0).unwrap().len(), 8);
    }

    #[test]
    fn push_from_rx_moves_exclusive_slots_and_copies_shared_ones() {
        let a: SocketAddr = "192.0.2.1:4500".parse().unwrap();
        let mut rx = RxBatch::new(2, 8, 24, 2);
        rx.slots[1].storage_mut()[..32].copy_from_slice(&[7u8; 32]);
        rx.slots[1].storage_mut()[4..12].copy_from_slice(b"espbytes");
        rx.entries.push(RxEntry { slot: 1, start: 8, len: 4, peer: None });
        let mut tx = TxBatch::new(2, 0, 32);
        let rx_ptr = rx.slots[1].as_ref().as_ptr();

        // Shared slots (a UDP GRO buffer): copied, the batch stays uniform.
        tx.push_from_rx(Some(a), &mut rx, 0, 4..12).unwrap();
        assert_eq!(tx.packet(0).unwrap(), b"espbytes");
        assert!(tx.uniform());
        assert_eq!(rx.slots[1].as_ref().as_ptr(), rx_ptr, "not moved");

        // Exclusive slots of equal size (TUN reads): moved, not copied.
        rx.exclusive = true;
        tx.push_from_rx(Some(a), &mut rx, 0, 4..12).unwrap();
        assert_eq!(tx.packet(1).unwrap(), b"espbytes");
        assert_eq!(tx.packet_len(1), 8);
        assert_eq!(tx.dst(1), Some(a));
        assert_eq!(tx.packet(1).unwrap().as_ptr(), rx_ptr.wrapping_add(4), "the read slot itself");
        assert!(!tx.uniform(), "packet 1 starts at 4, not at the headroom");
        assert_eq!(rx.slots[1].capacity(), 32, "rx got a slot as large back");
        assert_eq!(tx.push_from_rx(Some(a), &mut rx, 0, 4..12), Err(BatchFull));
        tx.clear();
        assert!(tx.uniform());

        // Out-of-range requests add nothing and do not panic.
        tx.push_from_rx(Some(a), &mut rx, 5, 0..4).unwrap();
        tx.push_from_rx(Some(a), &mut rx, 0, 30..40).unwrap();
        assert!(tx.is_empty());

        // Different sizes: copied.
        let mut small = TxBatch::new(1, 0, 16);
        small.push_from_rx(None, &mut rx, 0, 0..4).unwrap();
        assert_eq!(small.packet(0).unwrap().len(), 4);
        assert!(small.uniform());
    }

    #[test]
    fn rx_packet_views_are_bounded() {
        let mut r = RxBatch::new(2, 0, 16, 4);
        r.entries.push(RxEntry {
            slot: 0,
            start: 4,
            len: 4,
            peer: None,
        });
        r.entries.push(RxEntry {
            slot: 1,
            start: 10,
            len: 100,
            peer: None,
        });
        assert_eq!(r.packet(0).unwrap().len(), 4);
        assert!(
            r.packet(1).is_none(),
            "out-of-range entry gives None, not a panic"
        );
        assert!(r.packet(2).is_none());
    }
}
