//! Credentials over VICI: `load-cert`, `load-key`, `unload-key`,
//! `load-authority`, `unload-authority` (`get-keys` and `get-authorities`
//! answer with `get-conns` in `load.rs`),
//! `list-authorities`, `clear-creds`, `flush-certs` — what `swanctl
//! --load-creds` and `--load-authorities` send from `x509/`, `x509ca/`,
//! `private/`, `rsa/`, `ecdsa/`, `pkcs8/` and the `authorities` section.
//!
//! They live in the daemon's VICI layer beside the TOML file's
//! credentials (`config::layer`), and every change is checked and applied
//! as a reload: a CA certificate (`flag = CA`) is trusted as an
//! `[authorities]` entry is, by every connection without `cacerts`; a
//! private key is the one a connection loaded over VICI signs with if it
//! is its certificate's (charon finds keys so). End-entity certificates
//! are kept and listed (`list-certs`); a connection names its own in
//! `local.certs`, which swanctl sends with the connection.
//!
//! Not supported, and refused saying so: CRLs, OCSP responses, attribute
//! certificates and raw public keys as certificates; Ed448 keys; fetching
//! CRLs or OCSP (`crl_uris`, `ocsp_uris`, `cert_uri_base`); smartcards.

use esparto_ike::cert::{SigningKey, cert_subject, certs_from_file, pkcs8_from_der};
use esparto_wire::vici::{Builder, Section, Value};

use super::commands::{Cx, Emit, failure, finish, raise, success};
use crate::config::{LayerValue, inline};
use crate::control::{Request, Response};

/// `load-cert`: `{ type = X509, flag = NONE|CA, data = … }`.
pub(super) fn load_cert(req: &Section, cx: &mut Cx<'_>) -> Vec<u8> {
    let kind = req.str("type").unwrap_or("X509").to_ascii_uppercase();
    let flag = req.str("flag").unwrap_or("NONE").to_ascii_uppercase();
    let why = match kind.as_str() {
        "X509" => match flag.as_str() {
            "NONE" | "CA" => None,
            "AA" => Some("attribute authorities are not supported"),
            "OCSP" => Some("OCSP signers are not supported: Esparto checks revocation with CRLs only"),
            _ => Some("unknown flag"),
        },
        "X509_CRL" => Some("CRLs over VICI are not supported yet; give one as `crl` of an [authorities] entry of esparto.toml"),
        "X509_AC" => Some("attribute certificates are not supported"),
        "OCSP_RESPONSE" => Some("OCSP is not supported: Esparto checks revocation with CRLs only"),
        "PUBKEY" => Some("raw public keys are not supported: authenticate with certificates or a PSK"),
        _ => Some("unknown certificate type"),
    };
    if let Some(why) = why {
        return failure(&format!("load-cert type {kind} flag {flag}: {why}"));
    }
    let Some(Value::Str(data)) = req.get("data") else {
        return failure("load-cert: data missing");
    };
    let certs = match certs_from_file(data) {
        Ok(c) => c,
        Err(e) => return failure(&format!("load-cert: {e}")),
    };
    for der in certs {
        if let Response::Error(e) = cx.backend.request(&Request::LoadCert { der, ca: flag == "CA" }) {
            return failure(&e);
        }
    }
    finish(success())
}

/// `load-key`: `{ type = rsa|ecdsa|ed25519|any, data = … }`; answers its
/// `id`.
pub(super) fn load_key(req: &Section, cx: &mut Cx<'_>) -> Vec<u8> {
    let kind = req.str("type").unwrap_or("any").to_ascii_lowercase();
    if !["any", "rsa", "ecdsa", "ed25519"].contains(&kind.as_str()) {
        return failure(&format!("load-key type {kind}: not supported (ECDSA P-256/P-384, Ed25519 and RSA keys are)"));
    }
    let Some(Value::Str(data)) = req.get("data") else {
        return failure("load-key: data missing");
    };
    let pkcs8 = match pkcs8_from_der(data) {
        Ok(k) => k,
        Err(e) => return failure(&format!("load-key ({kind}): {e}")),
    };
    let id = match SigningKey::from_pkcs8(&pkcs8, false) {
        Ok(k) => k.key_id(),
        Err(e) => return failure(&format!("load-key ({kind}): {e}")),
    };
    match cx.backend.request(&Request::LoadKey { id: id.clone(), pkcs8 }) {
        Response::Error(e) => failure(&e),
        _ => {
            let mut b = success();
            b.kv("id", &id);
            finish(b)
        }
    }
}

/// `unload-key`: `{ id = … }`.
pub(super) fn unload_key(req: &Section, cx: &mut Cx<'_>) -> Vec<u8> {
    let Some(id) = req.str("id") else {
        return failure("unload-key: id missing");
    };
    super::load::applied(cx.backend.request(&Request::UnloadKey { id: id.to_string() }))
}

/// `load-authority`: `{ NAME = { cacert = …, … } }`.
pub(super) fn load_authority(req: &Section, cx: &mut Cx<'_>) -> Vec<u8> {
    match authority_value(req) {
        Ok((name, authority)) => super::load::applied(cx.backend.request(&Request::LoadAuthority { name, authority })),
        Err(e) => failure(&format!("load-authority: {e}")),
    }
}

/// A `load-authority` request's name and its `[authorities]` table.
pub fn authority_value(req: &Section) -> Result<(String, LayerValue), String> {
    let (name, a) = match req.entries.as_slice() {
        [(name, Value::Section(a))] => (name, a),
        _ => return Err("expected one section, named after the authority".into()),
    };
    let mut table = Vec::new();
    for (k, v) in &a.entries {
        match (k.as_str(), v) {
            ("cacert", Value::Str(data)) => table.push(("cacert".to_string(), LayerValue::Str(inline(data)))),
            ("crl_uris" | "ocsp_uris" | "cert_uri_base", _) => {
                return Err(format!(
                    "'{name}'.{k}: fetching CRLs or OCSP responses is not supported; give the CRL as `crl` of the \
                     authority in esparto.toml"
                ));
            }
            ("file" | "handle" | "slot" | "module", _) => {
                return Err(format!("'{name}'.{k}: Esparto has no smartcard support; give the CA certificate as cacert"));
            }
            _ => return Err(format!("'{name}'.{k}: unknown key (an authority takes cacert)")),
        }
    }
    if table.is_empty() {
        return Err(format!("'{name}': an authority needs cacert"));
    }
    Ok((name.clone(), LayerValue::Section(table)))
}

/// `unload-authority`: `{ name = … }`.
pub(super) fn unload_authority(req: &Section, cx: &mut Cx<'_>) -> Vec<u8> {
    let Some(name) = req.str("name") else {
        return failure("unload-authority: name missing");
    };
    super::load::applied(cx.backend.request(&Request::UnloadAuthority { name: name.to_string() }))
}

/// `clear-creds`: every credential loaded over VICI, refused (changing
/// nothing) if a connection loaded over VICI still needs one.
pub(super) fn clear_creds(cx: &mut Cx<'_>) -> Vec<u8> {
    super::load::applied(cx.backend.request(&Request::ClearCreds))
}

/// `list-authorities` (`{ name = … }`): a `list-authority` event per
/// authority loaded over VICI, its CA certificate by subject.
pub(super) fn list_authorities(req: &Section, cx: &mut Cx<'_>, emit: &mut Emit<'_>) -> Vec<u8> {
    let l = match super::load::fetch_loaded(cx) {
        Ok(l) => l,
        Err(e) => return failure(&e),
    };
    let only = req.str("name").filter(|n| !n.is_empty());
    for (name, der) in l.authorities.iter().filter(|(n, _)| only.is_none_or(|o| o == n)) {
        let mut b = Builder::new();
        b.begin(name)
            .kv("cacert", cert_subject(der).unwrap_or_default())
            .list::<&str>("crl_uris", [])
            .list::<&str>("ocsp_uris", [])
            .end();
        if !raise(emit, "list-authority", name, b) {
            break;
        }
    }
    Vec::new()
}

/// `flush-certs`: Esparto fetches no certificates (no HTTP/LDAP CRL or
/// OCSP fetching), so there is no cache to flush; what was loaded stays,
/// as in charon.
pub(super) fn flush_certs() -> Vec<u8> {
    finish(success())
}
