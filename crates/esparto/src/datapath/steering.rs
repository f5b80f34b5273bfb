//! Which worker an SA's inbound ESP reaches, and how an SPI is chosen for
//! a worker.
//!
//! Each inbound SA lives on one worker, so that its replay window needs no
//! lock; the kernel must therefore deliver every ESP-in-UDP datagram to the
//! worker holding its SA. The I/O layer steers datagrams among the sockets
//! of its reuseport group by a 32-bit key read from the UDP payload
//! ([`esparto_io::steer`]); what that key is belongs to ESP and is said
//! here, once: the SPI, where the ESP header has it, in datagrams at least
//! as long as that header ([`SPI_STEERING`]). RFC 3948 makes the rest fall
//! out of the same rule: a NAT keepalive (one byte, §2.3) is too short to
//! be steered, and IKE on the same port begins with the non-ESP marker,
//! four zero bytes where the SPI would be (§2.2), a key of zero, so both
//! reach the control socket. The worker is `spi % workers`; the SPI
//! allocator picks SPIs with [`spi_for_worker`] so that each lands on the
//! worker it is meant for, its other bits random.

use esparto_io::steer::{self, SteeringKey};
use esparto_wire::esp;

/// Inbound ESP-in-UDP is steered by its SPI (RFC 4303 §2.1): the first
/// field of the ESP header, in datagrams that hold the whole header.
pub const SPI_STEERING: SteeringKey = SteeringKey::new(esp::field::SPI.start as u32, esp::HEADER_LEN as u32);

/// The worker that holds inbound SA `spi` when there are `workers` workers.
pub fn spi_to_worker(spi: u32, workers: usize) -> usize {
    steer::worker_for_key(spi, workers)
}

/// An SPI that [`spi_to_worker`] maps to `worker`, built from `random` by
/// replacing its residue modulo `workers` (the other bits stay as random
/// as they came), and never a reserved one (below [`esp::MIN_SPI`]).
/// `None` if `worker >= workers`.
pub fn spi_for_worker(random: u32, worker: usize, workers: usize) -> Option<u32> {
    steer::key_for_worker(random, worker, workers, esp::MIN_SPI)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use esparto_wire::espinudp::{Datagram, Kind};

    /// The steering rule and RFC 3948's classification agree: what the
    /// kernel sends to a worker is ESP with that worker's SPI, and what it
    /// sends to the control socket is not ESP.
    #[test]
    fn steering_agrees_with_the_classification() {
        let workers = 3;
        let mut datagrams: Vec<Vec<u8>> = vec![vec![0xff], vec![0, 0, 0, 0, 1, 2, 3, 4, 5], vec![1, 2, 3]];
        for spi in [256u32, 257, 258, 0xdead_beef] {
            let mut d = spi.to_be_bytes().to_vec();
            d.extend_from_slice(&[0, 0, 0, 1, 0xaa]);
            datagrams.push(d);
        }
        for d in &datagrams {
            let to = steer::socket_index(&SPI_STEERING, d, workers);
            match Datagram::classify(d) {
                Ok(Kind::Esp(p)) => assert_eq!(to, spi_to_worker(p.spi(), workers), "{d:02x?}"),
                _ => assert_eq!(to, workers, "{d:02x?} goes to the control socket"),
            }
        }
    }

    #[test]
    fn allocated_spis_reach_their_worker_and_are_never_reserved() {
        for workers in 1..=5 {
            for worker in 0..workers {
                for r in [0, 1, 255, 256, 0x1234_5678, u32::MAX] {
                    let spi = spi_for_worker(r, worker, workers).unwrap();
                    assert!(!esp::is_reserved_spi(spi), "{spi}");
                    assert_eq!(spi_to_worker(spi, workers), worker);
                    let mut d = spi.to_be_bytes().to_vec();
                    d.extend_from_slice(&[0, 0, 0, 1]);
                    assert_eq!(steer::socket_index(&SPI_STEERING, &d, workers), worker);
                }
            }
        }
        assert_eq!(spi_for_worker(7, 2, 2), None);
    }
}
