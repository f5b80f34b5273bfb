//! Which IKE SAs belong to a connection, and which join a pair of
//! identities, answered without walking every SA the endpoint holds.
//!
//! * `initiate` sends INITIAL_CONTACT only if no other IKE SA of the
//!   connection is up (RFC 7296 §2.4), and `acquire` adds a Child SA to
//!   the connection's IKE SA: both look up the connection's SAs.
//! * An INITIAL_CONTACT received deletes every other IKE SA "between the
//!   authenticated identities" (§2.4): a lookup by identity pair.
//! * A responder applying the connection's `unique` policy asks which IKE
//!   SAs of the connection with the same identity pair are up, and from
//!   which address ([`SaIndex::up_with`]). It asks while it handles its own
//!   request, when the other SAs cannot be borrowed, so the index keeps
//!   what that needs: each SA's peer address and whether it is closing.
//!
//! A hub whose every spoke sends INITIAL_CONTACT would otherwise walk all
//! its SAs on every set-up (quadratic in tunnels). The index maps the
//! connection (by the address of its shared `Arc`, alive as long as the
//! endpoint holds it) and a hash of the identity pair to the SPIs of the
//! SAs; callers check each SA's state and, for pairs, the identities
//! themselves (a hash collision only adds a candidate). Each SA remembers
//! under which keys it is filed ([`Filed`]), and the endpoint refiles it
//! after every step (`Endpoint::after`), so a responder's connection
//! switching in IKE_AUTH, identities set at authentication and death are
//! all followed. A bucket with one SA — a spoke's — costs no allocation.

use crate::identity::Identity;
use crate::sa::IkeSa;
use core::net::IpAddr;
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, RandomState};

/// Where an SA is filed in the [`SaIndex`] (kept in the SA).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Filed {
    /// The connection's address, 0 if not filed.
    conn: usize,
    /// The identity pair's hash, if filed.
    ids: Option<u64>,
    /// What [`Peer`] holds for the SA, as last filed.
    peer: Option<Peer>,
}

/// An SA filed under an identity pair: what a `unique` check needs of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Peer {
    /// The connection's address.
    conn: usize,
    /// The peer's address.
    remote: IpAddr,
    /// Being deleted or replaced by a rekey.
    closing: bool,
}

/// The SAs under one key. The set is boxed on purpose: a bucket is most
/// often one spoke's single SA, and an inline set would make every entry
/// of the map three times larger.
#[derive(Debug)]
#[allow(clippy::box_collection)]
enum Bucket {
    One(u64),
    Many(Box<HashSet<u64>>),
}

impl Bucket {
    fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        let (one, many) = match self {
            Bucket::One(id) => (Some(*id), None),
            Bucket::Many(set) => (None, Some(set.iter().copied())),
        };
        one.into_iter().chain(many.into_iter().flatten())
    }
}

/// A multimap from `K` to SA ids.
#[derive(Debug)]
struct Multi<K>(HashMap<K, Bucket>);

impl<K> Default for Multi<K> {
    fn default() -> Self {
        Multi(HashMap::new())
    }
}

impl<K: std::hash::Hash + Eq> Multi<K> {
    fn insert(&mut self, k: K, id: u64) {
        match self.0.get_mut(&k) {
            None => {
                self.0.insert(k, Bucket::One(id));
            }
            Some(Bucket::One(other)) if *other == id => {}
            Some(b @ Bucket::One(_)) => {
                let Bucket::One(other) = *b else { return };
                *b = Bucket::Many(Box::new(HashSet::from([other, id])));
            }
            Some(Bucket::Many(set)) => {
                set.insert(id);
            }
        }
    }

    fn remove(&mut self, k: &K, id: u64) {
        let empty = match self.0.get_mut(k) {
            None => false,
            Some(Bucket::One(other)) => *other == id,
            Some(Bucket::Many(set)) => {
                set.remove(&id);
                set.is_empty()
            }
        };
        if empty {
            self.0.remove(k);
        }
    }

    fn get<'a>(&'a self, k: &K) -> impl Iterator<Item = u64> + use<'a, K> {
        self.0.get(k).into_iter().flat_map(Bucket::iter)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.values().map(|b| b.iter().count()).sum()
    }
}

/// IKE SAs by connection and by identity pair.
#[derive(Debug, Default)]
pub(crate) struct SaIndex {
    by_conn: Multi<usize>,
    by_ids: Multi<u64>,
    /// The SAs filed under an identity pair.
    peers: HashMap<u64, Peer>,
    hasher: RandomState,
}

impl SaIndex {
    fn conn_key(sa: &IkeSa) -> usize {
        std::sync::Arc::as_ptr(&sa.conn) as usize
    }

    fn ids_key(&self, local: &Identity, remote: &Identity) -> u64 {
        self.hasher.hash_one((local, remote))
    }

    /// File (or refile) a live SA under its current connection and, once
    /// both identities are known, its identity pair.
    pub(super) fn file(&mut self, id: u64, sa: &mut IkeSa) {
        let conn = Self::conn_key(sa);
        if sa.filed.conn != conn {
            if sa.filed.conn != 0 {
                self.by_conn.remove(&sa.filed.conn, id);
            }
            self.by_conn.insert(conn, id);
            sa.filed.conn = conn;
        }
        if sa.filed.ids.is_none() {
            if let (Some(l), Some(r)) = (&sa.local_id, &sa.remote_id) {
                let k = self.ids_key(l, r);
                self.by_ids.insert(k, id);
                sa.filed.ids = Some(k);
            }
        }
        if sa.filed.ids.is_some() {
            let peer = Peer {
                conn,
                remote: sa.remote.ip(),
                closing: sa.closing(),
            };
            if sa.filed.peer != Some(peer) {
                self.peers.insert(id, peer);
                sa.filed.peer = Some(peer);
            }
        }
    }

    /// Take a removed SA out of the index.
    pub(super) fn unfile(&mut self, id: u64, sa: &mut IkeSa) {
        if sa.filed.conn != 0 {
            self.by_conn.remove(&sa.filed.conn, id);
        }
        if let Some(k) = sa.filed.ids {
            self.by_ids.remove(&k, id);
            self.peers.remove(&id);
        }
        sa.filed = Filed::default();
    }

    /// The SAs filed under connection `conn`.
    pub(super) fn of_conn<'a>(
        &'a self,
        conn: &std::sync::Arc<crate::config::ConnectionConfig>,
    ) -> impl Iterator<Item = u64> + use<'a> {
        self.by_conn.get(&(std::sync::Arc::as_ptr(conn) as usize))
    }

    /// The SAs that may join `local` and `remote` (check their identities).
    pub(crate) fn of_ids<'a>(
        &'a self,
        local: &Identity,
        remote: &Identity,
    ) -> impl Iterator<Item = u64> + use<'a> {
        self.by_ids.get(&self.ids_key(local, remote))
    }

    /// The IKE SAs of connection `conn` between `local` and `remote` that
    /// are up and not closing, with the peer address of each. The pair is
    /// matched by its keyed 64-bit hash, not compared: a stranger's SA
    /// shows here only if its identities collide with these under the
    /// process's random key (odds of 2^-64 per pair), which a peer cannot
    /// aim at.
    pub(crate) fn up_with<'a>(
        &'a self,
        conn: &std::sync::Arc<crate::config::ConnectionConfig>,
        local: &Identity,
        remote: &Identity,
    ) -> impl Iterator<Item = (u64, IpAddr)> + use<'a> {
        let conn = std::sync::Arc::as_ptr(conn) as usize;
        self.of_ids(local, remote).filter_map(move |id| {
            let p = self.peers.get(&id)?;
            (p.conn == conn && !p.closing).then_some((id, p.remote))
        })
    }

    /// Entries filed (for tests: nothing leaks).
    #[cfg(test)]
    pub(super) fn len(&self) -> (usize, usize) {
        debug_assert_eq!(self.peers.len(), self.by_ids.len());
        (self.by_conn.len(), self.by_ids.len())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The multimap holds exactly what a map of sets would, through
        /// any sequence of inserts and removes (repeats and strays included).
        #[test]
        fn multi_is_a_map_of_sets(ops in proptest::collection::vec((any::<bool>(), 0u8..3, 0u64..5), 0..60)) {
            let mut m = Multi::<u8>::default();
            let mut model: HashMap<u8, HashSet<u64>> = HashMap::new();
            for (insert, k, id) in ops {
                if insert {
                    m.insert(k, id);
                    model.entry(k).or_default().insert(id);
                } else {
                    m.remove(&k, id);
                    if let Some(s) = model.get_mut(&k) {
                        s.remove(&id);
                    }
                }
                model.retain(|_, s| !s.is_empty());
                let none = HashSet::new();
                for k in 0u8..3 {
                    let got: HashSet<u64> = m.get(&k).collect();
                    prop_assert_eq!(m.get(&k).count(), got.len(), "no duplicates");
                    prop_assert_eq!(&got, model.get(&k).unwrap_or(&none));
                }
                prop_assert_eq!(m.0.len(), model.len(), "no empty keys left");
            }
        }
    }

    #[test]
    fn buckets_grow_and_shrink() {
        let mut m = Multi::<u8>::default();
        m.insert(1, 10);
        m.insert(1, 10);
        assert_eq!(m.get(&1).collect::<Vec<_>>(), [10]);
        m.insert(1, 11);
        m.insert(1, 12);
        let mut got: Vec<_> = m.get(&1).collect();
        got.sort_unstable();
        assert_eq!(got, [10, 11, 12]);
        m.remove(&1, 11);
        m.remove(&1, 99);
        assert_eq!(m.len(), 2);
        m.remove(&1, 10);
        m.remove(&1, 12);
        assert!(m.0.is_empty(), "an emptied key is gone");
        m.insert(2, 5);
        m.remove(&2, 6);
        assert_eq!(m.get(&2).collect::<Vec<_>>(), [5], "another id leaves it");
        m.remove(&2, 5);
        assert_eq!(m.get(&2).count(), 0);
    }
}
