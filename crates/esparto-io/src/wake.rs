//! A wake-up another thread can give a thread blocked in `poll`: the
//! control thread's, when a worker has an event it must see at once (an
//! SA install the control thread waits to have confirmed) rather than at
//! its next timer.

use std::io;
use std::os::fd::{AsRawFd, RawFd};

use crate::sys::EventFd;

/// An `eventfd` to poll: [`Waker::wake`] makes it readable,
/// [`Waker::drain`] resets it. Shared between threads behind an `Arc`.
#[derive(Debug)]
pub struct Waker(EventFd);

impl Waker {
    /// A new wake-up, not yet raised.
    pub fn new() -> io::Result<Self> {
        EventFd::new().map(Self)
    }

    /// Raises it (never blocks; raising a raised one changes nothing).
    pub fn wake(&self) {
        // A failure leaves the poller to its next timeout.
        let _ = self.0.notify();
    }

    /// Lowers it, after a poll said it was raised.
    pub fn drain(&self) {
        self.0.drain();
    }
}

impl AsRawFd for Waker {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wake_makes_the_fd_readable_until_drained() {
        let w = Waker::new().unwrap_or_else(|e| panic!("{e}"));
        let readable = |w: &Waker| {
            let mut fds = [libc::pollfd { fd: w.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
            crate::sys::poll(&mut fds, 0).unwrap_or(0) == 1
        };
        assert!(!readable(&w));
        w.wake();
        w.wake();
        assert!(readable(&w));
        w.drain();
        assert!(!readable(&w));
    }
}
