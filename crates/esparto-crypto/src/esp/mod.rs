//! ESP transforms: name a suite, seal and open packets in place.
//!
//! An ESP packet (RFC 4303 §2) as it goes on the wire — for Esparto always
//! the payload of a UDP datagram on port 4500 (RFC 3948) — is
//!
//! ```text
//! [SPI 4][Seq 4][IV iv_len][ payload ‖ padding ‖ pad len ‖ next hdr ][ICV icv_len]
//!                           \________ encrypted, block-aligned _______/
//! ```
//!
//! [`EspSuite`] describes a negotiated transform set (lengths, names);
//! [`EspCipher`] holds one direction's keys and turns a laid-out plaintext
//! packet into ciphertext in place, or back. The ESP layer above owns
//! everything else: padding, trailer checks, replay windows, sequence
//! numbers.
//!
//! Design choices, all driven by the data plane's per-packet budget:
//!
//! * Keys are expanded once, in [`EspCipher::new`]. `seal` and `open` borrow
//!   `&self`, so a cipher can be shared by reference across a worker's
//!   batch; they allocate nothing and never copy the payload — ESP's
//!   `ciphertext ‖ ICV` layout is exactly aws-lc's in-place AEAD layout.
//! * AEAD IVs are the 64-bit sequence number (RFC 4106 §3.1 allows any
//!   IV that never repeats under a key; an SA never reuses a sequence
//!   number, RFC 4303 §3.3.3). CBC IVs are made unpredictable by encrypting
//!   the sequence number (NIST SP 800-38A Appendix C), without an RNG call
//!   per packet.
//! * Errors are small `Copy` values; a failed `open` says nothing about why
//!   (RFC 4303 §3.4.4: the packet is simply discarded and counted).

mod cipher;
mod suite;

pub use cipher::EspCipher;
pub use suite::{EspSuite, Integ};

/// The key material handed to a constructor has the wrong length: a local
/// bug (KEYMAT is cut by the caller to [`EspSuite::keymat_len`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyLengthError {
    /// Bytes the transform needs.
    pub expected: usize,
    /// Bytes it was given.
    pub got: usize,
}

impl core::fmt::Display for KeyLengthError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "key material has {} bytes, the transform needs {}",
            self.got, self.expected
        )
    }
}

impl std::error::Error for KeyLengthError {}

/// Authentication failed (or the packet could not possibly be valid). The
/// peer's fault, or an attacker's: drop the packet and count it
/// (RFC 4303 §3.4.4.1). Deliberately carries no detail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IcvError;

impl core::fmt::Display for IcvError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("integrity check failed")
    }
}

impl std::error::Error for IcvError {}

/// A packet handed to `seal` is not laid out as the transform needs: a
/// local bug in the caller's framing, never a peer fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SealError {
    /// The buffer cannot hold the headers, IV, a non-empty payload and the
    /// ICV.
    TooShort {
        /// Minimum length for this transform.
        min: usize,
        /// Length given.
        got: usize,
    },
    /// The encrypted part is not a multiple of the transform's block size
    /// (RFC 4303 §2.4: padding must align it).
    Misaligned {
        /// Required alignment.
        block_size: usize,
        /// Length of the part to encrypt.
        len: usize,
    },
    /// The crypto library refused the operation (e.g. an input longer than
    /// the AEAD allows; cannot happen for IP-sized packets).
    Backend,
}

impl core::fmt::Display for SealError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            SealError::TooShort { min, got } => {
                write!(f, "buffer of {got} bytes is shorter than the minimum {min}")
            }
            SealError::Misaligned { block_size, len } => write!(
                f,
                "payload of {len} bytes is not a multiple of the block size {block_size}"
            ),
            SealError::Backend => f.write_str("the crypto library rejected the operation"),
        }
    }
}

impl std::error::Error for SealError {}
