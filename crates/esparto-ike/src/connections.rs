//! The endpoint's connections, indexed for the three questions asked of
//! them per tunnel.
//!
//! | question | asked by | index |
//! | --- | --- | --- |
//! | the connection named *n* | `initiate`, `acquire` | name → position |
//! | which accept IKE_SA_INIT from *r* to *l* (RFC 7296 §1.2) | the responder | peer address → positions, plus those accepting any |
//! | which accept the peer's IDi (§2.15) | the responder in IKE_AUTH | folded identity → positions, plus `%any` |
//! | which name peer address *r* | INVALID_SPI hints (`endpoint/recovery.rs`) | peer address → positions |
//!
//! A connection naming a host in `remote_addrs` is indexed under the
//! addresses that name last resolved to (the driver's answers, kept here
//! across reconfigurations), beside the literal ones: a responder finds
//! it for a peer at whatever address the name now has.
//!
//! Every answer keeps configuration order (the first fitting connection
//! wins, as it did when they were scanned): an index list is ascending, and
//! the specific and the wildcard lists are merged. So a hub with 10,000
//! spokes finds a spoke's connection in a hash probe instead of a scan on
//! every set-up, and adding a connection is O(1) instead of a scan for a
//! duplicate name (loading was quadratic). Property tests check each
//! answer against the plain filter.

use crate::config::{ConfigError, ConnectionConfig};
use crate::identity::Identity;
use core::net::IpAddr;
use std::collections::HashMap;
use std::sync::Arc;

/// Every connection, in the order added, and the indexes over them.
#[derive(Debug, Default)]
pub(crate) struct Connections {
    list: Vec<Arc<ConnectionConfig>>,
    by_name: HashMap<Arc<str>, u32>,
    /// Connections listing a remote address, by that address.
    by_remote_addr: HashMap<IpAddr, Vec<u32>>,
    /// Connections with no remote addresses (accept any).
    any_remote_addr: Vec<u32>,
    /// Connections with a remote identity, by its folded form.
    by_remote_id: HashMap<Identity, Vec<u32>>,
    /// Connections with no remote identity or `%any`.
    any_remote_id: Vec<u32>,
    /// Connections naming a host in `remote_addrs`, by that name.
    by_host: HashMap<Arc<str>, Vec<u32>>,
    /// Each name's last answer from the driver.
    answers: HashMap<Arc<str>, Vec<IpAddr>>,
    /// Connections naming a host, by the addresses it resolved to.
    by_resolved_addr: HashMap<IpAddr, Vec<u32>>,
}

/// Push `pos` unless it is already last (a list naming an address twice).
fn push(list: &mut Vec<u32>, pos: u32) {
    if list.last() != Some(&pos) {
        list.push(pos);
    }
}

impl Connections {
    /// Room for `n` connections (a reconfiguration knows how many).
    pub(crate) fn with_capacity(n: usize) -> Self {
        Connections {
            list: Vec::with_capacity(n),
            by_name: HashMap::with_capacity(n),
            by_remote_id: HashMap::with_capacity(n),
            ..Connections::default()
        }
    }

    /// Add a validated connection; its name must be new.
    pub(crate) fn add(&mut self, conn: ConnectionConfig) -> Result<(), ConfigError> {
        self.insert(Arc::new(conn))
    }

    /// Add a validated connection that may be shared already (a
    /// reconfiguration keeps the one IKE SAs hold); its name must be new.
    pub(crate) fn insert(&mut self, conn: Arc<ConnectionConfig>) -> Result<(), ConfigError> {
        if self.by_name.contains_key(&conn.name) {
            return Err(ConfigError::Invalid("duplicate connection name"));
        }
        let pos = u32::try_from(self.list.len())
            .map_err(|_| ConfigError::Invalid("too many connections"))?;
        if !conn.has_remote() {
            self.any_remote_addr.push(pos);
        }
        for a in &conn.remote_addrs {
            push(self.by_remote_addr.entry(*a).or_default(), pos);
        }
        for h in &conn.remote_hosts {
            push(self.by_host.entry(h.name.clone()).or_default(), pos);
            for a in self.answers.get(&h.name).into_iter().flatten() {
                push(self.by_resolved_addr.entry(*a).or_default(), pos);
            }
        }
        match &conn.remote.id {
            None | Some(Identity::Any) => self.any_remote_id.push(pos),
            Some(id) => push(self.by_remote_id.entry(id.folded()).or_default(), pos),
        }
        self.by_name.insert(conn.name.clone(), pos);
        self.list.push(conn);
        Ok(())
    }

    /// The connection named `name`.
    pub(crate) fn get(&self, name: &str) -> Option<&Arc<ConnectionConfig>> {
        let pos = *self.by_name.get(name)?;
        self.list.get(pos as usize)
    }

    /// All connections, in the order added.
    pub(crate) fn all(&self) -> &[Arc<ConnectionConfig>] {
        &self.list
    }

    /// Connections whose addresses accept an IKE_SA_INIT from `remote` to
    /// `local` ([`ConnectionConfig::matches_addrs`]), in configuration order.
    pub(crate) fn for_addrs(
        &self,
        local: IpAddr,
        remote: IpAddr,
    ) -> impl Iterator<Item = &Arc<ConnectionConfig>> {
        let specific = self
            .by_remote_addr
            .get(&remote)
            .map_or(&[][..], Vec::as_slice);
        let resolved = self
            .by_resolved_addr
            .get(&remote)
            .map_or(&[][..], Vec::as_slice);
        self.merged([specific, resolved, &self.any_remote_addr])
            .filter(move |c| c.local_addrs.is_empty() || c.local_addrs.contains(&local))
    }

    /// Connections that name `remote` in their `remote_addrs`, literally
    /// or by a host name that resolved to it (the wildcards, which accept
    /// any address, are not among them).
    pub(crate) fn with_remote_addr(
        &self,
        remote: IpAddr,
    ) -> impl Iterator<Item = &Arc<ConnectionConfig>> {
        let specific = self.by_remote_addr.get(&remote).map_or(&[][..], Vec::as_slice);
        let resolved = self.by_resolved_addr.get(&remote).map_or(&[][..], Vec::as_slice);
        self.merged([specific, resolved, &[]])
    }

    /// [`ConnectionConfig::matches_addrs`] with the names' last answers.
    pub(crate) fn matches_addrs(&self, conn: &ConnectionConfig, local: IpAddr, remote: IpAddr) -> bool {
        conn.matches_addrs(local, remote, |name, a| self.answer(name).contains(&a))
    }

    /// The last answer for host `name` (empty: none yet, or it failed).
    pub(crate) fn answer(&self, name: &str) -> &[IpAddr] {
        self.answers.get(name).map_or(&[][..], Vec::as_slice)
    }

    /// Whether a connection names host `name`.
    pub(crate) fn names_host(&self, name: &str) -> bool {
        self.by_host.contains_key(name)
    }

    /// Every host name the connections name, each once.
    pub(crate) fn hosts(&self) -> impl Iterator<Item = &Arc<str>> {
        self.by_host.keys()
    }

    /// Record the driver's answer for host `name` and re-index the
    /// connections naming it. An address also given by another name of
    /// the same connection stays indexed for it.
    pub(crate) fn set_answer(&mut self, name: &str, addrs: Vec<IpAddr>) {
        let Some((key, positions)) = self.by_host.get_key_value(name) else {
            return;
        };
        let (key, positions) = (key.clone(), positions.clone());
        let old = self.answers.insert(key, addrs.clone()).unwrap_or_default();
        for a in old.iter().filter(|a| !addrs.contains(a)) {
            let Some(list) = self.by_resolved_addr.get_mut(a) else { continue };
            let list_ref = &self.list;
            let answers = &self.answers;
            list.retain(|p| {
                !positions.contains(p)
                    || list_ref.get(*p as usize).is_some_and(|c| {
                        c.remote_hosts.iter().any(|h| {
                            &*h.name != name && answers.get(&h.name).is_some_and(|v| v.contains(a))
                        })
                    })
            });
            if list.is_empty() {
                self.by_resolved_addr.remove(a);
            }
        }
        for a in addrs.iter().filter(|a| !old.contains(a)) {
            let list = self.by_resolved_addr.entry(*a).or_default();
            for p in &positions {
                if let Err(i) = list.binary_search(p) {
                    list.insert(i, *p);
                }
            }
        }
    }

    /// The answers of the names `next` still names, handed to it (a
    /// reconfiguration keeps what was resolved).
    pub(crate) fn hand_answers_to(&mut self, next: &mut Connections) {
        for (name, addrs) in std::mem::take(&mut self.answers) {
            if next.names_host(&name) {
                next.set_answer(&name, addrs);
            }
        }
    }

    /// Connections whose remote identity accepts `peer`
    /// ([`ConnectionConfig::accepts_remote_id`]), in configuration order.
    pub(crate) fn for_remote_id(
        &self,
        peer: &Identity,
    ) -> impl Iterator<Item = &Arc<ConnectionConfig>> {
        // `%any` from the wire cannot happen; as a query it matches only
        // the wildcards, as `matches` does.
        let specific = if peer.is_any() {
            &[][..]
        } else {
            self.by_remote_id
                .get(&peer.folded())
                .map_or(&[][..], Vec::as_slice)
        };
        self.merged([specific, &self.any_remote_id, &[]])
    }

    /// The connections at the positions of three ascending lists, in order.
    fn merged<'a>(&'a self, lists: [&'a [u32]; 3]) -> impl Iterator<Item = &'a Arc<ConnectionConfig>> {
        Merge { lists }.filter_map(|pos| self.list.get(pos as usize))
    }
}

/// The ascending union of three ascending lists.
struct Merge<'a> {
    lists: [&'a [u32]; 3],
}

impl Iterator for Merge<'_> {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        let next = self.lists.iter().filter_map(|l| l.first().copied()).min()?;
        for list in &mut self.lists {
            if list.first() == Some(&next) {
                *list = &list[1..];
            }
        }
        Some(next)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    const ADDRS: [&str; 3] = ["192.0.2.1", "192.0.2.2", "2001:db8::1"];
    const IDS: [&str; 5] = [
        "@a.example",
        "@A.EXAMPLE",
        "@b.example",
        "a@example",
        "%any",
    ];

    /// A connection from indexes into `ADDRS`/`IDS` (None: no remote id).
    fn conn(n: usize, local: &[usize], remote: &[usize], id: Option<usize>) -> ConnectionConfig {
        let ip = |i: &usize| ADDRS[*i].parse::<IpAddr>().unwrap();
        let mut c =
            ConnectionConfig::new(&format!("c{n}"), "aes256gcm16-prfsha256-x25519").unwrap();
        c.local_addrs = local.iter().map(ip).collect();
        c.remote_addrs = remote.iter().map(ip).collect();
        c.remote.id = id.map(|i| Identity::parse(IDS[i]).unwrap());
        c
    }

    fn arb_conn() -> impl Strategy<Value = (Vec<usize>, Vec<usize>, Option<usize>)> {
        (
            proptest::collection::vec(0..ADDRS.len(), 0..3),
            proptest::collection::vec(0..ADDRS.len(), 0..3),
            proptest::option::of(0..IDS.len()),
        )
    }

    fn names<'a>(it: impl Iterator<Item = &'a Arc<ConnectionConfig>>) -> Vec<Arc<str>> {
        it.map(|c| c.name.clone()).collect()
    }

    proptest! {
        /// Each index gives exactly what filtering the list gives, in the
        /// same order.
        #[test]
        fn indexes_agree_with_filters(
            specs in proptest::collection::vec(arb_conn(), 0..10),
            l in 0..ADDRS.len(),
            r in 0..ADDRS.len(),
            peer in 0..IDS.len() - 1,
        ) {
            let mut cs = Connections::default();
            for (n, (la, ra, id)) in specs.iter().enumerate() {
                cs.add(conn(n, la, ra, *id)).unwrap();
            }
            let (l, r) = (ADDRS[l].parse().unwrap(), ADDRS[r].parse().unwrap());
            prop_assert_eq!(
                names(cs.for_addrs(l, r)),
                names(cs.all().iter().filter(|c| c.matches_addrs(l, r, |_, _| false)))
            );
            let peer = Identity::parse(IDS[peer]).unwrap();
            prop_assert_eq!(
                names(cs.for_remote_id(&peer)),
                names(cs.all().iter().filter(|c| c.accepts_remote_id(&peer)))
            );
            for n in 0..specs.len() {
                prop_assert_eq!(&*cs.get(&format!("c{n}")).unwrap().name, format!("c{n}"));
            }
            prop_assert!(cs.get("nope").is_none());
        }
    }

    #[test]
    fn duplicate_names_are_refused() {
        let mut cs = Connections::default();
        cs.add(conn(0, &[], &[], None)).unwrap();
        assert_eq!(
            cs.add(conn(0, &[1], &[], None)),
            Err(ConfigError::Invalid("duplicate connection name"))
        );
        assert_eq!(cs.all().len(), 1);
        assert!(
            cs.get("c0").unwrap().local_addrs.is_empty(),
            "the first stays"
        );
    }

    #[test]
    fn merge_is_an_ascending_union() {
        let m = |a: &[u32], b: &[u32], c: &[u32]| Merge { lists: [a, b, c] }.collect::<Vec<_>>();
        assert_eq!(m(&[1, 4, 9], &[0, 4, 5], &[4, 10]), [0, 1, 4, 5, 9, 10]);
        assert_eq!(m(&[], &[2], &[]), [2]);
        assert_eq!(m(&[], &[], &[]), Vec::<u32>::new());
    }

    /// A connection naming `hosts` (no literal addresses).
    fn named(n: usize, hosts: &[&str]) -> ConnectionConfig {
        let mut c = conn(n, &[], &[], None);
        c.remote_hosts = hosts
            .iter()
            .map(|h| crate::config::RemoteHost { name: (*h).into(), position: 0 })
            .collect();
        c
    }

    #[test]
    fn names_are_indexed_under_their_last_answers() {
        let strs = |v: Vec<Arc<str>>| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let (a, b) = (ADDRS[0].parse().unwrap(), ADDRS[1].parse().unwrap());
        let l = ADDRS[2].parse().unwrap();
        let mut cs = Connections::default();
        cs.add(named(0, &["x.example", "y.example"])).unwrap();
        cs.add(conn(1, &[], &[0], None)).unwrap();
        cs.add(named(2, &["x.example"])).unwrap();
        assert_eq!(strs(names(cs.for_addrs(l, a))), ["c1"], "nothing resolved yet");
        cs.set_answer("x.example", vec![a]);
        cs.set_answer("y.example", vec![a, b]);
        assert_eq!(strs(names(cs.for_addrs(l, a))), ["c0", "c1", "c2"], "in configuration order");
        assert_eq!(strs(names(cs.with_remote_addr(b))), ["c0"]);
        // x moves away from a: c0 keeps it through y, c2 loses it.
        cs.set_answer("x.example", vec![b]);
        assert_eq!(strs(names(cs.for_addrs(l, a))), ["c0", "c1"]);
        assert_eq!(strs(names(cs.for_addrs(l, b))), ["c0", "c2"]);
        assert!(cs.matches_addrs(cs.get("c2").unwrap(), l, b));
        assert!(!cs.matches_addrs(cs.get("c2").unwrap(), l, a));
        cs.set_answer("unknown.example", vec![a]);
        assert!(cs.answer("unknown.example").is_empty(), "a name no connection has is not kept");
        // A reconfiguration keeps the answers of names still named.
        let mut next = Connections::default();
        next.add(named(5, &["y.example"])).unwrap();
        cs.hand_answers_to(&mut next);
        assert_eq!(strs(names(next.for_addrs(l, b))), ["c5"]);
        assert!(next.answer("x.example").is_empty());
    }
}
