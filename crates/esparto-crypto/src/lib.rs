//! Esparto crypto.
