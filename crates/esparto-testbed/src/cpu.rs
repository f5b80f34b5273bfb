//! CPU time of processes over an interval, turned into "CPU seconds per GB
//! carried" for a gateway.
//!
//! FreeS/WAN's performance notes measured IPsec cost by time, not by `top`:
//! how much CPU the work took, not how busy a sampled screen looked. Here
//! that is the kernel's own accounting: `utime` + `stime` of a process
//! (fields 14 and 15 of `/proc/PID/stat`, in clock ticks, all threads
//! included), sampled before and after a measurement, plus the same per
//! thread (`/proc/PID/task/TID/stat`) to see which thread carried the load.
//!
//! What it does not see: work the kernel does for the gateway in softirq
//! context on behalf of nobody in particular (forwarding, veth, TUN queue
//! wake-ups), which lands on whichever task was running or on
//! `ksoftirqd`. [`SystemCpu`] (the `cpu` line of `/proc/stat`) counts all
//! of it, and everything else the machine was doing: on a shared machine it
//! is an upper bound, and is reported as such.

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

/// CPU times of one task (process or thread), in seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskTimes {
    /// The `comm` name.
    pub comm: String,
    /// User time.
    pub user_s: f64,
    /// System time.
    pub system_s: f64,
}

impl TaskTimes {
    /// User plus system.
    pub fn total_s(&self) -> f64 {
        self.user_s + self.system_s
    }
}

/// Parse one `/proc/PID/stat` line. The `comm` field is in parentheses and
/// may itself hold spaces and parentheses, so the fields are counted from
/// the *last* `)` (proc(5)).
pub fn parse_stat(line: &str, ticks_per_s: f64) -> Result<TaskTimes> {
    let open = line.find('(').context("stat: no '('")?;
    let close = line.rfind(')').context("stat: no ')'")?;
    if close < open {
        bail!("stat: malformed comm");
    }
    let comm = line[open + 1..close].to_string();
    // After ")": field 3 (state) is index 0, so utime (14) is 11, stime (15) 12.
    let rest: Vec<&str> = line[close + 1..].split_whitespace().collect();
    let field = |i: usize, name: &str| -> Result<f64> {
        let v: u64 = rest
            .get(i)
            .with_context(|| format!("stat: no {name}"))?
            .parse()?;
        Ok(v as f64 / ticks_per_s)
    };
    Ok(TaskTimes {
        comm,
        user_s: field(11, "utime")?,
        system_s: field(12, "stime")?,
    })
}

/// `sysconf(_SC_CLK_TCK)`, via `getconf` (this crate has no `unsafe`);
/// 100 on every Linux this runs on, which is also the fallback.
pub fn ticks_per_second() -> f64 {
    static TCK: OnceLock<f64> = OnceLock::new();
    *TCK.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .filter(|v: &f64| *v > 0.0)
            .unwrap_or(100.0)
    })
}

/// A process and its threads at one instant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessSample {
    /// Process id.
    pub pid: u32,
    /// The whole process (live and exited threads).
    pub process: TaskTimes,
    /// Live threads by thread id.
    pub threads: BTreeMap<u32, TaskTimes>,
}

/// Read `/proc/PID/stat` and its threads'.
pub fn sample(pid: u32) -> Result<ProcessSample> {
    let tck = ticks_per_second();
    let line = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat (process gone?)"))?;
    let process = parse_stat(&line, tck)?;
    let mut threads = BTreeMap::new();
    if let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for e in dir.flatten() {
            let Some(tid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            // A thread may exit between readdir and read: skip it.
            if let Ok(l) = std::fs::read_to_string(e.path().join("stat")) {
                if let Ok(t) = parse_stat(&l, tck) {
                    threads.insert(tid, t);
                }
            }
        }
    }
    Ok(ProcessSample {
        pid,
        process,
        threads,
    })
}

/// The machine's `cpu` line of `/proc/stat`, in seconds summed over CPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct SystemCpu {
    /// user + nice + system + irq + softirq + steal.
    pub busy_s: f64,
    /// idle + iowait.
    pub idle_s: f64,
}

/// Parse the first (`cpu `) line of `/proc/stat`.
pub fn parse_proc_stat(text: &str, ticks_per_s: f64) -> Result<SystemCpu> {
    let line = text
        .lines()
        .find(|l| l.starts_with("cpu "))
        .context("/proc/stat: no cpu line")?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    if v.len() < 8 {
        bail!("/proc/stat: short cpu line");
    }
    // user nice system idle iowait irq softirq steal [guest guest_nice]:
    // guest time is already included in user (proc(5)).
    let busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
    let idle = v[3] + v[4];
    Ok(SystemCpu {
        busy_s: busy as f64 / ticks_per_s,
        idle_s: idle as f64 / ticks_per_s,
    })
}

/// Read `/proc/stat`.
pub fn system() -> Result<SystemCpu> {
    parse_proc_stat(&std::fs::read_to_string("/proc/stat")?, ticks_per_second())
}

/// CPU used by one process over an interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessUsage {
    /// Process id.
    pub pid: u32,
    /// A label given by the caller (e.g. "gw-west charon").
    pub label: String,
    /// User seconds.
    pub user_s: f64,
    /// System seconds.
    pub system_s: f64,
    /// Per-thread seconds (threads alive at both ends), busiest first.
    pub threads: Vec<(String, f64)>,
}

/// The result of a [`Meter`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// Wall-clock seconds of the interval.
    pub wall_s: f64,
    /// The measured processes.
    pub processes: Vec<ProcessUsage>,
    /// CPU-seconds busy on the whole machine (all CPUs, everyone's work).
    pub system_busy_s: f64,
}

impl Usage {
    /// User + system seconds of the measured processes.
    pub fn process_s(&self) -> f64 {
        self.processes.iter().map(|p| p.user_s + p.system_s).sum()
    }

    /// CPU seconds of the measured processes per 10⁹ bytes carried.
    pub fn process_s_per_gb(&self, bytes: u64) -> Option<f64> {
        (bytes > 0).then(|| self.process_s() / (bytes as f64 / 1e9))
    }

    /// Machine-wide busy seconds per 10⁹ bytes (an upper bound, see the
    /// module essay).
    pub fn system_s_per_gb(&self, bytes: u64) -> Option<f64> {
        (bytes > 0).then(|| self.system_busy_s / (bytes as f64 / 1e9))
    }
}

/// Measures processes between [`Meter::start`] and [`Meter::stop`].
#[derive(Debug)]
pub struct Meter {
    start: Vec<(String, ProcessSample)>,
    system: SystemCpu,
    t0: Instant,
}

impl Meter {
    /// Sample `(label, pid)` pairs now.
    pub fn start(pids: &[(&str, u32)]) -> Result<Self> {
        let start = pids
            .iter()
            .map(|(l, p)| Ok((l.to_string(), sample(*p)?)))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            start,
            system: system()?,
            t0: Instant::now(),
        })
    }

    /// Sample again and return the differences.
    pub fn stop(self) -> Result<Usage> {
        let wall_s = self.t0.elapsed().as_secs_f64();
        let sys = system()?;
        let mut processes = Vec::new();
        for (label, a) in self.start {
            let b = sample(a.pid)?;
            let mut threads: Vec<(String, f64)> = b
                .threads
                .iter()
                .filter_map(|(tid, tb)| {
                    let ta = a.threads.get(tid)?;
                    Some((format!("{}/{tid}", tb.comm), tb.total_s() - ta.total_s()))
                })
                .filter(|(_, s)| *s > 0.0)
                .collect();
            threads.sort_by(|x, y| y.1.total_cmp(&x.1));
            processes.push(ProcessUsage {
                pid: a.pid,
                label,
                user_s: b.process.user_s - a.process.user_s,
                system_s: b.process.system_s - a.process.system_s,
                threads,
            });
        }
        Ok(Usage {
            wall_s,
            processes,
            system_busy_s: sys.busy_s - self.system.busy_s,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn stat_line_with_awkward_comm() {
        // A comm with a space and a ')' inside, as proc(5) warns.
        let line =
            "4242 (char on) x) S 1 4242 4242 0 -1 4194560 1234 0 0 0 250 75 0 0 20 0 17 0 100 0 0";
        let t = parse_stat(line, 100.0).unwrap();
        assert_eq!(t.comm, "char on) x");
        assert_eq!(t.user_s, 2.5);
        assert_eq!(t.system_s, 0.75);
        assert_eq!(t.total_s(), 3.25);
        assert!(parse_stat("12 (x) S 1 2", 100.0).is_err());
        assert!(parse_stat("no parens here", 100.0).is_err());
        assert!(parse_stat(") (", 100.0).is_err());
    }

    #[test]
    fn proc_stat_cpu_line() {
        let text = "cpu  100 5 50 1000 20 3 7 2 40 0\ncpu0 1 2 3 4 5 6 7 8 9 10\nintr 1\n";
        let s = parse_proc_stat(text, 100.0).unwrap();
        assert_eq!(s.busy_s, (100 + 5 + 50 + 3 + 7 + 2) as f64 / 100.0);
        assert_eq!(s.idle_s, 10.2);
        assert!(parse_proc_stat("cpu0 1 2\n", 100.0).is_err());
        assert!(parse_proc_stat("cpu  1 2 3\n", 100.0).is_err());
    }

    #[test]
    fn meter_sees_our_own_busy_loop() {
        let me = std::process::id();
        let m = Meter::start(&[("self", me)]).unwrap();
        // Burn about 0.3 s of CPU on this thread.
        let t = Instant::now();
        let mut x = 0u64;
        while t.elapsed().as_millis() < 300 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let u = m.stop().unwrap();
        assert_eq!(u.processes.len(), 1);
        // Clock ticks are 10 ms: at least 0.1 s must show up even on a busy machine
        // (we may be descheduled, so not the full 0.3 s).
        assert!(u.process_s() >= 0.1, "{u:?}");
        assert!(u.wall_s >= 0.3);
        assert!(u.system_busy_s >= 0.1, "{u:?}");
        let per_gb = u.process_s_per_gb(500_000_000).unwrap();
        assert!((per_gb - 2.0 * u.process_s()).abs() < 1e-9);
        assert_eq!(u.process_s_per_gb(0), None);
        assert!(!u.processes[0].threads.is_empty());
    }
}
