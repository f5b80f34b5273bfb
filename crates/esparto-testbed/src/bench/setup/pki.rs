//! The certificates of a `bench setup --auth ecdsa|rsa|ed25519` run: a CA
//! and one certificate per side, all of the chosen key type, made with
//! rcgen into a temporary directory that both peers read.
//!
//! Files (DER): `ca.der`, `initiator.der` + `initiator.key` (identity
//! `spoke0.bench`), `responder.der` + `responder.key` (`responder.bench`),
//! matching the identities of [`super::peer`]'s single connection.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use esparto_ike::cert::{LocalCredential, SigningKey, TrustStore};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};

/// How the tunnels of the run authenticate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Auth {
    /// Pre-shared keys.
    Psk,
    /// ECDSA P-256 with SHA-256.
    Ecdsa,
    /// Ed25519.
    Ed25519,
    /// RSA 3072 with PKCS#1 v1.5 and SHA-256.
    Rsa,
}

impl Auth {
    /// From `--auth`.
    pub fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "psk" => Auth::Psk,
            "ecdsa" => Auth::Ecdsa,
            "ed25519" => Auth::Ed25519,
            "rsa" => Auth::Rsa,
            _ => bail!("--auth {s}: psk, ecdsa, ed25519 or rsa"),
        })
    }

    /// The name in the report.
    pub fn name(self) -> &'static str {
        match self {
            Auth::Psk => "psk",
            Auth::Ecdsa => "ecdsa-p256",
            Auth::Ed25519 => "ed25519",
            Auth::Rsa => "rsa-3072",
        }
    }

    fn key(self) -> Result<KeyPair> {
        Ok(match self {
            Auth::Ecdsa | Auth::Psk => KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?,
            Auth::Ed25519 => KeyPair::generate_for(&rcgen::PKCS_ED25519)?,
            Auth::Rsa => KeyPair::generate_rsa_for(&rcgen::PKCS_RSA_SHA256, rcgen::RsaKeySize::_3072)?,
        })
    }
}

/// Make the run's PKI in a fresh temporary directory.
pub fn make(auth: Auth) -> Result<crate::WorkDir> {
    let dir = crate::WorkDir::new("bench-pki")?;
    let ca_key = auth.key()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.distinguished_name.push(DnType::CommonName, "bench CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    std::fs::write(dir.join("ca.der"), ca.self_signed(&ca_key)?.der())?;
    let issuer = Issuer::from_params(&ca, &ca_key);
    for (side, name) in [("initiator", "spoke0.bench"), ("responder", "responder.bench")] {
        let key = auth.key()?;
        let mut p = CertificateParams::new(vec![name.to_string()])?;
        p.distinguished_name.push(DnType::CommonName, name);
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        std::fs::write(dir.join(&format!("{side}.der")), p.signed_by(&key, &issuer)?.der())?;
        std::fs::write(dir.join(&format!("{side}.key")), key.serialize_der())?;
    }
    Ok(dir)
}

/// One side's credential and the trust store for the other.
pub fn load(dir: &Path, initiator: bool) -> Result<(Arc<LocalCredential>, Arc<TrustStore>)> {
    let side = if initiator { "initiator" } else { "responder" };
    let read = |f: &str| std::fs::read(dir.join(f)).with_context(|| format!("reading {f}"));
    let key = SigningKey::from_pkcs8(&read(&format!("{side}.key"))?, false)?;
    let cred = LocalCredential::new(vec![read(&format!("{side}.der"))?], key)?;
    let trust = TrustStore::new(vec![read("ca.der")?], &[])?;
    Ok((Arc::new(cred), Arc::new(trust)))
}
