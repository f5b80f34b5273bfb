//! `[secrets.NAME]`: pre-shared keys for IKE, as swanctl's
//! `secrets.ike-NAME` sections: `id` (or a list `ids`) names the
//! identities the key is for, `secret` holds it (`0x…` for hex, anything
//! else taken literally) or `secret_file` names a file holding it, relative
//! to the configuration file's directory. A key with no identities matches
//! any pair, with the lowest priority (`esparto_ike::Secrets::find_psk`).
//!
//! Secrets never appear in messages or in `Debug` output: `Psk` and
//! `SecretBytes` print lengths only, and errors describe, never quote.

use std::collections::HashMap;

use esparto_ike::Secrets;
use esparto_ike::config::Psk;
use esparto_ike::identity::Identity;

use super::error::KeyPath;
use super::hygiene;
use super::layer::{Grafted, Walk, Walked};
use super::static_sas::read_secret_file;
use super::tree::{Cx, Field, Node};
use super::value::parse_psk;

const KEYS: &[&str] = &["id", "ids", "secret", "secret_file"];

/// Parse every `[secrets.*]`: the file's, then those loaded over VICI
/// (walked here if `grafted`, else their kept walks; see `layer`).
pub(crate) fn parse(cx: &mut Cx<'_>, root: &Node, grafted: &Grafted) -> Secrets {
    let mut secrets = Secrets::default();
    let mut fresh: HashMap<String, Walk> = HashMap::new();
    if let Some(f) = root.field(&KeyPath::root(), "secrets") {
        let Some(t) = cx.table(&f) else {
            return secrets;
        };
        for e in t.entries() {
            let path = f.path.key(&e.key);
            let Some(n) = cx.table(&Field { node: &e.value, path: path.clone() }) else {
                continue;
            };
            let (errors, warnings) = (cx.error_count(), cx.warning_count());
            let Some(psk) = parse_one(cx, n, &path).map(std::sync::Arc::new) else { continue };
            if !cx.grafted(&n.span) {
                secrets.psks.push(psk);
            } else if cx.error_count() == errors {
                let warnings = cx.warnings_since(warnings);
                fresh.insert(e.key.clone(), Walk { walked: Walked::Secret(psk), warnings });
            }
        }
    }
    for (_, walked) in grafted.walks(cx, "secrets", fresh) {
        if let Walked::Secret(psk) = walked {
            secrets.psks.push(psk);
        }
    }
    secrets
}

/// One `[secrets.NAME]` table.
fn parse_one(cx: &mut Cx<'_>, n: &Node, path: &KeyPath) -> Option<Psk> {
    cx.check_keys(n, path, KEYS, &[]);
    let mut ids = Vec::new();
    for key in ["id", "ids"] {
        let Some(idf) = n.field(path, key) else {
            continue;
        };
        for (fld, s) in cx.str_list(&idf) {
            match Identity::parse(s) {
                Ok(id) => ids.push(id),
                Err(err) => cx.err_at(&fld, err.to_string()),
            }
        }
    }
    let secret = match (n.field(path, "secret"), n.field(path, "secret_file")) {
        (Some(a), Some(_)) => {
            cx.err_at(&a, "give secret or secret_file, not both");
            None
        }
        (None, None) => {
            cx.err(&n.span, &path.key("secret"), "missing (or secret_file)");
            None
        }
        (Some(sf), None) => {
            cx.note_inline_secret(&sf);
            cx.str(&sf)
                .and_then(|s| parse_psk(s).map_err(|err| cx.err_at(&sf, err)).ok())
                .map(|s| (s, sf))
        }
        (None, Some(ff)) => cx.str(&ff).and_then(|name| {
            let r = read_secret_file(&cx.dir, name).and_then(|bytes| {
                let text = std::str::from_utf8(bytes.as_slice())
                    .map_err(|_| format!("'{name}' is not text"))?;
                // A trailing newline is the editor's, not the key's.
                parse_psk(text.trim_end_matches(['\n', '\r']))
                    .map_err(|err| format!("'{name}': {err}"))
            });
            if r.is_ok() {
                if let Some(w) = hygiene::exposed(&cx.dir.join(name)) {
                    cx.warn(&ff.node.span, &ff.path, w);
                }
            }
            r.map_err(|err| cx.err_at(&ff, err)).ok().map(|s| (s, ff))
        }),
    };
    let (secret, at) = secret?;
    if let Some(w) = hygiene::weak_psk(secret.as_slice()) {
        cx.warn(&at.node.span, &at.path, w);
    }
    Some(Psk { ids, secret })
}
