//! The store: results files written into a directory and read back.
//!
//! A plan is only as good as the figures it stands on, so nothing is
//! trusted silently. [`load_dir`] reads every `*.json` in the directory and
//! sets aside, each with its file name and the reason, a file that is
//! unreadable or not JSON, not a results file, of another format version,
//! from another machine (its machine id, CPU model or CPU count differ from
//! this one's), or whose figures make no sense (a negative rate). Of the
//! rest the planner takes the newest of each kind (of each suite, for the
//! data plane), and names the file and date beside every figure.
//!
//! [`save`] writes a file whole under a temporary name, then renames it, so
//! a reader never sees half a file; [`envelope`] dates a measurement and
//! names this machine, this binary's commit and this command line.

use std::fmt;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::schema::{AgilityData, CallRateData, DataplaneData, FORMAT, Kind, Machine, Saved, TunnelData};
use crate::bench::dataplane;

/// Where results go unless `--results DIR` says otherwise.
pub const DEFAULT_DIR: &str = "/var/lib/esparto/bench";

/// A results file larger than this is not one of ours: set aside unread.
pub const MAX_FILE_BYTES: u64 = 32 << 20;

/// The commit this binary was built from (`git rev-parse HEAD` at build
/// time, or `ESPARTO_COMMIT`; "unknown" without git).
pub const COMMIT: &str = env!("ESPARTO_COMMIT");

/// A file read and accepted.
#[derive(Debug, Clone)]
pub struct Loaded<T> {
    /// Where it is.
    pub path: PathBuf,
    /// What it says.
    pub saved: Saved<T>,
}

impl<T> Loaded<T> {
    /// "FILE (DATE, load L, commit C, `COMMAND`)": where a figure came from.
    pub fn provenance(&self) -> String {
        let commit: String = self.saved.commit.chars().take(12).collect();
        let s = &self.saved;
        format!("{} ({}, load {}, commit {commit}, `{}`)", self.path.display(), s.date, s.load_average, s.command)
    }
}

/// A file set aside, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ignored {
    /// The file.
    pub path: PathBuf,
    /// Why it was not used.
    pub reason: String,
}

impl fmt::Display for Ignored {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ignored {}: {}", self.path.display(), self.reason)
    }
}

/// Everything usable in a results directory, and what was set aside.
#[derive(Debug, Clone, Default)]
pub struct Found {
    /// The directory read.
    pub dir: PathBuf,
    /// In-process results of this machine.
    pub dataplane: Vec<Loaded<DataplaneData>>,
    /// End-to-end results of this machine.
    pub tunnel: Vec<Loaded<TunnelData>>,
    /// Key-agility results of this machine.
    pub agility: Vec<Loaded<AgilityData>>,
    /// Call-traffic zero-loss rates of this machine.
    pub call_rate: Vec<Loaded<CallRateData>>,
    /// Files not used, with the reason.
    pub ignored: Vec<Ignored>,
    /// The directory does not exist (nothing was ever saved there).
    pub missing_dir: bool,
}

impl Found {
    /// The newest end-to-end result.
    pub fn newest_tunnel(&self) -> Option<&Loaded<TunnelData>> {
        newest(self.tunnel.iter())
    }

    /// The newest call-traffic zero-loss rate.
    pub fn newest_call_rate(&self) -> Option<&Loaded<CallRateData>> {
        newest(self.call_rate.iter())
    }

    /// The newest in-process result for `suite` (strongSwan's name).
    pub fn newest_dataplane(&self, suite: &str) -> Option<&Loaded<DataplaneData>> {
        newest(self.dataplane.iter().filter(|d| d.saved.data.suite == suite))
    }

    /// The newest in-process result of each suite measured, in
    /// [`EspSuite::ALL`](esparto_crypto::EspSuite::ALL) order.
    pub fn newest_dataplane_per_suite(&self) -> Vec<&Loaded<DataplaneData>> {
        esparto_crypto::EspSuite::ALL.iter().filter_map(|s| self.newest_dataplane(s.name())).collect()
    }
}

impl Found {
    /// The newest key-agility result for `suite`, preferring a Zipf mix of
    /// tunnels (a few busy, a long tail: what a gateway sees) over round
    /// robin when both were measured.
    pub fn newest_agility(&self, suite: &str) -> Option<&Loaded<AgilityData>> {
        let of = |mix: dataplane::SaMix| {
            newest(self.agility.iter().filter(|d| d.saved.data.suite == suite && d.saved.data.rows.first().is_some_and(|r| r.mix == mix)))
        };
        of(dataplane::SaMix::Zipf).or_else(|| of(dataplane::SaMix::RoundRobin))
    }
}

/// The current time as (Unix seconds, RFC 3339 UTC).
pub fn now() -> (u64, String) {
    let t = SystemTime::now();
    let unix = t.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    (unix, humantime::format_rfc3339_seconds(t).to_string())
}

/// `/proc/loadavg`'s first three fields ("unknown" without it).
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// A saved measurement of this machine, dated now, with this process's
/// command line.
pub fn envelope<T>(kind: Kind, data: T) -> Saved<T> {
    let (unix, date) = now();
    Saved {
        format: FORMAT,
        kind,
        machine: Machine::this(),
        commit: COMMIT.to_string(),
        date,
        unix,
        command: std::env::args().collect::<Vec<_>>().join(" "),
        load_average: load_average(),
        clock_hz: crate::bench::tsc::tsc_hz(),
        data,
    }
}

/// Writes `saved` into `dir` (made if missing) as
/// `KIND-SUITE-YYYYMMDDTHHMMSSZ.json`; returns the path.
pub fn save<T: Serialize>(dir: &Path, suite: &str, saved: &Saved<T>) -> Result<PathBuf> {
    make_dir(dir).with_context(|| format!("creating the results directory {}", dir.display()))?;
    let stamp: String = saved.date.chars().filter(|c| *c != '-' && *c != ':').collect();
    let safe_suite: String =
        suite.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect();
    let base = format!("{}-{safe_suite}-{stamp}", saved.kind);
    let mut path = dir.join(format!("{base}.json"));
    let mut n = 1;
    while path.exists() {
        n += 1;
        path = dir.join(format!("{base}-{n}.json"));
    }
    let tmp = dir.join(format!(".{base}.json.tmp-{}", std::process::id()));
    let text = serde_json::to_string_pretty(saved)?;
    std::fs::write(&tmp, text + "\n").with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, &path).with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))?;
    Ok(path)
}

/// Reads every `*.json` in `dir`: this machine's results of the current
/// format, and every other file named with the reason it was set aside. A
/// directory that does not exist holds nothing (`missing_dir`).
pub fn load_dir(dir: &Path, this: &Machine) -> Result<Found> {
    let mut found = Found { dir: dir.to_path_buf(), ..Found::default() };
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            found.missing_dir = true;
            return Ok(found);
        }
        Err(e) => return Err(e).with_context(|| format!("reading the results directory {}", dir.display())),
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .filter(|p| !p.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.')))
        .collect();
    paths.sort();
    for path in paths {
        let mut ignore = |reason: String| found.ignored.push(Ignored { path: path.clone(), reason });
        let value = match read_json(&path) {
            Ok(v) => v,
            Err(e) => {
                ignore(e);
                continue;
            }
        };
        let format = match serde_json::from_value::<Head>(value.clone()) {
            Ok(h) => h.format,
            Err(_) => {
                ignore("not an Esparto results file (no \"format\" field)".into());
                continue;
            }
        };
        match format.as_u64() {
            Some(f) if f == u64::from(FORMAT) => {}
            Some(f) => {
                let age = if f < u64::from(FORMAT) { "older" } else { "newer" };
                ignore(format!("{age} format {f} (this esparto reads format {FORMAT}); measure again"));
                continue;
            }
            None => {
                ignore(format!("corrupt: format {format} is not a version number"));
                continue;
            }
        }
        let kind = value.get("kind").cloned().map(serde_json::from_value::<Kind>);
        match kind {
            Some(Ok(Kind::Dataplane)) => match parse(value, this) {
                Ok(saved) => found.dataplane.push(Loaded { path: path.clone(), saved }),
                Err(e) => ignore(e),
            },
            Some(Ok(Kind::Tunnel)) => match parse(value, this) {
                Ok(saved) => found.tunnel.push(Loaded { path: path.clone(), saved }),
                Err(e) => ignore(e),
            },
            Some(Ok(Kind::Agility)) => match parse(value, this) {
                Ok(saved) => found.agility.push(Loaded { path: path.clone(), saved }),
                Err(e) => ignore(e),
            },
            Some(Ok(Kind::CallRate)) => match parse(value, this) {
                Ok(saved) => found.call_rate.push(Loaded { path: path.clone(), saved }),
                Err(e) => ignore(e),
            },
            // Kept for the operator and for charts; no plan reads it.
            Some(Ok(Kind::Voip | Kind::Ipcomp | Kind::IpcompTunnel)) => {}
            Some(Err(e)) => ignore(format!("corrupt: kind: {e}")),
            None => ignore("corrupt: no \"kind\" field".into()),
        }
    }
    Ok(found)
}

fn newest<'a, T: 'a>(it: impl Iterator<Item = &'a Loaded<T>>) -> Option<&'a Loaded<T>> {
    // Ties on the second: the later file name (they carry the time).
    it.max_by(|a, b| a.saved.unix.cmp(&b.saved.unix).then_with(|| a.path.cmp(&b.path)))
}

/// Makes `dir` (mode 0755: results are not secret) and any missing parent
/// (mode 0700, as the daemon makes its state directory, the default
/// results directory's parent).
fn make_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty() && !p.exists()) {
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(parent)?;
    }
    std::fs::DirBuilder::new().recursive(true).mode(0o755).create(dir)
}

/// The part of a file every format version has: enough to say why a file
/// is set aside before its figures are read.
#[derive(Deserialize)]
struct Head {
    format: serde_json::Value,
}

/// Reads one file as `Saved<T>`, or says why not.
fn parse<T: DeserializeOwned + Plausible>(value: serde_json::Value, this: &Machine) -> Result<Saved<T>, String> {
    let saved: Saved<T> = serde_json::from_value(value).map_err(|e| format!("corrupt: {e}"))?;
    if let Some(d) = this.differs(&saved.machine) {
        return Err(d);
    }
    saved.data.check().map_err(|e| format!("implausible figures: {e}"))?;
    Ok(saved)
}

fn read_json(path: &Path) -> Result<serde_json::Value, String> {
    let f = std::fs::File::open(path).map_err(|e| format!("unreadable: {e}"))?;
    let mut text = String::new();
    f.take(MAX_FILE_BYTES + 1).read_to_string(&mut text).map_err(|e| format!("unreadable: {e}"))?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(format!("larger than {} MiB: not a results file", MAX_FILE_BYTES >> 20));
    }
    serde_json::from_str(&text).map_err(|e| format!("corrupt: not JSON ({e})"))
}

/// Figures that make no sense are refused like a corrupt file.
trait Plausible {
    fn check(&self) -> Result<(), String>;
}

fn positive(what: &str, x: f64) -> Result<(), String> {
    if x.is_finite() && x > 0.0 { Ok(()) } else { Err(format!("{what} is {x}")) }
}

impl Plausible for DataplaneData {
    fn check(&self) -> Result<(), String> {
        if esparto_crypto::EspSuite::from_proposal(&self.suite).is_none() {
            return Err(format!("unknown suite '{}'", self.suite));
        }
        if self.rows.is_empty() {
            return Err("no rows".into());
        }
        for r in &self.rows {
            positive(&format!("size {}: bytes", r.size), r.bytes)?;
            positive(&format!("size {}: cycles per byte", r.size), r.cycles_per_byte)?;
            positive(&format!("size {}: ESP Mpps", r.size), r.esp_mpps)?;
            positive(&format!("size {}: one-worker ESP Mpps", r.size), r.esp_mpps_1)?;
        }
        Ok(())
    }
}

impl Plausible for AgilityData {
    fn check(&self) -> Result<(), String> {
        if esparto_crypto::EspSuite::from_proposal(&self.suite).is_none() {
            return Err(format!("unknown suite '{}'", self.suite));
        }
        if self.rows.is_empty() {
            return Err("no rows".into());
        }
        if self.workers == 0 {
            return Err("0 workers".into());
        }
        for r in &self.rows {
            if r.size == 0 || r.sas == 0 {
                return Err(format!("a row of {} B with {} SAs", r.size, r.sas));
            }
            positive(&format!("{} B, {} SAs: ratio", r.size, r.sas), r.ratio)?;
            positive(&format!("{} B, {} SAs: one-SA Mpps", r.size, r.sas), r.mpps_1)?;
        }
        Ok(())
    }
}

impl Plausible for TunnelData {
    fn check(&self) -> Result<(), String> {
        if esparto_crypto::EspSuite::from_proposal(&self.suite).is_none() {
            return Err(format!("unknown suite '{}'", self.suite));
        }
        for z in &self.zero_loss {
            if !(z.pps.is_finite() && z.pps >= 0.0) || z.ip_size == 0 {
                return Err(format!("zero-loss rate {} pps at {} B", z.pps, z.ip_size));
            }
            if let Some(s) = z.gateway_s_per_gb {
                positive(&format!("{} B: CPU s/GB", z.ip_size), s)?;
            }
        }
        Ok(())
    }
}

impl Plausible for CallRateData {
    fn check(&self) -> Result<(), String> {
        if esparto_crypto::EspSuite::from_proposal(&self.suite).is_none() {
            return Err(format!("unknown suite '{}'", self.suite));
        }
        if self.ptime_ms == 0 {
            return Err("packet time 0 ms".into());
        }
        for z in &self.zero_loss {
            if !(z.pps.is_finite() && z.pps >= 0.0) || z.ip_size == 0 {
                return Err(format!("zero-loss rate {} pps at {} B", z.pps, z.ip_size));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::results::fixtures::{call_rate_data, dataplane_data, tunnel_data};
    use crate::results::schema::IpcompData;

    #[test]
    fn call_rates_are_read_back_and_foreign_or_implausible_ones_set_aside() {
        let dir = tempfile::tempdir().unwrap();
        let this = Machine::this();
        let old = save(dir.path(), "aes256gcm16", &dated(Kind::CallRate, 1_000, call_rate_data(&[(70, 1e4, false)])))
            .unwrap();
        let new = save(dir.path(), "aes256gcm16", &dated(Kind::CallRate, 2_000, call_rate_data(&[(70, 2e4, true)])))
            .unwrap();
        assert!(new.file_name().unwrap().to_string_lossy().starts_with("callrate-aes256gcm16-"), "{new:?}");
        let mut foreign = envelope(Kind::CallRate, call_rate_data(&[(70, 1e6, false)]));
        foreign.machine.id = "0123456789abcdef".into();
        let foreign = save(dir.path(), "foreign", &foreign).unwrap();
        let negative =
            save(dir.path(), "aes256gcm16", &envelope(Kind::CallRate, call_rate_data(&[(70, -1.0, false)]))).unwrap();
        let mut no_ptime = call_rate_data(&[(70, 1e4, false)]);
        no_ptime.ptime_ms = 0;
        let no_ptime = save(dir.path(), "aes256gcm16", &envelope(Kind::CallRate, no_ptime)).unwrap();
        let f = load_dir(dir.path(), &this).unwrap();
        assert_eq!(f.call_rate.len(), 2);
        assert_eq!(f.newest_call_rate().unwrap().path, new);
        assert!(f.newest_call_rate().unwrap().saved.data.zero_loss[0].lower_bound);
        assert_ne!(old, new);
        let reason = |p: &Path| f.ignored.iter().find(|i| i.path == p).map(|i| i.reason.clone()).unwrap_or_default();
        assert!(reason(&foreign).contains("another machine"), "{}", reason(&foreign));
        assert!(reason(&negative).contains("implausible"), "{}", reason(&negative));
        assert!(reason(&no_ptime).contains("packet time 0"), "{}", reason(&no_ptime));
        assert_eq!(f.ignored.len(), 3, "{:#?}", f.ignored);
    }

    fn dated<T>(kind: Kind, unix: u64, data: T) -> Saved<T> {
        let mut s = envelope(kind, data);
        s.unix = unix;
        s.date = humantime::format_rfc3339_seconds(UNIX_EPOCH + std::time::Duration::from_secs(unix)).to_string();
        s
    }

    #[test]
    fn saved_files_are_read_back_and_the_newest_wins() {
        let dir = tempfile::tempdir().unwrap();
        let this = Machine::this();
        let old = save(dir.path(), "aes256gcm16", &dated(Kind::Tunnel, 1_000, tunnel_data(&[(64, 1000.0)]))).unwrap();
        let new = save(dir.path(), "aes256gcm16", &dated(Kind::Tunnel, 2_000, tunnel_data(&[(64, 2000.0)]))).unwrap();
        assert_ne!(old, new);
        assert!(
            new.file_name().unwrap().to_string_lossy().starts_with("tunnel-aes256gcm16-19700101T003320Z"),
            "{new:?}"
        );
        save(dir.path(), "aes256gcm16", &dated(Kind::Dataplane, 1_500, dataplane_data("aes256gcm16"))).unwrap();
        save(dir.path(), "chacha20poly1305", &dated(Kind::Dataplane, 1_600, dataplane_data("chacha20poly1305")))
            .unwrap();
        let f = load_dir(dir.path(), &this).unwrap();
        assert!(f.ignored.is_empty(), "{:?}", f.ignored);
        assert_eq!((f.tunnel.len(), f.dataplane.len()), (2, 2));
        let t = f.newest_tunnel().unwrap();
        assert_eq!((t.path.as_path(), t.saved.data.zero_loss[0].pps), (new.as_path(), 2000.0));
        assert_eq!(t.saved.commit, COMMIT);
        assert!(t.provenance().contains("1970-01-01T00:33:20Z"), "{}", t.provenance());
        let suites: Vec<_> = f.newest_dataplane_per_suite().iter().map(|d| d.saved.data.suite.clone()).collect();
        assert_eq!(suites, ["aes256gcm16", "chacha20poly1305"]);
        assert!(f.newest_dataplane("aes128gcm16").is_none());
        // No temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert!(names.iter().all(|n| !n.to_string_lossy().starts_with('.')), "{names:?}");
    }

    #[test]
    fn foreign_old_corrupt_and_implausible_files_are_named_and_set_aside() {
        let dir = tempfile::tempdir().unwrap();
        let this = Machine::this();
        let good = save(dir.path(), "aes256gcm16", &envelope(Kind::Tunnel, tunnel_data(&[(64, 8192.0)]))).unwrap();

        let mut foreign = envelope(Kind::Tunnel, tunnel_data(&[(64, 1e6)]));
        foreign.machine.id = "0123456789abcdef".into();
        foreign.machine.hostname = "elsewhere".into();
        let foreign = save(dir.path(), "foreign", &foreign).unwrap();
        let mut resized = envelope(Kind::Dataplane, dataplane_data("aes256gcm16"));
        resized.machine.cpus += 6;
        let resized = save(dir.path(), "resized", &resized).unwrap();
        let mut old = serde_json::to_value(envelope(Kind::Tunnel, tunnel_data(&[(64, 1.0)]))).unwrap();
        old["format"] = 0.into();
        let w = |name: &str, text: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        let old = w("tunnel-old.json", &old.to_string());
        let mut future = serde_json::to_value(envelope(Kind::Tunnel, tunnel_data(&[(64, 1.0)]))).unwrap();
        future["format"] = (FORMAT + 1).into();
        let future = w("tunnel-future.json", &future.to_string());
        let truncated = w("tunnel-truncated.json", &std::fs::read_to_string(&good).unwrap()[..200]);
        let other = w("package.json", r#"{"name": "left-pad"}"#);
        let mut wrong = serde_json::to_value(envelope(Kind::Tunnel, tunnel_data(&[(64, 1.0)]))).unwrap();
        wrong["data"]["zero_loss"] = "many".into();
        let wrong = w("tunnel-wrong-type.json", &wrong.to_string());
        let negative = save(dir.path(), "aes256gcm16", &envelope(Kind::Tunnel, tunnel_data(&[(64, -5.0)]))).unwrap();
        let mut bad_kind = serde_json::to_value(envelope(Kind::Tunnel, tunnel_data(&[(64, 1.0)]))).unwrap();
        bad_kind["kind"] = "fax".into();
        let bad_kind = w("fax.json", &bad_kind.to_string());
        w("notes.txt", "not json, not looked at");
        w(".tunnel-x.json.tmp-1", "half a fi");

        let f = load_dir(dir.path(), &this).unwrap();
        assert_eq!(f.tunnel.len(), 1);
        assert_eq!(f.tunnel[0].path, good);
        assert!(f.dataplane.is_empty());
        let reason = |p: &Path| f.ignored.iter().find(|i| i.path == p).map(|i| i.reason.clone()).unwrap_or_default();
        assert!(reason(&foreign).contains("another machine (elsewhere"), "{}", reason(&foreign));
        assert!(reason(&resized).contains(&format!("with {} CPUs", this.cpus + 6)), "{}", reason(&resized));
        assert!(reason(&old).contains("older format 0"), "{}", reason(&old));
        assert!(reason(&future).contains("newer format"), "{}", reason(&future));
        assert!(reason(&truncated).contains("corrupt: not JSON"), "{}", reason(&truncated));
        assert!(reason(&other).contains("not an Esparto results file"), "{}", reason(&other));
        assert!(reason(&wrong).starts_with("corrupt:"), "{}", reason(&wrong));
        assert!(reason(&negative).contains("implausible"), "{}", reason(&negative));
        assert!(reason(&bad_kind).contains("corrupt: kind"), "{}", reason(&bad_kind));
        assert_eq!(f.ignored.len(), 9, "{:#?}", f.ignored);
        assert!(f.ignored.iter().all(|i| i.to_string().starts_with("ignored ")));
    }

    #[test]
    fn the_directory_is_made_with_its_parent_private() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let bench = dir.path().join("state/bench");
        save(&bench, "aes256gcm16", &envelope(Kind::Tunnel, tunnel_data(&[(64, 1.0)]))).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        // 0755 less the umask for the results, never more than 0700 for the parent.
        assert_eq!(mode(&dir.path().join("state")) & 0o077, 0);
        assert_eq!(mode(&bench) & 0o722, 0o700);
        assert_eq!(load_dir(&bench, &Machine::this()).unwrap().tunnel.len(), 1);
    }

    #[test]
    fn ipcomp_results_are_kept_beside_the_others_and_read_by_no_plan() {
        let dir = tempfile::tempdir().unwrap();
        let data = IpcompData { seconds: 0.5, runs: 3, file: None, rows: vec![] };
        let a = save(dir.path(), "deflate", &envelope(Kind::Ipcomp, data)).unwrap();
        let b = save(dir.path(), "deflate", &envelope(Kind::IpcompTunnel, serde_json::json!({"cells": []}))).unwrap();
        assert!(a.file_name().unwrap().to_string_lossy().starts_with("ipcomp-deflate-"), "{a:?}");
        assert!(b.file_name().unwrap().to_string_lossy().starts_with("ipcomp-tunnel-deflate-"), "{b:?}");
        let back: Saved<IpcompData> = serde_json::from_str(&std::fs::read_to_string(&a).unwrap()).unwrap();
        assert_eq!((back.kind, back.data.runs), (Kind::Ipcomp, 3));
        let f = load_dir(dir.path(), &Machine::this()).unwrap();
        assert!(f.ignored.is_empty() && f.tunnel.is_empty() && f.dataplane.is_empty(), "{:?}", f.ignored);
    }

    #[test]
    fn a_missing_directory_holds_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let f = load_dir(&dir.path().join("never-made"), &Machine::this()).unwrap();
        assert!(f.missing_dir && f.tunnel.is_empty() && f.dataplane.is_empty() && f.ignored.is_empty());
    }
}
