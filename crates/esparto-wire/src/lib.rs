//! Esparto wire.
