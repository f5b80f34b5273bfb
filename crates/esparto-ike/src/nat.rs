//! NAT detection (RFC 7296 §2.23).
//!
//! Each side sends, in IKE_SA_INIT, NAT_DETECTION_SOURCE_IP =
//! SHA-1(SPIi | SPIr | source IP | source port) of the address it sends
//! from and NAT_DETECTION_DESTINATION_IP = SHA-1(SPIi | SPIr | dest IP |
//! dest port) of the address it sends to (SPIr is zero in the request).
//! The receiver hashes the addresses the datagram actually carried: if no
//! received source hash matches, the *peer* is behind a NAT; if the
//! destination hash does not match, *we* are. Either way both sides
//! switch IKE to UDP port 4500 and ESP to UDP encapsulation (RFC 3948),
//! and the side behind the NAT sends keepalives.
//!
//! Forcing encapsulation (`encap = yes`) is done as strongSwan does it:
//! the source hash we send is computed over a random address, so the peer
//! believes we are behind a NAT.
//!
//! SHA-1 here is a fingerprint fixed by the RFC, not a security primitive;
//! `esparto-crypto` does not expose a bare hash, so this module calls
//! aws-lc-rs's SHA-1 (`SHA1_FOR_LEGACY_USE_ONLY`) directly.

use aws_lc_rs::digest;
use core::net::{IpAddr, SocketAddr};
use esparto_crypto::Rng;

/// Length of a NAT detection hash (SHA-1).
pub const NAT_HASH_LEN: usize = 20;

/// SHA-1(SPIi | SPIr | IP | port).
pub fn nat_hash(spi_i: u64, spi_r: u64, addr: SocketAddr) -> [u8; NAT_HASH_LEN] {
    let mut ctx = digest::Context::new(&digest::SHA1_FOR_LEGACY_USE_ONLY);
    ctx.update(&spi_i.to_be_bytes());
    ctx.update(&spi_r.to_be_bytes());
    match addr.ip() {
        IpAddr::V4(a) => ctx.update(&a.octets()),
        IpAddr::V6(a) => ctx.update(&a.octets()),
    }
    ctx.update(&addr.port().to_be_bytes());
    let mut out = [0u8; NAT_HASH_LEN];
    out.copy_from_slice(ctx.finish().as_ref());
    out
}

/// A source hash that matches no real address, to force encapsulation.
pub fn fake_nat_hash(rng: &mut dyn Rng) -> [u8; NAT_HASH_LEN] {
    let mut out = [0u8; NAT_HASH_LEN];
    rng.fill_public(&mut out);
    out
}

/// What NAT detection found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NatState {
    /// Our address was translated (we must send keepalives).
    pub local_behind_nat: bool,
    /// The peer's address was translated (or the peer fakes it to force
    /// encapsulation).
    pub remote_behind_nat: bool,
    /// Both sides sent NAT detection notifies (NAT-T is supported).
    pub supported: bool,
}

impl NatState {
    /// Is there a NAT on the path, so IKE floats to 4500 and ESP is
    /// UDP-encapsulated?
    pub fn any(&self) -> bool {
        self.supported && (self.local_behind_nat || self.remote_behind_nat)
    }

    /// Evaluate the received notifies of an IKE_SA_INIT message.
    /// `source_hashes` are all NAT_DETECTION_SOURCE_IP data received (there
    /// may be several, one per sender address), `dest_hash` the
    /// NAT_DETECTION_DESTINATION_IP data; `from` / `to` the addresses the
    /// datagram carried.
    pub fn detect(
        spi_i: u64,
        spi_r: u64,
        source_hashes: &[&[u8]],
        dest_hash: Option<&[u8]>,
        from: SocketAddr,
        to: SocketAddr,
    ) -> Self {
        let Some(dest_hash) = dest_hash else {
            return NatState::default();
        };
        if source_hashes.is_empty() {
            return NatState::default();
        }
        let src = nat_hash(spi_i, spi_r, from);
        let dst = nat_hash(spi_i, spi_r, to);
        NatState {
            remote_behind_nat: !source_hashes.contains(&src.as_slice()),
            local_behind_nat: dest_hash != dst.as_slice(),
            supported: true,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn sha1_of_known_input() {
        // SHA-1 of 8+8 zero octets, 0.0.0.0 and port 0 (22 zero octets):
        // cross-checked with `head -c 22 /dev/zero | sha1sum`.
        let h = nat_hash(0, 0, sa("0.0.0.0:0"));
        assert_eq!(
            h,
            [
                0x60, 0xab, 0x0d, 0xd2, 0xef, 0x31, 0xcf, 0xb9, 0x6d, 0x52, 0xfa, 0x0a, 0x42, 0x9c,
                0x38, 0x03, 0x41, 0x7d, 0xb5, 0xc2
            ]
        );
    }

    #[test]
    fn detects_which_side_is_translated() {
        let (i, r) = (0x1122, 0);
        let peer = sa("10.0.0.1:500");
        let me = sa("192.0.2.2:500");
        let src = nat_hash(i, r, peer);
        let dst = nat_hash(i, r, me);
        let n = NatState::detect(i, r, &[&src], Some(&dst), peer, me);
        assert!(!n.any() && n.supported);
        // The peer's packets arrive from its NAT's public address.
        let n = NatState::detect(i, r, &[&src], Some(&dst), sa("203.0.113.9:40000"), me);
        assert!(n.remote_behind_nat && !n.local_behind_nat && n.any());
        // We are reached through a port forward.
        let n = NatState::detect(i, r, &[&src], Some(&dst), peer, sa("10.9.9.9:500"));
        assert!(n.local_behind_nat && !n.remote_behind_nat);
        // No notifies: no NAT-T.
        let n = NatState::detect(i, r, &[], None, peer, me);
        assert!(!n.supported && !n.any());
    }
}
