//! Esparto wire formats: checked views and `Repr`s for every packet the
//! gateway reads or writes.
//!
//! Each module follows smoltcp's `src/wire/` shape:
//!
//! - a `Packet<T: AsRef<[u8]>>` **view** over a borrowed buffer, whose
//!   `new_checked` validates every length field once so that the getters
//!   afterwards cannot index out of bounds, with setters when
//!   `T: AsMut<[u8]>`;
//! - a `Repr`, the parsed high-level form, with `parse(&Packet) ->
//!   Result<Repr>`, `emit(&self, &mut Packet) -> Result<()>` and
//!   `buffer_len()`, such that `parse(emit(x)) == x`.
//!
//! Nothing here reads a clock, logs or panics on input, and the views the
//! data plane calls per packet, on bytes from the network, do not allocate;
//! the IKE `Repr`s own their payloads' bytes (bounded by `ike::limits`). Malformed input is
//! an [`Error`] value saying which field was wrong.
//!
//! This is the one crate that knows where a field lies. The other crates
//! read and write packets through these views (`new_checked` once, then
//! accessors; `new_unchecked` where a length was checked just before), and
//! the few places that must name an offset rather than read a value — the
//! checksum offset of an offloaded packet, the loads of a BPF program the
//! kernel runs — take it from a module's `field` table.
//!
//! | module | format | RFC |
//! | --- | --- | --- |
//! | [`checksum`] | Internet checksum | 1071, 1624 |
//! | [`ipv4`] | IPv4 header | 791 |
//! | [`ipv6`] | IPv6 header and extension-header walk | 8200 |
//! | [`ip`] | version, protocol numbers, selector 5-tuple | 4301 |
//! | [`udp`] | UDP | 768 |
//! | [`tcp`] | TCP header and options | 9293 |
//! | [`icmp`] | ICMPv4/ICMPv6, "packet too big" errors | 792, 1191, 4443 |
//! | [`esp`] | ESP header and trailer | 4303 |
//! | [`espinudp`] | ESP-in-UDP classification | 3948 |
//! | [`ipcomp`] | IP Payload Compression header | 3173 |
//! | [`vici`] | strongSwan's control protocol (VICI) | — |
#![forbid(unsafe_code)]

mod bytes;
mod error;
#[cfg(test)]
mod testutil;

pub mod checksum;
pub mod esp;
pub mod espinudp;
pub mod icmp;
pub mod ike;
pub mod ip;
pub mod ipcomp;
pub mod ipv4;
pub mod ipv6;
pub mod tcp;
pub mod udp;
pub mod vici;

pub use error::{Error, Result};
