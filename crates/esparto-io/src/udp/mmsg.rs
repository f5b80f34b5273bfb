//! The raw `mmsghdr`/`cmsg` plumbing behind [`super::UdpSocket`]'s batched
//! calls: reusable scratch arrays and the two control messages we use,
//! `UDP_SEGMENT` on send (the GSO segment size, a `u16`) and `UDP_GRO` on
//! receive (the GRO segment size, an `int`), both at level `SOL_UDP`
//! (see `udp(7)`).

use std::mem::{size_of, zeroed};

/// Room for the control messages we read (`UDP_GRO`: one int) or write
/// (`UDP_SEGMENT`: one u16), 8-byte aligned like `struct cmsghdr`.
pub(super) type CmsgBuf = [u64; 8];

/// Scratch arrays for `sendmmsg`/`recvmmsg`, sized once and reused; the raw
/// pointers inside are rebuilt before every call.
pub(super) struct Scratch {
    pub(super) msgs: Vec<libc::mmsghdr>,
    pub(super) iovs: Vec<libc::iovec>,
    pub(super) names: Vec<libc::sockaddr_storage>,
    pub(super) cmsgs: Vec<CmsgBuf>,
    /// Per send entry: index of the first datagram and how many.
    pub(super) groups: Vec<(usize, usize)>,
}

// SAFETY: the raw pointers stored in `msgs`/`iovs` are scratch values written
// immediately before each syscall and never dereferenced afterwards; moving
// the struct to another thread cannot create aliasing.
unsafe impl Send for Scratch {}

impl Scratch {
    pub(super) fn new() -> Self {
        Self {
            msgs: Vec::new(),
            iovs: Vec::new(),
            names: Vec::new(),
            cmsgs: Vec::new(),
            groups: Vec::new(),
        }
    }

    /// Grow to at least `n` of everything (allocates only when a batch is
    /// larger than any seen before on this socket).
    pub(super) fn ensure(&mut self, n: usize) {
        if self.msgs.len() < n {
            // SAFETY: mmsghdr, iovec and sockaddr_storage are plain old data
            // for which all-zero bytes are valid values.
            unsafe {
                self.msgs.resize_with(n, || zeroed());
                self.iovs.resize_with(n, || zeroed());
                self.names.resize_with(n, || zeroed());
            }
            self.cmsgs.resize(n, [0; 8]);
            self.groups.reserve(n.saturating_sub(self.groups.len()));
        }
    }
}

/// Write a `SOL_UDP`/`UDP_SEGMENT` control message into `h`'s control buffer
/// and shrink `msg_controllen` to what it uses.
pub(super) fn write_segment_cmsg(h: &mut libc::msghdr, seg: u16) {
    // SAFETY: h.msg_control points at a live, 8-byte aligned CmsgBuf of
    // msg_controllen bytes (64), which holds CMSG_SPACE(2) = 24 bytes;
    // CMSG_FIRSTHDR is non-null for such a buffer.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(h);
        (*c).cmsg_level = libc::SOL_UDP;
        (*c).cmsg_type = libc::UDP_SEGMENT;
        (*c).cmsg_len = libc::CMSG_LEN(size_of::<u16>() as u32) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), seg);
        h.msg_controllen = libc::CMSG_SPACE(size_of::<u16>() as u32) as usize;
    }
}

/// The `UDP_GRO` segment size from a received message's control data.
pub(super) fn gro_segment_size(h: &libc::msghdr) -> Option<usize> {
    // SAFETY: the kernel filled msg_control with msg_controllen bytes of
    // well-formed cmsgs; CMSG_FIRSTHDR/NXTHDR stay inside that buffer and
    // return null at its end; the data of a UDP_GRO cmsg is one c_int.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_UDP && (*c).cmsg_type == libc::UDP_GRO {
                let v = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>());
                return usize::try_from(v).ok();
            }
            c = libc::CMSG_NXTHDR(h, c);
        }
    }
    None
}
