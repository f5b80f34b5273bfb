//! Least privilege: once the daemon has set itself up, it keeps only the
//! capabilities it still uses.
//!
//! Creating the TUN device needs `CAP_NET_ADMIN`, binding ports below
//! 1024 `CAP_NET_BIND_SERVICE`, and loading the steering programs `CAP_BPF`
//! where unprivileged eBPF is disabled (Debian's default); carrying
//! packets on the descriptors that set-up produced needs none. What the daemon still does
//! later is change routes (and, in time, the TUN device and policy rules):
//! `CAP_NET_ADMIN`. So [`restrict_thread`] reduces the effective, permitted
//! and inheritable sets to what is kept, drops everything else from the
//! bounding set (so that no program the process might ever run gets it
//! back), clears the ambient set, and sets `PR_SET_NO_NEW_PRIVS` (no
//! set-user-ID or file-capability gain across `execve`).
//!
//! Linux keeps capabilities per *thread*, and a new thread starts with its
//! creator's. Threads that already exist are not touched by another
//! thread's `capset`, so threads that need nothing are best started from a
//! thread that holds nothing: [`with_no_capabilities`] runs a closure on a
//! fresh thread stripped of every capability, and the worker threads it
//! spawns start with none.

use std::fmt;
use std::io;

use rustix::thread::{
    CapabilitySet, CapabilitySets, capabilities, capability_is_in_bounding_set, clear_ambient_capability_set,
    remove_capability_from_bounding_set, set_capabilities, set_no_new_privs,
};

/// Highest capability number to try when the kernel does not say
/// (`/proc/sys/kernel/cap_last_cap`); numbers it does not know are skipped.
const MAX_CAP: u32 = 63;

/// A capability the daemon may keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capability {
    /// `CAP_NET_ADMIN`: routes, links, TUN settings.
    NetAdmin,
    /// `CAP_NET_BIND_SERVICE`: binding UDP ports below 1024.
    NetBindService,
    /// `CAP_BPF`: loading eBPF programs and maps where unprivileged eBPF
    /// is disabled (`kernel.unprivileged_bpf_disabled`).
    Bpf,
    /// `CAP_SYS_ADMIN`: covers what `CAP_BPF` allows (kernels before 5.8
    /// know only this one).
    SysAdmin,
}

impl Capability {
    fn set(self) -> CapabilitySet {
        match self {
            Capability::NetAdmin => CapabilitySet::NET_ADMIN,
            Capability::NetBindService => CapabilitySet::NET_BIND_SERVICE,
            Capability::Bpf => CapabilitySet::BPF,
            Capability::SysAdmin => CapabilitySet::SYS_ADMIN,
        }
    }

    /// The name `capabilities(7)` gives it.
    pub fn name(self) -> &'static str {
        match self {
            Capability::NetAdmin => "CAP_NET_ADMIN",
            Capability::NetBindService => "CAP_NET_BIND_SERVICE",
            Capability::Bpf => "CAP_BPF",
            Capability::SysAdmin => "CAP_SYS_ADMIN",
        }
    }
}

/// Whether the calling thread has `c` in its effective set (what the
/// kernel checks when a system call needs it).
pub fn has(c: Capability) -> io::Result<bool> {
    Ok(capabilities(None)?.effective.contains(c.set()))
}

/// What [`restrict_thread`] left the thread with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restricted {
    /// Capabilities kept (those asked for that the thread had).
    pub kept: Vec<Capability>,
    /// Whether the bounding set was reduced too (it needs
    /// `CAP_SETPCAP`, which a daemon started without root may lack).
    pub bounding_reduced: bool,
}

impl fmt::Display for Restricted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.kept.iter().map(|c| c.name()).collect();
        if names.is_empty() { write!(f, "no capabilities") } else { write!(f, "{}", names.join(", ")) }
    }
}

fn last_cap() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .map_or(MAX_CAP, |n: u32| n.min(MAX_CAP))
}

/// Reduces the calling thread to the capabilities in `keep` (those of them
/// it has), in every set, and sets `no_new_privs`. Other threads keep
/// theirs; threads created afterwards by this one start reduced.
pub fn restrict_thread(keep: &[Capability]) -> io::Result<Restricted> {
    let now = capabilities(None)?;
    let kept: Vec<Capability> = keep.iter().copied().filter(|c| now.permitted.contains(c.set())).collect();
    let keep_set = kept.iter().fold(CapabilitySet::empty(), |s, c| s | c.set());
    // The bounding set first: dropping from it needs CAP_SETPCAP, which
    // the capset below gives up.
    let bounding_reduced = now.effective.contains(CapabilitySet::SETPCAP);
    if bounding_reduced {
        for n in 0..=last_cap() {
            let cap = CapabilitySet::from_bits_retain(1u64 << n);
            if keep_set.contains(cap) {
                continue;
            }
            match capability_is_in_bounding_set(cap) {
                Ok(true) => remove_capability_from_bounding_set(cap)?,
                Ok(false) => {}
                // A number this kernel does not know.
                Err(e) if e == rustix::io::Errno::INVAL => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    // Ambient capabilities would survive an execve; none are wanted. (A
    // kernel without them, before 4.3, refuses the call: nothing to clear.)
    match clear_ambient_capability_set() {
        Ok(()) => {}
        Err(e) if e == rustix::io::Errno::INVAL => {}
        Err(e) => return Err(e.into()),
    }
    set_no_new_privs(true)?;
    set_capabilities(
        None,
        CapabilitySets { effective: keep_set, permitted: keep_set, inheritable: CapabilitySet::empty() },
    )?;
    Ok(Restricted { kept, bounding_reduced })
}

/// Runs `f` on a new thread that first gives up every capability (see the
/// module docs); threads `f` spawns start with none either.
pub fn with_no_capabilities<T: Send>(f: impl FnOnce() -> T + Send) -> io::Result<T> {
    std::thread::scope(|s| {
        s.spawn(|| restrict_thread(&[]).map(|_| f()))
            .join()
            .map_err(|_| io::Error::other("thread without capabilities panicked"))?
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A field of `/proc/thread-self/status` (`CapEff`, `NoNewPrivs`, …).
    fn status(field: &str) -> String {
        let s = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        s.lines()
            .find_map(|l| l.strip_prefix(field).and_then(|r| r.strip_prefix(':')))
            .map(|v| v.trim().to_string())
            .unwrap()
    }

    fn hex(field: &str) -> u64 {
        u64::from_str_radix(&status(field), 16).unwrap()
    }

    fn privileged() -> bool {
        capabilities(None).is_ok_and(|c| c.effective.contains(CapabilitySet::SETPCAP | CapabilitySet::NET_ADMIN))
    }

    #[test]
    fn a_restricted_thread_keeps_only_what_it_asked_for() {
        if !privileged() {
            eprintln!("SKIP: needs root");
            return;
        }
        let net_admin = 1u64 << 12;
        let full = hex("CapBnd");
        let (eff, prm, bnd, inh, nnp, r) = std::thread::spawn(|| {
            let r = restrict_thread(&[Capability::NetAdmin]).unwrap();
            (hex("CapEff"), hex("CapPrm"), hex("CapBnd"), hex("CapInh"), status("NoNewPrivs"), r)
        })
        .join()
        .unwrap();
        assert_eq!((eff, prm, bnd, inh), (net_admin, net_admin, net_admin, 0));
        assert_eq!(nnp, "1");
        assert_eq!(r, Restricted { kept: vec![Capability::NetAdmin], bounding_reduced: true });
        assert_eq!(r.to_string(), "CAP_NET_ADMIN");
        // Capabilities are per thread: this one still has them all.
        assert_eq!(hex("CapBnd"), full);
        assert_ne!(hex("CapEff"), net_admin);
    }

    #[test]
    fn has_reads_the_effective_set() {
        if !privileged() {
            eprintln!("SKIP: needs root");
            return;
        }
        assert!(has(Capability::NetAdmin).unwrap() && has(Capability::NetBindService).unwrap());
        let after = std::thread::spawn(|| {
            restrict_thread(&[Capability::NetAdmin]).unwrap();
            [Capability::NetAdmin, Capability::NetBindService, Capability::Bpf, Capability::SysAdmin]
                .map(|c| has(c).unwrap())
        })
        .join()
        .unwrap();
        assert_eq!(after, [true, false, false, false]);
    }

    #[test]
    fn threads_started_without_capabilities_have_none() {
        if !privileged() {
            eprintln!("SKIP: needs root");
            return;
        }
        let (own, child) = with_no_capabilities(|| {
            let child = std::thread::spawn(|| (hex("CapEff"), hex("CapPrm"), hex("CapBnd"), status("NoNewPrivs")));
            ((hex("CapEff"), hex("CapBnd")), child.join().unwrap())
        })
        .unwrap();
        assert_eq!(own, (0, 0));
        assert_eq!(child, (0, 0, 0, "1".to_string()));
    }
}
