//! Esparto I/O: the kernel primitives of the data plane.
//!
//! This is the only crate that makes syscalls and the only one allowed
//! `unsafe` (each block carries a `// SAFETY:` comment). It gives each worker
//! thread k its own queue k of a multi-queue TUN device ([`tun`]) and its own
//! socket k of a `SO_REUSEPORT` group ([`udp`]), with a classic BPF program
//! that steers each datagram by a key it carries to one worker ([`steer`]);
//! the worker loop ([`worker`]) polls both plus a command queue and hands
//! batches to a [`worker::Datapath`], plugged in by the binary. Every queue
//! between a worker and the control thread is bounded ([`worker`],
//! [`control`]).
//!
//! It knows sockets, the TUN device, batching, steering programs and
//! threads, and no protocol that runs over them, as `quinn-udp` knows
//! nothing of QUIC: the datapath brings ESP (and says where its SPI lies,
//! for the steering program). What it reads of a packet, for GRO on the
//! TUN write path ([`gro`]) and the TUN steering program ([`tun_steer`]),
//! it reads through the views and field tables of `esparto-wire`.
//!
//! Kernel I/O costs far more per packet than AES-GCM, so everything moves in
//! batches ([`batch`]): TSO/USO super-packets from the TUN are split into
//! MTU-sized packets, outbound datagrams leave as UDP GSO super-packets
//! (`UDP_SEGMENT`), inbound ones arrive coalesced by UDP GRO and are split by
//! segment size, and packets written back to the TUN are coalesced again
//! (virtio-net header GSO) where that pays.
//!
//! The tunnel's routes and the policy rules that lead to them are set over
//! rtnetlink ([`netlink`], [`route`], [`rule`]) in a table of the daemon's
//! own, never in the host's main table ([`routing`] says how and why).

pub mod batch;
pub mod control;
pub mod cpu;
pub mod gro;
pub mod instance;
pub mod link;
pub mod mem;
pub mod netdev;
pub mod netlink;
pub mod poll;
pub mod privs;
pub mod route;
pub mod routing;
pub mod rule;
pub mod steer;
mod sys;
pub mod tun;
pub mod tun_steer;
pub mod udp;
pub mod wake;
pub mod worker;

pub use batch::{BatchFull, PacketBuf, RxBatch, RxEntry, TxBatch};
pub use control::{ControlDatagram, ControlRx, ControlTx, control_channel};
pub use steer::{SteeringKey, key_for_worker, socket_index, worker_for_key};
pub use tun::{Steering, TunConfig, TunDevice, TunQueue};
pub use udp::{UdpConfig, UdpGroup, UdpSocket};
pub use worker::{Datapath, IoStats, WorkerConfig, WorkerFailure, Workers};
