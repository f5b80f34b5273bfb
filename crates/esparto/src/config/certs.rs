//! Certificates, private keys and CAs, as in swanctl.conf.
//!
//! ```toml
//! [authorities.example]          # CAs every pubkey connection trusts
//! cacert = "ca.crt"              # PEM or DER
//! crl = "ca.crl"                 # optional, PEM or DER
//!
//! [connections.gw]
//! local  = { auth = "pubkey", certs = ["moon.crt", "intermediate.crt"], key = "moon.key", id = "moon.example" }
//! remote = { auth = "pubkey", id = "sun.example", cacerts = ["ca.crt"] }   # cacerts pins the CA
//! ```
//!
//! Everything is read and checked while the file loads, so `check-config`
//! reports what the daemon would refuse: files that do not load, a key
//! that is not the certificate's, a private key others may read (an
//! error: the key is the gateway's identity), a chain that does not build
//! to any configured CA, and certificates that expire within
//! [`EXPIRY_WARNING_DAYS`].

use super::error::KeyPath;
use super::tree::{Cx, Field, Node};
use esparto_ike::cert::{
    LocalCredential, SigningKey, TrustStore, certs_from_file, crl_from_file, key_from_file,
};
use std::sync::Arc;
use std::time::SystemTime;

/// Warn about certificates that expire within this many days.
pub(crate) const EXPIRY_WARNING_DAYS: i64 = 30;

const AUTHORITY_KEYS: &[&str] = &["cacert", "crl"];

/// The `[authorities]`: CA certificates and CRLs, DER.
#[derive(Default)]
pub(crate) struct Authorities {
    pub(crate) cas: Vec<Vec<u8>>,
    pub(crate) crls: Vec<Vec<u8>>,
    /// Entries written, whether their files loaded or not.
    pub(crate) entries: usize,
}

/// The contents of the file `name` names, or in a tree loaded over VICI
/// the data it holds (swanctl sends a file's contents, not its name).
fn read(cx: &mut Cx<'_>, f: &Field<'_>, name: &str) -> Option<Vec<u8>> {
    if cx.grafted(&f.node.span) {
        return match super::layer::inline_data(name) {
            Some(Ok(data)) => Some(data),
            Some(Err(e)) => {
                cx.err_at(f, e);
                None
            }
            None => {
                cx.err_at(f, format!("'{name}': over VICI a certificate is given by its contents, not a file name"));
                None
            }
        };
    }
    match std::fs::read(cx.dir.join(name)) {
        Ok(b) => Some(b),
        Err(e) => {
            cx.err_at(f, format!("cannot read '{name}': {e}"));
            None
        }
    }
}

/// `name` as messages show it: quoted, or what it is if it is data.
fn shown(name: &str) -> String {
    if name.starts_with(super::layer::INLINE) { "the data given over VICI".into() } else { format!("'{name}'") }
}

fn load_certs(cx: &mut Cx<'_>, f: &Field<'_>, name: &str) -> Vec<Vec<u8>> {
    let Some(bytes) = read(cx, f, name) else { return vec![] };
    match certs_from_file(&bytes) {
        Ok(c) => c,
        Err(e) => {
            cx.err_at(f, format!("{}: {e}", shown(name)));
            vec![]
        }
    }
}

fn load_crl(cx: &mut Cx<'_>, f: &Field<'_>, name: &str) -> Option<Vec<u8>> {
    let bytes = read(cx, f, name)?;
    crl_from_file(&bytes).map_err(|e| cx.err_at(f, format!("{}: {e}", shown(name)))).ok()
}

/// Parse `[authorities.*]`.
pub(crate) fn authorities(cx: &mut Cx<'_>, root: &Node) -> Authorities {
    let mut out = Authorities::default();
    let Some(f) = root.field(&KeyPath::root(), "authorities") else {
        return out;
    };
    let Some(t) = cx.table(&f) else { return out };
    out.entries = t.entries().len();
    for e in t.entries() {
        let path = f.path.key(&e.key);
        let Some(n) = cx.table(&Field { node: &e.value, path: path.clone() }) else {
            continue;
        };
        cx.check_keys(n, &path, AUTHORITY_KEYS, &[]);
        match n.field(&path, "cacert") {
            Some(cf) => {
                if let Some(name) = cx.str(&cf) {
                    out.cas.extend(load_certs(cx, &cf, name));
                }
            }
            None => cx.err(&n.span, &path, "an authority needs 'cacert'"),
        }
        if let Some(cf) = n.field(&path, "crl") {
            if let Some(name) = cx.str(&cf) {
                out.crls.extend(load_crl(cx, &cf, name));
            }
        }
    }
    out
}

/// `local.certs` and `local.key`: our credential. An RSA key signs with
/// RSASSA-PSS when `rsa_pss` (`auth = "rsa/pss"`), else PKCS#1 v1.5.
pub(crate) fn local_credential(
    cx: &mut Cx<'_>,
    side: &Field<'_>,
    t: &Node,
    rsa_pss: bool,
) -> Option<Arc<LocalCredential>> {
    let Some(cf) = t.field(&side.path, "certs") else {
        cx.err_at(side, "auth = \"pubkey\" needs 'certs' (our certificate, then intermediates)");
        return None;
    };
    let mut chain = Vec::new();
    for (f, name) in cx.str_list(&cf) {
        chain.extend(load_certs(cx, &f, name));
    }
    if cx.grafted(&side.node.span) {
        return vici_credential(cx, &cf, chain, rsa_pss);
    }
    let Some(kf) = t.field(&side.path, "key") else {
        cx.err_at(side, "auth = \"pubkey\" needs 'key' (the PKCS#8 private key file)");
        return None;
    };
    let name = cx.str(&kf)?;
    let key_path = cx.dir.join(name);
    let bytes = read(cx, &kf, name)?;
    if let Some(w) = super::hygiene::exposed(&key_path) {
        cx.err_at(&kf, w);
    }
    let key = key_from_file(&bytes, rsa_pss)
        .map_err(|e| cx.err_at(&kf, format!("'{name}': {e}")))
        .ok()?;
    if chain.is_empty() {
        return None;
    }
    let cred = LocalCredential::new(chain, key)
        .map_err(|e| cx.err_at(&cf, e.to_string()))
        .ok()?;
    expiry(cx, &cf, cred.not_after(), "our certificate");
    Some(Arc::new(cred))
}

/// Our credential in a connection loaded over VICI: the certificates it
/// came with and, of the private keys loaded over VICI (`load-key`), the
/// one that is the certificate's, as charon finds it.
fn vici_credential(cx: &mut Cx<'_>, cf: &Field<'_>, chain: Vec<Vec<u8>>, rsa_pss: bool) -> Option<Arc<LocalCredential>> {
    if chain.is_empty() {
        return None;
    }
    let keys = cx.vici_keys;
    let mut refused = Vec::new();
    for (id, pkcs8) in keys {
        let Ok(key) = SigningKey::from_pkcs8(pkcs8, rsa_pss) else { continue };
        match LocalCredential::new(chain.clone(), key) {
            Ok(cred) => {
                expiry(cx, cf, cred.not_after(), "our certificate");
                return Some(Arc::new(cred));
            }
            Err(e) => refused.push(format!("{id}: {e}")),
        }
    }
    cx.err_at(
        cf,
        format!(
            "none of the {} private keys loaded over VICI is this certificate's; load it first \
             (load-key: swanctl's private/, rsa/ or ecdsa/ directory){}",
            keys.len(),
            if refused.len() == 1 { format!(" ({})", refused[0]) } else { String::new() }
        ),
    );
    None
}

/// `remote.cacerts` (pinned) or every authority, with their CRLs.
pub(crate) fn remote_trust(
    cx: &mut Cx<'_>,
    side: &Field<'_>,
    t: &Node,
    auth: &Authorities,
) -> Option<Arc<TrustStore>> {
    let mut crls = auth.crls.clone();
    if let Some(cf) = t.field(&side.path, "crls") {
        for (f, name) in cx.str_list(&cf) {
            crls.extend(load_crl(cx, &f, name));
        }
    }
    let cas = match t.field(&side.path, "cacerts") {
        Some(cf) => {
            let mut cas = Vec::new();
            for (f, name) in cx.str_list(&cf) {
                cas.extend(load_certs(cx, &f, name));
            }
            cas
        }
        None if auth.cas.is_empty() => {
            // An entry whose CA did not load has its own error.
            if auth.entries == 0 {
                cx.err_at(side, "auth = \"pubkey\" needs 'cacerts' here or an [authorities] entry");
            }
            return None;
        }
        None => auth.cas.clone(),
    };
    if cas.is_empty() {
        return None;
    }
    let at = t.field(&side.path, "cacerts").unwrap_or_else(|| side.clone());
    TrustStore::new(cas, &crls)
        .map_err(|e| cx.err_at(&at, e.to_string()))
        .ok()
        .map(Arc::new)
}

/// Check that our chain builds to one of the CAs we know (the peer needs
/// the same CA); warn if not, since the peer may trust another.
pub(crate) fn check_chain(cx: &mut Cx<'_>, at: &Field<'_>, cred: &LocalCredential, trust: Option<&TrustStore>, auth: &Authorities) {
    let now = esparto_ike::UnixTime::now();
    let mut stores = Vec::new();
    if let Some(t) = trust {
        stores.push(t);
    }
    let all = (!auth.cas.is_empty()).then(|| TrustStore::new(auth.cas.clone(), &auth.crls).ok()).flatten();
    if let Some(a) = &all {
        stores.push(a);
    }
    if stores.is_empty() {
        return;
    }
    let errors: Vec<String> = stores.iter().filter_map(|s| s.accepts(cred, now).err()).map(|e| e.to_string()).collect();
    if errors.len() == stores.len() {
        cx.warn(&at.node.span, &at.path, format!(
            "our certificate does not chain to any CA configured here ({}); the peer must trust its CA and receive the intermediates through 'certs'",
            errors.join("; ")
        ));
    }
}

fn expiry(cx: &mut Cx<'_>, at: &Field<'_>, not_after: i64, what: &str) {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    let left = (not_after - now) / 86_400;
    if not_after < now {
        cx.warn(&at.node.span, &at.path, format!("{what} has expired"));
    } else if left < EXPIRY_WARNING_DAYS {
        cx.warn(&at.node.span, &at.path, format!("{what} expires in {left} days"));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
    use std::os::unix::fs::PermissionsExt;
    use std::path::Path;
    use std::time::Duration;

    /// A CA and two end entities (`moon`, `sun`), as PEM files in `dir`:
    /// ca.crt, moon.crt, moon.key, sun.crt, sun.key. `moon_days` is how
    /// long moon's certificate stays valid.
    fn pki(dir: &Path, moon_days: u64) {
        let now = time::OffsetDateTime::now_utc();
        let day = Duration::from_secs(86_400);
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.distinguished_name.push(DnType::CommonName, "Test CA");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        std::fs::write(dir.join("ca.crt"), ca_cert.pem()).unwrap();
        let issuer = Issuer::from_params(&ca, &ca_key);
        for (name, days) in [("moon", moon_days), ("sun", 365)] {
            let key = KeyPair::generate().unwrap();
            let mut p = CertificateParams::new(vec![format!("{name}.example")]).unwrap();
            p.distinguished_name.push(DnType::CommonName, name);
            p.not_before = now - day;
            p.not_after = now + day * u32::try_from(days).unwrap();
            let c = p.signed_by(&key, &issuer).unwrap();
            std::fs::write(dir.join(format!("{name}.crt")), c.pem()).unwrap();
            let kp = dir.join(format!("{name}.key"));
            std::fs::write(&kp, key.serialize_pem()).unwrap();
            std::fs::set_permissions(&kp, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
    }

    fn config(dir: &Path, local: &str, remote: &str) -> Result<crate::config::Config, String> {
        let text = format!(
            r#"[authorities.test]
cacert = "ca.crt"

[connections.gw]
local_addrs = "192.0.2.1"
remote_addrs = "192.0.2.2"
proposals = "aes256gcm16-prfsha256-x25519"
local = {{ {local} }}
remote = {{ {remote} }}
[connections.gw.children.net]
local_ts = "10.1.0.0/16"
remote_ts = "10.2.0.0/16"
esp_proposals = "aes256gcm16"
"#
        );
        let path = dir.join("esparto.toml");
        std::fs::write(&path, text).unwrap();
        crate::config::load(&path).map_err(|e| e.to_string())
    }

    const MOON: &str = r#"auth = "pubkey", certs = ["moon.crt"], key = "moon.key", id = "moon.example""#;
    const SUN: &str = r#"auth = "pubkey", id = "sun.example""#;

    #[test]
    fn pubkey_connection_loads_without_secrets() {
        let dir = tempfile::tempdir().unwrap();
        pki(dir.path(), 365);
        let c = config(dir.path(), MOON, SUN).unwrap();
        assert!(c.warnings.is_empty(), "{:?}", c.warnings.iter().map(ToString::to_string).collect::<Vec<_>>());
        let ike = c.connections[0].ike.as_ref().unwrap();
        assert!(ike.local.credential.is_some() && ike.remote.trust.is_some());
        // Pinned per connection: the same CA through remote.cacerts.
        let pinned = format!(r#"{SUN}, cacerts = ["ca.crt"]"#);
        assert!(config(dir.path(), MOON, &pinned).is_ok());
        // No id: the subject DN.
        let no_id = r#"auth = "pubkey", certs = "moon.crt", key = "moon.key""#;
        let c = config(dir.path(), no_id, SUN).unwrap();
        let id = c.connections[0].ike.as_ref().unwrap().local_id("192.0.2.1".parse().unwrap());
        assert_eq!(id.to_string(), "\"CN=moon\"");
    }

    #[test]
    fn check_config_refuses_what_would_not_work() {
        let dir = tempfile::tempdir().unwrap();
        pki(dir.path(), 365);
        let wrong_key = r#"auth = "pubkey", certs = ["moon.crt"], key = "sun.key""#;
        let e = config(dir.path(), wrong_key, SUN).unwrap_err();
        assert!(e.contains("does not belong to the certificate"), "{e}");
        let wrong_id = r#"auth = "pubkey", certs = ["moon.crt"], key = "moon.key", id = "mars.example""#;
        let e = config(dir.path(), wrong_id, SUN).unwrap_err();
        assert!(e.contains("does not name @mars.example"), "{e}");
        let missing = r#"auth = "pubkey", certs = ["nope.crt"], key = "moon.key""#;
        let e = config(dir.path(), missing, SUN).unwrap_err();
        assert!(e.contains("cannot read 'nope.crt'"), "{e}");
        let not_ca = format!(r#"{SUN}, cacerts = ["sun.crt"]"#);
        let e = config(dir.path(), MOON, &not_ca).unwrap_err();
        assert!(e.contains("not a CA certificate"), "{e}");
        std::fs::set_permissions(dir.path().join("moon.key"), std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = config(dir.path(), MOON, SUN).unwrap_err();
        assert!(e.contains("chmod 600"), "{e}");
    }

    #[test]
    fn warns_of_expiry_within_30_days() {
        let dir = tempfile::tempdir().unwrap();
        pki(dir.path(), 10);
        let c = config(dir.path(), MOON, SUN).unwrap();
        let w: Vec<String> = c.warnings.iter().map(ToString::to_string).collect();
        assert!(w.iter().any(|w| w.contains("expires in")), "{w:?}");
    }
}
