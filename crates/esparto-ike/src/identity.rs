//! IKE identities (RFC 7296 §3.5) in strongSwan's notation.
//!
//! An [`Identity`] is what goes into IDi/IDr and what PSKs are looked up by.
//! The string forms follow swanctl.conf so that a gateway's configuration
//! reads the same on both ends:
//!
//! | string | type |
//! | --- | --- |
//! | `192.0.2.1`, `2001:db8::1` | ID_IPV4_ADDR / ID_IPV6_ADDR |
//! | `@moon.example`, `moon.example` | ID_FQDN (the `@` forces FQDN) |
//! | `carol@example.org` | ID_RFC822_ADDR (USER_FQDN) |
//! | `keyid:0a0b…`, `@#0a0b…` | ID_KEY_ID (hex) |
//! | `fqdn:…`, `email:…` | explicit type prefixes |
//! | `%any` | wildcard, for matching only |
//! | `C=CH, O=Example, CN=moon` | ID_DER_ASN1_DN (certificates only) |
//!
//! FQDN and e-mail identities compare case-insensitively (DNS names are
//! case-insensitive, RFC 4343), as strongSwan does. A distinguished name is
//! compared in its text form, attribute by attribute, ignoring ASCII case
//! and the spaces around separators: a DN typed in the configuration has no
//! DER, so received DNs are rendered to text (x509-parser) and compared
//! there. A DN we send is always the subject of our own certificate, sent
//! as the certificate encodes it (RFC 4945 §3.1.5).

use core::fmt;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use esparto_wire::ike::IdType;

/// An IKE identity.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Identity {
    /// ID_IPV4_ADDR.
    Ipv4(Ipv4Addr),
    /// ID_IPV6_ADDR.
    Ipv6(Ipv6Addr),
    /// ID_FQDN.
    Fqdn(String),
    /// ID_RFC822_ADDR.
    UserFqdn(String),
    /// ID_KEY_ID.
    KeyId(Vec<u8>),
    /// ID_DER_ASN1_DN.
    Dn(DnName),
    /// `%any`: matches every identity; never sent.
    Any,
}

/// A distinguished name: its text and, when it came from a certificate or
/// the wire, its DER. Equality and hashing use the folded text only.
#[derive(Debug, Clone)]
pub struct DnName {
    /// `C=CH, O=Example, CN=moon`, separators normalised.
    text: String,
    /// The text folded for comparison.
    folded: String,
    /// The DER Name, empty for a DN typed in the configuration.
    der: Vec<u8>,
}

impl DnName {
    /// From the text form; `None` unless every component is `type=value`.
    pub fn parse(s: &str) -> Option<Self> {
        let mut parts = Vec::new();
        for part in s.split([',', '/']).map(str::trim).filter(|p| !p.is_empty()) {
            let (t, v) = part.split_once('=')?;
            let (t, v) = (t.trim(), v.trim());
            if t.is_empty() || !t.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.') {
                return None;
            }
            parts.push(format!("{}={v}", canonical_attr(t)));
        }
        if parts.is_empty() {
            return None;
        }
        let text = parts.join(", ");
        Some(DnName {
            folded: text.to_ascii_lowercase(),
            text,
            der: Vec::new(),
        })
    }

    /// From a DER Name (an ID payload or a certificate's subject).
    pub fn from_der(der: &[u8]) -> Option<Self> {
        use x509_parser::prelude::FromDer;
        let (rest, name) = x509_parser::x509::X509Name::from_der(der).ok()?;
        if !rest.is_empty() {
            return None;
        }
        let text = name.to_string_with_registry(x509_parser::objects::oid_registry()).ok()?;
        let mut dn = DnName::parse(&text)?;
        dn.der = der.to_vec();
        Some(dn)
    }

    /// The DER Name, if known.
    pub fn der(&self) -> Option<&[u8]> {
        (!self.der.is_empty()).then_some(self.der.as_slice())
    }
}

/// Attribute names as x509-parser prints them, whatever the spelling typed.
fn canonical_attr(t: &str) -> String {
    match t.to_ascii_uppercase().as_str() {
        "E" | "EMAIL" | "EMAILADDRESS" => "Email".to_string(),
        "S" | "ST" => "ST".to_string(),
        "SN" => "SN".to_string(),
        "SERIALNUMBER" => "serialNumber".to_string(),
        "DC" => "DC".to_string(),
        u @ ("C" | "L" | "O" | "OU" | "CN") => u.to_string(),
        _ => t.to_string(),
    }
}

impl PartialEq for DnName {
    fn eq(&self, other: &Self) -> bool {
        self.folded == other.folded
    }
}

impl Eq for DnName {}

impl core::hash::Hash for DnName {
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        self.folded.hash(state);
    }
}

impl fmt::Display for DnName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// An identity string that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentityError(pub String);

impl fmt::Display for IdentityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid identity {:?}", self.0)
    }
}

impl std::error::Error for IdentityError {}

fn hex(s: &str) -> Option<Vec<u8>> {
    let s = s.trim_start_matches("0x");
    if s.is_empty() || s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

impl Identity {
    /// Parse strongSwan notation (see the module table).
    pub fn parse(s: &str) -> Result<Self, IdentityError> {
        let err = || IdentityError(s.to_string());
        let s = s.trim();
        if s.is_empty() {
            return Err(err());
        }
        if s == "%any" || s == "*" {
            return Ok(Identity::Any);
        }
        if let Some(h) = s.strip_prefix("keyid:").or_else(|| s.strip_prefix("@#")) {
            let h = h.strip_prefix('#').unwrap_or(h);
            return hex(h).map(Identity::KeyId).ok_or_else(err);
        }
        if let Some(f) = s.strip_prefix("fqdn:").or_else(|| s.strip_prefix('@')) {
            return if f.is_empty() {
                Err(err())
            } else {
                Ok(Identity::Fqdn(f.to_string()))
            };
        }
        if let Some(e) = s
            .strip_prefix("email:")
            .or_else(|| s.strip_prefix("rfc822:"))
        {
            return if e.is_empty() {
                Err(err())
            } else {
                Ok(Identity::UserFqdn(e.to_string()))
            };
        }
        if let Ok(ip) = s.parse::<IpAddr>() {
            return Ok(Identity::from(ip));
        }
        if s.contains('=') {
            return DnName::parse(s).map(Identity::Dn).ok_or_else(err);
        }
        if s.contains('@') {
            return Ok(Identity::UserFqdn(s.to_string()));
        }
        Ok(Identity::Fqdn(s.to_string()))
    }

    /// The (type, data) pair for an ID payload. `None` for `%any`.
    pub fn to_wire(&self) -> Option<(IdType, Vec<u8>)> {
        Some(match self {
            Identity::Ipv4(a) => (IdType::IPV4_ADDR, a.octets().to_vec()),
            Identity::Ipv6(a) => (IdType::IPV6_ADDR, a.octets().to_vec()),
            Identity::Fqdn(s) => (IdType::FQDN, s.as_bytes().to_vec()),
            Identity::UserFqdn(s) => (IdType::RFC822_ADDR, s.as_bytes().to_vec()),
            Identity::KeyId(k) => (IdType::KEY_ID, k.clone()),
            Identity::Dn(d) => (IdType::DER_ASN1_DN, d.der()?.to_vec()),
            Identity::Any => return None,
        })
    }

    /// From a received ID payload. Types we do not handle (DNs, GNs) and
    /// malformed data give `None`; the caller treats that as an
    /// authentication failure (the identity cannot match any configuration).
    pub fn from_wire(id_type: IdType, data: &[u8]) -> Option<Self> {
        Some(match id_type {
            IdType::IPV4_ADDR => Identity::Ipv4(Ipv4Addr::from(<[u8; 4]>::try_from(data).ok()?)),
            IdType::IPV6_ADDR => Identity::Ipv6(Ipv6Addr::from(<[u8; 16]>::try_from(data).ok()?)),
            IdType::FQDN => Identity::Fqdn(String::from_utf8(data.to_vec()).ok()?),
            IdType::RFC822_ADDR => Identity::UserFqdn(String::from_utf8(data.to_vec()).ok()?),
            IdType::KEY_ID => Identity::KeyId(data.to_vec()),
            IdType::DER_ASN1_DN => Identity::Dn(DnName::from_der(data)?),
            _ => return None,
        })
    }

    /// Does `self` (a configured identity, possibly `%any`) accept `other`?
    pub fn matches(&self, other: &Identity) -> bool {
        match (self, other) {
            (Identity::Any, _) => true,
            (Identity::Fqdn(a), Identity::Fqdn(b))
            | (Identity::UserFqdn(a), Identity::UserFqdn(b)) => a.eq_ignore_ascii_case(b),
            (a, b) => a == b,
        }
    }

    /// True for `%any`.
    pub fn is_any(&self) -> bool {
        matches!(self, Identity::Any)
    }

    /// The identity with ASCII case folded where [`Identity::matches`]
    /// ignores it (FQDN, e-mail), for hash lookups: for any `a` other than
    /// `%any`, `a.matches(b)` exactly when `a.folded() == b.folded()`.
    pub fn folded(&self) -> Identity {
        match self {
            Identity::Fqdn(s) => Identity::Fqdn(s.to_ascii_lowercase()),
            Identity::UserFqdn(s) => Identity::UserFqdn(s.to_ascii_lowercase()),
            other => other.clone(),
        }
    }

    /// [`Identity::folded`], borrowed when folding changes nothing (a
    /// lookup then allocates nothing).
    pub fn folded_ref(&self) -> std::borrow::Cow<'_, Identity> {
        match self {
            Identity::Fqdn(s) | Identity::UserFqdn(s) if s.bytes().any(|b| b.is_ascii_uppercase()) => {
                std::borrow::Cow::Owned(self.folded())
            }
            other => std::borrow::Cow::Borrowed(other),
        }
    }
}

impl From<IpAddr> for Identity {
    fn from(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(a) => Identity::Ipv4(a),
            IpAddr::V6(a) => Identity::Ipv6(a),
        }
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Identity::Ipv4(a) => write!(f, "{a}"),
            Identity::Ipv6(a) => write!(f, "{a}"),
            Identity::Fqdn(s) => write!(f, "@{}", s.escape_debug()),
            Identity::UserFqdn(s) => write!(f, "{}", s.escape_debug()),
            Identity::KeyId(k) => {
                f.write_str("keyid:")?;
                k.iter().try_for_each(|b| write!(f, "{b:02x}"))
            }
            Identity::Dn(d) => write!(f, "\"{d}\""),
            Identity::Any => f.write_str("%any"),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn parses_notations() {
        assert_eq!(
            Identity::parse("192.0.2.1").unwrap(),
            Identity::Ipv4([192, 0, 2, 1].into())
        );
        assert!(matches!(
            Identity::parse("2001:db8::1").unwrap(),
            Identity::Ipv6(_)
        ));
        assert_eq!(
            Identity::parse("@moon.example").unwrap(),
            Identity::Fqdn("moon.example".into())
        );
        assert_eq!(
            Identity::parse("moon.example").unwrap(),
            Identity::Fqdn("moon.example".into())
        );
        assert_eq!(
            Identity::parse("carol@example.org").unwrap(),
            Identity::UserFqdn("carol@example.org".into())
        );
        assert_eq!(
            Identity::parse("keyid:0a0B").unwrap(),
            Identity::KeyId(vec![0x0a, 0x0b])
        );
        assert_eq!(
            Identity::parse("@#0a0b").unwrap(),
            Identity::KeyId(vec![0x0a, 0x0b])
        );
        assert_eq!(Identity::parse("%any").unwrap(), Identity::Any);
        assert_eq!(
            Identity::parse("c=CH,O = strongSwan").unwrap(),
            Identity::parse("C=CH, O=strongswan").unwrap()
        );
        assert!(Identity::parse("C=CH, strongSwan").is_err());
        assert!(Identity::parse("keyid:abc").is_err());
        assert!(Identity::parse("@").is_err());
    }

    #[test]
    fn wire_round_trip() {
        for s in [
            "192.0.2.1",
            "2001:db8::1",
            "@moon.example",
            "carol@example.org",
            "keyid:0102",
        ] {
            let id = Identity::parse(s).unwrap();
            let (t, d) = id.to_wire().unwrap();
            assert_eq!(Identity::from_wire(t, &d).unwrap(), id, "{s}");
        }
        assert_eq!(Identity::from_wire(IdType::IPV4_ADDR, &[1, 2, 3]), None);
        assert_eq!(Identity::from_wire(IdType::DER_ASN1_DN, &[1]), None);
        // A DN typed in the configuration has no DER to send.
        assert_eq!(Identity::parse("CN=moon").unwrap().to_wire(), None);
        assert_eq!(Identity::Any.to_wire(), None);
    }

    #[test]
    fn matching() {
        let moon = Identity::parse("@Moon.Example").unwrap();
        assert!(moon.matches(&Identity::Fqdn("moon.example".into())));
        assert!(!moon.matches(&Identity::UserFqdn("moon.example".into())));
        assert!(Identity::Any.matches(&moon));
        assert!(!moon.matches(&Identity::Any));
    }

    fn arb_identity() -> impl proptest::strategy::Strategy<Value = Identity> {
        use proptest::prelude::*;
        prop_oneof![
            "[a-cA-C.]{1,4}".prop_map(Identity::Fqdn),
            "[a-cA-C@]{1,4}".prop_map(Identity::UserFqdn),
            any::<[u8; 4]>().prop_map(|a| Identity::Ipv4(a.into())),
            proptest::collection::vec(0u8..3, 0..3).prop_map(Identity::KeyId),
            Just(Identity::Any),
        ]
    }

    proptest::proptest! {
        /// Folding is what lets identities be hash keys: it agrees with
        /// `matches` for every configured identity but `%any`.
        #[test]
        fn folded_equality_is_matching(a in arb_identity(), b in arb_identity()) {
            proptest::prop_assume!(!a.is_any());
            proptest::prop_assert_eq!(a.matches(&b), a.folded() == b.folded());
        }
    }
}
