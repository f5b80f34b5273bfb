//! What a certificate names: its subject DN and subjectAltNames, read with
//! x509-parser, and whether an IKE identity is one of them (RFC 4945
//! §3.1). Our credential is checked against them when it is loaded, the
//! peer's chain when it is verified.

use super::{CertRefusal, MAX_CERT_LEN};
use crate::identity::{DnName, Identity};
use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};

/// What a certificate says about its subject, read with x509-parser.
#[derive(Debug, Clone)]
pub(super) struct CertNames {
    /// The subject DN, if it renders as one.
    pub(super) subject: Option<DnName>,
    /// subjectAltNames: DNS names and e-mail addresses (lowercased), IP
    /// addresses (4 or 16 octets).
    dns: Vec<String>,
    email: Vec<String>,
    ip: Vec<Vec<u8>>,
    /// The keyUsage extension allows signatures (or is absent).
    pub(super) may_sign: bool,
    /// notAfter, seconds since the epoch.
    pub(super) not_after: i64,
    /// The raw subjectPublicKey.
    pub(super) public_key: Vec<u8>,
}

/// Parse one DER certificate, refusing trailing data and anything over
/// [`MAX_CERT_LEN`].
pub(super) fn parse_cert(der: &[u8]) -> Result<X509Certificate<'_>, CertRefusal> {
    if der.len() > MAX_CERT_LEN {
        return Err(CertRefusal::Oversized);
    }
    match X509Certificate::from_der(der) {
        Ok(([], c)) => Ok(c),
        Ok(_) => Err(CertRefusal::Invalid("trailing data after the certificate".into())),
        Err(e) => Err(CertRefusal::Invalid(format!("does not parse: {e}"))),
    }
}

impl CertNames {
    /// What `der` names.
    pub(super) fn read(der: &[u8]) -> Result<Self, CertRefusal> {
        let c = parse_cert(der)?;
        let subject = DnName::from_der(c.subject().as_raw());
        let (mut dns, mut email, mut ip) = (Vec::new(), Vec::new(), Vec::new());
        let san = c
            .subject_alternative_name()
            .map_err(|e| CertRefusal::Invalid(format!("subjectAltName: {e}")))?;
        if let Some(san) = san {
            for n in &san.value.general_names {
                match n {
                    GeneralName::DNSName(d) => dns.push(d.to_ascii_lowercase()),
                    GeneralName::RFC822Name(e) => email.push(e.to_ascii_lowercase()),
                    GeneralName::IPAddress(a) => ip.push(a.to_vec()),
                    _ => {}
                }
            }
        }
        let ku = c
            .key_usage()
            .map_err(|e| CertRefusal::Invalid(format!("keyUsage: {e}")))?;
        // RFC 4945 §5.1.3.2: digitalSignature or nonRepudiation.
        let may_sign = ku.is_none_or(|k| k.value.digital_signature() || k.value.non_repudiation());
        Ok(CertNames {
            subject,
            dns,
            email,
            ip,
            may_sign,
            not_after: c.validity().not_after.timestamp(),
            public_key: c.public_key().subject_public_key.data.to_vec(),
        })
    }

    /// RFC 4945 §3.1: the ID must be the subject (ID_DER_ASN1_DN) or a
    /// subjectAltName of its own type.
    pub(super) fn binds(&self, id: &Identity) -> bool {
        match id {
            Identity::Dn(d) => self.subject.as_ref() == Some(d),
            Identity::Fqdn(f) => self.dns.iter().any(|d| d.eq_ignore_ascii_case(f)),
            Identity::UserFqdn(e) => self.email.iter().any(|m| m.eq_ignore_ascii_case(e)),
            Identity::Ipv4(a) => self.ip.iter().any(|i| i.as_slice() == a.octets()),
            Identity::Ipv6(a) => self.ip.iter().any(|i| i.as_slice() == a.octets()),
            Identity::KeyId(_) | Identity::Any => false,
        }
    }
}
