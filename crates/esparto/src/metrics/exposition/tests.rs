//! The exposition of a hand-made status: the figures as they are, summed
//! where the doc says, zero drops left out, names by the conventions.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use super::*;
use crate::metrics::SaRow;
use crate::status::{DeviceStatus, IkeEvents, IoStatus, LoopGapsStatus, Status, WorkerStatus};
use esparto_esp::DropReason;

fn map(kv: &[(&str, u64)]) -> BTreeMap<String, u64> {
    kv.iter().map(|(k, v)| ((*k).to_string(), *v)).collect()
}

fn sa(spi: u32, direction: Direction, packets: u64, drops: &[(DropReason, u64)]) -> SaRow {
    let mut d = Drops::default();
    for (r, n) in drops {
        for _ in 0..*n {
            d.count(*r);
        }
    }
    SaRow {
        connection: "site".into(),
        child: "lan".into(),
        direction,
        spi,
        packets,
        bytes: packets * 100,
        drops: d,
    }
}

/// The fallback SA, sent on by both workers; the inbound SA on worker 1.
fn rows() -> Vec<SaRow> {
    vec![
        sa(0xc000_0201, Direction::Outbound, 120, &[]),
        sa(0xc000_0201, Direction::Outbound, 10, &[]),
        sa(0xc000_0101, Direction::Inbound, 7, &[(DropReason::Replay, 2)]),
    ]
}

fn status(ike: bool) -> Status {
    let worker = |k: u16, tx: u64, rx: u64, drops: &[(&str, u64)]| WorkerStatus {
        worker: k,
        cpu: Some(usize::from(k)),
        tx_packets: tx,
        rx_packets: rx,
        tx_bytes: tx * 100,
        rx_bytes: rx * 100,
        drops: map(drops),
        io: IoStatus {
            tun_reads: 40 + u64::from(k),
            udp_send_calls: 8,
            ..IoStatus::default()
        },
        keepalives: 2,
        events_dropped: 0,
        loop_gaps: LoopGapsStatus {
            bounds_ms: vec![0.1, 1.0, 10.0, 50.0, 100.0, 200.0, 500.0, 1000.0],
            counts: vec![100, 3, 0, 0, 0, 0, 1, 0, 0],
            sum_ms: 314.5,
            max_ms: 312.5,
            over_200ms: 1,
        },
        cpu_wait_ms: Some(250.0 * f64::from(k)),
    };
    let mut s = Status {
        version: "9.9.9".into(),
        pid: 42,
        uptime_s: 65.5,
        tun: "esparto0".into(),
        steering: "flow table".into(),
        workers: vec![
            worker(0, 120, 0, &[]),
            worker(1, 10, 7, &[("replay", 2), ("send_buffer_full", 1)]),
        ],
        drops: map(&[("replay", 2), ("send_buffer_full", 1), ("no_sa", 0), ("tun_queue_full", 5)]),
        devices: vec![DeviceStatus { name: "esparto0".into(), to_workers: 135, queue_full: 5, from_workers: 7, input_dropped: 0 }],
        ..Status::default()
    };
    if ike {
        s.ike = map(&[
            ("datagrams", 5),
            ("malformed", 0),
            ("unknown_spi", 3),
            ("ike_sas", 1),
            ("cookies_sent", 0),
            ("later_counter", 4),
        ]);
        s.ike_events = IkeEvents {
            ike_sa_states: map(&[
                ("connecting", 0),
                ("authenticating", 0),
                ("established", 1),
                ("failed", 0),
            ]),
            ike_sa_setups: 1,
            ike_sa_rekeys: 2,
            ike_sa_rekeys_initiated: 1,
            ike_messages: map(&[("ike-auth-out-req", 1), ("info-in-resp", 6)]),
            child_sa_setups: 1,
            child_sa_rekeys: 3,
            child_sa_failures: map(&[("ts_unacceptable", 2)]),
            ..IkeEvents::default()
        };
    }
    s
}

fn text(ike: bool, openmetrics: bool) -> String {
    let scrape = Scrape {
        status: status(ike),
        sas: rows(),
        gather: Duration::from_millis(3),
    };
    render(scrape, &Facts::read(SystemTime::now()), openmetrics).unwrap()
}

#[test]
fn figures_are_the_status_summed_over_workers() {
    let t = text(true, true);
    for line in [
        "esparto_build_info{version=\"9.9.9\"} 1",
        "esparto_uptime_seconds 65.5",
        "esparto_metrics_gather_seconds 0.003",
        "esparto_workers 2",
        "esparto_worker_cpu{worker=\"1\"} 1",
        "esparto_worker_packets_total{worker=\"0\",direction=\"out\"} 120",
        "esparto_worker_packets_total{worker=\"1\",direction=\"in\"} 7",
        "esparto_worker_bytes_total{worker=\"1\",direction=\"out\"} 1000",
        "esparto_worker_drops_total{worker=\"1\",reason=\"replay\"} 2",
        "esparto_worker_drops_total{worker=\"1\",reason=\"send_buffer_full\"} 1",
        "esparto_worker_tun_reads_total{worker=\"1\"} 41",
        "esparto_worker_udp_send_calls_total{worker=\"0\"} 8",
        "esparto_worker_keepalives_total{worker=\"0\"} 2",
        "esparto_drops_total{reason=\"replay\"} 2",
        "esparto_drops_total{reason=\"tun_queue_full\"} 5",
        "esparto_device_packets_total{device=\"esparto0\",direction=\"to_workers\"} 135",
        "esparto_device_packets_total{device=\"esparto0\",direction=\"from_workers\"} 7",
        "esparto_device_drops_total{device=\"esparto0\",reason=\"tun_queue_full\"} 5",
        "esparto_worker_cpu_wait_seconds_total{worker=\"1\"} 0.25",
        "# TYPE esparto_worker_loop_gap_seconds histogram",
        "esparto_worker_loop_gap_seconds_bucket{le=\"0.0001\",worker=\"0\"} 100",
        "esparto_worker_loop_gap_seconds_bucket{le=\"0.2\",worker=\"1\"} 103",
        "esparto_worker_loop_gap_seconds_bucket{le=\"1.0\",worker=\"1\"} 104",
        "esparto_worker_loop_gap_seconds_bucket{le=\"0.5\",worker=\"1\"} 104",
        "esparto_worker_loop_gap_seconds_bucket{le=\"+Inf\",worker=\"1\"} 104",
        "esparto_worker_loop_gap_seconds_count{worker=\"1\"} 104",
        "esparto_worker_loop_gap_seconds_sum{worker=\"1\"} 0.3145",
        "esparto_sas{direction=\"in\"} 1",
        "esparto_sas{direction=\"out\"} 1",
        "esparto_child_sa_packets_total{connection=\"site\",child=\"lan\",direction=\"out\",spi=\"c0000201\"} 130",
        "esparto_child_sa_bytes_total{connection=\"site\",child=\"lan\",direction=\"out\",spi=\"c0000201\"} 13000",
        "esparto_child_sa_packets_total{connection=\"site\",child=\"lan\",direction=\"in\",spi=\"c0000101\"} 7",
        "esparto_child_sa_drops_total{connection=\"site\",child=\"lan\",direction=\"in\",spi=\"c0000101\",reason=\"replay\"} 2",
        "esparto_ike_sas{state=\"established\"} 1",
        "esparto_ike_sas{state=\"connecting\"} 0",
        "esparto_ike_sa_setups_total 1",
        "esparto_ike_sa_rekeys_total 2",
        "esparto_ike_sa_rekeys_initiated_total 1",
        "esparto_ike_messages_total{exchange=\"IKE_AUTH\",direction=\"out\",kind=\"request\"} 1",
        "esparto_ike_messages_total{exchange=\"INFORMATIONAL\",direction=\"in\",kind=\"response\"} 6",
        "esparto_child_sa_setups_total 1",
        "esparto_child_sa_rekeys_total 3",
        "esparto_child_sa_failures_total{reason=\"ts_unacceptable\"} 2",
        "esparto_ike_drops_total{reason=\"unknown_spi\"} 3",
        "esparto_ike_datagrams_total 5",
        "esparto_ike_later_counter_total 4",
        "# TYPE esparto_child_sa_bytes counter",
        "# UNIT esparto_child_sa_bytes bytes",
    ] {
        assert!(t.lines().any(|l| l == line), "no line {line:?} in\n{t}");
    }
    // Zero drops are left out; so is the engine's SA count (it is by state).
    for absent in [
        "reason=\"tun_input_dropped\"",
        "icv_failure",
        "no_sa",
        "reason=\"malformed\"",
        "esparto_ike_ike_sas",
        "esparto_ike_malformed",
    ] {
        assert!(!t.contains(absent), "{absent} in\n{t}");
    }
    assert!(t.ends_with("# EOF\n"));
    let pid_lines = t.lines().filter(|l| l.starts_with("process_")).count();
    assert!(pid_lines >= 5, "process facts missing:\n{t}");
}

#[test]
fn without_ike_there_are_no_ike_metrics() {
    let t = text(false, true);
    assert!(
        !t.contains("esparto_ike_") && !t.contains("esparto_child_sa_setups"),
        "{t}"
    );
    assert!(t.contains("esparto_child_sa_packets_total{"));
}

/// The Prometheus text format: counters named with `_total` in `# TYPE`,
/// an info metric as a gauge, no `# EOF`; and in both formats every
/// family follows the naming conventions.
#[test]
fn both_formats_follow_the_naming_conventions() {
    let t = text(true, false);
    assert!(t.contains("# TYPE esparto_child_sa_packets_total counter\n"), "{t}");
    assert!(
        t.contains("# TYPE esparto_build_info gauge\nesparto_build_info{version=\"9.9.9\"} 1\n"),
        "{t}"
    );
    assert!(!t.contains("# EOF"));
    for openmetrics in [false, true] {
        let t = text(true, openmetrics);
        let mut families = 0;
        for l in t.lines().filter(|l| l.starts_with("# TYPE ")) {
            let mut w = l.split(' ').skip(2);
            let (name, kind) = (w.next().unwrap(), w.next().unwrap());
            assert!(name.starts_with("esparto_") || name.starts_with("process_"), "{l}");
            assert!(
                name.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                "{l}"
            );
            if !openmetrics && kind == "counter" {
                assert!(name.ends_with("_total"), "{l}");
            }
            if name.contains("bytes") || name.contains("seconds") {
                assert!(
                    name.ends_with("_bytes") || name.ends_with("_seconds") || name.ends_with("_total"),
                    "{l}"
                );
            }
            families += 1;
        }
        assert!(families > 40, "{families} families");
        for l in t.lines().filter(|l| !l.starts_with('#')) {
            if let (Some(open), Some(close)) = (l.find('{'), l.rfind('}')) {
                for pair in l[open + 1..close].split("\",").filter(|p| !p.is_empty()) {
                    let key = pair.split('=').next().unwrap();
                    assert!(
                        key.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                        "label {key:?} in {l}"
                    );
                }
            }
        }
    }
}

/// The example dashboard asks only for metrics that exist.
#[test]
fn the_example_dashboard_uses_exported_metrics() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/grafana-dashboard.json");
    let dashboard = std::fs::read_to_string(path).unwrap();
    let _: serde_json::Value = serde_json::from_str(&dashboard).unwrap();
    let t = text(true, false);
    let mut names: Vec<&str> = dashboard
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("esparto_") || w.starts_with("process_"))
        .collect();
    names.sort_unstable();
    names.dedup();
    assert!(names.len() > 20, "{names:?}");
    for name in names {
        assert!(
            t.contains(&format!("# TYPE {name} ")),
            "{name}: used by the dashboard, not exported"
        );
    }
}
