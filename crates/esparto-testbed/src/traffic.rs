//! Traffic between the hosts: iperf3 for TCP and paced UDP, and ping.
//!
//! iperf3 runs as a server in host-east and a client in host-west, each
//! started with `ip netns exec`; the client's `--json` report is parsed with
//! serde, reading only the fields used (`end.sum_sent` and
//! `end.sum_received`, present in iperf3 ≥ 3.12 for TCP and UDP alike).
//!
//! UDP rates are given as packets per second of a given **IP packet size**
//! (see [`super::udp_payload_len`]): iperf3's `-l` is the UDP payload, so a
//! 64-byte IPv4 packet is `-l 36`, and the bit rate asked with `-b` is the
//! payload bit rate (`pps × payload × 8`).
//!
//! iperf3's UDP sender is one thread doing one `sendto` per datagram: here
//! it tops out near 170 kpps (≈ 48 Mbit/s of 36-byte payloads) and loses
//! packets at its own receiver before any gateway does. It is kept for
//! cross-checks and for TCP; the zero-loss search uses
//! [`super::udpgen`], which batches with `sendmmsg`/`recvmmsg`, waits for
//! the tail of each trial to drain, and ignores stragglers of earlier trials.

use std::io::{BufRead, BufReader};
use std::net::IpAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use esparto_netns::Netns;
use serde::{Deserialize, Serialize};

use super::{Family, udp_payload_len};

/// The port iperf3 listens on unless told otherwise.
pub const IPERF3_PORT: u16 = 5201;

/// An iperf3 server in a namespace; killed on drop.
#[derive(Debug)]
pub struct Iperf3Server {
    child: Child,
    port: u16,
}

impl Iperf3Server {
    /// Start `iperf3 -s` in `ns` and wait until it listens.
    pub fn start(ns: &Netns, port: u16) -> Result<Self> {
        let mut child = Command::new("ip")
            .args([
                "netns",
                "exec",
                ns.name(),
                "iperf3",
                "-s",
                "--forceflush",
                "-p",
            ])
            .arg(port.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("starting iperf3 -s")?;
        let stdout = child.stdout.take().context("iperf3 stdout")?;
        let mut server = Self { child, port };
        // "Server listening on 5201 (test #1)" once the socket is bound.
        let mut lines = BufReader::new(stdout).lines();
        let ready = loop {
            match lines.next() {
                Some(Ok(l)) if l.contains("Server listening") => break true,
                Some(Ok(_)) => continue,
                _ => break false,
            }
        };
        if !ready {
            let _ = server.child.kill();
            bail!("iperf3 server in {} exited before listening", ns.name());
        }
        // Keep draining its output so it never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Ok(server)
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for Iperf3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A TCP measurement.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TcpResult {
    /// Parallel streams.
    pub streams: u32,
    /// Seconds measured.
    pub seconds: f64,
    /// Payload bit rate at the receiver, Mbit/s.
    pub received_mbps: f64,
    /// Payload bit rate at the sender, Mbit/s.
    pub sent_mbps: f64,
    /// TCP retransmissions the sender saw.
    pub retransmits: u64,
    /// Payload bytes received.
    pub bytes: u64,
}

/// A UDP measurement by iperf3.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct UdpResult {
    /// IP packet size.
    pub ip_size: usize,
    /// Datagrams sent.
    pub sent: u64,
    /// Datagrams the server counted lost (sequence gaps, end of test included).
    pub lost: u64,
    /// Datagrams received (`sent − lost` as the server saw them).
    pub received: u64,
    /// Seconds of sending.
    pub seconds: f64,
}

#[derive(Deserialize)]
struct Report {
    end: Option<End>,
    error: Option<String>,
}

#[derive(Deserialize)]
struct End {
    sum_sent: Option<Sum>,
    sum_received: Option<Sum>,
}

#[derive(Deserialize, Default, Clone, Copy)]
struct Sum {
    #[serde(default)]
    seconds: f64,
    #[serde(default)]
    bytes: u64,
    #[serde(default)]
    bits_per_second: f64,
    #[serde(default)]
    retransmits: Option<u64>,
    #[serde(default)]
    packets: Option<u64>,
    #[serde(default)]
    lost_packets: Option<u64>,
}

fn run_client(ns: &Netns, server: IpAddr, port: u16, args: &[String]) -> Result<(Sum, Sum)> {
    let out = Command::new("ip")
        .args(["netns", "exec", ns.name(), "iperf3", "-c"])
        .arg(server.to_string())
        .args([
            "-p",
            &port.to_string(),
            "--json",
            "--connect-timeout",
            "3000",
        ])
        .args(args)
        .output()
        .context("running iperf3 -c")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let report: Report = serde_json::from_str(&text).with_context(|| {
        format!(
            "iperf3 printed no JSON report (exit {}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    if let Some(e) = report.error {
        bail!("iperf3: {e}");
    }
    let end = report.end.context("iperf3 report without an end section")?;
    Ok((
        end.sum_sent.context("iperf3 report without end.sum_sent")?,
        end.sum_received
            .context("iperf3 report without end.sum_received")?,
    ))
}

/// TCP from `client` to `server` with `streams` parallel streams for `seconds`.
pub fn tcp(
    client: &Netns,
    server: IpAddr,
    port: u16,
    streams: u32,
    seconds: u32,
) -> Result<TcpResult> {
    if streams == 0 || seconds == 0 {
        bail!("iperf3 TCP needs at least one stream and one second");
    }
    let args = [
        "-P".to_string(),
        streams.to_string(),
        "-t".to_string(),
        seconds.to_string(),
    ];
    let (sent, recv) = run_client(client, server, port, &args)?;
    Ok(TcpResult {
        streams,
        seconds: recv.seconds,
        received_mbps: recv.bits_per_second / 1e6,
        sent_mbps: sent.bits_per_second / 1e6,
        retransmits: sent.retransmits.unwrap_or(0),
        bytes: recv.bytes,
    })
}

/// UDP from `client` to `server`: `pps` packets/s of `ip_size`-byte IP
/// packets for `seconds`.
pub fn udp(
    client: &Netns,
    server: IpAddr,
    port: u16,
    ip_size: usize,
    pps: f64,
    seconds: u32,
) -> Result<UdpResult> {
    udp_streams(client, server, port, ip_size, pps, seconds, 1)
}

/// [`udp`] with `streams` parallel flows (iperf3 `-P`), `pps` in total.
pub fn udp_streams(
    client: &Netns,
    server: IpAddr,
    port: u16,
    ip_size: usize,
    pps: f64,
    seconds: u32,
    streams: u32,
) -> Result<UdpResult> {
    let payload = udp_payload_len(ip_size, Family::of(server))?;
    // iperf3 needs room for its own 16-byte header (12 without 64-bit counters).
    if payload < 16 {
        bail!(
            "iperf3 needs a UDP payload of at least 16 bytes ({ip_size}-byte packets give {payload})"
        );
    }
    // iperf3's -b is per stream.
    let bps = (pps / f64::from(streams.max(1)) * payload as f64 * 8.0).round() as u64;
    let args = [
        "-u",
        "--udp-counters-64bit",
        "-l",
        &payload.to_string(),
        "-b",
        &bps.to_string(),
        "-t",
        &seconds.to_string(),
        "-P",
        &streams.max(1).to_string(),
    ]
    .map(String::from);
    let (sent, recv) = run_client(client, server, port, &args)?;
    let sent_pkts = sent.packets.context("iperf3 UDP report without packets")?;
    let lost = recv.lost_packets.unwrap_or(0);
    Ok(UdpResult {
        ip_size,
        sent: sent_pkts,
        lost,
        received: recv.packets.unwrap_or(0).saturating_sub(lost),
        seconds: sent.seconds,
    })
}

/// What ping saw.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PingResult {
    /// Echo requests sent.
    pub transmitted: u32,
    /// Echo replies received.
    pub received: u32,
    /// Round-trip times (min, avg, max) in ms, when any reply came.
    pub rtt_ms: Option<(f64, f64, f64)>,
}

impl PingResult {
    /// Every request was answered.
    pub fn all_answered(&self) -> bool {
        self.transmitted > 0 && self.received == self.transmitted
    }
}

/// `ping -c COUNT -i INTERVAL -W 1 DST` from `ns`. A host that does not
/// answer is a result (received 0), not an error.
pub fn ping(ns: &Netns, dst: IpAddr, count: u32, interval: Duration) -> Result<PingResult> {
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            ns.name(),
            "ping",
            "-n",
            "-q",
            "-W",
            "1",
            "-c",
        ])
        .arg(count.to_string())
        .arg("-i")
        .arg(format!("{:.3}", interval.as_secs_f64().max(0.002)))
        .arg(dst.to_string())
        .output()
        .context("running ping")?;
    let text = String::from_utf8_lossy(&out.stdout);
    parse_ping(&text).with_context(|| {
        format!(
            "unexpected ping output: {text} {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Parse ping's summary lines.
fn parse_ping(text: &str) -> Result<PingResult> {
    // "5 packets transmitted, 5 received, 0% packet loss, time 801ms"
    let line = text
        .lines()
        .find(|l| l.contains("packets transmitted"))
        .context("no summary line")?;
    let mut nums = line
        .split(',')
        .map(|part| part.split_whitespace().next().unwrap_or("").parse::<u32>());
    let transmitted = nums.next().context("no count")??;
    let received = nums.next().context("no received count")??;
    // "rtt min/avg/max/mdev = 0.041/0.060/0.095/0.019 ms"
    let rtt_ms = text
        .lines()
        .find(|l| l.starts_with("rtt") || l.starts_with("round-trip"))
        .and_then(|l| {
            let v: Vec<f64> = l
                .split('=')
                .nth(1)?
                .split_whitespace()
                .next()?
                .split('/')
                .filter_map(|x| x.parse().ok())
                .collect();
            (v.len() >= 3).then(|| (v[0], v[1], v[2]))
        });
    Ok(PingResult {
        transmitted,
        received,
        rtt_ms,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn ping_summary() {
        let ok = "PING 10.2.0.10 (10.2.0.10) 56(84) bytes of data.\n\n--- 10.2.0.10 ping statistics ---\n\
                  5 packets transmitted, 5 received, 0% packet loss, time 801ms\n\
                  rtt min/avg/max/mdev = 0.041/0.060/0.095/0.019 ms\n";
        let r = parse_ping(ok).unwrap();
        assert_eq!((r.transmitted, r.received), (5, 5));
        assert_eq!(r.rtt_ms, Some((0.041, 0.060, 0.095)));
        assert!(r.all_answered());
        let lost = "--- x ping statistics ---\n3 packets transmitted, 0 received, +3 errors, 100% packet loss, time 2040ms\n";
        let r = parse_ping(lost).unwrap();
        assert_eq!((r.transmitted, r.received, r.rtt_ms), (3, 0, None));
        assert!(!r.all_answered());
        assert!(parse_ping("ping: connect: Network is unreachable\n").is_err());
    }

    #[test]
    fn iperf3_report_fields() {
        let json = r#"{"start":{},"intervals":[],"end":{"streams":[],
            "sum_sent":{"start":0,"end":1.0,"seconds":1.0,"bytes":6113196,"bits_per_second":48905127.8,"jitter_ms":0,"lost_packets":0,"packets":169811,"lost_percent":0,"sender":true},
            "sum_received":{"start":0,"end":1.0,"seconds":1.0,"bytes":5750532,"bits_per_second":45991470.3,"jitter_ms":0.004,"lost_packets":10044,"packets":169781,"lost_percent":5.9,"sender":false}}}"#;
        let r: Report = serde_json::from_str(json).unwrap();
        let end = r.end.unwrap();
        assert_eq!(end.sum_sent.unwrap().packets, Some(169_811));
        assert_eq!(end.sum_received.unwrap().lost_packets, Some(10_044));
        let err: Report =
            serde_json::from_str(r#"{"start":{},"error":"unable to connect to server"}"#).unwrap();
        assert_eq!(err.error.as_deref(), Some("unable to connect to server"));
    }
}
