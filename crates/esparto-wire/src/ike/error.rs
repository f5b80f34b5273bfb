//! Why an IKE message could not be parsed.
//!
//! The kinds mirror the crate-wide wire error (`Truncated`, `Malformed`,
//! `Unsupported`) and add the two cases the IKE core must answer differently
//! (RFC 7296 §2.5 and §2.21): an unrecognised payload with the critical bit
//! set, which must be answered with `UNSUPPORTED_CRITICAL_PAYLOAD` naming the
//! payload type, and a major version other than 2, which is answered with
//! `INVALID_MAJOR_VERSION` (§2.5).

use core::fmt;

/// A parse (or emit) failure of an IKE message or payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// The buffer ends before a length field says it does.
    Truncated,
    /// A length, count or value is out of range; the string names the field.
    Malformed(&'static str),
    /// Well formed, but something this implementation does not support.
    Unsupported(&'static str),
    /// RFC 7296 §2.5: an unrecognised payload type with the critical bit set;
    /// the value is the payload type, for the `UNSUPPORTED_CRITICAL_PAYLOAD`
    /// notification data.
    UnsupportedCriticalPayload(u8),
    /// RFC 7296 §2.5: the major version is not 2 (the value is the major version).
    InvalidMajorVersion(u8),
    /// One of the limits in [`super::limits`] is exceeded.
    Limit(&'static str),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Truncated => f.write_str("truncated IKE message"),
            Error::Malformed(what) => write!(f, "malformed IKE message: {what}"),
            Error::Unsupported(what) => write!(f, "unsupported in IKE message: {what}"),
            Error::UnsupportedCriticalPayload(t) => {
                write!(f, "unsupported critical payload type {t}")
            }
            Error::InvalidMajorVersion(v) => write!(f, "IKE major version {v}, expected 2"),
            Error::Limit(what) => write!(f, "IKE message exceeds limit: {what}"),
        }
    }
}

impl core::error::Error for Error {}

/// Fold into the crate-wide kinds for callers that do not care about the
/// IKE-specific cases.
impl From<Error> for crate::Error {
    fn from(e: Error) -> Self {
        match e {
            Error::Truncated => crate::Error::Truncated,
            Error::Malformed(what) | Error::Limit(what) => crate::Error::Malformed(what),
            Error::Unsupported(what) => crate::Error::Unsupported(what),
            Error::UnsupportedCriticalPayload(_) => {
                crate::Error::Unsupported("IKE critical payload type")
            }
            Error::InvalidMajorVersion(_) => crate::Error::Unsupported("IKE major version"),
        }
    }
}

/// Result of IKE parsing.
pub type Result<T> = core::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_the_field() {
        assert_eq!(
            Error::Malformed("payload length").to_string(),
            "malformed IKE message: payload length"
        );
        assert_eq!(
            Error::UnsupportedCriticalPayload(99).to_string(),
            "unsupported critical payload type 99"
        );
    }
}
