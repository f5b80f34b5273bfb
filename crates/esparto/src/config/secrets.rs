//! `[secrets.NAME]`: pre-shared keys for IKE, as swanctl's
//! `secrets.ike-NAME` sections: `id` (or a list `ids`) names the
//! identities the key is for, `secret` holds it (`0x…` for hex, anything
//! else taken literally) or `secret_file` names a file holding it, relative
//! to the configuration file's directory. A key with no identities matches
//! any pair, with the lowest priority (`esparto_ike::Secrets::find_psk`).
//!
//! Secrets never appear in messages or in `Debug` output: `Psk` and
//! `SecretBytes` print lengths only, and errors describe, never quote.

use std::collections::HashSet;

use esparto_ike::Secrets;
use esparto_ike::config::Psk;
use esparto_ike::identity::Identity;

use super::error::KeyPath;
use super::static_sas::read_secret_file;
use super::tree::{Cx, Field, Node};
use super::value::parse_psk;

const KEYS: &[&str] = &["id", "ids", "secret", "secret_file"];

/// Answers "is there a PSK for this pair of identities?" for every
/// connection of a file in O(1) each, where asking
/// [`Secrets::find_psk`] once per connection would scan every key for each
/// (O(n²) for a hub with a key per spoke). It says yes exactly when
/// `find_psk` would find a key: one without identities, one listing
/// `%any`, or one listing either identity (FQDNs and e-mail identities
/// compared without regard to ASCII case, as `Identity::matches` does).
pub(crate) struct PskIndex {
    wildcard: bool,
    ids: HashSet<Identity>,
}

impl PskIndex {
    /// Index `secrets`.
    pub(crate) fn new(secrets: &Secrets) -> Self {
        let mut wildcard = false;
        let mut ids = HashSet::new();
        for p in &secrets.psks {
            wildcard |= p.ids.is_empty() || p.ids.iter().any(Identity::is_any);
            ids.extend(p.ids.iter().filter(|i| !i.is_any()).map(folded));
        }
        PskIndex { wildcard, ids }
    }

    /// Would `find_psk(local, remote)` find a key?
    pub(crate) fn has_psk_for(&self, local: &Identity, remote: &Identity) -> bool {
        self.wildcard || self.ids.contains(&folded(local)) || self.ids.contains(&folded(remote))
    }
}

/// The identity with case folded where `Identity::matches` ignores it.
fn folded(id: &Identity) -> Identity {
    match id {
        Identity::Fqdn(s) => Identity::Fqdn(s.to_ascii_lowercase()),
        Identity::UserFqdn(s) => Identity::UserFqdn(s.to_ascii_lowercase()),
        other => other.clone(),
    }
}

/// Parse every `[secrets.*]`.
pub(crate) fn parse(cx: &mut Cx<'_>, root: &Node) -> Secrets {
    let mut secrets = Secrets::default();
    let Some(f) = root.field(&KeyPath::root(), "secrets") else {
        return secrets;
    };
    let Some(t) = cx.table(&f) else {
        return secrets;
    };
    for e in t.entries() {
        let path = f.path.key(&e.key);
        let Some(n) = cx.table(&Field {
            node: &e.value,
            path: path.clone(),
        }) else {
            continue;
        };
        cx.check_keys(n, &path, KEYS, &[]);
        let mut ids = Vec::new();
        for key in ["id", "ids"] {
            let Some(idf) = n.field(&path, key) else {
                continue;
            };
            for (fld, s) in cx.str_list(&idf) {
                match Identity::parse(s) {
                    Ok(id) => ids.push(id),
                    Err(err) => cx.err_at(&fld, err.to_string()),
                }
            }
        }
        let secret = match (n.field(&path, "secret"), n.field(&path, "secret_file")) {
            (Some(a), Some(_)) => {
                cx.err_at(&a, "give secret or secret_file, not both");
                None
            }
            (None, None) => {
                cx.err(&n.span, &path.key("secret"), "missing (or secret_file)");
                None
            }
            (Some(sf), None) => cx
                .str(&sf)
                .and_then(|s| parse_psk(s).map_err(|err| cx.err_at(&sf, err)).ok()),
            (None, Some(ff)) => cx.str(&ff).and_then(|name| {
                let r = read_secret_file(&cx.dir, name).and_then(|bytes| {
                    let text = std::str::from_utf8(bytes.as_slice())
                        .map_err(|_| format!("'{name}' is not text"))?;
                    // A trailing newline is the editor's, not the key's.
                    parse_psk(text.trim_end_matches(['\n', '\r']))
                        .map_err(|err| format!("'{name}': {err}"))
                });
                r.map_err(|err| cx.err_at(&ff, err)).ok()
            }),
        };
        if let Some(secret) = secret {
            secrets.psks.push(Psk { ids, secret });
        }
    }
    secrets
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    fn arb_id() -> impl Strategy<Value = Identity> {
        prop_oneof![
            Just("%any"),
            Just("@a.example"),
            Just("@A.Example"),
            Just("@b.example"),
            Just("a@example"),
            Just("A@EXAMPLE"),
            Just("192.0.2.1"),
            Just("192.0.2.2"),
            Just("fd00::1"),
            Just("keyid:0a0b"),
        ]
        .prop_map(|s| Identity::parse(s).unwrap())
    }

    proptest! {
        /// The index agrees with `find_psk` on whether a key exists.
        #[test]
        fn index_agrees_with_find_psk(
            keys in proptest::collection::vec(proptest::collection::vec(arb_id(), 0..3), 0..5),
            local in arb_id(),
            remote in arb_id(),
        ) {
            let mut s = Secrets::default();
            for ids in &keys {
                s.add_psk(ids, b"k");
            }
            let ix = PskIndex::new(&s);
            prop_assert_eq!(ix.has_psk_for(&local, &remote), s.find_psk(&local, &remote).is_some());
        }
    }
}
