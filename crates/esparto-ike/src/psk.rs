//! PSK lookup by identity in O(1), with strongSwan's priorities.
//!
//! [`Secrets::find_psk`] states the rule (strongSwan's `ike` secrets,
//! `mem_cred`'s matching): a key listing both identities beats one
//! listing only the peer's, which beats one listing only ours, which beats
//! a key with no identities (or only `%any`); among keys of equal rank the
//! first loaded wins. It scans every key, which a hub with a key per spoke
//! cannot afford on every IKE_AUTH (10,000 spokes: 90 % of the CPU of set-up).
//!
//! [`PskIndex`] answers the same question from a map of *folded* identity
//! (FQDN and e-mail compared without regard to ASCII case, exactly as
//! [`Identity::matches`] does) to the ascending positions of the keys that
//! list it. With `L` the keys listing ours and `R` the keys listing the
//! peer's:
//!
//! 1. rank 3 is `L ∩ R`, and the first such key is the first element of the
//!    shorter list found in the longer one (binary search: both ascending);
//! 2. otherwise every key of `R` has rank 2, so `R[0]`;
//! 3. otherwise `R` is empty and every key of `L` has rank 1, so `L[0]`;
//! 4. otherwise the first key without identities or with `%any`.
//!
//! For a hub, one side of the pair is the hub's own identity, listed by
//! every key, and the other a spoke's, listed by one: a lookup costs two
//! hash probes and one binary search. A property test checks the index
//! against the linear rule on arbitrary key sets.
//!
//! The index holds positions into one [`Secrets`]; [`Psks`] keeps the two
//! together and rebuilds the index, lazily, after every mutable borrow of
//! the keys (the endpoint hands out `&mut Secrets`, so it cannot see what
//! changes).

use crate::config::Secrets;
use crate::identity::Identity;
use esparto_crypto::SecretBytes;
use std::collections::HashMap;
use std::sync::OnceLock;

/// Positions of keys in [`Secrets::psks`] by the identities they list.
///
/// The endpoint looks keys up through it ([`Psks`]); the daemon's
/// configuration loader builds one to check that every connection's pair
/// of identities has a key.
#[derive(Debug, Default)]
pub struct PskIndex {
    /// Folded identity → ascending positions of the keys listing it.
    by_id: HashMap<Identity, Vec<u32>>,
    /// The first key that matches any pair with rank 0.
    wildcard: Option<u32>,
}

impl PskIndex {
    /// Index `secrets` (O(total identities listed)).
    pub fn new(secrets: &Secrets) -> Self {
        let listed = secrets.psks.iter().map(|p| p.ids.len()).sum();
        let mut ix = PskIndex { by_id: HashMap::with_capacity(listed), wildcard: None };
        for (pos, p) in secrets.psks.iter().enumerate() {
            let Ok(pos) = u32::try_from(pos) else {
                // Four billion keys: the rest stay unindexed (unreachable
                // in practice; the loader caps files far below).
                break;
            };
            if ix.wildcard.is_none() && (p.ids.is_empty() || p.ids.iter().any(Identity::is_any)) {
                ix.wildcard = Some(pos);
            }
            for id in p.ids.iter().filter(|i| !i.is_any()) {
                let list = ix.by_id.entry(id.folded()).or_default();
                // A key listing one identity twice counts once.
                if list.last() != Some(&pos) {
                    list.push(pos);
                }
            }
        }
        ix
    }

    /// The position of the key [`Secrets::find_psk`] would pick.
    pub fn find(&self, local: &Identity, remote: &Identity) -> Option<usize> {
        let list = |id: &Identity| -> &[u32] {
            if id.is_any() {
                // `%any` as a query matches no listed identity.
                return &[];
            }
            self.by_id.get(&*id.folded_ref()).map_or(&[], Vec::as_slice)
        };
        let (l, r) = (list(local), list(remote));
        let (short, long) = if l.len() <= r.len() { (l, r) } else { (r, l) };
        let best = short
            .iter()
            .find(|p| long.binary_search(p).is_ok())
            .or_else(|| r.first())
            .or_else(|| l.first())
            .copied()
            .or(self.wildcard)?;
        usize::try_from(best).ok()
    }
}

/// The endpoint's PSKs and their index, rebuilt on the first lookup after
/// the keys may have changed.
#[derive(Debug, Default)]
pub(crate) struct Psks {
    secrets: Secrets,
    index: OnceLock<PskIndex>,
}

impl Psks {
    /// The keys, for changing: the index is dropped and rebuilt on the
    /// next lookup.
    pub(crate) fn secrets_mut(&mut self) -> &mut Secrets {
        self.index = OnceLock::new();
        &mut self.secrets
    }

    /// The best key for the pair, as [`Secrets::find_psk`] would choose it.
    pub(crate) fn find(&self, local: &Identity, remote: &Identity) -> Option<&SecretBytes> {
        let ix = self.index.get_or_init(|| PskIndex::new(&self.secrets));
        let pos = ix.find(local, remote)?;
        self.secrets.psks.get(pos).map(|p| &p.secret)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    fn id(s: &str) -> Identity {
        Identity::parse(s).unwrap()
    }

    fn arb_id() -> impl Strategy<Value = Identity> {
        prop_oneof![
            Just("%any"),
            Just("@a.example"),
            Just("@A.Example"),
            Just("@b.example"),
            Just("a@example"),
            Just("A@EXAMPLE"),
            Just("a.example"),
            Just("192.0.2.1"),
            Just("192.0.2.2"),
            Just("fd00::1"),
            Just("keyid:0a0b"),
            Just("keyid:0A0B"),
        ]
        .prop_map(id)
    }

    fn store(keys: &[Vec<Identity>]) -> Psks {
        let mut p = Psks::default();
        for (i, ids) in keys.iter().enumerate() {
            p.secrets_mut().add_psk(ids, format!("key {i}").as_bytes());
        }
        p
    }

    proptest! {
        /// The index picks exactly the key the linear rule picks (same
        /// secret, and the same position: ties go to the first loaded).
        #[test]
        fn index_agrees_with_find_psk(
            keys in proptest::collection::vec(proptest::collection::vec(arb_id(), 0..4), 0..12),
            local in arb_id(),
            remote in arb_id(),
        ) {
            let p = store(&keys);
            let linear = p.secrets.find_psk(&local, &remote).map(SecretBytes::as_slice);
            let indexed = p.find(&local, &remote).map(SecretBytes::as_slice);
            prop_assert_eq!(indexed, linear);
        }
    }

    #[test]
    fn priorities() {
        let (hub, s1, s2) = (id("@hub"), id("@spoke1"), id("@spoke2"));
        let p = store(&[
            vec![],
            vec![hub.clone()],
            vec![hub.clone(), s1.clone()],
            vec![hub.clone(), s2.clone()],
            vec![s2.clone()],
        ]);
        let key = |l: &Identity, r: &Identity| p.find(l, r).unwrap().as_slice().to_vec();
        assert_eq!(key(&hub, &s2), b"key 3", "both identities");
        assert_eq!(
            key(&s2, &hub),
            b"key 3",
            "order of the pair does not matter"
        );
        assert_eq!(
            key(&id("@HUB"), &id("@Spoke1")),
            b"key 2",
            "FQDNs fold case"
        );
        assert_eq!(key(&id("@x"), &s2), b"key 3", "the peer's, first of rank 2");
        assert_eq!(
            key(&id("@x"), &hub),
            b"key 1",
            "the peer's: the first listing it"
        );
        assert_eq!(key(&s1, &id("@x")), b"key 2", "only ours");
        assert_eq!(key(&id("@x"), &id("@y")), b"key 0", "the wildcard");
        assert!(store(&[vec![s1.clone()]]).find(&hub, &s2).is_none());
    }

    #[test]
    fn mutation_rebuilds_the_index() {
        let (hub, s1) = (id("@hub"), id("@spoke1"));
        let mut p = store(&[vec![hub.clone()]]);
        assert_eq!(p.find(&hub, &s1).unwrap().as_slice(), b"key 0");
        p.secrets_mut().add_psk(&[hub.clone(), s1.clone()], b"pair");
        assert_eq!(p.find(&hub, &s1).unwrap().as_slice(), b"pair");
        p.secrets_mut().psks.clear();
        assert!(p.find(&hub, &s1).is_none());
    }

    #[test]
    fn hub_finds_every_spokes_key() {
        // 20,000 spokes, every key listing the hub: from either side the
        // pair's own key, never another spoke's (rank 3 beats rank 2).
        let hub = id("@hub");
        let mut p = Psks::default();
        for i in 0..20_000 {
            let spoke = id(&format!("@spoke{i}"));
            p.secrets_mut().add_psk(&[hub.clone(), spoke], b"k");
        }
        p.secrets_mut()
            .add_psk(&[hub.clone(), id("@last")], b"last");
        let ix = PskIndex::new(&p.secrets);
        let spokes: Vec<Identity> = (0..20_000).map(|i| id(&format!("@spoke{i}"))).collect();
        for (i, s) in spokes.iter().enumerate() {
            assert_eq!(ix.find(&hub, s), Some(i));
            assert_eq!(ix.find(s, &hub), Some(i));
        }
        assert_eq!(ix.find(&hub, &id("@last")), Some(20_000));
    }
}
