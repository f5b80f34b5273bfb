//! Text rendering of the daemon's [`Status`] for `esparto status`: a line
//! per worker (its CPU, packets and bytes each way, drops by reason), the drops
//! summed over workers, then a table of SAs in the spirit of strongSwan's
//! `ipsec trafficstatus` — connection/child, SPI, direction, role
//! (fallback, per-worker sub-SA, or the single SA of a child), the worker
//! that processes it, suite, peer, packets, bytes, age and drops — but per
//! worker, since with per-CPU SAs (RFC 9611) that is where the traffic is.
//!
//! Figures are printed exactly (no rounding to K/M/G): operators compare
//! them between runs and with the peer's counters.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::status::{ConnStatus, IkeSaStatus, IoStatus, NatStatus, ReloadReport, SaStatus, Status};

/// A worker's system calls and what each carried on average: the sending
/// side's TUN reads (one packet each unless the kernel hands over GSO
/// super-packets), the receiving side's TUN writes (coalesced by our GRO)
/// and the UDP socket's batches.
fn io(w: &IoStatus) -> String {
    let per = |n: u64, calls: u64| if calls == 0 { 0.0 } else { n as f64 / calls as f64 };
    let mut s = format!(
        "tun {} reads ({} GSO), {:.1} packets/read, {} writes, {:.1} packets/write; udp {} recvmmsg, {:.1} datagrams/call; {} sendmmsg, {:.1} datagrams/call",
        w.tun_reads,
        w.tun_gso_reads,
        per(w.tun_rx_packets, w.tun_reads),
        w.tun_writes,
        per(w.tun_tx_packets, w.tun_writes),
        w.udp_recv_calls,
        per(w.udp_rx_datagrams, w.udp_recv_calls),
        w.udp_send_calls,
        per(w.udp_tx_datagrams, w.udp_send_calls),
    );
    if w.udp_tx_dropped > 0 {
        s += &format!("; {} datagrams dropped (send buffer full)", w.udp_tx_dropped);
    }
    if w.io_errors > 0 {
        s += &format!("; {} i/o errors", w.io_errors);
    }
    s
}

/// How long a worker went without draining its queues, and how long it
/// waited for a CPU (`None` before it has turned twice).
fn loop_line(w: &crate::status::WorkerStatus) -> Option<String> {
    let g = &w.loop_gaps;
    if g.counts.iter().sum::<u64>() == 0 {
        return None;
    }
    let mut s = format!("longest gap {:.1} ms, {} over 200 ms", g.max_ms, g.over_200ms);
    if let Some(ms) = w.cpu_wait_ms {
        s += &format!("; waited {ms:.0} ms for a CPU");
    }
    Some(s)
}

/// The whole status as text, ending with a newline.
pub fn status_text(s: &Status) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "esparto {} (pid {}), up {}, tun {}{}, {} worker{}",
        s.version,
        s.pid,
        age(s.uptime_s),
        s.tun,
        if s.steering.is_empty() { String::new() } else { format!(" ({})", s.steering) },
        s.workers.len(),
        if s.workers.len() == 1 { "" } else { "s" }
    );
    for w in &s.workers {
        let cpu = w
            .cpu
            .map_or_else(|| "unpinned".to_string(), |c| format!("cpu {c}"));
        let _ = writeln!(
            out,
            "worker {} ({cpu}): tx {} packets ({} bytes), rx {} packets ({} bytes), {}",
            w.worker,
            w.tx_packets,
            w.tx_bytes,
            w.rx_packets,
            w.rx_bytes,
            drops(&w.drops, "drops: ")
        );
        if w.io != IoStatus::default() {
            let _ = writeln!(out, "  i/o: {}", io(&w.io));
        }
        if let Some(l) = loop_line(w) {
            let _ = writeln!(out, "  loop: {l}");
        }
    }
    let _ = writeln!(out, "all workers: {}", drops(&s.drops, "drops: "));
    for d in &s.devices {
        let _ = writeln!(
            out,
            "device {} (the kernel's counters): {} packets to the workers, {} dropped (queue full); {} from the workers, {} dropped",
            d.name, d.to_workers, d.queue_full, d.from_workers, d.input_dropped
        );
    }
    out.push('\n');
    out.push_str(&sa_table(&s.sas));
    out.push_str(&ipcomp_lines(&s.sas));
    out
}

/// The IPComp lines under the SA table: one per SA with IPComp (nothing
/// when none has it).
pub fn ipcomp_lines(sas: &[SaStatus]) -> String {
    let mut out = String::new();
    for sa in sas {
        let Some(c) = &sa.ipcomp else { continue };
        if out.is_empty() {
            out.push_str("IPComp (DEFLATE):\n");
        }
        if c.state == crate::status::IPCOMP_REFUSED {
            out.push_str(&format!(
                "  {}/{} {} {} worker {}: mode {} {}\n",
                sa.connection, sa.child, sa.spi, sa.direction, sa.worker, c.mode, c.state
            ));
            continue;
        }
        out.push_str(&format!(
            "  {}/{} {} {} worker {}: cpi {} mode {} state {} ratio {:.3} saved {} B compressed {} skipped {} switched off {}x decompress_failed {} too_big {}\n",
            sa.connection, sa.child, sa.spi, sa.direction, sa.worker, c.cpi, c.mode, c.state, c.ratio, c.bytes_saved,
            c.compressed, c.skipped, c.switches_off, c.decompress_failed, c.too_big
        ));
        if !c.last_switch.is_empty() {
            out.push_str(&format!("    last switch: {}\n", c.last_switch));
        }
    }
    out
}

/// The SA table (or "no SAs"), ending with a newline.
pub fn sa_table(sas: &[SaStatus]) -> String {
    if sas.is_empty() {
        return "no SAs\n".to_string();
    }
    let mut sorted: Vec<&SaStatus> = sas.iter().collect();
    // Group by child; within it keep the daemon's order (fallback first).
    sorted.sort_by(|a, b| (&a.connection, &a.child).cmp(&(&b.connection, &b.child)));
    let header = [
        "CHILD", "SPI", "DIR", "ROLE", "WORKER", "SUITE", "PEER", "PACKETS", "BYTES", "LAST SEQ",
        "AGE", "DROPS",
    ];
    // Numeric columns are right-aligned.
    let right = [
        false, false, false, false, true, false, false, true, true, true, true, false,
    ];
    let rows: Vec<[String; 12]> = sorted
        .iter()
        .map(|sa| {
            [
                format!("{}/{}", sa.connection, sa.child),
                sa.spi.clone(),
                sa.direction.clone(),
                sa.role.clone(),
                sa.worker.to_string(),
                sa.suite.clone(),
                sa.peer.clone(),
                sa.packets.to_string(),
                sa.bytes.to_string(),
                sa.last_seq.to_string(),
                age(sa.age_s),
                drops(&sa.drops, ""),
            ]
        })
        .collect();
    let mut width = header.map(str::len);
    for r in &rows {
        for (w, cell) in width.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &[&str]| {
        let mut l = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i > 0 {
                l.push_str("  ");
            }
            let pad = width[i].saturating_sub(cell.chars().count());
            let last = i + 1 == cells.len();
            if right[i] {
                l.push_str(&" ".repeat(pad));
                l.push_str(cell);
            } else {
                l.push_str(cell);
                if !last {
                    l.push_str(&" ".repeat(pad));
                }
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(&header);
    for r in &rows {
        let cells: Vec<&str> = r.iter().map(String::as_str).collect();
        line(&cells);
    }
    out
}

/// `"replay 3, icv_failure 1"`, or `"no drops"` / `"-"`.
fn drops(d: &BTreeMap<String, u64>, prefix: &str) -> String {
    let nonzero: Vec<String> = d
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(r, n)| format!("{r} {n}"))
        .collect();
    match (nonzero.is_empty(), prefix.is_empty()) {
        (true, true) => "-".into(),
        (true, false) => "no drops".into(),
        (false, _) => format!("{prefix}{}", nonzero.join(", ")),
    }
}

/// IKE SAs and their Child SAs, as `swanctl --list-sas` lays them out.
pub fn ike_sas_text(sas: &[IkeSaStatus]) -> String {
    let mut o = String::new();
    if sas.is_empty() {
        o.push_str("no IKE SAs\n");
    }
    for s in sas {
        let _ = writeln!(
            o,
            "{}: #{} {}, {} ago, {}[{}]...{}{}[{}]{}",
            s.connection,
            s.id,
            s.state.to_uppercase(),
            age(s.age_s),
            s.local,
            s.local_id,
            if s.remote_host.is_empty() { String::new() } else { format!("{} ", s.remote_host) },
            s.remote,
            s.remote_id,
            if s.initiator { " (initiator)" } else { "" }
        );
        if !s.proposal.is_empty() || s.rekey_in_s.is_some() {
            let proposal = if s.proposal.is_empty() { "proposal not chosen yet" } else { &s.proposal };
            let _ = writeln!(o, "  {proposal}{}", timer(", rekeying in ", s.rekey_in_s));
        }
        let _ = writeln!(o, "  {}", nat_text(&s.nat));
        for c in &s.children {
            let out_on = match (c.out_state.as_str(), c.out_worker) {
                ("waiting", _) => "nobody yet (until the peer switches to it)".to_string(),
                ("idle", _) => "nobody (received on only)".to_string(),
                (_, Some(w)) => format!("worker {w}"),
                (_, None) => "every worker".to_string(),
            };
            if !c.local_ts.is_empty() || !c.remote_ts.is_empty() {
                let _ = writeln!(o, "  {}: {} === {}", c.child, c.local_ts.join(" "), c.remote_ts.join(" "));
            }
            let in_on = c.in_worker.map_or_else(|| "-".to_string(), |w| format!("worker {w}"));
            let _ = writeln!(
                o,
                "  {}: INSTALLED {} {}, {} ago{}{}\n    in  {} on {}: {} packets, {} bytes{}\n    out {} on {}: {} packets, {} bytes{}",
                c.child,
                c.role,
                c.suite,
                age(c.age_s),
                timer(", rekeying in ", c.rekey_in_s),
                timer(", expires in ", c.expire_in_s),
                c.in_spi,
                in_on,
                c.in_packets,
                c.in_bytes,
                last(c.in_idle_s),
                c.out_spi,
                out_on,
                c.out_packets,
                c.out_bytes,
                last(c.out_idle_s)
            );
            if !c.ipcomp.is_empty() {
                let _ = writeln!(o, "    ipcomp: {}", c.ipcomp);
            }
        }
    }
    o
}

/// `, rekeying in 55m00s`, or nothing for a timer that is not set.
fn timer(what: &str, secs: Option<f64>) -> String {
    secs.map_or_else(String::new, |s| format!("{what}{}", age(s)))
}

/// `, last 2s ago`, or nothing before the first packet.
fn last(idle: Option<f64>) -> String {
    idle.map_or_else(String::new, |s| format!(", last {} ago", age(s)))
}

/// `NAT: local behind NAT, ESP-in-UDP 4500 -> 4500`, as every field of
/// the JSON form says it.
fn nat_text(n: &NatStatus) -> String {
    let found = match (n.local_behind_nat, n.remote_behind_nat) {
        (false, false) => "none detected",
        (true, false) => "local behind NAT",
        (false, true) => "remote behind NAT",
        (true, true) => "local and remote behind NAT",
    };
    let encap = if n.encap.is_empty() || n.encap == "esp-in-udp" { "ESP-in-UDP" } else { &n.encap };
    let remote = if n.remote_port == 0 { "?".to_string() } else { n.remote_port.to_string() };
    let forced = if n.encap_forced { " (encapsulation forced)" } else { "" };
    format!("NAT: {found}, {encap} {} -> {remote}{forced}", n.local_port)
}

/// The loaded connections, as `swanctl --list-conns` lays them out. Every
/// field of the JSON form appears.
pub fn conns_text(conns: &[ConnStatus]) -> String {
    let mut o = String::new();
    if conns.is_empty() {
        o.push_str("no connections\n");
    }
    let any = |v: &[String]| if v.is_empty() { "%any".to_string() } else { v.join(",") };
    let secs = |s: Option<u64>| s.map_or_else(|| "never".to_string(), |s| age(s as f64));
    for c in conns {
        let kind = if c.ike.is_some() { "IKEv2" } else { "static keys" };
        let _ = writeln!(
            o,
            "{}: {kind}, {}...{} (ESP-in-UDP to port {})",
            c.name,
            any(&c.local_addrs),
            any(&c.remote_addrs),
            c.remote_port
        );
        if let Some(i) = &c.ike {
            let id = |s: &str, what: &str| if s.is_empty() { what.to_string() } else { s.to_string() };
            let _ = writeln!(
                o,
                "  rekey {}, dpd {}\n  proposals: {}\n  local:  {} (psk)\n  remote: {} (psk)",
                secs(i.rekey_time_s),
                i.dpd_delay_s.map_or_else(|| "off".to_string(), |s| age(s as f64)),
                i.proposals.join(", "),
                id(&i.local_id, "our IKE address"),
                id(&i.remote_id, "%any"),
            );
        }
        for ch in &c.children {
            if ch.keying == "static" {
                let pl = if ch.static_pairs == 1 { "" } else { "s" };
                let _ = writeln!(o, "  {}: static, {} SA pair{pl}, per_cpu_sas {}", ch.name, ch.static_pairs, ch.per_cpu_sas);
            } else {
                let _ = writeln!(
                    o,
                    "  {}: negotiated, start_action {}, rekey {}, per_cpu_sas {}",
                    ch.name,
                    ch.start_action,
                    secs(ch.rekey_time_s),
                    ch.per_cpu_sas
                );
            }
            let _ = writeln!(
                o,
                "    esp:    {}\n    local:  {}\n    remote: {}",
                ch.esp_proposals.join(", "),
                ch.local_ts.join(" "),
                ch.remote_ts.join(" ")
            );
        }
    }
    o
}

/// A duration in seconds as `45s`, `12m05s`, `3h02m`, `2d04h`.
pub fn age(secs: f64) -> String {
    if !secs.is_finite() || secs < 0.0 {
        return "?".into();
    }
    // Whole seconds; an age beyond u64 seconds is not a real age.
    let s = secs.min(u64::MAX as f64) as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86_400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// What `esparto reload` prints.
pub fn reload_text(r: &ReloadReport) -> String {
    let mut o = String::new();
    let names = |v: &[String]| if v.is_empty() { String::new() } else { format!(": {}", v.join(", ")) };
    let _ = writeln!(o, "reloaded {} in {:.1} ms", r.file, r.took_ms);
    let _ = writeln!(o, "  added     {}{}", r.added.len(), names(&r.added));
    let _ = writeln!(o, "  changed   {}{}", r.changed.len(), names(&r.changed));
    let _ = writeln!(o, "  removed   {}{}", r.removed.len(), names(&r.removed));
    let _ = writeln!(o, "  unchanged {}", r.unchanged);
    if r.ike_sas_deleted > 0 {
        let _ = writeln!(o, "  {} IKE SA(s) of removed or changed connections being deleted with their peers", r.ike_sas_deleted);
    }
    for w in &r.warnings {
        let _ = writeln!(o, "{w}");
    }
    for n in &r.needs_restart {
        let _ = writeln!(o, "needs a restart: {n}");
    }
    for p in &r.problems {
        let _ = writeln!(o, "problem: {p}");
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::{ChildSaStatus, NatStatus, WorkerStatus};

    fn sa(child: &str, spi: &str, dir: &str, role: &str, worker: u16, packets: u64) -> SaStatus {
        SaStatus {
            connection: "site".into(),
            child: child.into(),
            spi: spi.into(),
            direction: dir.into(),
            role: role.into(),
            worker,
            suite: "aes256gcm16".into(),
            peer: "192.0.2.2:4500".into(),
            packets,
            bytes: packets * 1000,
            last_seq: packets,
            age_s: 3725.0,
            drops: BTreeMap::new(),
            ipcomp: None,
        }
    }

    #[test]
    fn ages() {
        assert_eq!(age(0.4), "0s");
        assert_eq!(age(59.9), "59s");
        assert_eq!(age(725.0), "12m05s");
        assert_eq!(age(3725.0), "1h02m");
        assert_eq!(age(187_200.0), "2d04h");
        assert_eq!(age(f64::NAN), "?");
        assert_eq!(age(-1.0), "?");
    }

    #[test]
    fn full_status() {
        let mut w0 = WorkerStatus {
            worker: 0,
            cpu: Some(0),
            tx_packets: 120,
            rx_packets: 7,
            tx_bytes: 120_000,
            rx_bytes: 7_000,
            drops: BTreeMap::new(),
            io: IoStatus {
                tun_reads: 40,
                tun_gso_reads: 2,
                tun_rx_packets: 120,
                tun_tx_packets: 7,
                tun_writes: 2,
                udp_recv_calls: 4,
                udp_rx_datagrams: 7,
                udp_send_calls: 8,
                udp_tx_datagrams: 120,
                udp_tx_dropped: 3,
                io_errors: 0,
            },
            loop_gaps: crate::status::LoopGapsStatus {
                bounds_ms: vec![0.1, 1.0, 10.0, 50.0, 100.0, 200.0, 500.0, 1000.0],
                counts: vec![100, 3, 0, 0, 0, 0, 1, 0, 0],
                sum_ms: 314.9,
                max_ms: 312.5,
                over_200ms: 1,
            },
            cpu_wait_ms: Some(41.6),
            ..WorkerStatus::default()
        };
        w0.drops.insert("replay".into(), 3);
        w0.drops.insert("icv_failure".into(), 0);
        let w1 = WorkerStatus {
            worker: 1,
            cpu: None,
            tx_packets: 0,
            rx_packets: 0,
            drops: BTreeMap::new(),
            io: IoStatus::default(),
            ..WorkerStatus::default()
        };
        let mut in0 = sa("lan", "c0000101", "in", "fallback", 1, 7);
        in0.drops.insert("replay".into(), 3);
        let s = Status {
            version: "0.1.0".into(),
            pid: 77,
            uptime_s: 65.0,
            tun: "esparto0".into(),
            steering: "flow table".into(),
            workers: vec![w0.clone(), w1],
            sas: vec![sa("lan", "c0000201", "out", "fallback", 0, 120), in0],
            drops: [("replay".to_string(), 3), ("tun_queue_full".to_string(), 2)].into(),
            devices: vec![crate::status::DeviceStatus {
                name: "esparto0".into(),
                to_workers: 127,
                queue_full: 2,
                from_workers: 7,
                input_dropped: 0,
            }],
            ike_sas: vec![],
            ike: Default::default(),
            ike_events: Default::default(),
        };
        let want = "\
esparto 0.1.0 (pid 77), up 1m05s, tun esparto0 (flow table), 2 workers
worker 0 (cpu 0): tx 120 packets (120000 bytes), rx 7 packets (7000 bytes), drops: replay 3
  i/o: tun 40 reads (2 GSO), 3.0 packets/read, 2 writes, 3.5 packets/write; udp 4 recvmmsg, 1.8 datagrams/call; 8 sendmmsg, 15.0 datagrams/call; 3 datagrams dropped (send buffer full)
  loop: longest gap 312.5 ms, 1 over 200 ms; waited 42 ms for a CPU
worker 1 (unpinned): tx 0 packets (0 bytes), rx 0 packets (0 bytes), no drops
all workers: drops: replay 3, tun_queue_full 2
device esparto0 (the kernel's counters): 127 packets to the workers, 2 dropped (queue full); 7 from the workers, 0 dropped

CHILD     SPI       DIR  ROLE      WORKER  SUITE        PEER            PACKETS   BYTES  LAST SEQ    AGE  DROPS
site/lan  c0000201  out  fallback       0  aes256gcm16  192.0.2.2:4500      120  120000       120  1h02m  -
site/lan  c0000101  in   fallback       1  aes256gcm16  192.0.2.2:4500        7    7000         7  1h02m  replay 3
";
        assert_eq!(status_text(&s), want);
    }

    /// `sas`: selectors, and where each Child SA sends (a worker, every
    /// worker, nobody yet, nobody); an older daemon's JSON still renders.
    #[test]
    fn ike_sas_show_selectors_and_where_each_sa_sends() {
        let child = |in_spi: &str, out_worker, out_state: &str| ChildSaStatus {
            child: "net".into(),
            in_spi: in_spi.into(),
            out_spi: "c0000900".into(),
            suite: "aes256gcm16".into(),
            role: "sub".into(),
            in_worker: Some(1),
            out_worker,
            out_state: out_state.into(),
            local_ts: vec!["10.1.0.0/16".into()],
            remote_ts: vec!["10.2.0.0/16".into(), "fd02::/64".into()],
            age_s: 5.0,
            ..ChildSaStatus::default()
        };
        let ike = IkeSaStatus {
            id: "0000000000000001".into(),
            connection: "site".into(),
            state: "established".into(),
            local: "192.0.2.1:4500".into(),
            remote: "192.0.2.2:4500".into(),
            children: vec![
                child("c0000101", Some(1), "sending"),
                child("c0000102", None, "sending"),
                child("c0000103", None, "waiting"),
                child("c0000104", None, "idle"),
                child("c0000105", None, ""),
                ChildSaStatus { ipcomp: crate::status::IPCOMP_REFUSED.into(), ..child("c0000106", None, "sending") },
            ],
            ..IkeSaStatus::default()
        };
        let text = ike_sas_text(std::slice::from_ref(&ike));
        assert_eq!(text.matches("    ipcomp: refused by peer\n").count(), 1, "{text}");
        assert_eq!(text.matches("ipcomp").count(), 1, "{text}");
        assert!(text.contains("  net: 10.1.0.0/16 === 10.2.0.0/16 fd02::/64\n"), "{text}");
        assert!(text.contains("  NAT: none detected, ESP-in-UDP 0 -> ?\n"), "an older daemon's JSON: {text}");
        assert!(!text.contains("rekeying"), "{text}");
        let outs: Vec<&str> =
            text.lines().filter(|l| l.trim_start().starts_with("out ")).map(|l| l.split_once(" on ").map_or("", |(_, rest)| rest)).collect();
        assert_eq!(
            outs,
            [
                "worker 1: 0 packets, 0 bytes",
                "every worker: 0 packets, 0 bytes",
                "nobody yet (until the peer switches to it): 0 packets, 0 bytes",
                "nobody (received on only): 0 packets, 0 bytes",
                "every worker: 0 packets, 0 bytes",
                "every worker: 0 packets, 0 bytes",
            ]
        );
        // The timers, the proposal, NAT and the last packets' ages.
        let mut ike = ike;
        ike.children.truncate(1);
        ike.proposal = "IKE:AES_GCM_16_256/PRF_HMAC_SHA2_256/CURVE_25519".into();
        ike.rekey_in_s = Some(14_000.4);
        ike.nat = NatStatus {
            local_behind_nat: true,
            encap: "esp-in-udp".into(),
            encap_forced: true,
            local_port: 4500,
            remote_port: 4501,
            ..NatStatus::default()
        };
        let c = &mut ike.children[0];
        (c.rekey_in_s, c.expire_in_s, c.in_idle_s, c.out_idle_s) = (Some(3300.0), Some(3600.0), Some(2.2), None);
        let text = ike_sas_text(&[ike]);
        let want = "\
site: #0000000000000001 ESTABLISHED, 0s ago, 192.0.2.1:4500[]...192.0.2.2:4500[]
  IKE:AES_GCM_16_256/PRF_HMAC_SHA2_256/CURVE_25519, rekeying in 3h53m
  NAT: local behind NAT, ESP-in-UDP 4500 -> 4501 (encapsulation forced)
  net: 10.1.0.0/16 === 10.2.0.0/16 fd02::/64
  net: INSTALLED sub aes256gcm16, 5s ago, rekeying in 55m00s, expires in 1h00m
    in  c0000101 on worker 1: 0 packets, 0 bytes, last 2s ago
    out c0000900 on worker 1: 0 packets, 0 bytes
";
        assert_eq!(text, want);
    }

    #[test]
    fn groups_by_child_and_handles_no_sas() {
        assert_eq!(sa_table(&[]), "no SAs\n");
        let t = sa_table(&[
            sa("b", "2", "in", "sub", 0, 1),
            sa("a", "1", "in", "single", 0, 1),
            sa("b", "3", "out", "sub", 1, 1),
        ]);
        let children: Vec<&str> = t
            .lines()
            .skip(1)
            .map(|l| l.split_whitespace().next().unwrap_or(""))
            .collect();
        assert_eq!(children, ["site/a", "site/b", "site/b"]);
        let spis: Vec<&str> = t
            .lines()
            .skip(1)
            .map(|l| l.split_whitespace().nth(1).unwrap_or(""))
            .collect();
        assert_eq!(spis, ["1", "2", "3"], "stable within a child");
    }
}

#[cfg(test)]
mod conns_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn example(name: &str) -> Vec<ConnStatus> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
        let c = crate::config::load(&dir.join(name)).unwrap();
        c.connections.iter().map(|c| ConnStatus::from_config(c)).collect()
    }

    #[test]
    fn an_ike_connection_lists_as_swanctl_does() {
        let conns = example("site-to-site-psk.toml");
        let text = conns_text(&conns);
        println!("{text}");
        for want in [
            "site: IKEv2, 192.0.2.1...192.0.2.2 (ESP-in-UDP to port 4500)",
            "  rekey 4h00m, dpd 30s",
            "  proposals: IKE:AES_GCM_16_256/PRF_HMAC_SHA2_256/CURVE_25519, IKE:AES_CBC_128/HMAC_SHA2_256_128/PRF_HMAC_SHA2_256/ECP_256",
            "  local:  @west.example (psk)",
            "  remote: @east.example (psk)",
            "  lan: negotiated, start_action start, rekey 1h00m, per_cpu_sas on-demand",
            "    esp:    ESP:AES_GCM_16_256/NO_EXT_SEQ, ESP:AES_GCM_16_128/NO_EXT_SEQ, ESP:CHACHA20_POLY1305/NO_EXT_SEQ",
            "    local:  10.1.0.0/16 fd00:1::/64",
            "    remote: 10.2.0.0/16 fd00:2::/64",
        ] {
            assert!(text.contains(want), "{want:?} not in:\n{text}");
        }
        // The JSON form carries the same facts.
        let json = serde_json::to_value(&conns).unwrap();
        assert_eq!(json[0]["ike"]["proposals"][1], "IKE:AES_CBC_128/HMAC_SHA2_256_128/PRF_HMAC_SHA2_256/ECP_256");
        assert_eq!(json[0]["children"][0]["start_action"], "start");
        assert_eq!(json[0]["children"][0]["rekey_time_s"], 3600);
        assert_eq!(json[0]["children"][0]["remote_ts"][1], "fd00:2::/64");
        assert_eq!(json[0]["ike"]["local_id"], "@west.example");
        assert_eq!(json[0]["ike"]["rekey_time_s"], 4 * 3600, "swanctl's default");
    }

    #[test]
    fn a_static_connection_lists_its_pairs() {
        let text = conns_text(&example("static-west.toml"));
        for want in [": static keys, ", "static, 3 SA pairs, per_cpu_sas eager", "esp:    aes256gcm16 (NO_EXT_SEQ)"] {
            assert!(text.contains(want), "{want:?} not in:\n{text}");
        }
        assert!(!text.contains("proposals:"), "{text}");
        assert_eq!(conns_text(&[]), "no connections\n");
    }
}
