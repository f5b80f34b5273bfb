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
//! queue is the program's return value (as a `u16`) modulo the number of
//! queues. Ours has two parts:
//!
//! 1. **A flow hash** — addresses, protocol and, for unfragmented TCP and
//!    UDP, the ports, through murmur3's finaliser ([`flow_hash`]).
//! 2. **A flow table** ([`Steering::FlowTable`], the default): an LRU hash
//!    map from that hash to a queue. A flow's first packet takes the next
//!    queue in turn (a shared ticket counter, `atomic fetch-and-add`), and
//!    every later packet of the flow finds its entry there. So one flow
//!    always lands on one queue (never reordered), and *n* flows that start
//!    one after another are spread exactly evenly — where a bare hash is at
//!    the mercy of chance: four flows over two queues land 2–2 only 6 times
//!    in 16, 4–0 twice (`bench tunnel` runs with 4 flows measured 270 and
//!    278 kpps at 64 bytes when the hash split them 2–2, 220–254 kpps when
//!    it did not). A site-to-site tunnel often carries a few big flows
//!    (backups, replication), which is exactly where chance hurts. The
//!    table holds [`FLOW_TABLE_ENTRIES`] flows; the least recently used
//!    entry makes room for a new flow, and an evicted flow that comes back
//!    simply takes a new turn (a flow idle long enough to be evicted has no
//!    packet left in any queue to be reordered with). Two flows whose hashes
//!    collide share an entry, hence a queue.
//!
//! Without the table ([`Steering::FlowHash`], or if the kernel refuses the
//! maps) the hash alone picks the queue, `hash as u16 % queues`:
//! [`flow_queue`] predicts it.
//!
//! The program is eBPF of the socket-filter type, hand-assembled below (80-odd
//! instructions; no compiler or library needed), using the legacy packet
//! loads `LD_ABS`/`LD_IND`, which read big-endian fields relative to the IP
//! header (a TUN device has no link layer) and end the program with 0 if
//! the packet is too short. The table part runs after the last packet load
//! (helper calls clobber the registers those loads use).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use esparto_wire::ip::proto;
use esparto_wire::{ipv4, ipv6, udp};

/// What the program loads, by packet offset (the TUN device has no link
/// layer: offset 0 is the IP header): the version nibble, then IPv4's
/// addresses, protocol, flags and fragment offset, or IPv6's addresses and
/// next header, and the ports (TCP and UDP both open with them).
const VERSION_AT: usize = ipv4::field::VER_IHL;
const V4_SRC_AT: usize = ipv4::field::SRC.start;
const V4_DST_AT: usize = ipv4::field::DST.start;
const V4_PROTO_AT: usize = ipv4::field::PROTOCOL;
const V4_FRAG_AT: usize = ipv4::field::FLG_OFF;
/// More Fragments and the offset: set on any fragment.
const V4_FRAGMENT: u16 = ipv4::flags::MF | ipv4::flags::OFFSET_MASK;
const V6_ADDRS: core::ops::Range<usize> = ipv6::field::SRC.start..ipv6::field::DST.end;
const V6_NEXT_AT: usize = ipv6::field::NXT_HDR;
const V6_L4_AT: usize = ipv6::HEADER_LEN;
const PORTS_AT: usize = udp::field::SRC_PORT;

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
        let first = *p.get(VERSION_AT)?;
        let ported = |proto: u32| proto == u32::from(proto::TCP) || proto == u32::from(proto::UDP);
        let mut h;
        match first >> 4 {
            4 => {
                let ihl = usize::from(first & 0xf) * 4;
                h = be32(V4_SRC_AT)? ^ be32(V4_DST_AT)?;
                let proto = u32::from(*p.get(V4_PROTO_AT)?);
                h ^= proto;
                let frag = be16(V4_FRAG_AT)? & u32::from(V4_FRAGMENT);
                if frag == 0 && ported(proto) {
                    h ^= be32(ihl + PORTS_AT)?;
                }
            }
            6 => {
                h = 0;
                for o in V6_ADDRS.step_by(4) {
                    h ^= be32(o)?;
                }
                let nh = u32::from(*p.get(V6_NEXT_AT)?);
                h ^= nh;
                if ported(nh) {
                    h ^= be32(V6_L4_AT + PORTS_AT)?;
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
const LDX: u8 = 0x01;
const ST: u8 = 0x02;
const STX: u8 = 0x03;
const ALU: u8 = 0x04;
const JMP: u8 = 0x05;
const ALU64: u8 = 0x07;
const W: u8 = 0x00;
const H: u8 = 0x08;
const B: u8 = 0x10;
const DW: u8 = 0x18;
const IMM: u8 = 0x00;
const ABS: u8 = 0x20;
const IND: u8 = 0x40;
const MEM: u8 = 0x60;
const ATOMIC: u8 = 0xc0;
const K: u8 = 0x00;
const X: u8 = 0x08;
const ADD: u8 = 0x00;
const MUL: u8 = 0x20;
const AND: u8 = 0x50;
const LSH: u8 = 0x60;
const RSH: u8 = 0x70;
const XOR: u8 = 0xa0;
const MOV: u8 = 0xb0;
const JA: u8 = 0x00;
const JEQ: u8 = 0x10;
const JNE: u8 = 0x50;
const CALL: u8 = 0x80;
const EXIT: u8 = 0x90;
/// `imm` of an atomic add that returns the old value in `src`.
const FETCH_ADD: i32 = 0x01;
/// `src` of a 64-bit immediate load that names a map by its fd.
const PSEUDO_MAP_FD: u8 = 1;
/// Helper numbers (linux/bpf.h, `enum bpf_func_id`).
const MAP_LOOKUP_ELEM: i32 = 1;
const MAP_UPDATE_ELEM: i32 = 2;
/// `flags` of `bpf_map_update_elem`: only if the key is absent.
const BPF_NOEXIST: i32 = 1;

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
    /// `dst = src` on 64 bits (pointers).
    fn mov64(&mut self, dst: u8, src: u8) {
        self.op(ALU64 | MOV | X, dst, src, 0, 0);
    }
    /// `dst = imm` on 64 bits.
    fn mov64_imm(&mut self, dst: u8, imm: i32) {
        self.op(ALU64 | MOV | K, dst, 0, 0, imm);
    }
    /// `dst += imm` on 64 bits.
    fn add64(&mut self, dst: u8, imm: i32) {
        self.op(ALU64 | ADD | K, dst, 0, 0, imm);
    }
    /// `*(u32 *)(dst + off) = src`.
    fn stx_w(&mut self, dst: u8, off: i16, src: u8) {
        self.op(STX | MEM | W, dst, src, off, 0);
    }
    /// `*(u32 *)(dst + off) = imm`.
    fn st_w(&mut self, dst: u8, off: i16, imm: i32) {
        self.op(ST | MEM | W, dst, 0, off, imm);
    }
    /// `dst = *(u32 *)(src + off)`.
    fn ldx_w(&mut self, dst: u8, src: u8, off: i16) {
        self.op(LDX | MEM | W, dst, src, off, 0);
    }
    /// `src = atomic_fetch_add((u32 *)(dst + off), src)`.
    fn fetch_add_w(&mut self, dst: u8, off: i16, src: u8) {
        self.op(STX | ATOMIC | W, dst, src, off, FETCH_ADD);
    }
    /// `dst = &map` (the two-slot immediate load the kernel relocates).
    fn ld_map(&mut self, dst: u8, map_fd: RawFd) {
        self.op(LD | DW | IMM, dst, PSEUDO_MAP_FD, 0, map_fd);
        self.op(0, 0, 0, 0, 0);
    }
    fn call(&mut self, helper: i32) {
        self.op(JMP | CALL, 0, 0, 0, helper);
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

/// The maps of the flow table, by fd, for [`program`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct TableMaps {
    /// LRU hash: flow hash (`u32`) → ticket (`u32`, the queue before `%`).
    pub flows: RawFd,
    /// Array of one `u32`: the next ticket.
    pub tickets: RawFd,
}

/// The steering program (see the module docs): the hash of [`flow_hash`],
/// then, with `table`, the flow table's queue for it.
pub(crate) fn program(table: Option<TableMaps>) -> Vec<Insn> {
    const R0: u8 = 0;
    const R1: u8 = 1;
    const R2: u8 = 2;
    const R3: u8 = 3;
    const R4: u8 = 4;
    const R10: u8 = 10; // frame pointer
    const R6: u8 = 6; // LD_ABS/LD_IND need the context in r6
    const R7: u8 = 7; // the hash
    const R8: u8 = 8; // scratch that survives packet loads
    const R9: u8 = 9; // IPv4 header length
    let mut a = Asm::new();
    let (v4, v6, ports4, ports6, mix) = (a.label(), a.label(), a.label(), a.label(), a.label());
    // Offsets are small constants: the casts cannot truncate.
    let at = |o: usize| o as i32;
    let (tcp, udp) = (i32::from(proto::TCP), i32::from(proto::UDP));
    a.op(ALU64 | MOV | X, R6, R1, 0, 0);
    a.ld_abs(B, at(VERSION_AT));
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
    a.ld_abs(W, at(V4_SRC_AT));
    a.alu_x(MOV, R7, R0);
    a.ld_abs(W, at(V4_DST_AT));
    a.alu_x(XOR, R7, R0);
    a.ld_abs(B, at(V4_PROTO_AT));
    a.alu_x(XOR, R7, R0);
    a.alu_x(MOV, R8, R0);
    a.ld_abs(H, at(V4_FRAG_AT));
    a.alu(AND, R0, i32::from(V4_FRAGMENT));
    a.jmp_if(JNE, R0, 0, mix);
    a.jmp_if(JEQ, R8, tcp, ports4);
    a.jmp_if(JEQ, R8, udp, ports4);
    a.goto(mix);
    a.bind(ports4);
    a.ld_ind(W, R9, at(PORTS_AT));
    a.alu_x(XOR, R7, R0);
    a.goto(mix);

    a.bind(v6);
    a.alu(MOV, R7, 0);
    for off in V6_ADDRS.step_by(4) {
        a.ld_abs(W, at(off));
        a.alu_x(XOR, R7, R0);
    }
    a.ld_abs(B, at(V6_NEXT_AT));
    a.alu_x(XOR, R7, R0);
    a.jmp_if(JEQ, R0, tcp, ports6);
    a.jmp_if(JEQ, R0, udp, ports6);
    a.goto(mix);
    a.bind(ports6);
    a.ld_abs(W, at(V6_L4_AT + PORTS_AT));
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
    let Some(maps) = table else {
        a.exit();
        return a.finish();
    };

    // The flow table. Stack: key (the hash) at fp-4, ticket at fp-8.
    let (found, ticket, plain) = (a.label(), a.label(), a.label());
    a.alu_x(MOV, R7, R0);
    a.stx_w(R10, -4, R7);
    a.ld_map(R1, maps.flows);
    a.mov64(R2, R10);
    a.add64(R2, -4);
    a.call(MAP_LOOKUP_ELEM);
    a.jmp_if(JNE, R0, 0, found);
    // A new flow: take a ticket...
    a.st_w(R10, -8, 0);
    a.ld_map(R1, maps.tickets);
    a.mov64(R2, R10);
    a.add64(R2, -8);
    a.call(MAP_LOOKUP_ELEM);
    a.jmp_if(JEQ, R0, 0, plain);
    a.mov64_imm(R1, 1);
    a.fetch_add_w(R0, 0, R1);
    a.stx_w(R10, -8, R1);
    // ...and record it, unless another CPU recorded this flow meanwhile:
    // then the first entry wins (one flow, one queue).
    a.ld_map(R1, maps.flows);
    a.mov64(R2, R10);
    a.add64(R2, -4);
    a.mov64(R3, R10);
    a.add64(R3, -8);
    a.mov64_imm(R4, BPF_NOEXIST);
    a.call(MAP_UPDATE_ELEM);
    a.jmp_if(JEQ, R0, 0, ticket);
    a.ld_map(R1, maps.flows);
    a.mov64(R2, R10);
    a.add64(R2, -4);
    a.call(MAP_LOOKUP_ELEM);
    a.jmp_if(JNE, R0, 0, found);
    a.bind(ticket);
    a.ldx_w(R0, R10, -8);
    a.exit();
    a.bind(found);
    a.ldx_w(R0, R0, 0);
    a.exit();
    a.bind(plain);
    a.alu_x(MOV, R0, R7);
    a.exit();
    a.finish()
}


/// How outbound packets are spread over the queues of a multi-queue TUN.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Steering {
    /// Flow hash, then a flow table that gives new flows the queues in turn
    /// (the default; see the module docs).
    #[default]
    FlowTable,
    /// Flow hash alone: `hash as u16 % queues` ([`flow_queue`]).
    FlowHash,
    /// No program: the kernel's flow learning (a flow follows the queue its
    /// reverse traffic was last written on).
    Kernel,
}

impl std::fmt::Display for Steering {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::FlowTable => "flow table",
            Self::FlowHash => "flow hash",
            Self::Kernel => "kernel flow learning",
        })
    }
}

/// Flows the table remembers (an LRU hash map, about 1 MiB of kernel memory).
pub const FLOW_TABLE_ENTRIES: u32 = 16_384;

/// `_IOR('T', 224, int)`.
const TUNSETSTEERINGEBPF: libc::c_ulong = 0x8004_54e0;
const BPF_MAP_CREATE: libc::c_int = 0;
const BPF_PROG_LOAD: libc::c_int = 5;
const BPF_MAP_TYPE_ARRAY: u32 = 2;
const BPF_MAP_TYPE_LRU_HASH: u32 = 9;
const BPF_PROG_TYPE_SOCKET_FILTER: u32 = 1;

/// Attaches the best program `want` allows to the TUN device behind
/// `queue_fd` (any queue: the program belongs to the device). Returns what
/// is in effect, and why it is less than `want` if it is: a kernel without
/// the table's maps or atomics gets the bare hash, and one that refuses
/// steering programs keeps its flow learning.
pub(crate) fn attach(queue_fd: RawFd, want: Steering) -> (Steering, Option<String>) {
    let mut why = None;
    if want == Steering::FlowTable {
        let table = flow_table().and_then(|(flows, tickets)| {
            let maps = TableMaps { flows: flows.as_raw_fd(), tickets: tickets.as_raw_fd() };
            // The program holds its own references to the maps; ours close
            // when this closure returns.
            load_and_attach(queue_fd, &program(Some(maps)))
        });
        match table {
            Ok(()) => return (Steering::FlowTable, None),
            Err(e) => why = Some(format!("no flow table ({e}), flows spread by hash alone")),
        }
    }
    if want != Steering::Kernel {
        match load_and_attach(queue_fd, &program(None)) {
            Ok(()) => return (Steering::FlowHash, why),
            Err(e) => why = Some(format!("{e}; flows follow the kernel's flow learning")),
        }
    }
    (Steering::Kernel, why)
}

/// Creates the flow table's maps: (flows, tickets).
fn flow_table() -> io::Result<(OwnedFd, OwnedFd)> {
    let flows = create_map(BPF_MAP_TYPE_LRU_HASH, FLOW_TABLE_ENTRIES, "esparto_flows")?;
    let tickets = create_map(BPF_MAP_TYPE_ARRAY, 1, "esparto_ticket")?;
    Ok((flows, tickets))
}

/// A map with `u32` keys and values.
fn create_map(kind: u32, entries: u32, name: &str) -> io::Result<OwnedFd> {
    // `union bpf_attr` for BPF_MAP_CREATE (linux/bpf.h): map_type@0
    // key_size@4 value_size@8 max_entries@12 map_flags@16 inner_map_fd@20
    // numa_node@24 map_name@28 (16 bytes, NUL-terminated).
    let mut attr = [0u8; 128];
    attr[0..4].copy_from_slice(&kind.to_ne_bytes());
    attr[4..8].copy_from_slice(&4u32.to_ne_bytes());
    attr[8..12].copy_from_slice(&4u32.to_ne_bytes());
    attr[12..16].copy_from_slice(&entries.to_ne_bytes());
    let n = name.len().min(15);
    attr[28..28 + n].copy_from_slice(&name.as_bytes()[..n]);
    // SAFETY: `attr` is a valid bpf_attr image without pointers; the size
    // passed is the buffer's, and its unused tail is zero.
    let fd = unsafe { libc::syscall(libc::SYS_bpf, BPF_MAP_CREATE, attr.as_mut_ptr(), attr.len()) };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("creating the eBPF map {name}: {e}{}", bpf_hint(&e))));
    }
    // SAFETY: the syscall returned a new file descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// What to do about a refused `bpf(2)` call: without `CAP_BPF` (or
/// `CAP_SYS_ADMIN`) the kernel refuses every eBPF program and map while
/// `kernel.unprivileged_bpf_disabled` is set.
fn bpf_hint(e: &io::Error) -> &'static str {
    if e.raw_os_error() == Some(libc::EPERM) {
        " (needs CAP_BPF while kernel.unprivileged_bpf_disabled is set)"
    } else {
        ""
    }
}

/// Loads `insns` and attaches them to the TUN device behind `queue_fd`.
fn load_and_attach(queue_fd: RawFd, insns: &[Insn]) -> io::Result<()> {
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
        return Err(io::Error::new(
            e.kind(),
            format!("loading the TUN steering program: {e}{}: {}", bpf_hint(&e), msg.trim()),
        ));
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
        let maps = TableMaps { flows: 3, tickets: 4 };
        for p in [program(None), program(Some(maps))] {
            assert!(p.len() < 120);
            assert_eq!(p.last().map(|i| i.code), Some(JMP | EXIT));
            // Every jump lands inside the program, and not on the second
            // slot of a 64-bit immediate load.
            let second_slots: Vec<usize> =
                p.iter().enumerate().filter(|(_, i)| i.code == LD | DW | IMM).map(|(k, _)| k + 1).collect();
            for (i, ins) in p.iter().enumerate() {
                if ins.code & 0x07 == JMP && ins.code != JMP | EXIT && ins.code != JMP | CALL {
                    let t = i as i64 + 1 + i64::from(ins.off);
                    assert!((0..p.len() as i64).contains(&t), "jump at {i} to {t}");
                    assert!(!second_slots.contains(&(t as usize)), "jump at {i} into a wide load");
                }
            }
        }
        // The table's part names both maps.
        let p = program(Some(maps));
        let named: Vec<i32> = p.iter().filter(|i| i.code == LD | DW | IMM).map(|i| i.imm).collect();
        assert!(named.contains(&3) && named.contains(&4), "{named:?}");
    }
}
