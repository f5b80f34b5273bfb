//! Esparto ike.
