//! Socket steering: a classic BPF program that picks the socket of a
//! `SO_REUSEPORT` group by a key each datagram carries.
//!
//! A datapath may keep state per worker that every datagram of one kind
//! must reach: the gateway's inbound SAs, whose replay windows then need no
//! lock, each live on one worker. The kernel chooses the socket of a
//! reuseport group for each datagram; with `SO_ATTACH_REUSEPORT_CBPF` a
//! classic BPF program makes that choice, and its return value is the
//! *index* of the socket in the group (the order in which the sockets were
//! bound; a value past the end falls back to the kernel's hash).
//!
//! **Whose knowledge.** This crate knows no protocol, so the program is
//! built from a [`SteeringKey`] the datapath gives it: where in the UDP
//! payload a 32-bit big-endian key lies, and how long a payload must be to
//! be steered by it. The program is the same for any protocol that numbers
//! its flows with such a key and keeps zero for "not mine". For ESP-in-UDP
//! the gateway passes the place of the SPI and the length of the ESP
//! header: a NAT keepalive (one byte) is too short, and IKE on the same
//! port begins with four zero bytes where the SPI would be (RFC 3948
//! §2.2), so both reach the control socket, and the SPI picks the worker
//! otherwise. The rule, implemented twice (here in Rust as
//! [`socket_index`], and as the cBPF program from [`steering_program`])
//! and tested to agree:
//!
//! - a payload shorter than the key's `min_len` → the control socket
//!   (index `workers`);
//! - a key of zero → the control socket;
//! - otherwise socket [`worker_for_key`]`(key, workers)` = `key % workers`.
//!
//! The modulo rule works for any worker count; whoever hands out keys (the
//! gateway's SPI allocator) picks them with [`key_for_worker`], which keeps
//! every bit above the residue random.
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
//! the payload, so datagrams with *different keys from the same peer*, and
//! datagrams for the control socket behind them, can arrive at one worker.
//! A sender avoids it for GSO by ending a run where the key changes
//! ([`crate::udp::UdpConfig::steering`]), but anyone can send a GSO train
//! whose first datagram carries a key and whose others do not, and the
//! whole train goes to that key's worker. So a datapath takes every
//! datagram of a train for what its own bytes say, and hands what belongs
//! to the control thread over through the worker's bounded pool
//! ([`crate::control`]), dropped and counted as `control_queue_full` when
//! the control thread is behind.

use std::io;
use std::os::fd::AsRawFd;

/// `SO_ATTACH_REUSEPORT_CBPF` from `<asm-generic/socket.h>`.
const SO_ATTACH_REUSEPORT_CBPF: libc::c_int = 51;

/// Length of the key: a 32-bit word.
const KEY_LEN: u32 = 4;

/// Where a datagram carries the key that picks its socket (see the module
/// essay).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SteeringKey {
    offset: u32,
    min_len: u32,
}

impl SteeringKey {
    /// The key is the 32-bit big-endian word at `offset` in the UDP
    /// payload; a payload shorter than `min_len` (and in any case than the
    /// key's end) goes to the control socket.
    pub const fn new(offset: u32, min_len: u32) -> Self {
        let end = offset.saturating_add(KEY_LEN);
        Self { offset, min_len: if min_len > end { min_len } else { end } }
    }

    /// Offset of the key in the UDP payload.
    pub const fn offset(&self) -> u32 {
        self.offset
    }

    /// Shortest payload steered by its key (at least the key's end).
    pub const fn min_len(&self) -> u32 {
        self.min_len
    }

    /// The key of `payload`, or `None` when it is too short to be steered
    /// by one.
    pub fn of(&self, payload: &[u8]) -> Option<u32> {
        if payload.len() < self.min_len as usize {
            return None;
        }
        // In bounds: `min_len` covers the key.
        let at = self.offset as usize;
        let b = payload.get(at..at + KEY_LEN as usize)?;
        Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
}

/// Worker that datagrams with key `key` reach when there are `workers`
/// workers: `key % workers`. A worker count of 0 is treated as 1.
pub fn worker_for_key(key: u32, workers: usize) -> usize {
    let n = workers.clamp(1, u32::MAX as usize) as u32;
    (key % n) as usize
}

/// Socket index in the reuseport group for a datagram with this UDP payload:
/// a worker index below `workers`, or `workers` itself for the control socket.
/// Mirrors the cBPF program exactly.
pub fn socket_index(steering: &SteeringKey, payload: &[u8], workers: usize) -> usize {
    let workers = workers.clamp(1, u32::MAX as usize);
    match steering.of(payload) {
        Some(key) if key != 0 => worker_for_key(key, workers),
        _ => workers,
    }
}

/// A key that [`worker_for_key`] maps to `worker`, built from `random` by
/// replacing its residue modulo `workers`: all other information in `random`
/// is kept, so the key stays unpredictable. Never below `min_key` (nor 0,
/// which means "the control socket"). Returns `None` if `worker >= workers`,
/// or if no key of `worker` lies between `min_key` and `u32::MAX`.
pub fn key_for_worker(random: u32, worker: usize, workers: usize, min_key: u32) -> Option<u32> {
    let n = u32::try_from(workers).ok().filter(|n| *n > 0)?;
    let k = u32::try_from(worker).ok().filter(|k| *k < n)?;
    let min_key = min_key.max(1);
    let base = random - random % n;
    let mut key = match base.checked_add(k) {
        Some(s) => s,
        // base is the last multiple of n and base + k overflows: step down.
        None => base - n + k,
    };
    if key < min_key {
        // Smallest key + m·n ≥ min_key.
        let m = (min_key - key).div_ceil(n);
        key = key.checked_add(m.checked_mul(n)?)?;
    }
    Some(key)
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
pub fn steering_program(steering: &SteeringKey, workers: usize) -> Vec<libc::sock_filter> {
    let n = workers.clamp(1, u32::MAX as usize) as u32;
    use libc::{BPF_A, BPF_ABS, BPF_ALU, BPF_JEQ, BPF_JGE, BPF_JMP, BPF_K, BPF_LD, BPF_LEN, BPF_MOD, BPF_RET, BPF_W};
    vec![
        // 0: A = payload length
        stmt(BPF_LD | BPF_W | BPF_LEN, 0),
        // 1: if A >= min_len goto 2 else goto 6 (control)
        jump(BPF_JMP | BPF_JGE | BPF_K, steering.min_len, 0, 4),
        // 2: A = the key (big-endian; in bounds, as min_len covers it)
        stmt(BPF_LD | BPF_W | BPF_ABS, steering.offset),
        // 3: if A == 0 goto 6 (control) else goto 4
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
pub fn attach_steering(sock: &impl AsRawFd, steering: &SteeringKey, workers: usize) -> io::Result<()> {
    let mut prog = steering_program(steering, workers);
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

    /// Keys at the start of the payload (as ESP's SPI), further in, and
    /// one whose `min_len` is below its end.
    const KEYS: [SteeringKey; 3] = [SteeringKey::new(0, 8), SteeringKey::new(6, 12), SteeringKey::new(4, 2)];

    #[test]
    fn program_agrees_with_rust_rule() {
        let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
        for key in &KEYS {
            for workers in 1..=9 {
                let prog = steering_program(key, workers);
                for _ in 0..5000 {
                    let len = (rng.next() % 24) as usize;
                    let mut pkt: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
                    let at = key.offset() as usize;
                    if rng.next() % 8 == 0 && len >= at + 4 {
                        pkt[at..at + 4].fill(0); // a zero key
                    }
                    assert_eq!(
                        run_cbpf(&prog, &pkt) as usize,
                        socket_index(key, &pkt, workers),
                        "key={key:?} workers={workers} pkt={pkt:02x?}"
                    );
                }
            }
        }
    }

    #[test]
    fn control_cases() {
        let key = SteeringKey::new(0, 8);
        assert_eq!(socket_index(&key, &[0xff], 4), 4, "too short");
        assert_eq!(socket_index(&key, &[0, 0, 0, 0, 0x11, 0x22, 0x33, 0x44, 0x20], 4), 4, "zero key");
        assert_eq!(socket_index(&key, &[0, 0, 0, 7], 4), 4, "shorter than min_len");
        assert_eq!(socket_index(&key, &[0, 0, 1, 3, 0, 0, 0, 1], 4), 3);
        assert_eq!(SteeringKey::new(4, 2).min_len(), 8, "min_len covers the key");
        assert_eq!(socket_index(&SteeringKey::new(2, 0), &[9, 9, 0, 0, 0, 5], 4), 1);
    }

    #[test]
    fn key_for_worker_maps_back_and_keeps_high_bits() {
        let mut rng = XorShift(42);
        for min_key in [1, 256, 70_000] {
            for workers in 1..=7 {
                for worker in 0..workers {
                    for _ in 0..2000 {
                        let r = rng.next() as u32;
                        let key = key_for_worker(r, worker, workers, min_key).unwrap();
                        assert_eq!(worker_for_key(key, workers), worker);
                        assert!(key >= min_key);
                        if (min_key + 1024..=u32::MAX - 16).contains(&r) {
                            assert!(key.abs_diff(r) < workers as u32, "only the residue changes");
                        }
                    }
                }
                for r in [0, 1, 255, 256, u32::MAX, u32::MAX - 1] {
                    for worker in 0..workers {
                        let key = key_for_worker(r, worker, workers, min_key).unwrap();
                        assert_eq!(worker_for_key(key, workers), worker, "r={r}");
                        assert!(key >= min_key);
                    }
                }
            }
        }
        assert_eq!(key_for_worker(5, 3, 3, 256), None);
        assert_eq!(key_for_worker(5, 0, 0, 256), None);
        assert_eq!(key_for_worker(0, 0, 1, 0), Some(1), "never the zero key");
        assert_eq!(key_for_worker(7, 1, 3, u32::MAX), None, "no key of worker 1 at u32::MAX");
    }
}
