//! Interoperability with strongSwan 5.9.8 (Debian, `kernel-libipsec`) as
//! the peer (issue 4 item 4): Esparto as initiator and as responder, every
//! IKE proposal × every ESP proposal of the matrix; after each, the
//! hosts ping both ways through the tunnel, and `esparto down` deletes the
//! SAs on both sides.
//!
//! One charon (east) serves the whole matrix, reloaded with each case's
//! proposals; each case starts a fresh Esparto daemon (west). Needs root,
//! iproute2 and strongSwan: SKIP otherwise (`make test` installs them).

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use esparto::status::IkeSaStatus;
use esparto::testbed::esparto::{EspartoConfig, EspartoGateway, Keying};
use esparto::testbed::strongswan::{Charon, SwanConfig};
use esparto::testbed::topology::{Net, Node, Topology};
use esparto::testbed::{Family, missing, traffic};

const PSK: &str = "interop test key, namespaces only";
const IKE: [&str; 3] = ["aes256gcm16-prfsha256-x25519", "aes128-sha256-ecp256", "aes256-sha256-modp2048"];
const ESP: [&str; 4] = ["aes256gcm16", "aes128gcm16", "aes128-sha256", "chacha20poly1305"];

fn cli(bin: &Path, ns: &str, gw: &EspartoGateway, args: &[&str]) -> (bool, String) {
    let o = Command::new("ip")
        .args(["netns", "exec", ns])
        .arg(bin)
        .args(args)
        .arg("--control")
        .arg(gw.control_path())
        .output()
        .unwrap();
    (o.status.success(), format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)))
}

fn sas(bin: &Path, ns: &str, gw: &EspartoGateway) -> Vec<IkeSaStatus> {
    let (ok, out) = cli(bin, ns, gw, &["sas", "--json"]);
    assert!(ok, "{out}");
    serde_json::from_str(&out).unwrap()
}

fn wait<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn pings(topo: &Topology, fam: Family) -> bool {
    let there = Topology::addr(Node::HostEast, Net::Lan, fam);
    let back = Topology::addr(Node::HostWest, Net::Lan, fam);
    let a = traffic::ping(topo.ns(Node::HostWest), there, 2, Duration::from_millis(100)).unwrap();
    let b = traffic::ping(topo.ns(Node::HostEast), back, 2, Duration::from_millis(100)).unwrap();
    a.all_answered() && b.all_answered()
}

#[test]
fn strongswan_matrix_both_roles() {
    let m = missing(true);
    if !m.is_empty() {
        eprintln!("SKIP interop_strongswan: missing {}", m.join(", "));
        return;
    }
    let bin = Path::new(env!("CARGO_BIN_EXE_esparto"));
    let topo = Topology::new().unwrap();
    let wns = topo.ns(Node::GwWest).name().to_string();
    let swan_cfg = |ike: &str, esp: &str, initiator: bool| {
        let mut c = SwanConfig::site(Node::GwEast, PSK, ike, esp).unwrap();
        c.initiator = initiator;
        c
    };
    let mut charon = Charon::start(topo.ns(Node::GwEast), swan_cfg(IKE[0], ESP[0], false)).unwrap();
    let mut failures = Vec::new();
    for esparto_initiates in [true, false] {
        for ike in IKE {
            for esp in ESP {
                let case = format!(
                    "Esparto {} / IKE {ike} / ESP {esp}",
                    if esparto_initiates { "initiator" } else { "responder" }
                );
                charon.reload(swan_cfg(ike, esp, !esparto_initiates)).unwrap();
                let mut cfg = EspartoConfig::site(
                    Node::GwWest,
                    Keying::Ike {
                        proposal: ike.into(),
                        local_id: "@west".into(),
                        remote_id: "@east".into(),
                        psk: PSK.into(),
                        initiator: esparto_initiates,
                    },
                )
                .unwrap();
                cfg.esp_proposal = esp.into();
                cfg.workers = Some(2);
                let gw = EspartoGateway::start(topo.ns(Node::GwWest), bin, &cfg).unwrap();
                if !esparto_initiates {
                    if let Err(e) = charon.initiate(Duration::from_secs(10)) {
                        failures.push(format!("{case}: strongSwan could not initiate: {e:#}"));
                        gw.dir().keep();
                        drop(gw);
                        continue;
                    }
                }
                let established = wait(&case, Duration::from_secs(10), || {
                    let s = sas(bin, &wns, &gw);
                    s.into_iter().find(|s| s.state == "established" && !s.children.is_empty())
                });
                assert_eq!(established.children[0].suite, esp, "{case}: negotiated suite");
                charon.wait_child_installed(Duration::from_secs(5)).unwrap();
                let v4 = pings(&topo, Family::V4);
                // IPv6 inner traffic once per role is enough to show the mix works.
                let v6 = ike != IKE[0] || esp != ESP[0] || pings(&topo, Family::V6);
                if !(v4 && v6) {
                    failures.push(format!("{case}: ping failed (v4 {v4}, v6 {v6})"));
                    gw.dir().keep();
                    charon.dir().keep();
                }
                // `esparto down` deletes the SAs on both sides.
                let (ok, out) = cli(bin, &wns, &gw, &["down", "site"]);
                if !ok {
                    failures.push(format!("{case}: esparto down failed: {out}"));
                }
                wait(&format!("{case}: strongSwan to drop its SAs"), Duration::from_secs(5), || {
                    (!charon.has_ike_sa().unwrap_or(true)).then_some(())
                });
                gw.stop().unwrap();
            }
        }
    }
    charon.stop().unwrap();
    assert!(failures.is_empty(), "interop failures:\n{}", failures.join("\n"));
}
