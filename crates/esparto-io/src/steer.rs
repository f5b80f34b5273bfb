//! SPI steering: a classic BPF program that picks the socket of a
//! `SO_REUSEPORT` group from the ESP SPI.
//!
//! Every worker owns the inbound SAs steered to it, so their replay windows
//! need no lock (DESIGN.md, "Inbound"). The kernel chooses the socket of a
//! reuseport group for each datagram; with `SO_ATTACH_REUSEPORT_CBPF` a classic
//! BPF program makes that choice, and its return value is the *index* of the
//! socket in the group (the order in which the sockets were bound; a value past
//! the end falls back to the kernel's hash).
//!
//! The rule, implemented twice (here in Rust as [`steer_index`], and as the
//! cBPF program from [`steering_program`]) and tested to agree:
//!
//! - fewer than 8 payload bytes → the control socket (index `workers`). This
//!   covers the NAT keepalive, a single `0xFF` octet (RFC 3948 §2.3), and
//!   anything too short to be ESP (SPI + sequence number are 8 bytes,
//!   RFC 4303 §2);
//! - first four bytes zero → the control socket: RFC 3948 §2.2, "the Non-ESP
//!   Marker ... is 4 bytes of zero aligned with the SPI field of an ESP
//!   packet", i.e. IKE on port 4500;
//! - otherwise the first four bytes are the SPI (network byte order) and the
//!   socket is [`spi_to_worker`]`(spi, workers)` = `spi % workers`.
//!
//! The modulo rule works for any worker count; the SPI allocator picks SPIs
//! with [`spi_for_worker`], which keeps every bit above the residue random.
//!
//! **What the program sees.** Found by test (`tests/steer_netns.rs`) and in
//! the kernel source (`reuseport_select_sock` → `run_bpf_filter` pulls
//! `sizeof(struct udphdr)` before running the filter): for UDP the packet
//! offsets of a reuseport cBPF program are relative to the **UDP payload**,
//! and `len` is the payload length. `BPF_LD|BPF_ABS` loads are big-endian.
//!
//! **GRO caveat.** The program runs once per *skb*. A GSO super-packet that
//! stays whole (veth, loopback) or a GRO super-packet built by the receiving
//! NIC path carries many datagrams and is steered by the first one only; the
//! kernel's UDP GRO merges datagrams of the same 4-tuple without looking at
//! the payload, so datagrams of *different SAs from the same peer*, and
//! non-ESP datagrams behind ESP, can arrive at one worker. Our sender avoids
//! it for GSO (it never puts two SPIs in one `UDP_SEGMENT` send, see
//! [`crate::udp`]), but anyone can send a GSO train whose first datagram
//! carries an SPI and whose others carry the non-ESP marker, and the whole
//! train goes to that SPI's worker. So the worker takes every datagram of a
//! train for what its own bytes say ([`crate::esp`]): ESP is decrypted (an
//! SA that lives on another worker is counted as `unknown_spi`), a
//! keepalive is counted, IKE goes to the control thread through the
//! worker's bounded pool ([`crate::control`]), dropped and counted as
//! `control_queue_full` when the control thread is behind.

use std::io;
use std::os::fd::AsRawFd;

/// `SO_ATTACH_REUSEPORT_CBPF` from `<asm-generic/socket.h>`.
const SO_ATTACH_REUSEPORT_CBPF: libc::c_int = 51;

/// Shortest payload that can be ESP: SPI (4) + sequence number (4), RFC 4303 §2.
pub const MIN_ESP_LEN: usize = 8;

/// SPIs 1–255 are reserved by IANA and 0 is the non-ESP marker (RFC 4303 §2.1),
/// so allocated SPIs start here.
pub const MIN_SPI: u32 = 256;

/// Worker that owns inbound SPI `spi` when there are `workers` workers:
/// `spi % workers`. A worker count of 0 is treated as 1.
pub fn spi_to_worker(spi: u32, workers: usize) -> usize {
    let n = workers.clamp(1, u32::MAX as usize) as u32;
    (spi % n) as usize
}

/// Socket index in the reuseport group for a datagram with this UDP payload:
/// a worker index below `workers`, or `workers` itself for the control socket.
/// Mirrors the cBPF program exactly.
pub fn steer_index(payload: &[u8], workers: usize) -> usize {
    let workers = workers.clamp(1, u32::MAX as usize);
    match payload {
        [a, b, c, d, _, _, _, _, ..] => {
            let spi = u32::from_be_bytes([*a, *b, *c, *d]);
            if spi == 0 {
                workers
            } else {
                spi_to_worker(spi, workers)
            }
        }
        _ => workers,
    }
}

/// An SPI that [`spi_to_worker`] maps to `worker`, built from `random` by
/// replacing its residue modulo `workers`: all other information in `random`
/// is kept, so the SPI stays unpredictable. Never below [`MIN_SPI`]. Returns
/// `None` if `worker >= workers`.
pub fn spi_for_worker(random: u32, worker: usize, workers: usize) -> Option<u32> {
    let n = u32::try_from(workers).ok().filter(|n| *n > 0)?;
    let k = u32::try_from(worker).ok().filter(|k| *k < n)?;
    let base = random - random % n;
    let mut spi = match base.checked_add(k) {
        Some(s) => s,
        // base is the last multiple of n and base + k overflows: step down.
        None => base - n + k,
    };
    if spi < MIN_SPI {
        // Smallest spi + m·n ≥ MIN_SPI; cannot overflow (MIN_SPI + n fits).
        let m = (MIN_SPI - spi).div_ceil(n);
        spi += m * n;
    }
    Some(spi)
}

fn stmt(code: u32, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u32, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    }
}

/// The classic BPF steering program for a group of `workers` worker sockets
/// followed by one control socket (index `workers`).
pub fn steering_program(workers: usize) -> Vec<libc::sock_filter> {
    let n = workers.clamp(1, u32::MAX as usize) as u32;
    use libc::{
        BPF_A, BPF_ABS, BPF_ALU, BPF_JEQ, BPF_JGE, BPF_JMP, BPF_K, BPF_LD, BPF_LEN, BPF_MOD,
        BPF_RET, BPF_W,
    };
    vec![
        // 0: A = payload length
        stmt(BPF_LD | BPF_W | BPF_LEN, 0),
        // 1: if A >= 8 goto 2 else goto 6 (control)
        jump(BPF_JMP | BPF_JGE | BPF_K, MIN_ESP_LEN as u32, 0, 4),
        // 2: A = payload[0..4] (big-endian): SPI or non-ESP marker
        stmt(BPF_LD | BPF_W | BPF_ABS, 0),
        // 3: if A == 0 goto 6 (control: IKE) else goto 4
        jump(BPF_JMP | BPF_JEQ | BPF_K, 0, 2, 0),
        // 4: A = A % workers
        stmt(BPF_ALU | BPF_MOD | BPF_K, n),
        // 5: return A (worker index)
        stmt(BPF_RET | BPF_A, 0),
        // 6: return the control socket's index
        stmt(BPF_RET | BPF_K, n),
    ]
}

/// Attach the steering program to the reuseport group that `sock` belongs to
/// (any member will do; the program is per group).
pub fn attach_steering(sock: &impl AsRawFd, workers: usize) -> io::Result<()> {
    let mut prog = steering_program(workers);
    let fprog = libc::sock_fprog {
        len: prog.len() as libc::c_ushort,
        filter: prog.as_mut_ptr(),
    };
    // SAFETY: `fprog` points at `prog`, which outlives the call; the kernel
    // copies the program and validates it before use.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_ATTACH_REUSEPORT_CBPF,
            (&fprog as *const libc::sock_fprog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A minimal classic-BPF interpreter for the opcodes the steering program
    /// uses, with the kernel's semantics (out-of-bounds load returns 0).
    fn run_cbpf(prog: &[libc::sock_filter], pkt: &[u8]) -> u32 {
        let mut a: u32 = 0;
        let mut pc = 0usize;
        loop {
            let ins = prog[pc];
            pc += 1;
            let code = ins.code as u32;
            match code {
                c if c == libc::BPF_LD | libc::BPF_W | libc::BPF_LEN => a = pkt.len() as u32,
                c if c == libc::BPF_LD | libc::BPF_W | libc::BPF_ABS => {
                    let k = ins.k as usize;
                    match pkt.get(k..k + 4) {
                        Some(w) => a = u32::from_be_bytes([w[0], w[1], w[2], w[3]]),
                        None => return 0,
                    }
                }
                c if c == libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K => {
                    pc += if a >= ins.k { ins.jt } else { ins.jf } as usize
                }
                c if c == libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K => {
                    pc += if a == ins.k { ins.jt } else { ins.jf } as usize
                }
                c if c == libc::BPF_ALU | libc::BPF_MOD | libc::BPF_K => a %= ins.k,
                c if c == libc::BPF_RET | libc::BPF_A => return a,
                c if c == libc::BPF_RET | libc::BPF_K => return ins.k,
                other => panic!("opcode {other:#x} not modelled"),
            }
        }
    }

    struct XorShift(u64);
    impl XorShift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    #[test]
    fn program_agrees_with_rust_rule() {
        let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
        for workers in 1..=9 {
            let prog = steering_program(workers);
            for _ in 0..5000 {
                let len = (rng.next() % 24) as usize;
                let mut pkt: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
                if rng.next() % 8 == 0 && len >= 4 {
                    pkt[..4].fill(0); // non-ESP marker
                }
                assert_eq!(
                    run_cbpf(&prog, &pkt) as usize,
                    steer_index(&pkt, workers),
                    "workers={workers} pkt={pkt:02x?}"
                );
            }
        }
    }

    #[test]
    fn control_cases() {
        assert_eq!(steer_index(&[0xff], 4), 4, "NAT keepalive (RFC 3948 §2.3)");
        assert_eq!(
            steer_index(&[0, 0, 0, 0, 0x11, 0x22, 0x33, 0x44, 0x20], 4),
            4,
            "IKE"
        );
        assert_eq!(steer_index(&[0, 0, 0, 7], 4), 4, "too short for ESP");
        assert_eq!(steer_index(&[0, 0, 1, 3, 0, 0, 0, 1], 4), 3);
    }

    #[test]
    fn spi_for_worker_maps_back_and_keeps_high_bits() {
        let mut rng = XorShift(42);
        for workers in 1..=7 {
            for worker in 0..workers {
                for _ in 0..2000 {
                    let r = rng.next() as u32;
                    let spi = spi_for_worker(r, worker, workers).unwrap();
                    assert_eq!(spi_to_worker(spi, workers), worker);
                    assert!(spi >= MIN_SPI);
                    if (1024..=u32::MAX - 16).contains(&r) {
                        assert!(spi.abs_diff(r) < workers as u32, "only the residue changes");
                    }
                }
            }
            for r in [0, 1, 255, 256, u32::MAX, u32::MAX - 1] {
                for worker in 0..workers {
                    let spi = spi_for_worker(r, worker, workers).unwrap();
                    assert_eq!(spi_to_worker(spi, workers), worker, "r={r}");
                    assert!(spi >= MIN_SPI);
                }
            }
        }
        assert_eq!(spi_for_worker(5, 3, 3), None);
        assert_eq!(spi_for_worker(5, 0, 0), None);
    }
}
