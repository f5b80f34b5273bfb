//! Policy routing rules (`ip rule`) over rtnetlink: add, delete and list
//! them, without running `ip`.
//!
//! A [`Rule`] is the part of a kernel FIB rule that Esparto sets or needs
//! to recognise: priority, source and destination prefixes, firewall mark,
//! the action (look up a table, jump to a priority, do nothing), the
//! `suppress_prefixlength` of a lookup and the protocol that tags who made
//! it. A dumped rule that also matches on something else (an interface, a
//! uid range, ports, …) says so in [`Rule::other`], so that it is never
//! mistaken for one of ours.
//!
//! The kernel keeps rules in a list ordered by priority; a rule added at a
//! priority that already holds rules goes after them. `NLM_F_EXCL` makes
//! adding an identical rule twice an error (`EEXIST`) instead of a second
//! copy, which is what [`Rtnetlink::add_rule`] asks for.

use std::fmt;
use std::io;
use std::net::IpAddr;

use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::route::RouteProtocol;
use netlink_packet_route::rule::{RuleAction, RuleAttribute, RuleFlags, RuleHeader, RuleMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use crate::netlink::Rtnetlink;
use crate::route::{LOCAL_TABLE, MAIN_TABLE, prefix_contains};

/// `RT_TABLE_DEFAULT`: the table of the kernel's last rule.
pub const DEFAULT_TABLE: u32 = 253;
/// Tables above this number do not fit the header's byte.
const MAX_HEADER_TABLE: u32 = 255;
/// The mask a mark is compared under when none is given.
pub const FULL_MASK: u32 = u32::MAX;
/// `suppress_prefixlength` when a lookup suppresses nothing (the kernel's
/// -1).
const NO_SUPPRESS: u32 = u32::MAX;

/// What a rule does when it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Action {
    /// Look the destination up in this table (`lookup T`).
    Lookup(u32),
    /// Go on at the first rule of this priority (`goto P`).
    Goto(u32),
    /// Nothing: the rule only marks a place to jump to (`nop`).
    Nop,
    /// `blackhole`, `unreachable`, `prohibit` or an unknown action (the
    /// kernel's number).
    Other(u8),
}

/// One policy routing rule.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Rule {
    /// IPv6 rather than IPv4.
    pub v6: bool,
    /// Priority (`pref`): lower numbers are looked at first.
    pub priority: u32,
    /// Source prefix (`from`); `None`: from all.
    pub from: Option<(IpAddr, u8)>,
    /// Destination prefix (`to`); `None`: to all.
    pub to: Option<(IpAddr, u8)>,
    /// Firewall mark and mask (`fwmark M/MASK`).
    pub fwmark: Option<(u32, u32)>,
    /// The match is inverted (`not`): the rule applies to what does *not*
    /// match all of its selectors together.
    pub invert: bool,
    /// What it does.
    pub action: Action,
    /// A lookup's result is refused if its prefix is this long or shorter
    /// (`suppress_prefixlength`).
    pub suppress_prefixlen: Option<u32>,
    /// Who made it (`proto`; 0 when unset).
    pub protocol: u8,
    /// A dumped rule that also matches on something [`Rule`] does not
    /// hold (interface, uid range, ports, IP protocol, …).
    pub other: bool,
}

impl Rule {
    /// A rule of one family at `priority` doing `action`, matching
    /// everything.
    pub fn new(v6: bool, priority: u32, action: Action) -> Self {
        Self {
            v6,
            priority,
            from: None,
            to: None,
            fwmark: None,
            invert: false,
            action,
            suppress_prefixlen: None,
            protocol: 0,
            other: false,
        }
    }

    /// The table this rule looks up, if it looks one up.
    pub fn table(&self) -> Option<u32> {
        match self.action {
            Action::Lookup(t) => Some(t),
            _ => None,
        }
    }

    fn message(&self) -> RuleMessage {
        let mut m = RuleMessage::default();
        m.header = RuleHeader {
            family: if self.v6 {
                AddressFamily::Inet6
            } else {
                AddressFamily::Inet
            },
            dst_len: self.to.map_or(0, |(_, l)| l),
            src_len: self.from.map_or(0, |(_, l)| l),
            tos: 0,
            table: 0,
            action: match self.action {
                Action::Lookup(_) => RuleAction::ToTable,
                Action::Goto(_) => RuleAction::Goto,
                Action::Nop => RuleAction::Nop,
                Action::Other(n) => RuleAction::from(n),
            },
            flags: if self.invert {
                RuleFlags::Invert
            } else {
                RuleFlags::empty()
            },
        };
        let a = &mut m.attributes;
        a.push(RuleAttribute::Priority(self.priority));
        if let Action::Lookup(t) = self.action {
            if t <= MAX_HEADER_TABLE {
                m.header.table = t as u8;
            }
            a.push(RuleAttribute::Table(t));
        }
        if let Action::Goto(p) = self.action {
            a.push(RuleAttribute::Goto(p));
        }
        if let Some((addr, _)) = self.from.filter(|(_, l)| *l > 0) {
            a.push(RuleAttribute::Source(addr));
        }
        if let Some((addr, _)) = self.to.filter(|(_, l)| *l > 0) {
            a.push(RuleAttribute::Destination(addr));
        }
        if let Some((mark, mask)) = self.fwmark {
            a.push(RuleAttribute::FwMark(mark));
            a.push(RuleAttribute::FwMask(mask));
        }
        if let Some(s) = self.suppress_prefixlen {
            a.push(RuleAttribute::SuppressPrefixLen(s));
        }
        if self.protocol != 0 {
            a.push(RuleAttribute::Protocol(RouteProtocol::from(self.protocol)));
        }
        m
    }

    /// The rule a dumped message describes.
    fn parse(m: &RuleMessage) -> Option<Self> {
        let v6 = match m.header.family {
            AddressFamily::Inet => false,
            AddressFamily::Inet6 => true,
            _ => return None,
        };
        let mut r = Rule::new(v6, 0, Action::Nop);
        r.invert = m.header.flags.contains(RuleFlags::Invert);
        let mut table = u32::from(m.header.table);
        let mut goto = None;
        let (mut mark, mut mask) = (None, None);
        for a in &m.attributes {
            match a {
                RuleAttribute::Priority(p) => r.priority = *p,
                RuleAttribute::Table(t) => table = *t,
                RuleAttribute::Goto(p) => goto = Some(*p),
                RuleAttribute::Source(s) => r.from = Some((*s, m.header.src_len)),
                RuleAttribute::Destination(d) => r.to = Some((*d, m.header.dst_len)),
                RuleAttribute::FwMark(v) => mark = Some(*v),
                RuleAttribute::FwMask(v) => mask = Some(*v),
                RuleAttribute::SuppressPrefixLen(s) if *s != NO_SUPPRESS => r.suppress_prefixlen = Some(*s),
                RuleAttribute::SuppressPrefixLen(_) => {}
                RuleAttribute::Protocol(p) => r.protocol = u8::from(*p),
                // Selectors this type does not hold.
                RuleAttribute::Iifname(_)
                | RuleAttribute::Oifname(_)
                | RuleAttribute::UidRange(_)
                | RuleAttribute::IpProtocol(_)
                | RuleAttribute::SourcePortRange(_)
                | RuleAttribute::DestinationPortRange(_)
                | RuleAttribute::TunId(_)
                | RuleAttribute::L3MDev(_)
                | RuleAttribute::SuppressIfGroup(_) => r.other = true,
                _ => {}
            }
        }
        if m.header.tos != 0 {
            r.other = true;
        }
        if mark.is_some() || mask.is_some() {
            r.fwmark = Some((mark.unwrap_or(0), mask.unwrap_or(FULL_MASK)));
        }
        r.action = match m.header.action {
            RuleAction::ToTable => Action::Lookup(table),
            RuleAction::Goto => Action::Goto(goto.unwrap_or(0)),
            RuleAction::Nop => Action::Nop,
            other => Action::Other(u8::from(other)),
        };
        Some(r)
    }

    /// Whether a packet carrying `mark` matches this rule's mark selector
    /// (a rule without one matches every mark).
    pub fn matches_mark(&self, mark: u32) -> bool {
        self.fwmark.is_none_or(|(m, mask)| mark & mask == m)
    }

    /// Whether a packet from `src` could match this rule's source selector.
    pub fn covers_source(&self, src: IpAddr) -> bool {
        self.from.is_none_or(|(p, l)| prefix_contains(p, l, src))
    }
}

/// A table number as `ip` prints it.
pub fn table_name(t: u32) -> String {
    match t {
        MAIN_TABLE => "main".into(),
        LOCAL_TABLE => "local".into(),
        DEFAULT_TABLE => "default".into(),
        t => t.to_string(),
    }
}

impl fmt::Display for Rule {
    /// As `ip rule` shows it: `220: from 10.1.0.0/24 lookup main
    /// suppress_prefixlength 0 proto 229`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:", self.priority)?;
        if self.invert {
            write!(f, " not")?;
        }
        match self.from {
            Some((a, l)) if l > 0 => write!(f, " from {a}/{l}")?,
            _ => write!(f, " from all")?,
        }
        if let Some((a, l)) = self.to.filter(|(_, l)| *l > 0) {
            write!(f, " to {a}/{l}")?;
        }
        if let Some((m, mask)) = self.fwmark {
            write!(f, " fwmark {m:#x}")?;
            if mask != FULL_MASK {
                write!(f, "/{mask:#x}")?;
            }
        }
        if self.other {
            write!(f, " (and other selectors)")?;
        }
        match self.action {
            Action::Lookup(t) => write!(f, " lookup {}", table_name(t))?,
            Action::Goto(p) => write!(f, " goto {p}")?,
            Action::Nop => write!(f, " nop")?,
            Action::Other(n) => write!(f, " action {n}")?,
        }
        if let Some(s) = self.suppress_prefixlen {
            write!(f, " suppress_prefixlength {s}")?;
        }
        if self.protocol != 0 {
            write!(f, " proto {}", self.protocol)?;
        }
        Ok(())
    }
}

impl Rtnetlink {
    /// Adds `rule` (`ip rule add`); `EEXIST` if an identical rule is there.
    pub fn add_rule(&mut self, rule: &Rule) -> io::Result<()> {
        self.request(RouteNetlinkMessage::NewRule(rule.message()), NLM_F_CREATE | NLM_F_EXCL)
    }

    /// Deletes the first rule that matches `rule` (`ip rule del`):
    /// `ENOENT` if there is none.
    pub fn delete_rule(&mut self, rule: &Rule) -> io::Result<()> {
        self.request(RouteNetlinkMessage::DelRule(rule.message()), 0)
    }

    /// Every rule of one family, in the kernel's order.
    pub fn rules(&mut self, v6: bool) -> io::Result<Vec<Rule>> {
        let mut req = RuleMessage::default();
        req.header.family = if v6 { AddressFamily::Inet6 } else { AddressFamily::Inet };
        let msgs = self.dump(RouteNetlinkMessage::GetRule(req))?;
        Ok(msgs
            .iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewRule(r) => Rule::parse(r),
                _ => None,
            })
            .filter(|r| r.v6 == v6)
            .collect())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use esparto_netns::{self as netns, Netns};

    fn p(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn rules_print_like_ip_rule() {
        let mut r = Rule::new(false, 221, Action::Lookup(220));
        r.from = Some((p("10.1.0.0"), 24));
        r.protocol = 229;
        assert_eq!(r.to_string(), "221: from 10.1.0.0/24 lookup 220 proto 229");
        let mut g = Rule::new(true, 220, Action::Goto(222));
        g.fwmark = Some((0xdc, FULL_MASK));
        assert_eq!(g.to_string(), "220: from all fwmark 0xdc goto 222");
        let mut s = Rule::new(false, 221, Action::Lookup(MAIN_TABLE));
        s.suppress_prefixlen = Some(0);
        s.invert = true;
        assert_eq!(s.to_string(), "221: not from all lookup main suppress_prefixlength 0");
    }

    #[test]
    fn marks_and_sources_match_as_the_kernel_matches_them() {
        let mut r = Rule::new(false, 1, Action::Nop);
        assert!(r.matches_mark(0) && r.matches_mark(7));
        r.fwmark = Some((0x10, 0xf0));
        assert!(r.matches_mark(0x1f) && !r.matches_mark(0x20));
        assert!(r.covers_source(p("192.0.2.1")));
        r.from = Some((p("10.0.0.0"), 8));
        assert!(r.covers_source(p("10.9.9.9")) && !r.covers_source(p("11.0.0.1")));
    }

    /// `ip rule` in `ns`, one family: the oracle.
    fn ip_rules(ns: &Netns, fam: &str) -> String {
        String::from_utf8_lossy(&ns.ip(&[fam, "rule"]).unwrap().stdout).into_owned()
    }

    #[test]
    fn rules_are_added_listed_and_deleted_over_netlink() {
        if !netns::available() {
            eprintln!("SKIP: needs root and iproute2");
            return;
        }
        let ns = Netns::new("rule").unwrap();
        let before = (ip_rules(&ns, "-4"), ip_rules(&ns, "-6"));
        let mut lookup = Rule::new(false, 1221, Action::Lookup(1000));
        lookup.from = Some((p("10.1.0.0"), 24));
        lookup.protocol = 229;
        let mut suppress = Rule::new(true, 1221, Action::Lookup(MAIN_TABLE));
        suppress.from = Some((p("fd00:1::"), 64));
        suppress.suppress_prefixlen = Some(0);
        suppress.protocol = 229;
        let mut goto = Rule::new(true, 1220, Action::Goto(1222));
        goto.fwmark = Some((0xdc, FULL_MASK));
        goto.protocol = 229;
        let mut nop = Rule::new(true, 1222, Action::Nop);
        nop.protocol = 229;
        let all = [lookup.clone(), nop.clone(), goto.clone(), suppress.clone()];
        let (v4, v6) = ns
            .run(|| {
                let mut nl = Rtnetlink::open().unwrap();
                for r in &all {
                    nl.add_rule(r).unwrap();
                }
                // The same rule again is refused, not doubled.
                assert_eq!(
                    crate::netlink::errno(&nl.add_rule(&lookup).unwrap_err()),
                    Some(libc::EEXIST)
                );
                (nl.rules(false).unwrap(), nl.rules(true).unwrap())
            })
            .unwrap();
        assert!(v4.contains(&lookup), "{v4:?}");
        for r in [&goto, &nop, &suppress] {
            assert!(v6.contains(r), "{r} not in {v6:?}");
        }
        // The kernel's own rules are there too, and none is taken for ours.
        assert!(
            v4.iter()
                .any(|r| r.action == Action::Lookup(LOCAL_TABLE) && r.priority == 0)
        );
        assert!(
            v4.iter()
                .any(|r| r.action == Action::Lookup(MAIN_TABLE) && r.priority == 32766)
        );
        let shown = format!("{}{}", ip_rules(&ns, "-4"), ip_rules(&ns, "-6"));
        for want in [
            "1221:\tfrom 10.1.0.0/24 lookup 1000 proto 229",
            "1221:\tfrom fd00:1::/64 lookup main suppress_prefixlength 0 proto 229",
            "1220:\tfrom all fwmark 0xdc goto 1222 proto 229",
            "1222:\tfrom all nop proto 229",
        ] {
            assert!(shown.contains(want), "{want:?} not in:\n{shown}");
        }
        // A rule with selectors we do not model is flagged, not mistaken.
        ns.ip(&["rule", "add", "iif", "lo", "priority", "1300", "lookup", "1000"])
            .unwrap();
        let v4 = ns.run(|| Rtnetlink::open().unwrap().rules(false).unwrap()).unwrap();
        let iif = v4.iter().find(|r| r.priority == 1300).unwrap();
        assert!(iif.other, "{iif:?}");
        ns.ip(&["rule", "del", "priority", "1300"]).unwrap();

        ns.run(|| {
            let mut nl = Rtnetlink::open().unwrap();
            for r in &all {
                nl.delete_rule(r).unwrap();
            }
            let e = nl.delete_rule(&lookup).unwrap_err();
            assert_eq!(crate::netlink::errno(&e), Some(libc::ENOENT), "{e}");
        })
        .unwrap();
        assert_eq!((ip_rules(&ns, "-4"), ip_rules(&ns, "-6")), before);
    }
}
