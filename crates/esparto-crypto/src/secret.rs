//! Owned secret bytes that are wiped when dropped.
//!
//! IKE produces variable-length key material (g^ir, SKEYSEED, the prf+
//! stream that is cut into SK_d, SK_ai, SK_ei, ... and Child SA KEYMAT).
//! [`SecretBytes`] holds it in a heap buffer that is zeroized on drop and
//! never printed: its `Debug` shows only the length. It deliberately has no
//! `Clone`; copy key material only where you mean to.

use zeroize::{Zeroize, Zeroizing};

/// A zeroize-on-drop byte vector for key material. `Debug` never shows the
/// contents.
#[derive(PartialEq, Eq)]
pub struct SecretBytes(Zeroizing<Vec<u8>>);

impl SecretBytes {
    /// `len` zero bytes, to be filled in place.
    pub fn zeroed(len: usize) -> Self {
        SecretBytes(Zeroizing::new(vec![0; len]))
    }

    /// Copies `bytes` into a new secret buffer (the caller still owns, and
    /// should wipe, the original).
    pub fn from_slice(bytes: &[u8]) -> Self {
        SecretBytes(Zeroizing::new(bytes.to_vec()))
    }

    /// The secret bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.0
    }

    /// The secret bytes, mutably (for filling in place).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.0
    }

    /// Number of bytes held.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True if no bytes are held.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<Vec<u8>> for SecretBytes {
    /// Takes ownership of `v` (no copy is left behind).
    fn from(v: Vec<u8>) -> Self {
        SecretBytes(Zeroizing::new(v))
    }
}

impl AsRef<[u8]> for SecretBytes {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Zeroize for SecretBytes {
    fn zeroize(&mut self) {
        self.0.zeroize();
    }
}

impl core::fmt::Debug for SecretBytes {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "SecretBytes({} bytes)", self.0.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_contents() {
        let s = SecretBytes::from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        let shown = format!("{s:?}");
        assert_eq!(shown, "SecretBytes(4 bytes)");
        assert!(!shown.contains("de") && !shown.contains("222"));
    }

    #[test]
    fn accessors() {
        let mut s = SecretBytes::zeroed(3);
        s.as_mut_slice().copy_from_slice(&[1, 2, 3]);
        assert_eq!(s.as_slice(), &[1, 2, 3]);
        assert_eq!(s.len(), 3);
        assert!(!s.is_empty());
        s.zeroize();
        assert!(s.is_empty() || s.as_slice().iter().all(|&b| b == 0));
    }
}
