//! Configuration: the TOML file and the validated model.

pub mod model;

pub use model::*;
