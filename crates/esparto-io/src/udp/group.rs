//! The reuseport group: N worker sockets bound in order, then the control
//! socket, then the steering program (see [`crate::steer`]) for the key
//! [`UdpConfig::steering`] names.

use std::io;
use std::net::SocketAddr;

use super::{UdpConfig, UdpSocket};
use crate::steer;

/// The sockets of one reuseport group: `workers` data sockets and a control
/// socket, with steering attached.
#[derive(Debug)]
pub struct UdpGroup {
    /// Worker sockets; index = group index = worker number.
    pub workers: Vec<UdpSocket>,
    /// The control socket, group index `workers.len()`.
    pub control: UdpSocket,
}

impl UdpGroup {
    /// Bind `workers` sockets and then the control socket to `addr` (port
    /// 4500 normally; port 0 picks one for all), and attach the steering
    /// program for `cfg.steering`, which must be set. `cfg.pktinfo` is
    /// for the control socket alone (the IKE it reads needs the address it
    /// was sent to; ESP is found by its SPI). Must run in the network
    /// namespace the sockets belong to.
    pub fn bind(addr: SocketAddr, workers: usize, cfg: &UdpConfig) -> io::Result<Self> {
        if workers == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "at least one worker",
            ));
        }
        let Some(steering) = cfg.steering else {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "a group needs a steering key"));
        };
        let mut socks = Vec::with_capacity(workers);
        let control_cfg = cfg.clone();
        let data = UdpConfig { pktinfo: false, ..cfg.clone() };
        let cfg = &data;
        let first = UdpSocket::bind(addr, cfg, true)?;
        // With port 0 the first bind picks the port; the rest join it.
        let addr = first.local_addr();
        socks.push(first);
        for _ in 1..workers {
            socks.push(UdpSocket::bind(addr, cfg, true)?);
        }
        let control = UdpSocket::bind(addr, &control_cfg, true)?;
        steer::attach_steering(&socks[0], &steering, workers)?;
        Ok(Self {
            workers: socks,
            control,
        })
    }

    /// The shared local address.
    pub fn local_addr(&self) -> SocketAddr {
        self.control.local_addr()
    }
}
