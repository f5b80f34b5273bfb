//! Esparto io.
