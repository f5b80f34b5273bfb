//! Esparto's cryptography: ESP transforms, IKEv2 PRFs, key exchange and
//! injected randomness, all over aws-lc-rs.
//!
//! This crate is the one place where bytes meet keys. It has no parsers and
//! no protocol state; its job is to turn "an ESP packet laid out in a buffer"
//! into "the same packet, sealed" (and back) as fast as the hardware allows,
//! and to give the IKE daemon the handful of primitives RFC 7296 needs.
//!
//! * [`esp`] (re-exported at the crate root): [`EspSuite`] names a negotiated
//!   transform set in strongSwan's spelling; [`EspCipher`] seals and opens one
//!   ESP packet in place (RFC 4303, RFC 4106 AES-GCM, RFC 7634
//!   ChaCha20-Poly1305, RFC 3602 AES-CBC with RFC 4868 / RFC 2404 HMAC).
//!   It is the data plane's inner loop: keys are expanded once in
//!   [`EspCipher::new`]; [`EspCipher::seal`] and [`EspCipher::open`] neither
//!   allocate nor copy the payload.
//! * [`ike`]: [`ike::Prf`] and prf+ (RFC 7296 §2.13), Diffie-Hellman /
//!   ECDH groups ([`ike::KeGroup`]) with IKEv2 wire encodings and peer-value
//!   validation, and [`ike::IkeCipher`] for the Encrypted (SK) payload
//!   (RFC 7296 §3.14, RFC 5282, RFC 7634).
//! * [`rand`]: the [`Rng`] trait through which protocol crates receive
//!   randomness (they never read the OS RNG themselves), split into public
//!   and secret fills the way s2n-quic does, with an OS-backed [`SystemRng`] and a seeded
//!   [`DeterministicRng`] for tests and simulations.
//! * [`SecretBytes`]: key material we own is zeroized when dropped.
//!
//! Protocol code never reads the clock or the OS RNG: everything random comes
//! in through [`Rng`], so every test here is deterministic.

pub mod esp;
pub mod ike;
mod primitive;
pub mod rand;
mod secret;

#[cfg(test)]
mod test_vectors;

pub use esp::{EspCipher, EspSuite, IcvError, Integ, KeyLengthError, SealError};
pub use rand::{DeterministicRng, Rng, SystemRng};
pub use secret::SecretBytes;

#[cfg(test)]
mod tests {
    /// Workers share ciphers by reference across threads; the IKE daemon
    /// moves key exchanges between tasks.
    #[test]
    fn thread_safety_of_public_types() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<crate::EspCipher>();
        send_sync::<crate::ike::IkeCipher>();
        send_sync::<crate::ike::KeyExchange>();
        send_sync::<crate::SecretBytes>();
        send_sync::<crate::ike::PrfOutput>();
        send_sync::<crate::SystemRng>();
        send_sync::<crate::DeterministicRng>();
    }
}
