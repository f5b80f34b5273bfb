//! Outbound steering: which TUN queue (hence which worker) a packet goes to.
//!
//! A multi-queue TUN device without a steering program picks the queue by
//! *flow learning* (`tun_automq_select_queue`): a flow is sent to the queue
//! its reverse traffic was last written on. For a gateway that is the wrong
//! rule. Inbound ESP of one SA is decrypted by the one worker its SPI
//! steers to, which writes every flow's reverse traffic on its own queue —
//! so with a single SA pair (a peer without per-CPU SAs) every outbound flow
//! would be learned onto that one worker, and the other cores would idle.
//!
//! The kernel lets a program decide instead (`TUNSETSTEERINGEBPF`): the
//! queue is the program's return value modulo the number of queues. Ours is
//! the software RSS the design calls for: a hash of the addresses, the
//! protocol and, for unfragmented TCP and UDP, the ports. One flow always
//! lands on one queue (never reordered), different flows spread.
//!
//! The program is eBPF of the socket-filter type, hand-assembled below (it
//! is 50-odd instructions; no compiler or library needed), using the legacy
//! packet loads `LD_ABS`/`LD_IND`, which read big-endian fields relative to
//! the IP header (a TUN device has no link layer) and end the program with
//! 0 if the packet is too short. [`flow_queue`] is the same function in
//! Rust, for tests and for anyone who wants to predict the kernel's choice.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// The multipliers of murmur3's 32-bit finaliser (`fmix32`). A full
/// avalanche matters: the kernel keeps the low bits (`% queues`), and a
/// single multiply leaves those depending on the input's low bits only —
/// which for TCP never vary in the source port (Linux `connect()` picks
/// even ephemeral ports).
const FMIX1: u32 = 0x85eb_ca6b;
const FMIX2: u32 = 0xc2b2_ae35;

/// murmur3's `fmix32`.
fn fmix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(FMIX1);
    h ^= h >> 13;
    h = h.wrapping_mul(FMIX2);
    h ^ (h >> 16)
}

/// The hash the steering program computes for an IP packet (before the
/// kernel reduces it to `hash as u16 % queues`).
pub fn flow_hash(p: &[u8]) -> u32 {
    let be32 = |o: usize| p.get(o..o + 4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    let be16 = |o: usize| p.get(o..o + 2).map(|b| u32::from(u16::from_be_bytes([b[0], b[1]])));
    // A load beyond the packet ends the eBPF program with 0.
    let h = (|| -> Option<u32> {
        let first = *p.first()?;
        let mut h;
        match first >> 4 {
            4 => {
                let ihl = usize::from(first & 0xf) * 4;
                h = be32(12)? ^ be32(16)?;
                let proto = u32::from(*p.get(9)?);
                h ^= proto;
                let frag = be16(6)? & 0x3fff;
                if frag == 0 && (proto == 6 || proto == 17) {
                    h ^= be32(ihl)?;
                }
            }
            6 => {
                h = 0;
                for o in (8..40).step_by(4) {
                    h ^= be32(o)?;
                }
                let nh = u32::from(*p.get(6)?);
                h ^= nh;
                if nh == 6 || nh == 17 {
                    h ^= be32(40)?;
                }
            }
            _ => return Some(0),
        }
        Some(fmix32(h))
    })();
    h.unwrap_or(0)
}

/// The queue the kernel picks with our program attached.
pub fn flow_queue(p: &[u8], queues: usize) -> usize {
    usize::from(flow_hash(p) as u16) % queues.max(1)
}

/// One eBPF instruction (`struct bpf_insn`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct Insn {
    code: u8,
    regs: u8,
    off: i16,
    imm: i32,
}

// Opcode pieces (linux/bpf_common.h, linux/bpf.h).
const LD: u8 = 0x00;
const ALU: u8 = 0x04;
const JMP: u8 = 0x05;
const ALU64: u8 = 0x07;
const W: u8 = 0x00;
const H: u8 = 0x08;
const B: u8 = 0x10;
const ABS: u8 = 0x20;
const IND: u8 = 0x40;
const K: u8 = 0x00;
const X: u8 = 0x08;
const MUL: u8 = 0x20;
const AND: u8 = 0x50;
const LSH: u8 = 0x60;
const RSH: u8 = 0x70;
const XOR: u8 = 0xa0;
const MOV: u8 = 0xb0;
const JA: u8 = 0x00;
const JEQ: u8 = 0x10;
const JNE: u8 = 0x50;
const EXIT: u8 = 0x90;

/// A tiny assembler with forward labels.
struct Asm {
    prog: Vec<Insn>,
    fixups: Vec<(usize, usize)>,
    labels: Vec<Option<usize>>,
}

impl Asm {
    fn new() -> Self {
        Self { prog: Vec::new(), fixups: Vec::new(), labels: Vec::new() }
    }
    fn label(&mut self) -> usize {
        self.labels.push(None);
        self.labels.len() - 1
    }
    fn bind(&mut self, l: usize) {
        self.labels[l] = Some(self.prog.len());
    }
    fn op(&mut self, code: u8, dst: u8, src: u8, off: i16, imm: i32) {
        self.prog.push(Insn { code, regs: (src << 4) | dst, off, imm });
    }
    /// `dst op= imm` on 32 bits.
    fn alu(&mut self, op: u8, dst: u8, imm: i32) {
        self.op(ALU | op | K, dst, 0, 0, imm);
    }
    /// `dst op= src` on 32 bits.
    fn alu_x(&mut self, op: u8, dst: u8, src: u8) {
        self.op(ALU | op | X, dst, src, 0, 0);
    }
    /// r0 = big-endian load at packet offset `off`.
    fn ld_abs(&mut self, size: u8, off: i32) {
        self.op(LD | size | ABS, 0, 0, 0, off);
    }
    /// r0 = big-endian load at packet offset `src + off`.
    fn ld_ind(&mut self, size: u8, src: u8, off: i32) {
        self.op(LD | size | IND, 0, src, 0, off);
    }
    fn jmp_if(&mut self, op: u8, dst: u8, imm: i32, to: usize) {
        self.fixups.push((self.prog.len(), to));
        self.op(JMP | op | K, dst, 0, 0, imm);
    }
    fn goto(&mut self, to: usize) {
        self.fixups.push((self.prog.len(), to));
        self.op(JMP | JA, 0, 0, 0, 0);
    }
    fn exit(&mut self) {
        self.op(JMP | EXIT, 0, 0, 0, 0);
    }
    fn finish(mut self) -> Vec<Insn> {
        for (at, l) in self.fixups {
            // Labels are all bound by construction; offsets are small.
            let target = self.labels[l].unwrap_or(at + 1);
            self.prog[at].off = (target as i64 - at as i64 - 1) as i16;
        }
        self.prog
    }
}

/// The steering program (see the module docs; mirrors [`flow_hash`]).
pub(crate) fn program() -> Vec<Insn> {
    const R0: u8 = 0;
    const R1: u8 = 1;
    const R6: u8 = 6; // LD_ABS/LD_IND need the context in r6
    const R7: u8 = 7; // the hash
    const R8: u8 = 8; // scratch that survives packet loads
    const R9: u8 = 9; // IPv4 header length
    let mut a = Asm::new();
    let (v4, v6, ports4, ports6, mix) = (a.label(), a.label(), a.label(), a.label(), a.label());
    a.op(ALU64 | MOV | X, R6, R1, 0, 0);
    a.ld_abs(B, 0);
    a.alu_x(MOV, R9, R0);
    a.alu_x(MOV, R8, R0);
    a.alu(RSH, R8, 4);
    a.jmp_if(JEQ, R8, 4, v4);
    a.jmp_if(JEQ, R8, 6, v6);
    a.alu(MOV, R0, 0);
    a.exit();

    a.bind(v4);
    a.alu(AND, R9, 0xf);
    a.alu(LSH, R9, 2);
    a.ld_abs(W, 12);
    a.alu_x(MOV, R7, R0);
    a.ld_abs(W, 16);
    a.alu_x(XOR, R7, R0);
    a.ld_abs(B, 9);
    a.alu_x(XOR, R7, R0);
    a.alu_x(MOV, R8, R0);
    a.ld_abs(H, 6);
    a.alu(AND, R0, 0x3fff);
    a.jmp_if(JNE, R0, 0, mix);
    a.jmp_if(JEQ, R8, 6, ports4);
    a.jmp_if(JEQ, R8, 17, ports4);
    a.goto(mix);
    a.bind(ports4);
    a.ld_ind(W, R9, 0);
    a.alu_x(XOR, R7, R0);
    a.goto(mix);

    a.bind(v6);
    a.alu(MOV, R7, 0);
    for off in (8..40).step_by(4) {
        a.ld_abs(W, off);
        a.alu_x(XOR, R7, R0);
    }
    a.ld_abs(B, 6);
    a.alu_x(XOR, R7, R0);
    a.jmp_if(JEQ, R0, 6, ports6);
    a.jmp_if(JEQ, R0, 17, ports6);
    a.goto(mix);
    a.bind(ports6);
    a.ld_abs(W, 40);
    a.alu_x(XOR, R7, R0);

    a.bind(mix);
    // fmix32(r7), into r0.
    a.alu_x(MOV, R0, R7);
    a.alu(RSH, R0, 16);
    a.alu_x(XOR, R7, R0);
    a.alu(MUL, R7, FMIX1 as i32);
    a.alu_x(MOV, R0, R7);
    a.alu(RSH, R0, 13);
    a.alu_x(XOR, R7, R0);
    a.alu(MUL, R7, FMIX2 as i32);
    a.alu_x(MOV, R0, R7);
    a.alu(RSH, R0, 16);
    a.alu_x(XOR, R0, R7);
    a.exit();
    a.finish()
}

/// `_IOR('T', 224, int)`.
const TUNSETSTEERINGEBPF: libc::c_ulong = 0x8004_54e0;
const BPF_PROG_LOAD: libc::c_int = 5;
const BPF_PROG_TYPE_SOCKET_FILTER: u32 = 1;

/// Loads the program and attaches it to the TUN device behind `queue_fd`
/// (any queue: the program belongs to the device).
pub(crate) fn attach(queue_fd: RawFd) -> io::Result<()> {
    let insns = program();
    let license = c"Apache-2.0 OR MIT";
    let mut log = vec![0u8; 16 * 1024];
    // `union bpf_attr` for BPF_PROG_LOAD, laid out by hand (linux/bpf.h):
    // prog_type@0 insn_cnt@4 insns@8 license@16 log_level@24 log_size@28
    // log_buf@32 kern_version@40 prog_flags@44 prog_name@48.
    let mut attr = [0u8; 128];
    attr[0..4].copy_from_slice(&BPF_PROG_TYPE_SOCKET_FILTER.to_ne_bytes());
    attr[4..8].copy_from_slice(&(insns.len() as u32).to_ne_bytes());
    attr[8..16].copy_from_slice(&(insns.as_ptr() as u64).to_ne_bytes());
    attr[16..24].copy_from_slice(&(license.as_ptr() as u64).to_ne_bytes());
    attr[24..28].copy_from_slice(&1u32.to_ne_bytes());
    attr[28..32].copy_from_slice(&(log.len() as u32).to_ne_bytes());
    attr[32..40].copy_from_slice(&(log.as_mut_ptr() as u64).to_ne_bytes());
    attr[48..48 + 12].copy_from_slice(b"esparto_tun\0");
    // SAFETY: `attr` is a valid bpf_attr image whose pointers (insns,
    // license, log) stay alive and unaliased for the duration of the call;
    // the size passed is the buffer's, and its unused tail is zero.
    let fd = unsafe { libc::syscall(libc::SYS_bpf, BPF_PROG_LOAD, attr.as_mut_ptr(), attr.len()) };
    if fd < 0 {
        let e = io::Error::last_os_error();
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        let msg = String::from_utf8_lossy(&log[..end]);
        return Err(io::Error::new(e.kind(), format!("loading the TUN steering program: {e}: {}", msg.trim())));
    }
    // SAFETY: the syscall returned a new file descriptor that nothing else owns.
    let prog = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
    let raw: libc::c_int = prog.as_raw_fd();
    // SAFETY: TUNSETSTEERINGEBPF reads one int (the program fd) through the
    // pointer, which points at a live local.
    let rc = unsafe { libc::ioctl(queue_fd, TUNSETSTEERINGEBPF, &raw as *const libc::c_int) };
    if rc < 0 {
        return Err(io::Error::new(
            io::Error::last_os_error().kind(),
            format!("TUNSETSTEERINGEBPF: {}", io::Error::last_os_error()),
        ));
    }
    // The device holds its own reference to the program; ours closes here.
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(src: [u8; 4], dst: [u8; 4], proto: u8, sport: u16, dport: u16, frag: u16) -> Vec<u8> {
        let mut p = vec![0u8; 40];
        p[0] = 0x45;
        p[6..8].copy_from_slice(&frag.to_be_bytes());
        p[9] = proto;
        p[12..16].copy_from_slice(&src);
        p[16..20].copy_from_slice(&dst);
        p[20..22].copy_from_slice(&sport.to_be_bytes());
        p[22..24].copy_from_slice(&dport.to_be_bytes());
        p
    }

    #[test]
    fn one_flow_one_queue_and_flows_spread() {
        let a = v4([10, 1, 0, 10], [10, 2, 0, 10], 6, 40000, 5201, 0x4000);
        assert_eq!(flow_hash(&a), flow_hash(&a.clone()));
        let mut seen = [0usize; 4];
        for port in 0..400u16 {
            seen[flow_queue(&v4([10, 1, 0, 10], [10, 2, 0, 10], 17, 1000 + port, 53, 0), 4)] += 1;
        }
        assert!(seen.iter().all(|&n| n > 60), "400 flows over 4 queues: {seen:?}");
    }

    #[test]
    fn even_source_ports_still_spread() {
        // Linux connect() picks even ephemeral ports: the low bit is constant.
        let mut seen = [0usize; 2];
        for i in 0..64u16 {
            seen[flow_queue(&v4([10, 1, 0, 10], [10, 2, 0, 10], 6, 40000 + 2 * i, 5201, 0x4000), 2)] += 1;
        }
        assert!(seen.iter().all(|&n| n > 16), "{seen:?}");
    }

    #[test]
    fn fragments_ignore_ports() {
        let a = v4([10, 1, 0, 10], [10, 2, 0, 10], 17, 1, 2, 0x2000); // MF set
        let b = v4([10, 1, 0, 10], [10, 2, 0, 10], 17, 3, 4, 0x0010); // non-first fragment
        assert_eq!(flow_hash(&a), flow_hash(&b));
        assert_ne!(flow_hash(&a), flow_hash(&v4([10, 1, 0, 10], [10, 2, 0, 10], 17, 1, 2, 0)));
    }

    #[test]
    fn short_and_odd_packets() {
        assert_eq!(flow_hash(&[]), 0);
        assert_eq!(flow_hash(&[0x45, 0, 0]), 0);
        assert_eq!(flow_hash(&[0x10; 60]), 0);
    }

    #[test]
    fn program_is_well_formed() {
        let p = program();
        assert!(p.len() < 100);
        assert_eq!(p.last().map(|i| i.code), Some(JMP | EXIT));
        // Every jump lands inside the program.
        for (i, ins) in p.iter().enumerate() {
            if ins.code & 0x07 == JMP && ins.code != JMP | EXIT {
                let t = i as i64 + 1 + i64::from(ins.off);
                assert!((0..p.len() as i64).contains(&t), "jump at {i} to {t}");
            }
        }
    }
}
