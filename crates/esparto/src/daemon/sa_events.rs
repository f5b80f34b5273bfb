//! SA events for those who follow them (VICI `ike-updown`,
//! `child-updown`, `ike-rekey`, `child-rekey`; [`watch::Watches::subscribe`]):
//! built from the Child SA table around each engine event, only while
//! someone follows them.
//!
//! An SA that goes away is described before the table forgets it, one
//! that comes up after the table knows it:
//!
//! | engine event | published |
//! | --- | --- |
//! | `IkeSaEstablished` | after: `ike-updown` up |
//! | `IkeSaDeleted` (of an established IKE SA; its Child SAs' `ChildSaDeleted` came first) | before: `ike-updown` down |
//! | `ChildSaEstablished` | after: `child-updown` up, or `child-rekey` (old and new) for a rekey |
//! | `ChildSaDeleted` | before: `child-updown` down, unless a rekey replaced it (`child-rekey` said so) |
//! | `IkeSaRekeyed` | before and after: `ike-rekey` (old and new) |
//!
//! Traffic counters in events are zero (the workers' counters are
//! gathered for `sas`, not per event).

use std::time::Instant;

use esparto_ike::{Event, IkeSaId, Reason};

use super::Gateway;
use super::ike::Ike;
use super::table::report::Counters;
use super::watch;
use crate::control::SaEvent;
use crate::status::IkeSaStatus;

/// What to publish once the engine event is applied.
pub(super) enum After {
    IkeUp(IkeSaId),
    Child { ike_sa: IkeSaId, spi: u32, rekeys: Option<u32> },
    IkeRekey { old: Box<IkeSaStatus>, new: IkeSaId },
}

impl Ike {
    /// One IKE SA as the table and the engine know it now (the engine's
    /// view of that IKE SA itself, not of a successor).
    fn sa_status(&self, now: Instant, gw: &Gateway, id: IkeSaId) -> Option<IkeSaStatus> {
        let mut s = gw.table.ike_sa_status(id, now, &Counters::default(), gw.esp_port())?;
        self.annotate_as(now, std::slice::from_mut(&mut s), true);
        Some(s)
    }

    /// Publishes what `ev` ends, and says what to publish once it is
    /// applied; nothing while nobody follows events.
    pub(super) fn events_before(&self, now: Instant, gw: &Gateway, ev: &Event) -> Option<After> {
        let w = watch::global();
        if !w.subscribed() {
            return None;
        }
        match ev {
            Event::IkeSaEstablished { ike_sa, .. } => Some(After::IkeUp(*ike_sa)),
            Event::ChildSaEstablished(c) => {
                Some(After::Child { ike_sa: c.ike_sa, spi: c.inbound_spi, rekeys: c.rekeys })
            }
            Event::ChildSaDeleted { ike_sa, inbound_spi, reason, .. } if *reason != Reason::Rekeyed => {
                let sa = self.sa_status(now, gw, *ike_sa)?;
                publish_child(w, "child-updown", false, sa, &[*inbound_spi]);
                None
            }
            Event::IkeSaDeleted { ike_sa, .. } => {
                let sa = self.sa_status(now, gw, *ike_sa).filter(|s| s.state == "established")?;
                w.publish(&SaEvent { kind: "ike-updown".into(), up: false, sa, old: None });
                None
            }
            Event::IkeSaRekeyed { old, new, .. } => {
                let old = self.sa_status(now, gw, *old)?;
                Some(After::IkeRekey { old: Box::new(old), new: *new })
            }
            _ => None,
        }
    }

    /// Publishes what [`events_before`](Self::events_before) left for
    /// after the event.
    pub(super) fn events_after(&self, now: Instant, gw: &Gateway, after: After) {
        let w = watch::global();
        match after {
            After::IkeUp(id) => {
                if let Some(sa) = self.sa_status(now, gw, id) {
                    w.publish(&SaEvent { kind: "ike-updown".into(), up: true, sa, old: None });
                }
            }
            After::Child { ike_sa, spi, rekeys } => {
                let Some(sa) = self.sa_status(now, gw, ike_sa) else { return };
                match rekeys {
                    Some(old) => publish_child(w, "child-rekey", false, sa, &[old, spi]),
                    None => publish_child(w, "child-updown", true, sa, &[spi]),
                }
            }
            After::IkeRekey { old, new } => {
                if let Some(sa) = self.sa_status(now, gw, new) {
                    w.publish(&SaEvent { kind: "ike-rekey".into(), up: false, sa, old: Some(*old) });
                }
            }
        }
    }
}

/// Publishes a Child SA event of `sa` holding only the Child SAs of
/// inbound SPIs `spis`, in that order (for a rekey: the old, the new).
fn publish_child(w: &watch::Watches, kind: &str, up: bool, mut sa: IkeSaStatus, spis: &[u32]) {
    let mut children = std::mem::take(&mut sa.children);
    sa.children = spis
        .iter()
        .filter_map(|spi| {
            let i = children.iter().position(|c| u32::from_str_radix(&c.in_spi, 16) == Ok(*spi))?;
            Some(children.swap_remove(i))
        })
        .collect();
    if sa.children.len() == spis.len() {
        w.publish(&SaEvent { kind: kind.into(), up, sa, old: None });
    }
}
