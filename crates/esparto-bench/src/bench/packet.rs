//! Synthetic inner packets for the benchmarks.

use esparto_wire::checksum;
#[cfg(test)]
use esparto_wire::ipv4;

/// An IPv4/UDP packet of exactly `len` bytes (at least 28) from
/// 10.1.0.1:1000 to 10.2.0.1:2000, with a valid IPv4 header checksum
/// (and no UDP checksum, which IPv4 allows).
pub fn udp_packet(len: usize) -> Vec<u8> {
    let len = len.max(28);
    let mut p = vec![0u8; len];
    for (i, b) in p[28..].iter_mut().enumerate() {
        *b = i as u8;
    }
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
    p[6] = 0x40; // DF
    p[8] = 64;
    p[9] = 17;
    p[12..16].copy_from_slice(&[10, 1, 0, 1]);
    p[16..20].copy_from_slice(&[10, 2, 0, 1]);
    let hsum = !checksum::data(&p[..20]);
    p[10..12].copy_from_slice(&hsum.to_be_bytes());
    p[20..22].copy_from_slice(&1000u16.to_be_bytes());
    p[22..24].copy_from_slice(&2000u16.to_be_bytes());
    p[24..26].copy_from_slice(&((len - 20) as u16).to_be_bytes());
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packets_parse_with_the_right_length_and_checksum() {
        for len in [28, 64, 1420] {
            let p = udp_packet(len);
            assert_eq!(p.len(), len);
            let ip = ipv4::Packet::new_checked(&p[..]).unwrap();
            assert!(ip.verify_checksum());
            assert_eq!(usize::from(ip.total_len()), len);
        }
    }
}
