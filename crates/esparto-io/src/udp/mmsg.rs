//! The raw `mmsghdr`/`cmsg` plumbing behind [`super::UdpSocket`]'s batched
//! calls: reusable scratch arrays and the control messages we use,
//! `UDP_SEGMENT` on send (the GSO segment size, a `u16`) and `UDP_GRO` on
//! receive (the GRO segment size, an `int`), both at level `SOL_UDP`
//! (see `udp(7)`); and `IP_PKTINFO` / `IPV6_PKTINFO` both ways: the
//! address a datagram was sent to, and the one to send from (`ip(7)`,
//! `ipv6(7)`). A dual-stack IPv6 socket reports an IPv4 datagram's
//! address IPv4-mapped in `IPV6_PKTINFO`, and takes one back the same way.

use std::mem::{size_of, zeroed};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Room for the control messages we read (`UDP_GRO`: one int;
/// `IPV6_PKTINFO`: 20 bytes) or write (`UDP_SEGMENT`: one u16, and a
/// pktinfo), 8-byte aligned like `struct cmsghdr`.
pub(super) type CmsgBuf = [u64; 16];

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
            self.cmsgs.resize(n, [0; 16]);
            self.groups.reserve(n.saturating_sub(self.groups.len()));
        }
    }
}

/// Write the control messages of one send into `h`'s control buffer: a
/// `SOL_UDP`/`UDP_SEGMENT` with `seg`, and a pktinfo naming the source
/// address `src` (as a socket of family `v6` takes it); then shrink
/// `msg_controllen` to what they use.
pub(super) fn write_send_cmsgs(h: &mut libc::msghdr, seg: Option<u16>, src: Option<IpAddr>, v6: bool) {
    let mut used = 0usize;
    let space = |len: usize| -> usize {
        // SAFETY: CMSG_SPACE is arithmetic on its argument.
        unsafe { libc::CMSG_SPACE(len as u32) as usize }
    };
    // SAFETY: h.msg_control points at a live, 8-byte aligned CmsgBuf of
    // msg_controllen bytes (128), which holds CMSG_SPACE(2) = 24 bytes and
    // CMSG_SPACE(20) = 40 bytes one after the other; each header is written
    // at `used`, a multiple of 8 inside the buffer, and its data right
    // after it (CMSG_DATA), within the space counted for it.
    unsafe {
        let base = h.msg_control.cast::<u8>();
        if let Some(seg) = seg {
            let c = base.add(used).cast::<libc::cmsghdr>();
            (*c).cmsg_level = libc::SOL_UDP;
            (*c).cmsg_type = libc::UDP_SEGMENT;
            (*c).cmsg_len = libc::CMSG_LEN(size_of::<u16>() as u32) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), seg);
            used += space(size_of::<u16>());
        }
        match (src, v6) {
            (Some(IpAddr::V4(a)), false) => {
                let c = base.add(used).cast::<libc::cmsghdr>();
                (*c).cmsg_level = libc::IPPROTO_IP;
                (*c).cmsg_type = libc::IP_PKTINFO;
                (*c).cmsg_len = libc::CMSG_LEN(size_of::<libc::in_pktinfo>() as u32) as usize;
                let info = libc::in_pktinfo {
                    ipi_ifindex: 0,
                    ipi_spec_dst: libc::in_addr { s_addr: u32::from_ne_bytes(a.octets()) },
                    ipi_addr: libc::in_addr { s_addr: 0 },
                };
                std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<libc::in_pktinfo>(), info);
                used += space(size_of::<libc::in_pktinfo>());
            }
            (Some(a), true) => {
                let c = base.add(used).cast::<libc::cmsghdr>();
                (*c).cmsg_level = libc::IPPROTO_IPV6;
                (*c).cmsg_type = libc::IPV6_PKTINFO;
                (*c).cmsg_len = libc::CMSG_LEN(size_of::<libc::in6_pktinfo>() as u32) as usize;
                let addr = match a {
                    IpAddr::V4(a) => a.to_ipv6_mapped(),
                    IpAddr::V6(a) => a,
                };
                let info = libc::in6_pktinfo { ipi6_addr: libc::in6_addr { s6_addr: addr.octets() }, ipi6_ifindex: 0 };
                std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<libc::in6_pktinfo>(), info);
                used += space(size_of::<libc::in6_pktinfo>());
            }
            // An IPv6 source on an IPv4 socket cannot be: the routing
            // table picks one.
            (Some(IpAddr::V6(_)), false) | (None, _) => {}
        }
    }
    h.msg_controllen = used;
    if used == 0 {
        h.msg_control = std::ptr::null_mut();
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

/// The destination address of a received message, from its `IP_PKTINFO`
/// or `IPV6_PKTINFO` control message (IPv4-mapped addresses as IPv4).
pub(super) fn pktinfo_local(h: &libc::msghdr) -> Option<IpAddr> {
    // SAFETY: as in `gro_segment_size`; the data of an IP_PKTINFO cmsg is
    // one in_pktinfo, of an IPV6_PKTINFO one in6_pktinfo.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        while !c.is_null() {
            match ((*c).cmsg_level, (*c).cmsg_type) {
                (libc::IPPROTO_IP, libc::IP_PKTINFO) => {
                    let info = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::in_pktinfo>());
                    return Some(IpAddr::V4(Ipv4Addr::from(info.ipi_addr.s_addr.to_ne_bytes())));
                }
                (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO) => {
                    let info = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::in6_pktinfo>());
                    let a = Ipv6Addr::from(info.ipi6_addr.s6_addr);
                    return Some(a.to_ipv4_mapped().map_or(IpAddr::V6(a), IpAddr::V4));
                }
                _ => {}
            }
            c = libc::CMSG_NXTHDR(h, c);
        }
    }
    None
}
