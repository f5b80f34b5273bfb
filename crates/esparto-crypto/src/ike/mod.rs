//! Cryptography for the IKEv2 control plane (RFC 7296).
//!
//! * [`Prf`] and prf+ (§2.13): SKEYSEED, the SK_* keys, Child SA KEYMAT and
//!   PSK AUTH values are all PRF outputs. Inputs that IKE writes as
//!   concatenations (`Ni | Nr | SPIi | SPIr`) can be passed as parts.
//! * [`KeGroup`] / [`KeyExchange`] (§1.2, §3.4): MODP groups 14 and 15,
//!   ECP groups 19 and 20, Curve25519 (31), public values in the KE
//!   payload's encoding, peer values validated.
//! * [`MlKem`] (FIPS 203, RFC 9370): ML-KEM-512/768/1024 for the
//!   additional key exchanges of a hybrid IKE SA.
//! * [`IkeCipher`] (§3.14): seal and open the Encrypted (SK) payload of a
//!   whole IKE message in place, with AES-GCM (RFC 5282),
//!   ChaCha20-Poly1305 (RFC 7634) or AES-CBC + HMAC.
//!
//! These are not on the per-packet path, so clarity wins over the last
//! nanosecond; but nothing here allocates more than the secret it returns.

mod encr;
mod ke;
mod kem;
mod modp;
mod modp_groups;
mod prf;
mod sk;

pub use encr::IkeEncr;
pub use ke::{KeError, KeGroup, KeyExchange};
pub use kem::{MlKem, MlKemInitiator};
pub use prf::{Prf, PrfOutput, PrfPlusError};
pub use sk::{IkeCipher, IkeCipherError};
