//! Esparto esp.
