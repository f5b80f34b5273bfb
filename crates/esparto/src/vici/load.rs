//! Loading over VICI: `load-conn`, `unload-conn`, `get-conns`,
//! `load-shared`, `unload-shared`, `get-shared` — what `swanctl
//! --load-all` (`--load-conns`, `--load-creds`) sends.
//!
//! A connection arrives as swanctl read it from `swanctl.conf`: the keys
//! of the file, every value a string, lists split at commas. It becomes a
//! tree of strings ([`LayerValue`]) that the daemon grafts beside the
//! TOML file's connections and checks with the same walk
//! (`config::layer`), so a key Esparto does not support is refused with
//! the message `check-config` gives for the file. Only what swanctl.conf
//! spells differently is translated here:
//!
//! - `local`, `local-NAME`, `remote`, `remote-NAME`: swanctl names its
//!   authentication rounds so; Esparto has one round per side, `local`
//!   and `remote`. Two rounds on one side are refused.
//! - `remote_port`: in swanctl.conf the peer's IKE port (in Esparto's
//!   file the peer's ESP-in-UDP port). `500` says what Esparto does
//!   anyway and is dropped; another port is refused.
//! - `certs`, `cacerts` in an authentication round: swanctl sends the
//!   files' contents, which the tree holds as data where the file holds
//!   names. The private key is not in the connection: the daemon finds
//!   the one loaded with `load-key` that is the certificate's.
//!   `pubkeys` (raw public keys) are refused.
//!
//! A PSK (`load-shared`, type `IKE`) becomes a `[secrets]` entry: the
//! `owners` its `ids`, the data its secret (as `0x` hex).

use esparto_wire::vici::{Builder, Section, Value};

use super::commands::{Cx, failure, finish, success};
use crate::config::{LayerValue, inline};
use crate::control::{Loaded, Request, Response};
use crate::status::ReloadReport;

/// `load-conn`: `{ NAME = { … } }`.
pub(super) fn load_conn(req: &Section, cx: &mut Cx<'_>) -> Vec<u8> {
    match conn_tree(req) {
        Ok((name, conn)) => applied(cx.backend.request(&Request::LoadConn { name, conn })),
        Err(e) => failure(&e),
    }
}

/// A `load-conn` request's connection: its name and its tree as the
/// TOML file spells it (see the module docs); `Err` says why not.
pub fn conn_tree(req: &Section) -> Result<(String, LayerValue), String> {
    let (name, conn) = match req.entries.as_slice() {
        [(name, Value::Section(conn))] => (name, conn),
        _ => return Err("load-conn: expected one section, named after the connection".into()),
    };
    conn_value(conn).map(|v| (name.clone(), v)).map_err(|e| format!("load-conn '{name}': {e}"))
}

/// `unload-conn`: `{ name = NAME }`.
pub(super) fn unload_conn(req: &Section, cx: &mut Cx<'_>) -> Vec<u8> {
    let Some(name) = req.str("name") else {
        return failure("unload-conn: name missing");
    };
    applied(cx.backend.request(&Request::UnloadConn { name: name.to_string() }))
}

/// `load-shared`: `{ id = …, type = IKE, data = …, owners = [ … ] }`.
pub(super) fn load_shared(req: &Section, cx: &mut Cx<'_>) -> Vec<u8> {
    let (id, secret) = match shared_value(req) {
        Ok(v) => v,
        Err(e) => return failure(&format!("load-shared: {e}")),
    };
    applied(cx.backend.request(&Request::LoadShared { id, secret }))
}

/// `unload-shared`: `{ id = … }`.
pub(super) fn unload_shared(req: &Section, cx: &mut Cx<'_>) -> Vec<u8> {
    let Some(id) = req.str("id") else {
        return failure("unload-shared: id missing");
    };
    applied(cx.backend.request(&Request::UnloadShared { id: id.to_string() }))
}

/// What was loaded over VICI, as the daemon says.
pub(super) fn fetch_loaded(cx: &mut Cx<'_>) -> Result<Loaded, String> {
    match cx.backend.request(&Request::Loaded) {
        Response::Loaded(l) => Ok(l),
        Response::Error(e) => Err(e),
        _ => Err("unexpected answer from the daemon".into()),
    }
}

/// `get-conns` (`{ conns = [ … ] }`), `get-shared` (`{ keys = [ … ] }`:
/// PSK ids), `get-keys` (`{ keys = [ … ] }`: private key ids) or
/// `get-authorities` (`{ authorities = [ … ] }`): what was loaded over
/// VICI, not what the TOML file holds.
pub(super) fn get(cx: &mut Cx<'_>, cmd: &str) -> Vec<u8> {
    let l = match fetch_loaded(cx) {
        Ok(l) => l,
        Err(e) => return failure(&e),
    };
    let mut b = Builder::new();
    match cmd {
        "get-conns" => b.list("conns", &l.conns),
        "get-shared" => b.list("keys", &l.shared),
        "get-keys" => b.list("keys", &l.keys),
        _ => b.list("authorities", l.authorities.iter().map(|(n, _)| n)),
    };
    finish(b)
}

/// The daemon's answer to a load: success, or its errors as `errmsg`.
pub(super) fn applied(r: Response) -> Vec<u8> {
    match r {
        Response::Reload(report) => {
            log_problems(&report);
            finish(success())
        }
        Response::Error(e) => failure(&e),
        _ => failure("unexpected answer from the daemon"),
    }
}

/// What went wrong after the change was accepted (an initiation that
/// failed, say) is the daemon's log's; the load itself succeeded.
fn log_problems(report: &ReloadReport) {
    for p in &report.problems {
        tracing::warn!("vici: {}: {p}", report.file);
    }
}

/// A string value, which must be UTF-8 (the TOML schema's strings).
fn text(key: &str, v: &[u8]) -> Result<String, String> {
    String::from_utf8(v.to_vec()).map_err(|_| format!("{key}: not UTF-8"))
}

/// A section, every value as a string and every list as strings.
fn plain(s: &Section) -> Result<LayerValue, String> {
    let mut out = Vec::with_capacity(s.entries.len());
    for (k, v) in &s.entries {
        out.push((k.clone(), plain_value(k, v)?));
    }
    Ok(LayerValue::Section(out))
}

fn plain_value(key: &str, v: &Value) -> Result<LayerValue, String> {
    Ok(match v {
        Value::Str(b) => LayerValue::Str(text(key, b)?),
        Value::List(items) => LayerValue::List(items.iter().map(|i| text(key, i)).collect::<Result<_, _>>()?),
        Value::Section(s) => plain(s)?,
    })
}

/// A connection from swanctl.conf as Esparto's file spells it (see the
/// module docs).
fn conn_value(conn: &Section) -> Result<LayerValue, String> {
    let mut out = Vec::with_capacity(conn.entries.len());
    let mut rounds: [Option<&str>; 2] = [None, None];
    for (k, v) in &conn.entries {
        let side = ["local", "remote"]
            .iter()
            .position(|s| k == s || k.strip_prefix(s).is_some_and(|rest| rest.starts_with('-')));
        match (side, v) {
            (Some(i), Value::Section(round)) => {
                let base = ["local", "remote"][i];
                if let Some(first) = rounds[i].replace(k) {
                    return Err(format!(
                        "{first} and {k}: multiple authentication rounds (RFC 4739) are not supported; \
                         give one {base} section"
                    ));
                }
                out.push((base.to_string(), round_value(k, round)?));
            }
            (None, Value::Str(port)) if k == "remote_port" => {
                if port.as_slice() != b"500" {
                    return Err(format!(
                        "remote_port = {}: swanctl's remote_port is the peer's IKE port, and Esparto sends \
                         IKE to [daemon] ike_port of the peer",
                        String::from_utf8_lossy(port)
                    ));
                }
            }
            _ => out.push((k.clone(), plain_value(k, v)?)),
        }
    }
    Ok(LayerValue::Section(out))
}

/// An authentication round: `certs` and `cacerts` hold the files'
/// contents (swanctl sends them so), which the tree keeps as data
/// ([`inline`]).
fn round_value(name: &str, round: &Section) -> Result<LayerValue, String> {
    let mut out = Vec::with_capacity(round.entries.len());
    for (k, v) in &round.entries {
        let value = match (k.as_str(), v) {
            ("certs" | "cacerts", Value::List(items)) => LayerValue::List(items.iter().map(|d| inline(d)).collect()),
            ("certs" | "cacerts", Value::Str(d)) => LayerValue::List(vec![inline(d)]),
            ("pubkeys", _) => {
                return Err(format!("{name}.pubkeys: raw public keys are not supported; authenticate with certs"));
            }
            // Esparto's file names our key here; over VICI it comes with
            // load-key, and is found by the certificate.
            ("key", _) => {
                return Err(format!(
                    "{name}.key: not a swanctl.conf key; load the private key with load-key \
                     (swanctl's private/ directory)"
                ));
            }
            _ => plain_value(k, v)?,
        };
        out.push((k.clone(), value));
    }
    Ok(LayerValue::Section(out))
}

/// A `load-shared` request's id and its `[secrets]` table.
pub fn shared_value(req: &Section) -> Result<(String, LayerValue), String> {
    let kind = req.str("type").unwrap_or("");
    if !kind.eq_ignore_ascii_case("ike") {
        return Err(format!("type '{kind}': Esparto takes IKE pre-shared keys only (no EAP, XAuth or NTLM)"));
    }
    let Some(Value::Str(data)) = req.get("data") else {
        return Err("data missing".into());
    };
    if data.is_empty() {
        return Err("empty secret".into());
    }
    let owners: Vec<String> = match req.list("owners") {
        Some(items) => items.iter().map(|i| text("owners", i)).collect::<Result<_, _>>()?,
        None => Vec::new(),
    };
    // swanctl sends the section's name (`ike-site`); without one, the
    // owners name it.
    let id = match req.str("id") {
        Some(id) => id.to_string(),
        None => format!("ike:{}", owners.join(",")),
    };
    let mut hex = String::with_capacity(2 + 2 * data.len());
    hex.push_str("0x");
    for b in data {
        hex.push_str(&format!("{b:02x}"));
    }
    let mut table = Vec::new();
    if !owners.is_empty() {
        table.push(("ids".to_string(), LayerValue::List(owners)));
    }
    table.push(("secret".to_string(), LayerValue::Str(hex)));
    Ok((id, LayerValue::Section(table)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn s(entries: Vec<(&str, Value)>) -> Section {
        Section { entries: entries.into_iter().map(|(k, v)| (k.to_string(), v)).collect() }
    }
    fn v(x: &str) -> Value {
        Value::Str(x.as_bytes().to_vec())
    }

    #[test]
    fn swanctl_rounds_become_local_and_remote() {
        let conn = s(vec![
            ("remote_addrs", Value::List(vec![b"192.0.2.2".to_vec()])),
            ("local-psk", Value::Section(s(vec![("auth", v("psk")), ("id", v("west"))]))),
            ("remote-1", Value::Section(s(vec![("auth", v("psk"))]))),
            ("remote_port", v("500")),
        ]);
        let LayerValue::Section(out) = conn_value(&conn).unwrap() else { panic!() };
        let keys: Vec<&str> = out.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["remote_addrs", "local", "remote"]);
    }

    #[test]
    fn what_cannot_be_mapped_is_refused_with_why() {
        let two = s(vec![
            ("local-1", Value::Section(Section::default())),
            ("local-2", Value::Section(Section::default())),
        ]);
        assert!(conn_value(&two).unwrap_err().contains("multiple authentication rounds"));
        let port = s(vec![("remote_port", v("4501"))]);
        assert!(conn_value(&port).unwrap_err().contains("peer's IKE port"));
        let raw = s(vec![("remote", Value::Section(s(vec![("pubkeys", Value::List(vec![b"PEM".to_vec()]))])))]);
        assert!(conn_value(&raw).unwrap_err().contains("raw public keys"));
        let key = s(vec![("local", Value::Section(s(vec![("key", v("moon.key"))])))]);
        assert!(conn_value(&key).unwrap_err().contains("load-key"));
        let bad = s(vec![("version", Value::Str(vec![0xff]))]);
        assert_eq!(conn_value(&bad).unwrap_err(), "version: not UTF-8");
    }

    #[test]
    fn certificates_in_a_round_become_data() {
        let conn = s(vec![(
            "local",
            Value::Section(s(vec![("auth", v("pubkey")), ("certs", Value::List(vec![vec![0x30, 0x82], vec![0xff]]))])),
        )]);
        let LayerValue::Section(out) = conn_value(&conn).unwrap() else { panic!() };
        let LayerValue::Section(local) = &out[0].1 else { panic!() };
        assert_eq!(local[1], ("certs".into(), LayerValue::List(vec!["vici-data:3082".into(), "vici-data:ff".into()])));
    }

    #[test]
    fn a_shared_key_becomes_a_secrets_table_in_hex() {
        let req = s(vec![
            ("id", v("ike-site")),
            ("type", v("IKE")),
            ("data", Value::Str(vec![0x00, 0xab, b'z'])),
            ("owners", Value::List(vec![b"west".to_vec(), b"east".to_vec()])),
        ]);
        let (id, t) = shared_value(&req).unwrap();
        assert_eq!(id, "ike-site");
        assert_eq!(
            t,
            LayerValue::Section(vec![
                ("ids".into(), LayerValue::List(vec!["west".into(), "east".into()])),
                ("secret".into(), LayerValue::Str("0x00ab7a".into())),
            ])
        );
        let eap = s(vec![("type", v("EAP")), ("data", v("x"))]);
        assert!(shared_value(&eap).unwrap_err().contains("IKE pre-shared keys only"));
    }
}
