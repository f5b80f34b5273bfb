//! IANA code points of IKEv2 (RFC 7296 §3 and the IANA "Internet Key Exchange
//! Version 2 (IKEv2) Parameters" registry) as named constants.
//!
//! Each registry is a transparent newtype over its wire integer with
//! associated constants, not a closed `enum`: a peer may send any value, and
//! an unknown value must survive parsing so the core can decide what the RFC
//! says to do with it (ignore an unknown status notify, reject an unknown
//! error notify, skip a non-critical unknown payload, …). `Debug` prints the
//! RFC name where there is one.

use core::fmt;

macro_rules! code_points {
    (
        $(#[$meta:meta])*
        $name:ident($int:ty) {
            $( $(#[$cmeta:meta])* $cname:ident = $val:expr, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub $int);

        impl $name {
            $( $(#[$cmeta])* pub const $cname: Self = Self($val); )*

            /// The registry name of this value, if it is one we know.
            pub fn name(self) -> Option<&'static str> {
                match self.0 {
                    $( $val => Some(stringify!($cname)), )*
                    _ => None,
                }
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match self.name() {
                    Some(n) => f.write_str(n),
                    None => write!(f, "{}({})", stringify!($name), self.0),
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(self, f)
            }
        }

        impl From<$int> for $name {
            fn from(v: $int) -> Self { Self(v) }
        }
        impl From<$name> for $int {
            fn from(v: $name) -> Self { v.0 }
        }
    };
}

code_points! {
    /// Exchange type (RFC 7296 §3.1).
    ExchangeType(u8) {
        /// §1.2, the first exchange.
        IKE_SA_INIT = 34,
        /// §1.2, authentication and first Child SA.
        IKE_AUTH = 35,
        /// §1.3, additional Child SAs and rekeying.
        CREATE_CHILD_SA = 36,
        /// §1.4, deletes, errors, liveness checks.
        INFORMATIONAL = 37,
        /// RFC 9242: between IKE_SA_INIT and IKE_AUTH, protected; RFC
        /// 9370 runs the additional key exchanges in it.
        IKE_INTERMEDIATE = 43,
        /// RFC 9370 §2.2.4: an additional key exchange of CREATE_CHILD_SA.
        IKE_FOLLOWUP_KE = 44,
    }
}

code_points! {
    /// Payload type (RFC 7296 §3.2, "Next Payload").
    PayloadType(u8) {
        /// No next payload.
        NONE = 0,
        /// §3.3 Security Association.
        SA = 33,
        /// §3.4 Key Exchange.
        KE = 34,
        /// §3.5 Identification - Initiator.
        IDI = 35,
        /// §3.5 Identification - Responder.
        IDR = 36,
        /// §3.6 Certificate.
        CERT = 37,
        /// §3.7 Certificate Request.
        CERTREQ = 38,
        /// §3.8 Authentication.
        AUTH = 39,
        /// §3.9 Nonce (Ni or Nr).
        NONCE = 40,
        /// §3.10 Notify.
        NOTIFY = 41,
        /// §3.11 Delete.
        DELETE = 42,
        /// §3.12 Vendor ID.
        VENDOR_ID = 43,
        /// §3.13 Traffic Selector - Initiator.
        TSI = 44,
        /// §3.13 Traffic Selector - Responder.
        TSR = 45,
        /// §3.14 Encrypted and Authenticated.
        SK = 46,
        /// §3.15 Configuration.
        CP = 47,
        /// §3.16 Extensible Authentication.
        EAP = 48,
        /// RFC 7383 Encrypted and Authenticated Fragment.
        SKF = 53,
    }
}

code_points! {
    /// Security protocol identifier (RFC 7296 §3.3.1).
    ProtocolId(u8) {
        /// The IKE SA itself.
        IKE = 1,
        /// Authentication Header.
        AH = 2,
        /// Encapsulating Security Payload.
        ESP = 3,
    }
}

code_points! {
    /// Transform type (RFC 7296 §3.3.2).
    TransformType(u8) {
        /// Encryption algorithm.
        ENCR = 1,
        /// Pseudorandom function (IKE only).
        PRF = 2,
        /// Integrity algorithm.
        INTEG = 3,
        /// Key exchange method ("Diffie-Hellman group").
        KE = 4,
        /// Extended sequence numbers (ESP/AH only).
        ESN = 5,
        /// RFC 9370: the first additional key exchange (7 to 12 follow).
        ADDITIONAL_KE_1 = 6,
        /// RFC 9370.
        ADDITIONAL_KE_2 = 7,
        /// RFC 9370.
        ADDITIONAL_KE_3 = 8,
        /// RFC 9370.
        ADDITIONAL_KE_4 = 9,
        /// RFC 9370.
        ADDITIONAL_KE_5 = 10,
        /// RFC 9370.
        ADDITIONAL_KE_6 = 11,
        /// RFC 9370.
        ADDITIONAL_KE_7 = 12,
    }
}

/// Encryption transform IDs (transform type 1) we name.
pub mod encr {
    /// RFC 3602.
    pub const AES_CBC: u16 = 12;
    /// RFC 4106 (ESP) / RFC 5282 (IKE), 16-octet ICV.
    pub const AES_GCM_16: u16 = 20;
    /// RFC 7634.
    pub const CHACHA20_POLY1305: u16 = 28;
}

/// PRF transform IDs (transform type 2).
pub mod prf {
    /// RFC 2104.
    pub const HMAC_SHA1: u16 = 2;
    /// RFC 4868.
    pub const HMAC_SHA2_256: u16 = 5;
    /// RFC 4868.
    pub const HMAC_SHA2_384: u16 = 6;
    /// RFC 4868.
    pub const HMAC_SHA2_512: u16 = 7;
}

/// Integrity transform IDs (transform type 3).
pub mod integ {
    /// "None": implied by combined-mode ciphers (RFC 7296 §3.3.3).
    pub const NONE: u16 = 0;
    /// RFC 2404.
    pub const HMAC_SHA1_96: u16 = 2;
    /// RFC 4868.
    pub const HMAC_SHA2_256_128: u16 = 12;
    /// RFC 4868.
    pub const HMAC_SHA2_384_192: u16 = 13;
    /// RFC 4868.
    pub const HMAC_SHA2_512_256: u16 = 14;
}

/// Key exchange method IDs (transform type 4).
pub mod ke {
    /// RFC 3526 2048-bit MODP group.
    pub const MODP_2048: u16 = 14;
    /// RFC 3526 3072-bit MODP group.
    pub const MODP_3072: u16 = 15;
    /// RFC 5903 256-bit random ECP group.
    pub const ECP_256: u16 = 19;
    /// RFC 5903 384-bit random ECP group.
    pub const ECP_384: u16 = 20;
    /// RFC 8031 Curve25519.
    pub const CURVE25519: u16 = 31;
}

/// Extended sequence number transform IDs (transform type 5).
pub mod esn {
    /// No extended sequence numbers.
    pub const NO: u16 = 0;
    /// Extended sequence numbers.
    pub const YES: u16 = 1;
}

/// Transform attribute type "Key Length" (RFC 7296 §3.3.5), always TV format.
pub const ATTR_KEY_LENGTH: u16 = 14;

code_points! {
    /// Notify message type (RFC 7296 §3.10.1; RFC 9611 for the per-resource ones).
    ///
    /// Types below 16384 are errors, 16384 and above are status (§3.10.1).
    NotifyType(u16) {
        /// §2.5
        UNSUPPORTED_CRITICAL_PAYLOAD = 1,
        /// §2.21
        INVALID_IKE_SPI = 4,
        /// §2.5
        INVALID_MAJOR_VERSION = 5,
        /// §3.10.1
        INVALID_SYNTAX = 7,
        /// §2.3
        INVALID_MESSAGE_ID = 9,
        /// §1.5
        INVALID_SPI = 11,
        /// §2.7
        NO_PROPOSAL_CHOSEN = 14,
        /// §1.2
        INVALID_KE_PAYLOAD = 17,
        /// §2.15
        AUTHENTICATION_FAILED = 24,
        /// §3.10.1
        SINGLE_PAIR_REQUIRED = 34,
        /// §3.10.1
        NO_ADDITIONAL_SAS = 35,
        /// §3.15.4
        INTERNAL_ADDRESS_FAILURE = 36,
        /// §3.15.4
        FAILED_CP_REQUIRED = 37,
        /// §2.9
        TS_UNACCEPTABLE = 38,
        /// §3.10.1
        INVALID_SELECTORS = 39,
        /// RFC 4555 §4.2.1
        UNACCEPTABLE_ADDRESSES = 40,
        /// RFC 4555 §4.2.2
        UNEXPECTED_NAT_DETECTED = 41,
        /// §2.25
        TEMPORARY_FAILURE = 43,
        /// §2.25
        CHILD_SA_NOT_FOUND = 44,
        /// RFC 9611 §4: the peer will not create more per-resource Child SAs.
        TS_MAX_QUEUE = 48,
        /// §2.4
        INITIAL_CONTACT = 16384,
        /// §2.3
        SET_WINDOW_SIZE = 16385,
        /// §2.9
        ADDITIONAL_TS_POSSIBLE = 16386,
        /// §2.22
        IPCOMP_SUPPORTED = 16387,
        /// §2.23
        NAT_DETECTION_SOURCE_IP = 16388,
        /// §2.23
        NAT_DETECTION_DESTINATION_IP = 16389,
        /// §2.6
        COOKIE = 16390,
        /// §1.3.1
        USE_TRANSPORT_MODE = 16391,
        /// §3.6
        HTTP_CERT_LOOKUP_SUPPORTED = 16392,
        /// §1.3.3
        REKEY_SA = 16393,
        /// §1.3.1
        ESP_TFC_PADDING_NOT_SUPPORTED = 16394,
        /// §1.3.1
        NON_FIRST_FRAGMENTS_ALSO = 16395,
        /// RFC 4555
        MOBIKE_SUPPORTED = 16396,
        /// RFC 4555 §4.2.3
        ADDITIONAL_IP4_ADDRESS = 16397,
        /// RFC 4555 §4.2.3
        ADDITIONAL_IP6_ADDRESS = 16398,
        /// RFC 4555 §4.2.4
        NO_ADDITIONAL_ADDRESSES = 16399,
        /// RFC 4555
        UPDATE_SA_ADDRESSES = 16400,
        /// RFC 4555 §4.2.6: the return routability check.
        COOKIE2 = 16401,
        /// RFC 4555 §4.2.7
        NO_NATS_ALLOWED = 16402,
        /// RFC 4739
        MULTIPLE_AUTH_SUPPORTED = 16404,
        /// RFC 5685
        REDIRECT_SUPPORTED = 16406,
        /// RFC 5998
        EAP_ONLY_AUTHENTICATION = 16417,
        /// RFC 7383
        IKEV2_FRAGMENTATION_SUPPORTED = 16430,
        /// RFC 7427
        SIGNATURE_HASH_ALGORITHMS = 16431,
        /// RFC 6023
        CHILDLESS_IKEV2_SUPPORTED = 16418,
        /// RFC 9242 §3
        INTERMEDIATE_EXCHANGE_SUPPORTED = 16438,
        /// RFC 9370 §2.2.4
        ADDITIONAL_KEY_EXCHANGE = 16441,
        /// RFC 9611 §4: this Child SA is one of several per-resource SAs.
        SA_RESOURCE_INFO = 16444,
    }
}

impl NotifyType {
    /// RFC 7296 §3.10.1: "Types in the range 0 - 16383 are intended for
    /// reporting errors."
    pub fn is_error(self) -> bool {
        self.0 < 16384
    }
}

code_points! {
    /// Identification type (RFC 7296 §3.5).
    IdType(u8) {
        /// A single four-octet IPv4 address.
        IPV4_ADDR = 1,
        /// A fully qualified domain name string.
        FQDN = 2,
        /// A fully qualified RFC 822 email address string.
        RFC822_ADDR = 3,
        /// A single sixteen-octet IPv6 address.
        IPV6_ADDR = 5,
        /// DER encoding of an ASN.1 X.500 Distinguished Name.
        DER_ASN1_DN = 9,
        /// DER encoding of an ASN.1 X.509 GeneralName.
        DER_ASN1_GN = 10,
        /// An opaque octet stream.
        KEY_ID = 11,
    }
}

code_points! {
    /// Authentication method (RFC 7296 §3.8).
    AuthMethod(u8) {
        /// RSA digital signature.
        RSA_SIG = 1,
        /// Shared Key Message Integrity Code (§2.15).
        SHARED_KEY_MIC = 2,
        /// DSS digital signature.
        DSS_SIG = 3,
        /// RFC 7427 digital signature.
        DIGITAL_SIGNATURE = 14,
    }
}

code_points! {
    /// Traffic selector type (RFC 7296 §3.13.1).
    TsType(u8) {
        /// A range of IPv4 addresses.
        IPV4_ADDR_RANGE = 7,
        /// A range of IPv6 addresses.
        IPV6_ADDR_RANGE = 8,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_unknowns() {
        assert_eq!(format!("{:?}", PayloadType::SK), "SK");
        assert_eq!(format!("{:?}", PayloadType(200)), "PayloadType(200)");
        assert_eq!(NotifyType(16444), NotifyType::SA_RESOURCE_INFO);
        assert!(NotifyType::TS_MAX_QUEUE.is_error());
        assert!(!NotifyType::COOKIE.is_error());
        assert_eq!(ExchangeType::from(37).name(), Some("INFORMATIONAL"));
    }
}
