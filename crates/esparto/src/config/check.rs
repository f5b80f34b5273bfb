//! Checks across the whole file, run once every child has been parsed:
//! overlapping selectors between children, and SPIs used twice.
//!
//! **Overlaps.** The SPD is searched by packet; if two children both match
//! some packet, one of them is unreachable for it (RFC 4301 §4.4.1: the
//! SPD is ordered, and the first match wins; an unordered, decorrelated SPD
//! is what makes caching by flow correct). Two children overlap when a
//! local selector of one intersects a local selector of the other *and* a
//! remote selector of one intersects a remote selector of the other, with
//! compatible protocols: then there is a packet both claim. Outbound and
//! inbound policies are the same pairs read in opposite directions, so one
//! check covers both. The error names both children and where the other
//! one is.
//!
//! **SPIs.** Inbound SAs are found by SPI alone (RFC 4301 §4.1: "the SPI
//! alone suffices to specify an SA" for unicast), so an inbound SPI used
//! twice anywhere in the file is refused. Outbound SPIs are chosen by the
//! peer; two peers may pick the same one, so they must only be unique
//! towards one peer (within a connection).

use std::collections::HashMap;

use esparto_esp::TrafficSelector;

use super::error::KeyPath;
use super::tree::{Cx, Span};

/// A value with where it was written.
#[derive(Debug, Clone)]
pub(crate) struct Located<T> {
    /// The value.
    pub(crate) value: T,
    /// Its position.
    pub(crate) span: Span,
    /// Its key path.
    pub(crate) path: KeyPath,
}

/// What the cross checks need to know about one child.
#[derive(Debug, Clone)]
pub(crate) struct ChildSeen {
    /// `connection/child`.
    pub(crate) name: String,
    /// The connection's name.
    pub(crate) connection: String,
    /// Resolved local selectors (`dynamic` without a known address is left out).
    pub(crate) local: Vec<Located<TrafficSelector>>,
    /// Resolved remote selectors.
    pub(crate) remote: Vec<Located<TrafficSelector>>,
    /// Inbound SPIs of static SAs.
    pub(crate) in_spis: Vec<Located<u32>>,
    /// Outbound SPIs of static SAs.
    pub(crate) out_spis: Vec<Located<u32>>,
}

/// Would one packet match both (local, remote) pairs?
fn pairs_overlap(
    l1: &TrafficSelector,
    r1: &TrafficSelector,
    l2: &TrafficSelector,
    r2: &TrafficSelector,
) -> bool {
    let (Some(l), Some(r)) = (l1.intersect(l2), r1.intersect(r2)) else {
        return false;
    };
    // One packet has one protocol: both intersections must allow it.
    l.proto == 0 || r.proto == 0 || l.proto == r.proto
}

/// Refuse children whose selectors claim the same traffic.
pub(crate) fn overlaps(cx: &mut Cx<'_>, children: &[ChildSeen]) {
    for (j, b) in children.iter().enumerate() {
        // Report each later child once, against the first earlier one it hits.
        'earlier: for a in &children[..j] {
            for lb in &b.local {
                for rb in &b.remote {
                    for la in &a.local {
                        for ra in &a.remote {
                            if pairs_overlap(&la.value, &ra.value, &lb.value, &rb.value) {
                                let msg = format!(
                                    "{} <-> {} overlaps child {} ({} <-> {}, at {}): both would claim the same traffic and one of them would never see it",
                                    lb.value,
                                    rb.value,
                                    a.name,
                                    la.value,
                                    ra.value,
                                    cx.position(&la.span),
                                );
                                cx.err(&lb.span, &lb.path, msg);
                                break 'earlier;
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Refuse an inbound SPI used twice in the file, or an outbound SPI used
/// twice towards one peer.
pub(crate) fn spis(cx: &mut Cx<'_>, children: &[ChildSeen]) {
    let mut seen_in: HashMap<u32, (Span, String)> = HashMap::new();
    let mut seen_out: HashMap<(String, u32), (Span, String)> = HashMap::new();
    for c in children {
        for s in &c.in_spis {
            match seen_in.get(&s.value) {
                Some((span, name)) => {
                    let msg = format!(
                        "in_spi 0x{:08x} is already used by {name} (at {}): inbound SAs are looked up by SPI alone (RFC 4301 §4.1)",
                        s.value,
                        cx.position(span)
                    );
                    cx.err(&s.span, &s.path, msg);
                }
                None => {
                    seen_in.insert(s.value, (s.span.clone(), c.name.clone()));
                }
            }
        }
        for s in &c.out_spis {
            let key = (c.connection.clone(), s.value);
            match seen_out.get(&key) {
                Some((span, name)) => {
                    let msg = format!(
                        "out_spi 0x{:08x} is already used by {name} (at {}) towards the same peer",
                        s.value,
                        cx.position(span)
                    );
                    cx.err(&s.span, &s.path, msg);
                }
                None => {
                    seen_out.insert(key, (s.span.clone(), c.name.clone()));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn ts(s: &str) -> TrafficSelector {
        s.parse().unwrap()
    }

    #[test]
    fn overlap_needs_both_sides_and_a_common_protocol() {
        let (l, r) = (ts("10.1.0.0/16"), ts("10.2.0.0/16"));
        assert!(pairs_overlap(&l, &r, &ts("10.1.2.0/24"), &ts("10.0.0.0/8")));
        // Same local side, disjoint remote sides: no packet matches both.
        assert!(!pairs_overlap(&l, &r, &l, &ts("10.3.0.0/16")));
        // Same addresses, different protocols on the two sides of one packet.
        assert!(!pairs_overlap(
            &l,
            &r,
            &ts("10.1.0.0/16[tcp]"),
            &ts("10.2.0.0/16[udp]")
        ));
        assert!(pairs_overlap(
            &l,
            &r,
            &ts("10.1.0.0/16[tcp]"),
            &ts("10.2.0.0/16")
        ));
        // Disjoint ports.
        assert!(!pairs_overlap(
            &ts("10.1.0.0/16[tcp/80]"),
            &r,
            &ts("10.1.0.0/16[tcp/443]"),
            &r
        ));
        // Families never overlap.
        assert!(!pairs_overlap(&l, &r, &ts("fd00::/8"), &ts("fd01::/16")));
    }
}
