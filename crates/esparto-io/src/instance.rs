//! One daemon per TUN device and per UDP port, checked before anything is
//! touched.
//!
//! A second daemon started on the same device would not fail by itself:
//! `TUNSETIFF` on an existing multi-queue device attaches one more queue,
//! and `SO_REUSEPORT` lets its sockets join the first daemon's group. It
//! would then take the link down (the kernel flushes the first daemon's
//! routes), replace the steering programs and, with static keys, carry
//! traffic beside it. So each resource a daemon uses is *claimed* first:
//!
//! - **a lock file per claim** under [`RUN_DIR`], held with `flock(2)` for
//!   the daemon's life and holding its pid, so that the refusal can name
//!   the daemon that holds it. TUN devices and ports exist per network
//!   namespace, so the lock's name carries the namespace's identity (the
//!   inode of `/proc/thread-self/ns/net`): daemons in two namespaces never
//!   block each other. A lock dies with its process, so a crashed daemon
//!   leaves no stale lock; a clean stop also removes the file (unlinked
//!   while still locked; a taker checks that the file it locked is still
//!   the one at the path, and retries otherwise).
//! - the same for the **routing table and rule priorities** of the
//!   daemon's own routing ([`crate::routing`]), which it cleans of
//!   leftovers at start: only a table no live daemon uses may be cleaned.
//! - **the TUN device itself** ([`check_tun_free`]): a device of that name
//!   that exists with queues attached belongs to some other program (the
//!   lock rules out an Esparto in this namespace), and is refused rather
//!   than joined.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rustix::fs::{FlockOperation, flock};

/// Where the lock files live (created, mode 0755, if missing).
pub const RUN_DIR: &str = "/run/esparto";

/// How long a new holder of a lock may take to write its pid.
const PID_WAIT: Duration = Duration::from_millis(200);
/// How long a TUN device whose owner has just exited may take to go.
const TUN_GONE_WAIT: Duration = Duration::from_secs(2);
/// Polling interval for both waits.
const POLL: Duration = Duration::from_millis(20);
/// Attempts to lock a file that its holder keeps unlinking under us.
const LOCK_ATTEMPTS: usize = 100;

/// A resource one daemon may use at a time.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Claim {
    /// A TUN device, by name.
    Tun(String),
    /// A UDP port of one address family (sockets are `IPV6_V6ONLY`, so an
    /// IPv4 and an IPv6 daemon may share a port number).
    Udp {
        /// IPv6 rather than IPv4.
        v6: bool,
        /// The port.
        port: u16,
    },
    /// A routing table (its routes are the daemon's, and leftovers in it
    /// are removed at start: [`crate::routing`]).
    RouteTable(u32),
    /// A policy rule priority (likewise).
    RulePriority(u32),
}

impl Claim {
    fn file_part(&self) -> String {
        match self {
            Claim::Tun(name) => format!("tun-{name}"),
            Claim::Udp { v6, port } => format!("udp{}-{port}", if *v6 { 6 } else { 4 }),
            Claim::RouteTable(t) => format!("table-{t}"),
            Claim::RulePriority(p) => format!("rule-{p}"),
        }
    }
}

impl fmt::Display for Claim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Claim::Tun(name) => write!(f, "TUN device {name}"),
            Claim::Udp { v6, port } => write!(f, "UDP port {port} (IPv{})", if *v6 { 6 } else { 4 }),
            Claim::RouteTable(t) => write!(f, "routing table {t}"),
            Claim::RulePriority(p) => write!(f, "rule priority {p}"),
        }
    }
}

/// Why a daemon may not start.
#[derive(Debug)]
pub enum InstanceError {
    /// Another Esparto holds the claim in this network namespace.
    Held {
        /// What it holds.
        claim: Claim,
        /// Its pid, as it wrote it in the lock file (`None`: not written yet).
        pid: Option<u32>,
        /// The lock file.
        path: PathBuf,
    },
    /// The TUN device exists and is in use by a program that holds no lock.
    TunInUse {
        /// The device.
        name: String,
        /// Queues attached.
        queues: u32,
        /// Processes in this namespace with a queue of it open.
        holders: Vec<u32>,
    },
    /// A device of that name exists and is not a TUN device.
    NotTun {
        /// The device.
        name: String,
        /// Its kind (`veth`, …), if it has one.
        kind: Option<String>,
    },
    /// A system call failed.
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: io::Error,
    },
}

impl fmt::Display for InstanceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InstanceError::Held { claim, pid: Some(pid), path } => write!(
                f,
                "another esparto (pid {pid}) is running with {claim} in this network namespace (lock {})",
                path.display()
            ),
            InstanceError::Held { claim, pid: None, path } => write!(
                f,
                "another esparto (pid not yet written) is starting with {claim} in this network namespace (lock {})",
                path.display()
            ),
            InstanceError::TunInUse { name, queues, holders } => {
                write!(f, "TUN device {name} already exists with {queues} queue(s) attached")?;
                match holders.as_slice() {
                    [] => write!(f, " by a program outside this network namespace")?,
                    pids => {
                        let l: Vec<String> = pids.iter().map(u32::to_string).collect();
                        write!(f, " by pid {}", l.join(", "))?;
                    }
                }
                write!(f, "; refusing to join it (pick another [daemon] tun)")
            }
            InstanceError::NotTun { name, kind } => write!(
                f,
                "a network device {name} already exists and is not a TUN device (kind {}); pick another [daemon] tun",
                kind.as_deref().unwrap_or("unknown")
            ),
            InstanceError::Io { what, source } => write!(f, "{what}: {source}"),
        }
    }
}

impl std::error::Error for InstanceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            InstanceError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> InstanceError {
    let what = what.into();
    move |source| InstanceError::Io { what, source }
}

/// The calling thread's network namespace, as the inode of its nsfs file.
pub fn netns_id() -> io::Result<u64> {
    fs::metadata("/proc/thread-self/ns/net").map(|m| m.ino())
}

struct Held {
    path: PathBuf,
    file: File,
}

/// Claims held for this process's life: released (and their files
/// removed) on drop.
pub struct InstanceLock {
    held: Vec<Held>,
}

impl fmt::Debug for InstanceLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.held.iter().map(|h| &h.path)).finish()
    }
}

impl InstanceLock {
    /// Takes every claim in `dir` ([`RUN_DIR`] for the daemon) for the
    /// calling thread's network namespace, or none: the first claim held
    /// by another process is the error.
    pub fn acquire(dir: &Path, claims: &[Claim]) -> Result<Self, InstanceError> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(dir)
            .map_err(io_err(format!("creating {}", dir.display())))?;
        let ns = netns_id().map_err(io_err("reading /proc/thread-self/ns/net"))?;
        let mut claims = claims.to_vec();
        claims.sort();
        claims.dedup();
        let mut lock = Self { held: Vec::with_capacity(claims.len()) };
        for c in claims {
            let path = dir.join(format!("net{ns}.{}.lock", c.file_part()));
            // On error, `lock` drops and releases what it took so far.
            lock.held.push(take(&path, &c)?);
        }
        Ok(lock)
    }

    /// The lock files held.
    pub fn paths(&self) -> impl Iterator<Item = &Path> {
        self.held.iter().map(|h| h.path.as_path())
    }
}

impl Drop for InstanceLock {
    fn drop(&mut self) {
        for h in self.held.drain(..) {
            // Unlinked while still locked: a process that opened it before
            // sees, once it gets the lock, that the path no longer leads to
            // the file it locked, and starts over.
            let _ = fs::remove_file(&h.path);
            drop(h.file);
        }
    }
}

fn take(path: &Path, claim: &Claim) -> Result<Held, InstanceError> {
    for _ in 0..LOCK_ATTEMPTS {
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            .open(path)
            .map_err(io_err(format!("opening {}", path.display())))?;
        match flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(e) if e == rustix::io::Errno::WOULDBLOCK => {
                return Err(InstanceError::Held { claim: claim.clone(), pid: read_pid(&mut file), path: path.into() });
            }
            Err(e) => return Err(io_err(format!("locking {}", path.display()))(e.into())),
        }
        let ours = file.metadata().map_err(io_err(format!("fstat {}", path.display())))?;
        match fs::metadata(path) {
            Ok(m) if (m.dev(), m.ino()) == (ours.dev(), ours.ino()) => {}
            // The previous holder removed the file between our open and our
            // lock: ours is an orphan. Start over.
            _ => continue,
        }
        let pid = format!("{}\n", std::process::id());
        file.set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| file.write_all(pid.as_bytes()))
            .map_err(io_err(format!("writing {}", path.display())))?;
        return Ok(Held { path: path.into(), file });
    }
    Err(InstanceError::Io {
        what: format!("locking {}", path.display()),
        source: io::Error::other("the file kept being replaced"),
    })
}

/// The pid a holder wrote, waiting briefly for one that has just started.
fn read_pid(file: &mut File) -> Option<u32> {
    let deadline = Instant::now() + PID_WAIT;
    loop {
        let mut s = String::new();
        if file.rewind().is_ok() && file.read_to_string(&mut s).is_ok() {
            if let Ok(pid) = s.trim().parse() {
                return Some(pid);
            }
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(POLL);
    }
}

/// Refuses a TUN device `name` that exists in the calling thread's network
/// namespace with queues attached, or that is not a TUN device. A device
/// whose queues are all closing (its owner has just exited) is given a
/// moment to go. An existing TUN device with no queue (a persistent one
/// made with `ip tuntap add … multi_queue`) is free to use.
pub fn check_tun_free(name: &str) -> Result<(), InstanceError> {
    let mut nl = crate::netlink::Rtnetlink::open().map_err(io_err("opening an rtnetlink socket"))?;
    let deadline = Instant::now() + TUN_GONE_WAIT;
    loop {
        let Some(link) = nl.link(name).map_err(io_err(format!("looking up device {name}")))? else {
            return Ok(());
        };
        if link.kind.as_deref() != Some("tun") {
            return Err(InstanceError::NotTun { name: name.into(), kind: link.kind });
        }
        // Older kernels do not report the queue count; a TUN device has
        // carrier exactly while a queue is attached.
        let queues = link.tun_queues.unwrap_or(u32::from(link.carrier == Some(true)));
        if queues == 0 {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(InstanceError::TunInUse { name: name.into(), queues, holders: tun_holders(name) });
        }
        std::thread::sleep(POLL);
    }
}

/// Processes with a thread in the calling thread's network namespace that
/// have a queue of TUN device `name` open (their `fdinfo` says `iff: NAME`;
/// devices of that name in other namespaces are someone else's).
fn tun_holders(name: &str) -> Vec<u32> {
    let Ok(ns) = netns_id() else { return Vec::new() };
    let want = format!("iff:\t{name}");
    let mut pids = Vec::new();
    let Ok(procs) = fs::read_dir("/proc") else { return pids };
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let dir = p.path();
        let Ok(tasks) = fs::read_dir(dir.join("task")) else { continue };
        let here = tasks.flatten().any(|t| fs::metadata(t.path().join("ns/net")).is_ok_and(|m| m.ino() == ns));
        if !here {
            continue;
        }
        let Ok(fds) = fs::read_dir(dir.join("fdinfo")) else { continue };
        let holds = fds.flatten().any(|fd| {
            fs::read_to_string(fd.path()).is_ok_and(|info| info.lines().any(|l| l.trim_end() == want))
        });
        if holds {
            pids.push(pid);
        }
    }
    pids.sort_unstable();
    pids
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn tempdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("esparto-instance-{}-{tag}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn a_claim_is_held_once_per_namespace_and_released_on_drop() {
        let dir = tempdir("claims");
        let tun = Claim::Tun("esparto0".into());
        let udp = Claim::Udp { v6: false, port: 4500 };
        let first = InstanceLock::acquire(&dir, &[tun.clone(), udp.clone()]).unwrap();
        assert_eq!(first.paths().count(), 2);
        for p in first.paths() {
            assert_eq!(fs::read_to_string(p).unwrap().trim(), std::process::id().to_string());
        }
        // flock locks belong to the open file, so a second open in this
        // process conflicts just as another process would.
        for claims in [vec![tun.clone()], vec![udp.clone()], vec![Claim::Tun("other0".into()), udp.clone()]] {
            match InstanceLock::acquire(&dir, &claims) {
                Err(InstanceError::Held { claim, pid, path }) => {
                    assert!(claims.contains(&claim));
                    assert_eq!(pid, Some(std::process::id()));
                    assert!(path.starts_with(&dir));
                }
                other => panic!("{claims:?}: {other:?}"),
            }
        }
        // A failed attempt released what it took ("other0") before failing.
        let other = InstanceLock::acquire(&dir, &[Claim::Tun("other0".into())]).unwrap();
        drop(other);
        // Other resources, and the other family on the same port, are free.
        let v6 = InstanceLock::acquire(&dir, &[Claim::Udp { v6: true, port: 4500 }, Claim::Tun("esparto1".into())]);
        assert!(v6.is_ok(), "{v6:?}");
        // Routing tables and rule priorities are claimed the same way.
        let routing = InstanceLock::acquire(&dir, &[Claim::RouteTable(220), Claim::RulePriority(221)]).unwrap();
        let table = InstanceLock::acquire(&dir, &[Claim::RouteTable(220)]).unwrap_err().to_string();
        assert!(table.contains("routing table 220"), "{table}");
        let prio = InstanceLock::acquire(&dir, &[Claim::RouteTable(221), Claim::RulePriority(221)]).unwrap_err();
        assert!(prio.to_string().contains("rule priority 221"), "{prio}");
        assert!(InstanceLock::acquire(&dir, &[Claim::RouteTable(221), Claim::RulePriority(220)]).is_ok());
        drop(routing);
        let msg = InstanceLock::acquire(&dir, std::slice::from_ref(&tun)).unwrap_err().to_string();
        assert!(msg.contains(&format!("pid {}", std::process::id())) && msg.contains("TUN device esparto0"), "{msg}");
        let paths: Vec<PathBuf> = first.paths().map(Path::to_path_buf).collect();
        drop(first);
        assert!(paths.iter().all(|p| !p.exists()), "lock files removed on drop");
        let again = InstanceLock::acquire(&dir, &[tun, udp]);
        assert!(again.is_ok(), "{again:?}");
        drop((again, v6));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn namespaces_do_not_block_each_other() {
        if !esparto_netns::available() {
            eprintln!("SKIP: needs root and iproute2");
            return;
        }
        let dir = tempdir("netns");
        let (a, b) = (esparto_netns::Netns::new("lock-a").unwrap(), esparto_netns::Netns::new("lock-b").unwrap());
        let claims = [Claim::Tun("esparto0".into()), Claim::Udp { v6: false, port: 4500 }];
        let in_a = a.run(|| InstanceLock::acquire(&dir, &claims)).unwrap().unwrap();
        let in_b = b.run(|| InstanceLock::acquire(&dir, &claims)).unwrap();
        assert!(in_b.is_ok(), "{in_b:?}");
        let again_a = a.run(|| InstanceLock::acquire(&dir, &claims)).unwrap();
        assert!(matches!(again_a, Err(InstanceError::Held { .. })), "{again_a:?}");
        drop((in_a, in_b));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_attached_tun_device_is_refused_and_a_detached_one_is_free() {
        if !esparto_netns::available() {
            eprintln!("SKIP: needs root and iproute2");
            return;
        }
        let ns = esparto_netns::Netns::new("tunchk").unwrap();
        assert!(ns.run(|| check_tun_free("esparto0")).unwrap().is_ok());
        let dev = ns
            .run(|| crate::tun::TunDevice::create(&crate::tun::TunConfig { queues: 2, ..Default::default() }))
            .unwrap()
            .unwrap();
        match ns.run(|| check_tun_free("esparto0")).unwrap() {
            Err(InstanceError::TunInUse { name, queues, holders }) => {
                assert_eq!((name.as_str(), queues), ("esparto0", 2));
                assert_eq!(holders, vec![std::process::id()]);
            }
            other => panic!("{other:?}"),
        }
        drop(dev);
        // A persistent multi-queue device with no queue attached may be used.
        ns.ip(&["tuntap", "add", "dev", "persist0", "mode", "tun", "multi_queue"]).unwrap();
        assert!(ns.run(|| check_tun_free("persist0")).unwrap().is_ok());
        ns.ip(&["link", "add", "veth0", "type", "veth", "peer", "name", "veth1"]).unwrap();
        let e = ns.run(|| check_tun_free("veth0")).unwrap().unwrap_err();
        assert!(e.to_string().contains("not a TUN device (kind veth)"), "{e}");
    }
}
