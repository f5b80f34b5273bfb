//! Certificates for the simulations, made with rcgen around the
//! simulation's calendar time ([`super::WALL_CLOCK_START`]) rather than the
//! machine's: a certificate valid "now" in a simulation is years from
//! being valid by the real clock, so a test passes only if the engine
//! checks validity at the time it was given.

use super::WALL_CLOCK_START;
use esparto_ike::cert::{LocalCredential, SigningKey, TrustStore};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    SerialNumber, SignatureAlgorithm,
};
use std::sync::Arc;
use time::OffsetDateTime;

/// One day, in seconds.
pub const DAY: i64 = 86_400;

/// A root CA.
pub struct Ca {
    params: CertificateParams,
    key: KeyPair,
    der: Vec<u8>,
    serial: u64,
}

/// A certificate and its key, as a credential.
pub struct Cert {
    pub der: Vec<u8>,
    pub credential: Arc<LocalCredential>,
}

/// The calendar time `offset` seconds after the simulation's start.
fn at(offset: i64) -> OffsetDateTime {
    let start = i64::try_from(WALL_CLOCK_START).unwrap();
    OffsetDateTime::from_unix_timestamp(start + offset).unwrap()
}

impl Ca {
    /// A root valid from a year before the simulation's start to ten years
    /// after it.
    pub fn new(alg: &'static SignatureAlgorithm) -> Self {
        let key = KeyPair::generate_for(alg).unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::OrganizationName, "Esparto Sim");
        params.distinguished_name.push(DnType::CommonName, "Sim Root");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params.not_before = at(-365 * DAY);
        params.not_after = at(3650 * DAY);
        let der = params.self_signed(&key).unwrap().der().to_vec();
        Ca { params, key, der, serial: 1 }
    }

    /// The trust store of a connection that accepts this CA.
    pub fn trust(&self) -> Arc<TrustStore> {
        Arc::new(TrustStore::new(vec![self.der.clone()], &[]).unwrap())
    }

    /// An end entity for the DNS name `dns`, valid from `from` to `until`
    /// seconds relative to the simulation's start.
    pub fn issue(&mut self, dns: &str, alg: &'static SignatureAlgorithm, from: i64, until: i64) -> Cert {
        let key = KeyPair::generate_for(alg).unwrap();
        let mut p = CertificateParams::new(vec![dns.to_string()]).unwrap();
        p.distinguished_name.push(DnType::OrganizationName, "Esparto Sim");
        p.distinguished_name.push(DnType::CommonName, dns);
        self.serial += 1;
        p.serial_number = Some(SerialNumber::from(self.serial));
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        p.not_before = at(from);
        p.not_after = at(until);
        let issuer = Issuer::from_params(&self.params, &self.key);
        let der = p.signed_by(&key, &issuer).unwrap().der().to_vec();
        let signing = SigningKey::from_pkcs8(&key.serialize_der(), false).unwrap();
        let credential = Arc::new(LocalCredential::new(vec![der.clone()], signing).unwrap());
        Cert { der, credential }
    }
}
