//! A ping that runs in the background and remembers when each answer came:
//! how long a tunnel was down is the gap in the answers.
//!
//! `ping -D` stamps every reply line with the wall-clock time it was
//! received (UNIX seconds, microseconds), so the figures do not depend on
//! when this process gets to read the line; `stdbuf -oL` makes ping's
//! stdout line-buffered, so a test can also poll for "answers again"
//! while it runs. A reader thread collects the stamps; dropping the
//! [`Pinger`] kills ping (SIGKILL) and joins the thread.

use std::io::{BufRead, BufReader};
use std::net::IpAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use esparto_netns::Netns;

/// A background `ping` from one namespace to one address.
#[derive(Debug)]
pub struct Pinger {
    child: Child,
    replies: Arc<Mutex<Vec<f64>>>,
    reader: Option<JoinHandle<()>>,
    what: String,
}

/// Seconds since the UNIX epoch of `t` (as `ping -D` prints them).
pub fn unix_secs(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// The `-D` stamp of a reply line: `[1700000000.123456] 64 bytes from …`.
fn reply_stamp(line: &str) -> Option<f64> {
    if !line.contains("bytes from") {
        return None;
    }
    let rest = line.strip_prefix('[')?;
    rest[..rest.find(']')?].parse().ok()
}

impl Pinger {
    /// Start pinging `dst` from `ns` every `interval` (below 0.2 s needs
    /// root, which the test bed has).
    pub fn start(ns: &Netns, dst: IpAddr, interval: Duration) -> Result<Self> {
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns.name(), "stdbuf", "-oL", "ping", "-D", "-n", "-W", "1", "-i"])
            .arg(format!("{:.3}", interval.as_secs_f64().max(0.002)))
            .arg(dst.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("starting ping")?;
        let stdout = child.stdout.take().context("ping stdout")?;
        let replies = Arc::new(Mutex::new(Vec::new()));
        let sink = replies.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(t) = reply_stamp(&line) {
                    if let Ok(mut v) = sink.lock() {
                        v.push(t);
                    }
                }
            }
        });
        Ok(Self { child, replies, reader: Some(reader), what: format!("{} → {dst}", ns.name()) })
    }

    /// What is pinged from where (for messages).
    pub fn what(&self) -> &str {
        &self.what
    }

    /// Every reply's receive time so far (UNIX seconds, ascending).
    pub fn replies(&self) -> Vec<f64> {
        self.replies.lock().map(|v| v.clone()).unwrap_or_default()
    }

    /// The first reply received at or after `t` (UNIX seconds).
    pub fn first_reply_after(&self, t: f64) -> Option<f64> {
        self.replies().into_iter().find(|r| *r >= t)
    }

    /// The last reply received before `t`.
    pub fn last_reply_before(&self, t: f64) -> Option<f64> {
        self.replies().into_iter().rev().find(|r| *r < t)
    }
}

impl Drop for Pinger {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reply_lines_give_their_stamp_and_others_nothing() {
        assert_eq!(
            reply_stamp("[1700000000.123456] 64 bytes from 10.2.0.10: icmp_seq=3 ttl=62 time=0.41 ms"),
            Some(1_700_000_000.123_456)
        );
        assert_eq!(reply_stamp("PING 10.2.0.10 (10.2.0.10) 56(84) bytes of data."), None);
        assert_eq!(reply_stamp("[1700000000.5] From 10.1.0.1 icmp_seq=4 Destination Host Unreachable"), None);
        assert_eq!(reply_stamp("[garbage] 64 bytes from x"), None);
    }
}
