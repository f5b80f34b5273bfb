//! A small `poll(2)` set for the control thread (the workers have their own
//! loop): the control socket, the IKE sockets and a signal pipe.

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

use crate::sys;

/// File descriptors to wait on for readability (some also for
/// writability).
#[derive(Debug, Default)]
pub struct Poller {
    fds: Vec<libc::pollfd>,
}

impl Poller {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `fd`; returns its index for [`readable`](Self::readable).
    pub fn add(&mut self, fd: RawFd) -> usize {
        self.fds.push(libc::pollfd { fd, events: libc::POLLIN, revents: 0 });
        self.fds.len() - 1
    }

    /// Adds `fd`, waited on for writability too (a socket with output
    /// that did not fit); its index for [`readable`](Self::readable).
    pub fn add_writable(&mut self, fd: RawFd) -> usize {
        self.fds.push(libc::pollfd { fd, events: libc::POLLIN | libc::POLLOUT, revents: 0 });
        self.fds.len() - 1
    }

    /// Number of descriptors in the set.
    pub fn len(&self) -> usize {
        self.fds.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.fds.is_empty()
    }

    /// Waits until one is ready or `timeout` passes (EINTR counts as a
    /// timeout: a signal arrived, the caller looks at its flags).
    pub fn wait(&mut self, timeout: Duration) -> io::Result<()> {
        for f in &mut self.fds {
            f.revents = 0;
        }
        let ms = i32::try_from(timeout.as_micros().div_ceil(1000)).unwrap_or(i32::MAX);
        match sys::poll(&mut self.fds, ms) {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Whether fd number `idx` was readable (or hung up) after the last wait.
    pub fn readable(&self, idx: usize) -> bool {
        self.fds.get(idx).is_some_and(|f| f.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0)
    }
}
