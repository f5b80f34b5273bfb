//! Connections and secrets loaded over VICI (`swanctl --load-all`): a
//! second source beside the file, as charon keeps what swanctl loads.
//!
//! The daemon holds a [`Layer`]: each connection and secret as the VICI
//! client gave it, as a tree of strings. Loading the configuration grafts
//! the layer's trees into the file's tree ([`graft`]: under `connections`
//! and `secrets`, after the file's own) and walks the whole as one file,
//! so a connection loaded over VICI meets exactly the checks of one in
//! the file, with the same messages, and the checks across connections
//! (overlapping selectors, SPIs, PSKs) see both. Errors in a grafted tree
//! name it (`load-conn 'site'`) instead of a file and line.
//!
//! A name belongs to one source: a connection or secret loaded over VICI
//! may not have the name of one in the file (the file's would silently
//! win or lose at the next reload).
//!
//! **Cost.** `swanctl --load-all` of n connections is n `load-conn`s,
//! each a whole check of the file and everything loaded before. So that
//! it stays linear, what the walk made of a grafted tree (the
//! [`Connection`] and its children's cross-check records, or the PSK,
//! and its warnings) is kept ([`Walk`]) and reused, not walked again,
//! while the tree and the file's text are the same: a connection's walk
//! depends on nothing else. The checks across connections still see
//! every one, but remember what they last found clean: the children free
//! of overlapping selectors, the PSK index and the connections whose
//! PSKs it holds. A list that begins with what was found clean and adds a
//! few after it (one more `load-conn`) has only the additions checked,
//! against everything, with the messages a whole check gives.

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use esparto_ike::config::{Psk, Secrets};
use esparto_ike::{Identity, PskIndex};
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

use super::check::{self, ChildSeen};
use super::error::{ConfigError, KeyPath};
use super::model::Connection;
use super::tree::{Cx, Entry, Kind, Node, Span};

/// A value given over VICI, where every scalar is a string.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Value {
    /// A key's value.
    Str(String),
    /// A list of strings.
    List(Vec<String>),
    /// A section: its keys and values in the order they came.
    Section(Vec<(String, Value)>),
}

/// What was loaded over VICI, in the order it came.
#[derive(Clone, Default)]
pub struct Layer {
    /// Connections by name (`load-conn`). Shared strings: every load
    /// copies the layer.
    pub conns: Vec<(Arc<str>, Arc<Value>)>,
    /// PSKs by their VICI id (`load-shared`).
    pub secrets: Vec<(Arc<str>, Arc<Value>)>,
    /// Authorities by name (`load-authority`), as `[authorities]` entries.
    pub authorities: Vec<(Arc<str>, Arc<Value>)>,
    /// Certificates (`load-cert`) by their SHA-256 in hex.
    pub certs: Vec<(Arc<str>, Arc<LoadedCert>)>,
    /// The CA certificates of `certs` as `[authorities]` entries (named
    /// `x509ca <sha256>`): every connection without `cacerts` trusts them,
    /// as charon trusts what swanctl loads from `x509ca/`.
    ca_authorities: Vec<(Arc<str>, Arc<Value>)>,
    /// Private keys (`load-key`), PKCS#8 DER, by key id (SHA-1 of the
    /// public key, as strongSwan names keys). A connection loaded over
    /// VICI signs with the one that is its certificate's.
    pub keys: Vec<(Arc<str>, PrivateKey)>,
    /// The walks of the trees, shared by every copy of the layer.
    cache: Cache,
}

/// A private key loaded over VICI: PKCS#8 DER, wiped when the last
/// copy of the layer drops it.
pub type PrivateKey = Arc<Zeroizing<Vec<u8>>>;

/// A certificate loaded over VICI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedCert {
    /// DER.
    pub der: Vec<u8>,
    /// A CA certificate (`flag = CA`, swanctl's `x509ca/`).
    pub ca: bool,
}

impl PartialEq for Layer {
    fn eq(&self, other: &Self) -> bool {
        self.conns == other.conns
            && self.secrets == other.secrets
            && self.authorities == other.authorities
            && self.certs == other.certs
            && self.keys.len() == other.keys.len()
            && self.keys.iter().zip(&other.keys).all(|(a, b)| a.0 == b.0)
    }
}

impl Eq for Layer {}

impl Layer {
    /// Adds the connection `name`, or replaces the one of that name
    /// (in its place). True if it replaced one.
    pub fn set_conn(&mut self, name: &str, value: Value) -> bool {
        set(&mut self.conns, name, value)
    }

    /// Removes the connection `name`; false if there is none.
    pub fn remove_conn(&mut self, name: &str) -> bool {
        remove(&mut self.conns, name)
    }

    /// Adds the secret `id`, or replaces the one of that id.
    pub fn set_secret(&mut self, id: &str, value: Value) -> bool {
        set(&mut self.secrets, id, value)
    }

    /// Removes the secret `id`; false if there is none.
    pub fn remove_secret(&mut self, id: &str) -> bool {
        remove(&mut self.secrets, id)
    }

    /// Adds the authority `name`, or replaces the one of that name.
    pub fn set_authority(&mut self, name: &str, value: Value) -> bool {
        set(&mut self.authorities, name, value)
    }

    /// Removes the authority `name`; false if there is none.
    pub fn remove_authority(&mut self, name: &str) -> bool {
        remove(&mut self.authorities, name)
    }

    /// Adds a certificate (DER) unless it is loaded already; its id
    /// (SHA-256, hex).
    pub fn add_cert(&mut self, der: Vec<u8>, ca: bool) -> Arc<str> {
        let id: Arc<str> = hex(aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &der).as_ref()).into();
        if self.certs.iter().any(|(i, c)| *i == id && c.ca == ca) {
            return id;
        }
        if ca {
            let value = Value::Section(vec![("cacert".into(), Value::Str(inline(&der)))]);
            self.ca_authorities.push((format!("x509ca {id}").into(), Arc::new(value)));
        }
        self.certs.push((id.clone(), Arc::new(LoadedCert { der, ca })));
        id
    }

    /// Adds the private key `id` (PKCS#8), or replaces the one of that id.
    pub fn set_key(&mut self, id: &str, pkcs8: Zeroizing<Vec<u8>>) {
        let key = Arc::new(pkcs8);
        match self.keys.iter_mut().find(|(i, _)| &**i == id) {
            Some(slot) => slot.1 = key,
            None => self.keys.push((id.into(), key)),
        }
    }

    /// Removes the private key `id`; false if there is none.
    pub fn remove_key(&mut self, id: &str) -> bool {
        let before = self.keys.len();
        self.keys.retain(|(i, _)| &**i != id);
        self.keys.len() != before
    }

    /// Forgets every credential loaded over VICI (`clear-creds`):
    /// certificates, private keys, PSKs and authorities.
    pub fn clear_creds(&mut self) {
        self.secrets.clear();
        self.authorities.clear();
        self.certs.clear();
        self.ca_authorities.clear();
        self.keys.clear();
    }

    /// The CA certificate (DER) of an authority's tree, if it holds one
    /// as data (PEM or DER, as the file swanctl read).
    pub fn cacert(authority: &Value) -> Option<Vec<u8>> {
        let Value::Section(entries) = authority else { return None };
        let data = entries.iter().find_map(|(k, v)| match v {
            Value::Str(s) if k == "cacert" => inline_data(s).and_then(Result::ok),
            _ => None,
        })?;
        esparto_ike::cert::certs_from_file(&data).ok()?.into_iter().next()
    }

    /// Whether anything at all was loaded over VICI.
    pub fn is_empty(&self) -> bool {
        self.conns.is_empty() && self.secrets.is_empty() && self.authorities.is_empty() && self.certs.is_empty() && self.keys.is_empty()
    }

    /// Names of the connections, in the order they were loaded.
    pub fn conn_names(&self) -> impl Iterator<Item = &str> {
        self.conns.iter().map(|(n, _)| &**n)
    }

    /// Ids of the secrets, in the order they were loaded.
    pub fn secret_ids(&self) -> impl Iterator<Item = &str> {
        self.secrets.iter().map(|(n, _)| &**n)
    }

    /// The index of `secrets`' PSKs: the one built last time if the keys
    /// list the same identities in the same order (it holds positions and
    /// identities only), else a new one, kept for next time. A load over
    /// VICI checks every connection's PSK again; the keys rarely change
    /// between two loads of connections.
    pub(crate) fn psk_index(&self, secrets: &Secrets) -> Arc<PskIndex> {
        let mut c = self.cache.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let same = |(ids, _): &(Vec<Vec<Identity>>, Arc<PskIndex>)| {
            ids.len() == secrets.psks.len() && ids.iter().zip(&secrets.psks).all(|(a, b)| *a == b.ids)
        };
        if let Some(kept) = c.psk_index.as_ref().filter(|k| same(k)) {
            return kept.1.clone();
        }
        let ix = Arc::new(PskIndex::new(secrets));
        c.psk_index = Some((secrets.psks.iter().map(|p| p.ids.clone()).collect(), ix.clone()));
        ix
    }

    /// Checks `children` for overlapping selectors ([`check::overlaps`]).
    /// If they are the children last found free of overlaps with a few
    /// added after them (a load over VICI of one more connection), only
    /// those few are compared ([`check::overlaps_after`]): the same
    /// errors, without indexing every child again.
    pub(crate) fn check_overlaps(&self, cx: &mut Cx<'_>, children: &[Arc<ChildSeen>]) {
        const FEW: usize = 16;
        let mut c = self.cache.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let before = (cx.error_count(), cx.warning_count());
        let known = c.no_overlaps.len();
        if known > 0 && children.len().saturating_sub(known) <= FEW && extends(children, &c.no_overlaps) {
            check::overlaps_after(cx, children, known);
        } else {
            check::overlaps(cx, children);
        }
        if (cx.error_count(), cx.warning_count()) == before {
            c.no_overlaps = children.to_vec();
        }
    }

    /// How many of `connections`, from the first, are known to have their
    /// PSK in `index` (found so last time with that very index); the
    /// caller looks up the rest and reports [`Layer::psks_found`].
    pub(crate) fn psks_known(&self, index: &Arc<PskIndex>, connections: &[Arc<Connection>]) -> usize {
        let c = self.cache.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match &c.psks_found {
            Some((ix, found)) if Arc::ptr_eq(ix, index) && extends(connections, found) => found.len(),
            _ => 0,
        }
    }

    /// Every one of `connections` has its PSK in `index`.
    pub(crate) fn psks_found(&self, index: &Arc<PskIndex>, connections: &[Arc<Connection>]) {
        let mut c = self.cache.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        c.psks_found = Some((index.clone(), connections.to_vec()));
    }
}

// By hand: the secrets' values stay out of logs.
impl std::fmt::Debug for Layer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Layer")
            .field("conns", &self.conns)
            .field("secrets", &self.secret_ids().collect::<Vec<_>>())
            .field("authorities", &self.authorities)
            .field("certs", &self.certs.iter().map(|(i, _)| i).collect::<Vec<_>>())
            .field("keys", &self.keys.iter().map(|(i, _)| i).collect::<Vec<_>>())
            .finish()
    }
}

fn set(list: &mut Vec<(Arc<str>, Arc<Value>)>, name: &str, value: Value) -> bool {
    match list.iter_mut().find(|(n, _)| &**n == name) {
        Some(slot) => {
            slot.1 = Arc::new(value);
            true
        }
        None => {
            list.push((name.into(), Arc::new(value)));
            false
        }
    }
}

fn remove(list: &mut Vec<(Arc<str>, Arc<Value>)>, name: &str) -> bool {
    let before = list.len();
    list.retain(|(n, _)| &**n != name);
    list.len() != before
}

/// What the walk made of one grafted tree (see the module docs).
#[derive(Clone)]
pub(crate) enum Walked {
    /// A connection and its children's cross-check records.
    Conn(Arc<Connection>, Arc<[Arc<ChildSeen>]>),
    /// A PSK.
    Secret(Arc<Psk>),
}

/// A tree's walk and the warnings it gave.
pub(crate) struct Walk {
    pub(crate) walked: Walked,
    pub(crate) warnings: Vec<ConfigError>,
}

/// Per table and name: the number of its segment (stable while the name
/// is loaded, so the spans in a kept walk stay right) and its walk, with
/// the file's fingerprint and the tree it was made from.
#[derive(Clone, Default)]
struct Cache(Arc<Mutex<CacheInner>>);

#[derive(Default)]
struct CacheInner {
    conns: HashMap<Arc<str>, Kept>,
    secrets: HashMap<Arc<str>, Kept>,
    next_segment: usize,
    /// The identities of the keys last indexed, by position, and their index.
    psk_index: Option<(Vec<Vec<Identity>>, Arc<PskIndex>)>,
    /// The children last found free of overlaps.
    no_overlaps: Vec<Arc<ChildSeen>>,
    /// A key index and the connections last found to have their PSKs in it.
    psks_found: Option<(Arc<PskIndex>, Vec<Arc<Connection>>)>,
}

/// Whether `new` begins with `old`, element by element: the same `Arc`s
/// (a kept walk's: an `Arc`'s content never changes, and `old` keeps it
/// alive), or equal ones (the file's, parsed again each time).
fn extends<T: PartialEq>(new: &[Arc<T>], old: &[Arc<T>]) -> bool {
    new.len() >= old.len() && old.iter().zip(new).all(|(a, b)| Arc::ptr_eq(a, b) || a == b)
}

struct Kept {
    segment: usize,
    walk: Option<(u64, Arc<Value>, Arc<Walk>)>,
}

impl CacheInner {
    fn table(&mut self, table: &str) -> &mut HashMap<Arc<str>, Kept> {
        if table == "connections" { &mut self.conns } else { &mut self.secrets }
    }
}

/// One tree of the layer, where it was grafted, and its walk if kept.
pub(crate) struct Slot {
    pub(crate) name: Arc<str>,
    /// The span of its nodes (its segment).
    pub(crate) span: Span,
    value: Arc<Value>,
    /// The walk kept from before: the tree was not grafted.
    pub(crate) kept: Option<Arc<Walk>>,
}

/// The layer's trees as [`graft`] placed them, in the layer's order.
#[derive(Default)]
pub(crate) struct Grafted {
    pub(crate) conns: Vec<Slot>,
    pub(crate) secrets: Vec<Slot>,
    fingerprint: u64,
    cache: Cache,
}

impl Grafted {
    /// The walks of `table`'s trees in the layer's order: a kept one (its
    /// warnings recorded again), else the fresh one from `fresh`, which is
    /// kept for next time. A tree with neither had errors.
    pub(crate) fn walks(&self, cx: &mut Cx<'_>, table: &'static str, mut fresh: HashMap<String, Walk>) -> Vec<(&Slot, Walked)> {
        let slots = if table == "connections" { &self.conns } else { &self.secrets };
        let mut out = Vec::with_capacity(slots.len());
        for slot in slots {
            let walked = match &slot.kept {
                Some(w) => {
                    cx.replay_warnings(&slot.span, &w.warnings);
                    w.walked.clone()
                }
                None => {
                    let Some(w) = fresh.remove(&*slot.name) else { continue };
                    let walked = w.walked.clone();
                    self.keep(table, slot, w);
                    walked
                }
            };
            out.push((slot, walked));
        }
        out
    }

    /// Keeps the walk of the tree in `slot` (of `table`) for next time.
    fn keep(&self, table: &'static str, slot: &Slot, walk: Walk) {
        let mut c = self.cache.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(k) = c.table(table).get_mut(&*slot.name) {
            k.walk = Some((self.fingerprint, slot.value.clone(), Arc::new(walk)));
        }
    }
}

/// What the walk of a tree depends on besides the tree: the file's text
/// and where it is (relative paths), and the credentials loaded over
/// VICI (a connection's CAs and private key).
pub(crate) fn fingerprint(text: &str, dir: &std::path::Path, layer: &Layer) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    dir.hash(&mut h);
    for (name, value) in layer.authorities.iter().chain(&layer.ca_authorities) {
        name.hash(&mut h);
        value.hash(&mut h);
    }
    for (id, _) in &layer.keys {
        id.hash(&mut h);
    }
    h.finish()
}

/// How data given over VICI (a certificate's bytes, where the file names
/// one) is written in a grafted tree: this, then the bytes in hex. Read
/// so only in grafted trees ([`inline_data`]).
pub const INLINE: &str = "vici-data:";

/// `data` as a grafted tree writes it ([`INLINE`]).
pub fn inline(data: &[u8]) -> String {
    format!("{INLINE}{}", hex(data))
}

/// `data` in lower-case hex.
fn hex(data: &[u8]) -> String {
    use std::fmt::Write as _;
    data.iter().fold(String::with_capacity(2 * data.len()), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// The bytes of an [`inline`] value; `None` if `s` is not one, `Some(Err)`
/// if it is malformed.
pub(crate) fn inline_data(s: &str) -> Option<Result<Vec<u8>, String>> {
    let hex = s.strip_prefix(INLINE)?;
    let nibble = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let b = hex.as_bytes();
    if b.len() % 2 != 0 {
        return Some(Err("data given over VICI: odd number of hex digits".into()));
    }
    Some(
        b.chunks(2)
            .map(|p| Some((nibble(p[0])? << 4) | nibble(p[1])?))
            .collect::<Option<Vec<u8>>>()
            .ok_or_else(|| "data given over VICI: not hex".to_string()),
    )
}

/// Adds `layer`'s connections and secrets to the file's tree `root`
/// (see the module docs), except those whose walk is kept for this
/// `fingerprint`. A name the file already uses is an error at the
/// grafted tree, pointing at the file's.
pub(crate) fn graft<'t>(cx: &mut Cx<'t>, root: &mut Node, layer: &'t Layer, fingerprint: u64) -> Grafted {
    let mut out = Grafted { fingerprint, cache: layer.cache.clone(), ..Grafted::default() };
    let mut guard = layer.cache.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let cache = &mut *guard;
    cx.reserve_segments(layer.conns.len() + layer.secrets.len() + layer.authorities.len() + layer.ca_authorities.len());
    cx.vici_keys = &layer.keys;
    for (table, what, items) in [("connections", "load-conn", &layer.conns), ("secrets", "load-shared", &layer.secrets)] {
        let file_names = names_in(root, table);
        for (name, value) in items {
            let fresh = cache.next_segment + 1;
            let entry = cache.table(table).entry(name.clone()).or_insert(Kept { segment: fresh, walk: None });
            let segment = entry.segment;
            let kept = entry
                .walk
                .as_ref()
                .filter(|(f, v, _)| *f == fingerprint && (Arc::ptr_eq(v, value) || **v == **value))
                .map(|(_, _, w)| w.clone());
            if segment == fresh {
                cache.next_segment = fresh;
            }
            let span = cx.segment(segment, what, name);
            if file_names.contains(&**name) {
                name_taken(cx, root, table, name, &span);
                continue;
            }
            if kept.is_none() {
                let Some(entries) = table_entries(root, table, &span) else {
                    // The file's table is not a table: the walk says so.
                    continue;
                };
                entries.push(Entry { key: name.to_string(), key_span: span.clone(), value: node(value, &span) });
            }
            let slot = Slot { name: name.clone(), span, value: value.clone(), kept };
            match table {
                "connections" => out.conns.push(slot),
                _ => out.secrets.push(slot),
            }
        }
        // Forget the walks of trees the layer no longer has. Every name of
        // the layer is in the cache now, so it holds others only if it is
        // larger.
        let kept = cache.table(table);
        if kept.len() > items.len() {
            let names: HashSet<&str> = items.iter().map(|(n, _)| &**n).collect();
            kept.retain(|name, _| names.contains(&**name));
        }
    }
    // Authorities are walked afresh every time (every connection's trust
    // depends on them, and there are few): in segments past the cache's,
    // which the next connection loaded may take over.
    let file_names = names_in(root, "authorities");
    let mut segment = cache.next_segment;
    for (what, items) in [("load-authority", &layer.authorities), ("load-cert", &layer.ca_authorities)] {
        for (name, value) in items {
            segment += 1;
            let span = cx.segment(segment, what, name);
            if file_names.contains(&**name) {
                name_taken(cx, root, "authorities", name, &span);
                continue;
            }
            if let Some(entries) = table_entries(root, "authorities", &span) {
                entries.push(Entry { key: name.to_string(), key_span: span.clone(), value: node(value, &span) });
            }
        }
    }
    drop(guard);
    out
}

/// The names in the file's top-level table `table`.
fn names_in(root: &Node, table: &str) -> HashSet<String> {
    match root.get(table).map(|e| &e.value.kind) {
        Some(Kind::Table(entries)) => entries.iter().map(|e| e.key.clone()).collect(),
        _ => Default::default(),
    }
}

/// A name loaded over VICI that the file's `table` has too: an error at
/// the grafted tree, pointing at the file's.
fn name_taken(cx: &mut Cx<'_>, root: &Node, table: &str, name: &str, span: &Span) {
    let theirs = root.get(table).and_then(|t| t.value.get(name)).map(|e| e.key_span.clone());
    let at = theirs.map(|s| cx.position(&s)).unwrap_or_default();
    cx.err(
        span,
        &KeyPath::root().key(table).key(name),
        format!("{at} has one of this name; what is loaded over VICI needs a name of its own"),
    );
}

/// The entries of the top-level table `key`, created (at `span`) if the
/// file has none; `None` if the file's is not a table.
fn table_entries<'n>(root: &'n mut Node, key: &str, span: &Span) -> Option<&'n mut Vec<Entry>> {
    let Kind::Table(top) = &mut root.kind else {
        return None;
    };
    let i = match top.iter().position(|e| e.key == key) {
        Some(i) => i,
        None => {
            top.push(Entry {
                key: key.to_string(),
                key_span: span.clone(),
                value: Node { span: span.clone(), kind: Kind::Table(Vec::new()) },
            });
            top.len() - 1
        }
    };
    match &mut top[i].value.kind {
        Kind::Table(entries) => Some(entries),
        _ => None,
    }
}

/// `value` as a tree node, every node at `span`.
fn node(value: &Value, span: &Span) -> Node {
    let kind = match value {
        Value::Str(s) => Kind::Str(s.clone()),
        Value::List(items) => {
            Kind::Array(items.iter().map(|s| Node { span: span.clone(), kind: Kind::Str(s.clone()) }).collect())
        }
        Value::Section(entries) => Kind::Table(
            entries
                .iter()
                .map(|(k, v)| Entry { key: k.clone(), key_span: span.clone(), value: node(v, span) })
                .collect(),
        ),
    };
    Node { span: span.clone(), kind }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn set_replaces_in_place_and_remove_says_whether_it_found() {
        let mut l = Layer::default();
        assert!(!l.set_conn("a", Value::Str("1".into())));
        assert!(!l.set_conn("b", Value::Str("2".into())));
        assert!(l.set_conn("a", Value::Str("3".into())));
        assert_eq!(l.conn_names().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(*l.conns[0].1, Value::Str("3".into()));
        assert!(l.remove_conn("a"));
        assert!(!l.remove_conn("a"));
        assert_eq!(l.conn_names().collect::<Vec<_>>(), ["b"]);
    }

    #[test]
    fn the_wire_form_is_tagged_json() {
        let v = Value::Section(vec![("a".into(), Value::List(vec!["x".into()]))]);
        let j = serde_json::to_string(&v).unwrap();
        assert_eq!(j, r#"{"section":[["a",{"list":["x"]}]]}"#);
        assert_eq!(serde_json::from_str::<Value>(&j).unwrap(), v);
    }
}
