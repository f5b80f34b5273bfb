//! Thin, checked wrappers over the few raw syscalls the crate needs: socket
//! options, socket addresses, `poll`, `eventfd` and CPU affinity.
//!
//! Every `unsafe` block of the crate that is not tied to one module's data
//! structures lives here, so the rest reads as ordinary Rust.

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// `errno` of the last failed call as an `io::Error`.
pub(crate) fn last_err() -> io::Error {
    io::Error::last_os_error()
}

/// Turn a `-1` return into the last OS error.
pub(crate) fn cvt(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 { Err(last_err()) } else { Ok(rc) }
}

/// `setsockopt` with an integer value.
pub(crate) fn setsockopt_int(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: the option value points at a live c_int of the size we pass.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    cvt(rc).map(|_| ())
}

/// `getsockopt` of an integer value.
pub(crate) fn getsockopt_int(fd: RawFd, level: libc::c_int, name: libc::c_int) -> io::Result<i32> {
    let mut value: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: value and len are live locals of the sizes the kernel expects.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            level,
            name,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    cvt(rc).map(|_| value)
}

/// An `ioctl` that reads one integer (`SIOCOUTQ`, `SIOCINQ`, ...).
pub(crate) fn ioctl_read_int(fd: RawFd, request: libc::Ioctl) -> io::Result<i32> {
    let mut value: libc::c_int = 0;
    // SAFETY: the request writes one c_int into the live local we pass.
    let rc = unsafe { libc::ioctl(fd, request, &mut value as *mut libc::c_int) };
    cvt(rc).map(|_| value)
}

/// A socket address in kernel layout.
#[derive(Clone, Copy)]
pub(crate) struct RawAddr {
    pub(crate) storage: libc::sockaddr_storage,
    pub(crate) len: libc::socklen_t,
}

impl RawAddr {
    /// `addr` as a socket of family `v6` takes it: an IPv4 address as
    /// IPv4-mapped IPv6 on an IPv6 socket (which reaches IPv4 peers only
    /// when it is dual-stack, `IPV6_V6ONLY` off).
    pub(crate) fn for_socket(addr: &SocketAddr, v6: bool) -> Self {
        match addr {
            SocketAddr::V4(a) if v6 => {
                Self::from_std(&SocketAddr::V6(SocketAddrV6::new(a.ip().to_ipv6_mapped(), a.port(), 0, 0)))
            }
            _ => Self::from_std(addr),
        }
    }

    pub(crate) fn from_std(addr: &SocketAddr) -> Self {
        // SAFETY: sockaddr_storage is plain old data; all-zero is valid.
        let mut storage: libc::sockaddr_storage = unsafe { zeroed() };
        let len = match addr {
            SocketAddr::V4(a) => {
                let sin = libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: a.port().to_be(),
                    sin_addr: libc::in_addr {
                        s_addr: u32::from_ne_bytes(a.ip().octets()),
                    },
                    sin_zero: [0; 8],
                };
                // SAFETY: sockaddr_storage is larger than and suitably aligned
                // for sockaddr_in.
                unsafe {
                    std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin)
                };
                size_of::<libc::sockaddr_in>()
            }
            SocketAddr::V6(a) => {
                let sin6 = libc::sockaddr_in6 {
                    sin6_family: libc::AF_INET6 as libc::sa_family_t,
                    sin6_port: a.port().to_be(),
                    sin6_flowinfo: a.flowinfo(),
                    sin6_addr: libc::in6_addr {
                        s6_addr: a.ip().octets(),
                    },
                    sin6_scope_id: a.scope_id(),
                };
                // SAFETY: as above, for sockaddr_in6.
                unsafe {
                    std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin6)
                };
                size_of::<libc::sockaddr_in6>()
            }
        };
        Self {
            storage,
            len: len as libc::socklen_t,
        }
    }
}

/// Decode a kernel socket address; `None` for families other than IPv4/IPv6
/// or a length too short for the family.
pub(crate) fn to_std(storage: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
    let len = len as usize;
    match storage.ss_family as libc::c_int {
        libc::AF_INET if len >= size_of::<libc::sockaddr_in>() => {
            // SAFETY: the family says the storage holds a sockaddr_in, and
            // sockaddr_storage is aligned for it.
            let sin: &libc::sockaddr_in =
                unsafe { &*(storage as *const libc::sockaddr_storage).cast() };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes()),
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 if len >= size_of::<libc::sockaddr_in6>() => {
            // SAFETY: as above, for sockaddr_in6.
            let sin6: &libc::sockaddr_in6 =
                unsafe { &*(storage as *const libc::sockaddr_storage).cast() };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            // An IPv4 peer of a dual-stack socket: its address as IPv4.
            if let Some(v4) = ip.to_ipv4_mapped() {
                return Some(SocketAddr::V4(SocketAddrV4::new(v4, u16::from_be(sin6.sin6_port))));
            }
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// A new non-blocking, close-on-exec UDP socket of the address's family.
pub(crate) fn udp_socket(addr: &SocketAddr) -> io::Result<OwnedFd> {
    let family = if addr.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    // SAFETY: plain syscall with constant arguments.
    let fd = cvt(unsafe {
        libc::socket(
            family,
            libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    })?;
    // SAFETY: `fd` was just returned by socket() and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

pub(crate) fn bind(fd: RawFd, addr: &SocketAddr) -> io::Result<()> {
    let raw = RawAddr::from_std(addr);
    // SAFETY: `raw` holds a valid sockaddr of `raw.len` bytes.
    cvt(unsafe {
        libc::bind(
            fd,
            (&raw.storage as *const libc::sockaddr_storage).cast(),
            raw.len,
        )
    })
    .map(|_| ())
}

pub(crate) fn local_addr(fd: RawFd) -> io::Result<SocketAddr> {
    // SAFETY: all-zero sockaddr_storage is valid.
    let mut storage: libc::sockaddr_storage = unsafe { zeroed() };
    let mut len = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: storage/len describe a writable buffer of the right size.
    cvt(unsafe {
        libc::getsockname(
            fd,
            (&mut storage as *mut libc::sockaddr_storage).cast(),
            &mut len,
        )
    })?;
    to_std(&storage, len).ok_or_else(|| io::Error::other("unexpected address family"))
}

/// An `eventfd` used to wake a worker blocked in `poll`.
#[derive(Debug)]
pub(crate) struct EventFd(OwnedFd);

impl EventFd {
    pub(crate) fn new() -> io::Result<Self> {
        // SAFETY: plain syscall with constant arguments.
        let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
        // SAFETY: fresh descriptor owned by nobody else.
        Ok(Self(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Add one to the counter (wakes a poller).
    pub(crate) fn notify(&self) -> io::Result<()> {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64, as eventfd requires.
        let rc = unsafe { libc::write(self.0.as_raw_fd(), (&one as *const u64).cast(), 8) };
        if rc == 8 { Ok(()) } else { Err(last_err()) }
    }

    /// Reset the counter (non-blocking; a zero counter is fine).
    pub(crate) fn drain(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64. EAGAIN when zero is ignored.
        let _ = unsafe { libc::read(self.0.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    }
}

impl AsRawFd for EventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// `poll` over `fds` with a timeout in milliseconds (-1 = forever). EINTR is
/// reported as zero ready descriptors.
pub(crate) fn poll(fds: &mut [libc::pollfd], timeout_ms: i32) -> io::Result<usize> {
    // SAFETY: `fds` is a valid, exclusively borrowed array of pollfd.
    let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
    if rc < 0 {
        let e = last_err();
        if e.kind() == io::ErrorKind::Interrupted {
            Ok(0)
        } else {
            Err(e)
        }
    } else {
        Ok(rc as usize)
    }
}

/// CPUs this thread may run on, in ascending order.
pub(crate) fn allowed_cpus() -> io::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is plain old data; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { zeroed() };
    // SAFETY: `set` is a live cpu_set_t of the size we pass.
    cvt(unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) })?;
    let max = 8 * size_of::<libc::cpu_set_t>();
    // SAFETY: CPU_ISSET reads a bit of the live set, index < its size.
    Ok((0..max)
        .filter(|c| unsafe { libc::CPU_ISSET(*c, &set) })
        .collect())
}

/// Pin the calling thread to one CPU.
pub(crate) fn pin_current_thread(cpu: usize) -> io::Result<()> {
    if cpu >= 8 * size_of::<libc::cpu_set_t>() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "cpu index out of range",
        ));
    }
    // SAFETY: all-zero is the empty set; CPU_SET writes a bit below its size
    // (checked above); sched_setaffinity reads the live set.
    unsafe {
        let mut set: libc::cpu_set_t = zeroed();
        libc::CPU_SET(cpu, &mut set);
        cvt(libc::sched_setaffinity(
            0,
            size_of::<libc::cpu_set_t>(),
            &set,
        ))
        .map(|_| ())
    }
}

/// CPU the calling thread runs on now.
pub(crate) fn current_cpu() -> Option<usize> {
    // SAFETY: plain syscall without arguments.
    let c = unsafe { libc::sched_getcpu() };
    usize::try_from(c).ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn sockaddr_round_trip() {
        for s in ["192.0.2.7:4500", "[2001:db8::1]:500", "[fe80::1%3]:4500"] {
            let a: SocketAddr = s.parse().unwrap();
            let raw = RawAddr::from_std(&a);
            assert_eq!(to_std(&raw.storage, raw.len), Some(a));
        }
    }

    #[test]
    fn sockaddr_rejects_short_or_foreign() {
        let a: SocketAddr = "192.0.2.7:4500".parse().unwrap();
        let raw = RawAddr::from_std(&a);
        assert_eq!(to_std(&raw.storage, 4), None);
        // SAFETY: all-zero sockaddr_storage is valid (AF_UNSPEC).
        let zero: libc::sockaddr_storage = unsafe { zeroed() };
        assert_eq!(to_std(&zero, 128), None);
    }

    #[test]
    fn eventfd_wakes_poll() {
        let e = EventFd::new().unwrap();
        let mut fds = [libc::pollfd {
            fd: e.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        assert_eq!(poll(&mut fds, 0).unwrap(), 0);
        e.notify().unwrap();
        assert_eq!(poll(&mut fds, 0).unwrap(), 1);
        e.drain();
        fds[0].revents = 0;
        assert_eq!(poll(&mut fds, 0).unwrap(), 0);
    }

    #[test]
    fn affinity_lists_and_pins() {
        let cpus = allowed_cpus().unwrap();
        assert!(!cpus.is_empty());
        let c = *cpus.last().unwrap();
        std::thread::spawn(move || {
            pin_current_thread(c).unwrap();
            assert_eq!(allowed_cpus().unwrap(), vec![c]);
            assert_eq!(current_cpu(), Some(c));
        })
        .join()
        .unwrap();
    }
}
