//! Network namespaces for the tests, the demo and the end-to-end
//! benchmarks; not part of the gateway.
//!
//! A [`Netns`] is a named namespace created with `ip netns add` (iproute2),
//! named `esp-<pid>-<n>-<role>`: the pid and a per-process counter make the
//! name unique to this run, so parallel tests and other engineers' runs never
//! collide, and [`Drop`] deletes exactly the namespace it created (its veth
//! ends, TUN devices and routes go with it) even when a test panics.
//!
//! Everything is configured *inside* namespaces (`ip -n NAME ...`), never in
//! the caller's own namespace. Code that must create sockets or TUN devices
//! in a namespace runs through [`Netns::run`], which does it on a fresh thread
//! that has `setns(2)`-ed into the namespace: file descriptors keep the
//! namespace they were created in, so the caller can use them afterwards
//! from any thread.

use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// Prefix of every namespace this process creates: `esp-<pid>-`.
pub fn own_prefix() -> String {
    format!("esp-{}-", std::process::id())
}

/// Whether this process may create namespaces (root) and `ip` is installed.
/// Tests call it and skip, with a message, when it is false.
pub fn available() -> bool {
    let root = rustix::process::geteuid().is_root();
    root && Command::new("ip")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Run a command, turning a non-zero exit into an error carrying its stderr.
fn run(cmd: &mut Command) -> io::Result<Output> {
    let out = cmd.output()?;
    if out.status.success() {
        Ok(out)
    } else {
        Err(io::Error::other(format!(
            "{:?} failed: {}",
            cmd,
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// A network namespace owned by this process; deleted on drop.
#[derive(Debug)]
pub struct Netns {
    name: String,
}

impl Netns {
    /// Create `esp-<pid>-<n>-<role>` with its loopback up.
    pub fn new(role: &str) -> io::Result<Self> {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = format!("{}{n}-{role}", own_prefix());
        run(Command::new("ip").args(["netns", "add", &name]))?;
        let ns = Self { name };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `ip -n NAME <args>`.
    pub fn ip(&self, args: &[&str]) -> io::Result<Output> {
        run(Command::new("ip").arg("-n").arg(&self.name).args(args))
    }

    /// `ip netns exec NAME <program> <args>`.
    pub fn exec(&self, program: &str, args: &[&str]) -> io::Result<Output> {
        run(Command::new("ip")
            .args(["netns", "exec", &self.name, program])
            .args(args))
    }

    /// Set a sysctl inside the namespace (`net.*` keys are per namespace).
    pub fn sysctl(&self, key: &str, value: &str) -> io::Result<()> {
        self.exec("sysctl", &["-q", "-w", &format!("{key}={value}")])
            .map(|_| ())
    }

    /// Add an address (`"10.0.0.1/24"`) to an interface and bring it up.
    pub fn addr(&self, dev: &str, cidr: &str) -> io::Result<()> {
        self.ip(&["addr", "add", cidr, "dev", dev])?;
        self.ip(&["link", "set", dev, "up"]).map(|_| ())
    }

    /// Add a route (`"10.1.0.0/16"`) via a gateway or out of a device.
    pub fn route(&self, prefix: &str, via: Option<&str>, dev: Option<&str>) -> io::Result<()> {
        let mut args = vec!["route", "add", prefix];
        if let Some(v) = via {
            args.extend(["via", v]);
        }
        if let Some(d) = dev {
            args.extend(["dev", d]);
        }
        self.ip(&args).map(|_| ())
    }

    /// Create a veth pair: `a_if` in `self`, `b_if` in `other`; both up.
    pub fn veth(&self, a_if: &str, other: &Netns, b_if: &str) -> io::Result<()> {
        self.ip(&[
            "link",
            "add",
            a_if,
            "type",
            "veth",
            "peer",
            "name",
            b_if,
            "netns",
            &other.name,
        ])?;
        self.ip(&["link", "set", a_if, "up"])?;
        other.ip(&["link", "set", b_if, "up"]).map(|_| ())
    }

    /// Run `f` on a new thread inside this namespace and return its result.
    /// Sockets and TUN devices created by `f` belong to the namespace.
    pub fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> io::Result<T> {
        let file = File::open(format!("/var/run/netns/{}", self.name))?;
        std::thread::scope(|s| {
            s.spawn(|| {
                // Only this (fresh, scoped) thread changes namespace.
                enter(&file)?;
                Ok(f())
            })
            .join()
            .map_err(|_| io::Error::other("thread in namespace panicked"))?
        })
    }

    /// Enter this namespace on the *current* thread for good (for threads
    /// spawned to live in the namespace, e.g. a benchmark's traffic source).
    pub fn enter_current_thread(&self) -> io::Result<()> {
        let file = File::open(format!("/var/run/netns/{}", self.name))?;
        enter(&file)
    }
}

/// `setns(2)` the calling thread into the network namespace `file` names.
fn enter(file: &File) -> io::Result<()> {
    use rustix::thread::{LinkNameSpaceType, move_into_link_name_space};
    move_into_link_name_space(file.as_fd(), Some(LinkNameSpaceType::Network)).map_err(io::Error::from)
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Only ever our own name: the prefix carries our pid.
        debug_assert!(self.name.starts_with(&own_prefix()));
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

/// Namespaces whose names start with `prefix` (`ip netns list`).
pub fn names_with_prefix(prefix: &str) -> io::Result<Vec<String>> {
    let out = run(Command::new("ip").args(["netns", "list"]))?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(prefix))
        .map(str::to_string)
        .collect())
}

/// Processes whose network namespace is `name` (`ip netns pids`).
pub fn pids_in(name: &str) -> io::Result<Vec<u32>> {
    let out = run(Command::new("ip").args(["netns", "pids", name]))?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect())
}

/// This process's namespaces (names starting with [`own_prefix`]).
fn own_names() -> io::Result<Vec<String>> {
    names_with_prefix(&own_prefix())
}

/// Whether process `pid` exists and is not a zombie (a child is a zombie
/// until its parent waits for it, which a signal may never let happen).
pub fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| !rest.starts_with('Z')))
        .unwrap_or(false)
}

/// Delete namespaces left behind by *this* process (names starting with
/// [`own_prefix`]), e.g. after an abort or a signal skipped `Drop`. The
/// processes running in them (gateways, iperf3, charon, started by this
/// process) get SIGTERM, and SIGKILL if they are still there after
/// `grace`. Returns how many namespaces were deleted.
pub fn sweep_own(grace: std::time::Duration) -> io::Result<usize> {
    let me = std::process::id();
    let mut pids = Vec::new();
    for name in own_names()? {
        pids.extend(pids_in(&name)?.into_iter().filter(|&p| p != me));
    }
    // Each pid is one `ip netns pids` listed in a namespace only this
    // process creates.
    let kill = |p: u32, sig| {
        if let Some(pid) = i32::try_from(p).ok().and_then(rustix::process::Pid::from_raw) {
            let _ = rustix::process::kill_process(pid, sig);
        }
    };
    for &p in &pids {
        kill(p, rustix::process::Signal::TERM);
    }
    let deadline = std::time::Instant::now() + grace;
    while pids.iter().any(|&p| running(p)) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    for &p in pids.iter().filter(|&&p| running(p)) {
        kill(p, rustix::process::Signal::KILL);
    }
    // The owner may be deleting them too (its `Drop` runs when the
    // processes above end): count what is gone, whoever removed it.
    let names = own_names()?;
    for name in &names {
        let r = run(Command::new("ip").args(["netns", "del", name]));
        if r.is_err() && own_names()?.contains(name) {
            r?;
        }
    }
    Ok(names.len())
}

/// Two namespaces joined by a veth pair: `veth0` (a) ↔ `veth1` (b), with the
/// given IPv4 addresses (`10.x.y.z/24` form). The usual test topology.
#[derive(Debug)]
pub struct Pair {
    /// The first namespace.
    pub a: Netns,
    /// The second namespace.
    pub b: Netns,
}

impl Pair {
    /// Create both namespaces and the veth between them.
    pub fn new(role: &str, a_cidr: &str, b_cidr: &str) -> io::Result<Self> {
        let a = Netns::new(&format!("{role}-a"))?;
        let b = Netns::new(&format!("{role}-b"))?;
        a.veth("veth0", &b, "veth1")?;
        a.addr("veth0", a_cidr)?;
        b.addr("veth1", b_cidr)?;
        Ok(Self { a, b })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn create_use_and_remove() {
        if !available() {
            eprintln!("SKIP netns::create_use_and_remove: needs root and iproute2");
            return;
        }
        let name;
        {
            let p = Pair::new("unit", "10.200.0.1/24", "10.200.0.2/24").unwrap();
            name = p.a.name().to_string();
            assert!(name.starts_with(&own_prefix()));
            // Sockets made through `run` live in their namespace, and the
            // veth carries a datagram from one to the other.
            let rx =
                p.b.run(|| std::net::UdpSocket::bind("10.200.0.2:0"))
                    .unwrap()
                    .unwrap();
            let dst = rx.local_addr().unwrap();
            let tx =
                p.a.run(|| std::net::UdpSocket::bind("10.200.0.1:0"))
                    .unwrap()
                    .unwrap();
            tx.send_to(b"over the veth", dst).unwrap();
            rx.set_read_timeout(Some(std::time::Duration::from_secs(5)))
                .unwrap();
            let mut buf = [0u8; 64];
            let (n, from) = rx.recv_from(&mut buf).unwrap();
            assert_eq!(&buf[..n], b"over the veth");
            assert_eq!(from, tx.local_addr().unwrap());
            // Not reachable from the caller's namespace.
            assert!(std::net::UdpSocket::bind("10.200.0.2:0").is_err());
        }
        let list = run(Command::new("ip").args(["netns", "list"])).unwrap();
        assert!(
            !String::from_utf8_lossy(&list.stdout).contains(&name),
            "namespace left behind"
        );
    }
}
