#![allow(clippy::unwrap_used)]

use super::*;
use crate::daemon::watch::LogLine;
use crate::status::{ChildConnStatus, IkeConnStatus, NatStatus, Status};

/// Answers from fixed data and records what it was asked.
#[derive(Default)]
struct Fake {
    sas: Vec<IkeSaStatus>,
    conns: Vec<ConnStatus>,
    asked: Vec<Request>,
    log: Vec<LogLine>,
    certs: Vec<crate::control::CertInfo>,
    authorities: Vec<(String, Vec<u8>)>,
}

impl Backend for Fake {
    fn request(&mut self, req: &Request) -> Response {
        self.asked.push(req.clone());
        match req {
            Request::Sas => Response::Sas(self.sas.clone()),
            Request::ListConns => Response::Conns(self.conns.clone()),
            Request::Status => Response::Status(Box::new(Status {
                uptime_s: 4000.0,
                ike_sas: self.sas.clone(),
                ..Status::default()
            })),
            Request::Down { name } if self.conns.iter().any(|c| &c.name == name) => {
                Response::Done(format!("deleting 1 IKE SA(s) of {name}"))
            }
            Request::DownChild { name, in_spi } if name == "site" => Response::Done(format!("deleting Child SA {in_spi:08x} of {name}")),
            Request::Rekey { name, ike: false } => Response::Done(format!("rekeying 3 Child SA(s) of {name}")),
            Request::Rekey { name, ike: true } => Response::Done(format!("rekeying 1 IKE SA(s) of {name}")),
            Request::Up { name, .. } if self.conns.iter().any(|c| &c.name == name) => Response::Done("initiating".into()),
            Request::Certs => Response::Certs(self.certs.clone()),
            Request::Install { name, child } => Response::Done(format!("{name}/{child}: trap policy installed")),
            Request::Uninstall { name, child } => Response::Error(format!("{name}/{child}: no trap policy is installed")),
            Request::Loaded => Response::Loaded(crate::control::Loaded {
                conns: vec!["vici-site".into()],
                authorities: self.authorities.clone(),
                ..Default::default()
            }),
            Request::LoadCert { .. } | Request::LoadKey { .. } | Request::LoadAuthority { .. } => Response::Reload(Box::default()),
            Request::LoadConn { name, .. } if name == "good" => Response::Reload(Box::default()),
            Request::LoadConn { name, .. } => Response::Error(format!("load-conn '{name}': invalid configuration")),
            r => Response::Error(format!("{r:?}: no")),
        }
    }

    fn up(&mut self, name: &str, _timeout: Duration, each: &mut dyn FnMut(StreamItem)) -> Response {
        self.asked.push(Request::Up { name: name.into(), watch: true, force: false });
        for l in &self.log {
            each(StreamItem::Log { log: l.clone() });
        }
        Response::Done(format!("{name}: established"))
    }
}

fn fake() -> Fake {
    let child = |spi: &str, role: &str, worker: Option<u16>| ChildSaStatus {
        child: "lan".into(),
        in_spi: spi.into(),
        out_spi: "c1c2c3c4".into(),
        suite: "aes256gcm16".into(),
        role: role.into(),
        out_worker: worker,
        local_ts: vec!["10.1.0.0/24".into()],
        remote_ts: vec!["10.2.0.0/24".into()],
        age_s: 12.5,
        rekey_in_s: Some(3000.2),
        expire_in_s: Some(3300.0),
        in_bytes: 1234,
        in_packets: 10,
        in_idle_s: Some(0.4),
        ..ChildSaStatus::default()
    };
    let sa = IkeSaStatus {
        id: "0123456789abcdef".into(),
        connection: "site".into(),
        state: "established".into(),
        initiator: true,
        local: "192.0.2.1:500".into(),
        remote: "[fd00:ff::2]:4500".into(),
        local_id: "west".into(),
        remote_id: "east".into(),
        age_s: 60.0,
        proposal: "IKE:AES_GCM_16_256/PRF_HMAC_SHA2_256/CURVE_25519/KE1_ML_KEM_768".into(),
        rekey_in_s: Some(10_000.0),
        responder_spi: "fedcba9876543210".into(),
        nat: NatStatus { encap_forced: true, ..NatStatus::default() },
        children: vec![child("c0000001", "fallback", None), child("c0000002", "sub", Some(1))],
        ..IkeSaStatus::default()
    };
    let conn = ConnStatus {
        name: "site".into(),
        local_addrs: vec!["192.0.2.1".into()],
        remote_addrs: vec!["192.0.2.2".into()],
        remote_port: 4500,
        ike: Some(IkeConnStatus { local_id: "west".into(), remote_id: "east".into(), rekey_time_s: Some(14_400), ..IkeConnStatus::default() }),
        children: vec![
            ChildConnStatus { name: "lan".into(), local_ts: vec!["10.1.0.0/24".into()], ..ChildConnStatus::default() },
            ChildConnStatus { name: "dmz".into(), start_action: "trap".into(), trap: true, remote_ts: vec!["10.3.0.0/24".into()], ..ChildConnStatus::default() },
        ],
    };
    Fake { sas: vec![sa], conns: vec![conn], ..Fake::default() }
}

/// Runs `cmd` with `req` (key-value pairs), returning the reply and the
/// events raised.
fn run(f: &mut Fake, ids: &Mutex<Ids>, cmd: &str, req: &[(&str, &str)]) -> (Outcome, Vec<(&'static str, Section)>) {
    let mut b = Builder::new();
    for (k, v) in req {
        b.kv(k, v);
    }
    let req = Section::parse(&b.finish().unwrap()).unwrap();
    let mut events = Vec::new();
    let mut emit = |name: &'static str, m: &[u8]| {
        events.push((name, Section::parse(m).unwrap()));
        true
    };
    let mut cx = Cx { backend: f, ids };
    let out = handle(cmd, &req, &mut cx, &mut emit);
    (out, events)
}

fn reply(o: Outcome) -> Section {
    match o {
        Outcome::Reply(m) => Section::parse(&m).unwrap(),
        Outcome::Unknown => panic!("CMD_UNKNOWN"),
    }
}

#[test]
fn list_sas_has_the_keys_swanctl_prints() {
    let (mut f, ids) = (fake(), Mutex::new(Ids::default()));
    let (out, ev) = run(&mut f, &ids, "list-sas", &[]);
    assert_eq!(reply(out), Section::default(), "list-sas completes with an empty message");
    assert_eq!(ev.len(), 1);
    let (name, m) = &ev[0];
    assert_eq!(*name, "list-sa");
    let ike = m.section("site").unwrap();
    for (k, v) in [
        ("uniqueid", "1"),
        ("version", "2"),
        ("state", "ESTABLISHED"),
        ("local-host", "192.0.2.1"),
        ("local-port", "500"),
        ("remote-host", "fd00:ff::2"),
        ("remote-port", "4500"),
        ("initiator", "yes"),
        ("initiator-spi", "0123456789abcdef"),
        ("responder-spi", "fedcba9876543210"),
        ("nat-fake", "yes"),
        ("nat-any", "yes"),
        ("encr-alg", "AES_GCM_16"),
        ("encr-keysize", "256"),
        ("prf-alg", "PRF_HMAC_SHA2_256"),
        ("dh-group", "CURVE_25519"),
        ("ake1", "ML_KEM_768"),
        ("established", "60"),
        ("rekey-time", "10000"),
    ] {
        assert_eq!(ike.str(k), Some(v), "{k}");
    }
    assert_eq!(ike.get("integ-alg"), None, "AEAD: no integrity algorithm");
    let children = ike.section("child-sas").unwrap();
    assert_eq!(children.entries.len(), 2, "the fallback and the sub-SA are separate children");
    let fallback = children.section("lan-2").unwrap();
    let sub = children.section("lan-3").unwrap();
    for (k, v) in [
        ("name", "lan"),
        ("uniqueid", "2"),
        ("reqid", "1"),
        ("state", "INSTALLED"),
        ("mode", "TUNNEL"),
        ("protocol", "ESP"),
        ("encap", "yes"),
        ("spi-in", "c0000001"),
        ("spi-out", "c1c2c3c4"),
        ("per-cpu-sas", "yes"),
        ("encr-alg", "AES_GCM_16"),
        ("encr-keysize", "256"),
        ("bytes-in", "1234"),
        ("packets-in", "10"),
        ("use-in", "0"),
        ("bytes-out", "0"),
        ("rekey-time", "3000"),
        ("life-time", "3300"),
        ("install-time", "12"),
    ] {
        assert_eq!(fallback.str(k), Some(v), "{k}");
    }
    assert_eq!(fallback.get("cpu"), None, "the fallback SA has no CPU");
    assert_eq!(fallback.get("use-out"), None, "nothing sent yet");
    assert_eq!(fallback.list("local-ts").unwrap(), &[b"10.1.0.0/24".to_vec()]);
    assert_eq!((sub.str("cpu"), sub.str("reqid")), (Some("1"), Some("1")));

    // The numbers stay; filters select by them.
    let (_, ev) = run(&mut f, &ids, "list-sas", &[("child-id", "3")]);
    let c = ev[0].1.section("site").unwrap().section("child-sas").unwrap();
    assert_eq!(c.entries.len(), 1);
    assert_eq!(c.section("lan-3").unwrap().str("spi-in"), Some("c0000002"));
    assert!(run(&mut f, &ids, "list-sas", &[("ike-id", "9")]).1.is_empty());
    assert!(run(&mut f, &ids, "list-sas", &[("ike", "other")]).1.is_empty());
    assert_eq!(run(&mut f, &ids, "list-sas", &[("ike", "site")]).1.len(), 1);
    let bad = reply(run(&mut f, &ids, "list-sas", &[("ike-id", "x")]).0);
    assert_eq!(bad.str("errmsg"), Some("ike-id = 'x' is not a number"));
}

#[test]
fn sas_that_are_gone_lose_their_numbers() {
    let (mut f, ids) = (fake(), Mutex::new(Ids::default()));
    run(&mut f, &ids, "list-sas", &[]);
    f.sas[0].id = "1111111111111111".into();
    f.sas[0].children.truncate(1);
    f.sas[0].children[0].in_spi = "c0000009".into();
    let (_, ev) = run(&mut f, &ids, "list-sas", &[]);
    let ike = ev[0].1.section("site").unwrap();
    assert_eq!(ike.str("uniqueid"), Some("4"), "a new SA, a new number");
    let l = ids.lock().unwrap();
    assert_eq!((l.ike.len(), l.child.len()), (1, 1), "{l:?}");
}

#[test]
fn list_conns_streams_each_connection() {
    let (mut f, ids) = (fake(), Mutex::new(Ids::default()));
    let (out, ev) = run(&mut f, &ids, "list-conns", &[]);
    assert_eq!(reply(out), Section::default());
    let c = ev[0].1.section("site").unwrap();
    assert_eq!(ev[0].0, "list-conn");
    assert_eq!(c.list("remote_addrs").unwrap(), &[b"192.0.2.2".to_vec()]);
    assert_eq!((c.str("version"), c.str("rekey_time")), (Some("IKEv2"), Some("14400")));
    assert_eq!(c.str("unique"), Some("UNIQUE_NO"), "swanctl's default, in charon's name");
    assert_eq!(c.section("local-1").unwrap().str("id"), Some("west"));
    assert_eq!(c.section("children").unwrap().section("lan").unwrap().str("mode"), Some("TUNNEL"));
    assert!(run(&mut f, &ids, "list-conns", &[("ike", "nope")]).1.is_empty());
}

#[test]
fn trap_children_are_the_policies() {
    let (mut f, ids) = (fake(), Mutex::new(Ids::default()));
    let (_, ev) = run(&mut f, &ids, "list-policies", &[("trap", "yes"), ("drop", "yes"), ("pass", "yes")]);
    assert_eq!(ev.len(), 1, "only the trap child");
    let p = ev[0].1.section("site/dmz").unwrap();
    assert_eq!((p.str("child"), p.str("ike"), p.str("mode"), p.str("reqid")), (Some("dmz"), Some("site"), Some("TUNNEL"), Some("1")));
    assert_eq!(p.list("remote-ts").unwrap(), &[b"10.3.0.0/24".to_vec()]);
    assert!(run(&mut f, &ids, "list-policies", &[("drop", "yes")]).1.is_empty(), "no drop policies");
    assert!(run(&mut f, &ids, "list-policies", &[("trap", "yes"), ("child", "lan")]).1.is_empty());
    // install / uninstall name the child's connection.
    assert_eq!(reply(run(&mut f, &ids, "install", &[("child", "lan")]).0).str("success"), Some("yes"));
    assert_eq!(f.asked.last(), Some(&Request::Install { name: "site".into(), child: "lan".into() }));
    let r = reply(run(&mut f, &ids, "uninstall", &[("child", "lan"), ("ike", "site")]).0);
    assert_eq!((r.str("success"), r.str("errmsg")), (Some("no"), Some("site/lan: no trap policy is installed")));
}

#[test]
fn initiate_streams_the_log_at_the_level_asked() {
    let (mut f, ids) = (fake(), Mutex::new(Ids::default()));
    let line = |level: &str, m: &str| LogLine { level: level.into(), target: "esparto".into(), message: m.into() };
    f.log = vec![line("INFO", "initiating IKE_SA"), line("DEBUG", "sending packet"), line("WARN", "retransmit")];
    let (out, ev) = run(&mut f, &ids, "initiate", &[("child", "lan"), ("timeout", "5000"), ("loglevel", "1")]);
    assert_eq!(reply(out).str("success"), Some("yes"));
    let msgs: Vec<_> = ev.iter().map(|(n, m)| (*n, m.str("msg").unwrap().to_string())).collect();
    assert_eq!(msgs, [("control-log", "initiating IKE_SA".into()), ("control-log", "retransmit".into())]);
    assert_eq!(ev[0].1.str("ikesa-name"), Some("site"));
    assert_eq!(f.asked.last(), Some(&Request::Up { name: "site".into(), watch: true, force: false }), "the child's connection");
    let (_, ev) = run(&mut f, &ids, "initiate", &[("ike", "site"), ("loglevel", "2")]);
    assert_eq!(ev.len(), 3);
    let (out, ev) = run(&mut f, &ids, "initiate", &[("ike", "site"), ("timeout", "-1")]);
    assert_eq!((reply(out).str("success"), ev.len()), (Some("yes"), 0));
    assert_eq!(f.asked.last(), Some(&Request::Up { name: "site".into(), watch: false, force: false }));
    let r = reply(run(&mut f, &ids, "initiate", &[("child", "nope")]).0);
    assert_eq!((r.str("success"), r.str("errmsg")), (Some("no"), Some("CHILD_SA config 'nope' not found")));
}

#[test]
fn terminate_and_rekey_find_the_connection() {
    let (mut f, ids) = (fake(), Mutex::new(Ids::default()));
    run(&mut f, &ids, "list-sas", &[]);
    for key in ["ike-id", "ike_id"] {
        let r = reply(run(&mut f, &ids, "terminate", &[(key, "1")]).0);
        assert_eq!((r.str("success"), r.str("matches"), r.str("terminated")), (Some("yes"), Some("1"), Some("1")), "{key}");
        assert_eq!(f.asked.last(), Some(&Request::Down { name: "site".into() }));
    }
    let r = reply(run(&mut f, &ids, "terminate", &[("ike-id", "77")]).0);
    assert_eq!(r.str("errmsg"), Some("no IKE_SA with unique id 77"));
    // Child SAs: every one of the child, or the one numbered so; the IKE
    // SA stays.
    let r = reply(run(&mut f, &ids, "terminate", &[("child", "lan")]).0);
    assert_eq!((r.str("success"), r.str("matches"), r.str("terminated")), (Some("yes"), Some("2"), Some("2")));
    let downs = |f: &Fake| f.asked.iter().filter_map(|r| if let Request::DownChild { in_spi, .. } = r { Some(*in_spi) } else { None }).collect::<Vec<_>>();
    assert_eq!(downs(&f), [0xc000_0001, 0xc000_0002]);
    let r = reply(run(&mut f, &ids, "terminate", &[("child-id", "3")]).0);
    assert_eq!((r.str("success"), r.str("matches")), (Some("yes"), Some("1")));
    assert_eq!(f.asked.last(), Some(&Request::DownChild { name: "site".into(), in_spi: 0xc000_0002 }));
    let r = reply(run(&mut f, &ids, "terminate", &[("child-id", "99")]).0);
    assert_eq!(r.str("errmsg"), Some("no CHILD_SA with unique id 99"));
    let r = reply(run(&mut f, &ids, "terminate", &[("child", "lan"), ("ike", "other")]).0);
    assert_eq!(r.str("errmsg"), Some("no CHILD_SA named 'lan'"));

    let r = reply(run(&mut f, &ids, "rekey", &[("child", "lan")]).0);
    assert_eq!((r.str("success"), r.str("matches")), (Some("yes"), Some("3")));
    assert_eq!(f.asked.last(), Some(&Request::Rekey { name: "site".into(), ike: false }));
    reply(run(&mut f, &ids, "rekey", &[("ike", "site")]).0);
    assert_eq!(f.asked.last(), Some(&Request::Rekey { name: "site".into(), ike: true }));
    reply(run(&mut f, &ids, "rekey", &[("child-id", "3")]).0);
    assert_eq!(f.asked.last(), Some(&Request::Rekey { name: "site".into(), ike: false }));
    let r = reply(run(&mut f, &ids, "rekey", &[("ike", "site"), ("reauth", "yes")]).0);
    assert_eq!(r.str("success"), Some("no"));
}

#[test]
fn what_esparto_does_not_do_says_so() {
    let (mut f, ids) = (fake(), Mutex::new(Ids::default()));
    for (cmd, _) in UNSUPPORTED {
        let r = reply(run(&mut f, &ids, cmd, &[]).0);
        assert_eq!(r.str("success"), Some("no"), "{cmd}");
        assert!(r.str("errmsg").unwrap().starts_with(&format!("{cmd}: ")), "{cmd}");
    }
    assert_eq!(run(&mut f, &ids, "reboot", &[]).0, Outcome::Unknown);
    let v = reply(run(&mut f, &ids, "version", &[]).0);
    assert_eq!((v.str("daemon"), v.str("version")), (Some("esparto"), Some(env!("CARGO_PKG_VERSION"))));
    let st = reply(run(&mut f, &ids, "stats", &[]).0);
    assert_eq!(st.section("uptime").unwrap().str("running"), Some("66 minutes"));
    assert_eq!(st.section("ikesas").unwrap().str("total"), Some("1"));
    for (cmd, list) in [("get-keys", "keys"), ("get-shared", "keys")] {
        assert_eq!(reply(run(&mut f, &ids, cmd, &[]).0).list(list).unwrap().len(), 0, "{cmd}");
    }
    assert_eq!(reply(run(&mut f, &ids, "get-conns", &[]).0).list("conns").unwrap(), [b"vici-site".to_vec()]);
    assert_eq!(reply(run(&mut f, &ids, "get-pools", &[]).0), Section::default());
}

#[test]
fn times_read_as_strongswan_prints_them() {
    assert_eq!(relative(1), "1 second");
    assert_eq!(relative(120), "120 seconds");
    assert_eq!(relative(121), "2 minutes");
    assert_eq!(relative(3 * 86_400), "3 days");
    let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_283_426);
    assert_eq!(absolute(t), "Dec 03 07:37:06 2026");
    assert_eq!(absolute(SystemTime::UNIX_EPOCH + Duration::from_secs(951_782_400)), "Feb 29 00:00:00 2000");
}

#[test]
fn proposals_split_as_list_sa_has_them() {
    let a = proposal_algs("IKE:AES_CBC_128/HMAC_SHA2_256_128/PRF_HMAC_SHA2_256/MODP_2048");
    assert_eq!(a.encr, Some(("AES_CBC".into(), Some("128".into()))));
    assert_eq!((a.integ.as_deref(), a.ke.as_slice()), (Some("HMAC_SHA2_256_128"), &["MODP_2048".to_string()][..]));
    let a = proposal_algs("IKE:CHACHA20_POLY1305/PRF_HMAC_SHA2_512/CURVE_25519");
    assert_eq!(a.encr, Some(("CHACHA20_POLY1305".into(), None)));
    assert_eq!(esp_algs("aes128-sha256"), ("AES_CBC".into(), Some("128"), Some("HMAC_SHA2_256_128")));
    assert_eq!(proposal_algs(""), Algs::default());
}

#[test]
fn load_conn_sends_the_connection_and_answers_with_the_daemons_verdict() {
    let (mut f, ids) = (fake(), Mutex::new(Ids::default()));
    let load = |f: &mut Fake, name: &str| {
        let mut b = Builder::new();
        b.begin(name).list("remote_addrs", ["192.0.2.2"]).begin("local-1").kv("auth", "psk").end().end();
        let req = Section::parse(&b.finish().unwrap()).unwrap();
        let mut emit = |_: &'static str, _: &[u8]| true;
        reply(handle("load-conn", &req, &mut Cx { backend: f, ids: &ids }, &mut emit))
    };
    assert_eq!(load(&mut f, "good").str("success"), Some("yes"));
    let Some(Request::LoadConn { name, conn }) = f.asked.last() else { panic!("{:?}", f.asked) };
    assert_eq!(name, "good");
    let crate::config::LayerValue::Section(keys) = conn else { panic!() };
    assert_eq!(keys.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(), ["remote_addrs", "local"]);
    let bad = load(&mut f, "bad");
    assert_eq!(bad.str("success"), Some("no"));
    assert_eq!(bad.str("errmsg"), Some("load-conn 'bad': invalid configuration"));
}

/// A self-signed certificate for `cn` (DER), as CA or end entity.
fn cert(cn: &str, ca: bool) -> Vec<u8> {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut p = rcgen::CertificateParams::new(vec![cn.to_string()]).unwrap();
    p.distinguished_name.push(rcgen::DnType::CommonName, cn);
    if ca {
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    }
    p.self_signed(&key).unwrap().der().to_vec()
}

#[test]
fn list_certs_filters_by_type_flag_and_subject() {
    let (own, root) = (cert("west.example", false), cert("root", true));
    let mut f = Fake {
        certs: vec![
            crate::control::CertInfo { der: own.clone(), ca: false, private_key: true },
            crate::control::CertInfo { der: root.clone(), ca: true, private_key: false },
        ],
        ..fake()
    };
    let ids = Mutex::new(Ids::default());
    let datas = |ev: &[(&'static str, Section)]| -> Vec<Vec<u8>> {
        ev.iter()
            .map(|(name, m)| {
                assert_eq!(*name, "list-cert");
                assert_eq!(m.str("type"), Some("X509"));
                m.get("data").and_then(|v| if let esparto_wire::vici::Value::Str(b) = v { Some(b.clone()) } else { None }).unwrap()
            })
            .collect()
    };
    let (out, ev) = run(&mut f, &ids, "list-certs", &[]);
    assert_eq!(reply(out), Section::default());
    assert_eq!(datas(&ev), [own.clone(), root.clone()]);
    assert_eq!(ev[0].1.str("has_privkey"), Some("yes"));
    assert_eq!((ev[0].1.str("flag"), ev[1].1.str("flag")), (Some("NONE"), Some("CA")));
    assert_eq!(ev[1].1.str("has_privkey"), None);
    // Names in any case, as swanctl passes what it was given.
    assert_eq!(datas(&run(&mut f, &ids, "list-certs", &[("flag", "ca")]).1), [root]);
    assert_eq!(datas(&run(&mut f, &ids, "list-certs", &[("type", "x509"), ("flag", "none")]).1), std::slice::from_ref(&own));
    assert_eq!(datas(&run(&mut f, &ids, "list-certs", &[("subject", "west.example")]).1), [own]);
    assert!(run(&mut f, &ids, "list-certs", &[("type", "pubkey")]).1.is_empty(), "no other kinds");
    let r = reply(run(&mut f, &ids, "list-certs", &[("flag", "sometimes")]).0);
    assert_eq!((r.str("success"), r.str("errmsg")), (Some("no"), Some("invalid certificate flag 'SOMETIMES'")));
}

/// Sends `cmd` with the message `b` built: the reply and the events.
fn run_msg(f: &mut Fake, ids: &Mutex<Ids>, cmd: &str, b: Builder) -> (Section, Vec<(&'static str, Section)>) {
    let req = Section::parse(&b.finish().unwrap()).unwrap();
    let mut events = Vec::new();
    let mut emit = |name: &'static str, m: &[u8]| {
        events.push((name, Section::parse(m).unwrap()));
        true
    };
    let out = handle(cmd, &req, &mut Cx { backend: f, ids }, &mut emit);
    (reply(out), events)
}

#[test]
fn credentials_reach_the_daemon_as_swanctl_sends_them() {
    use aws_lc_rs::encoding::AsDer;
    let (mut f, ids) = (fake(), Mutex::new(Ids::default()));
    let root = cert("root", true);
    let mut b = Builder::new();
    b.kv("type", "X509").kv("flag", "CA").kv("data", &root);
    assert_eq!(run_msg(&mut f, &ids, "load-cert", b).0.str("success"), Some("yes"));
    assert_eq!(f.asked.last(), Some(&Request::LoadCert { der: root.clone(), ca: true }));
    let mut b = Builder::new();
    b.kv("type", "X509_CRL").kv("data", &root);
    let r = run_msg(&mut f, &ids, "load-cert", b).0;
    assert_eq!(r.str("success"), Some("no"));
    assert!(r.str("errmsg").unwrap().starts_with("load-cert type X509_CRL flag NONE: CRLs over VICI"), "{r:?}");
    let mut b = Builder::new();
    b.kv("type", "X509").kv("data", b"not a certificate");
    assert_eq!(run_msg(&mut f, &ids, "load-cert", b).0.str("success"), Some("no"));

    // An EC key as swanctl sends one it read itself: RFC 5915.
    let p8 = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap().serialize_der();
    let ec = aws_lc_rs::signature::EcdsaKeyPair::from_pkcs8(&aws_lc_rs::signature::ECDSA_P256_SHA256_ASN1_SIGNING, &p8).unwrap();
    let sec1 = ec.private_key().as_der().unwrap();
    let want = esparto_ike::cert::SigningKey::from_pkcs8(&p8, false).unwrap().key_id();
    let mut b = Builder::new();
    b.kv("type", "ecdsa").kv("data", sec1.as_ref());
    let r = run_msg(&mut f, &ids, "load-key", b).0;
    assert_eq!((r.str("success"), r.str("id")), (Some("yes"), Some(want.as_str())));
    let Some(Request::LoadKey { id, pkcs8 }) = f.asked.last() else { panic!("{:?}", f.asked.last()) };
    assert_eq!(id, &want);
    assert_eq!(esparto_ike::cert::SigningKey::from_pkcs8(pkcs8, false).unwrap().key_id(), want, "sent as PKCS#8");
    let mut b = Builder::new();
    b.kv("type", "ed448").kv("data", sec1.as_ref());
    assert!(run_msg(&mut f, &ids, "load-key", b).0.str("errmsg").unwrap().contains("not supported"));

    // Authorities: what cannot be done is refused, naming the key.
    let mut b = Builder::new();
    b.begin("site-ca").kv("cacert", &root).list("crl_uris", ["http://crl.example/ca.crl"]).end();
    let r = run_msg(&mut f, &ids, "load-authority", b).0;
    assert!(r.str("errmsg").unwrap().starts_with("load-authority: 'site-ca'.crl_uris: fetching CRLs"), "{r:?}");
    let mut b = Builder::new();
    b.begin("site-ca").kv("cacert", &root).end();
    assert_eq!(run_msg(&mut f, &ids, "load-authority", b).0.str("success"), Some("yes"));
    let Some(Request::LoadAuthority { name, authority }) = f.asked.last() else { panic!() };
    assert_eq!(name, "site-ca");
    assert_eq!(crate::config::Layer::cacert(authority), Some(root.clone()));
    f.authorities = vec![("site-ca".into(), root)];
    assert_eq!(run_msg(&mut f, &ids, "get-authorities", Builder::new()).0.list("authorities").unwrap(), [b"site-ca".to_vec()]);
    let (r, ev) = run_msg(&mut f, &ids, "list-authorities", Builder::new());
    assert_eq!(r, Section::default());
    assert_eq!(ev.len(), 1);
    assert_eq!((ev[0].0, ev[0].1.section("site-ca").unwrap().str("cacert")), ("list-authority", Some("CN=root")));
}

#[test]
fn the_daemons_events_become_charons() {
    let ids = Mutex::new(Ids::default());
    let sa = fake().sas.remove(0);
    let ev = |kind: &str, up: bool, sa: IkeSaStatus, old: Option<IkeSaStatus>| {
        let item = StreamItem::Event { event: Box::new(control::SaEvent { kind: kind.into(), up, sa, old }) };
        let (name, m) = daemon_event(&item, &ids).unwrap();
        (name, Section::parse(&m).unwrap())
    };
    let (name, m) = ev("ike-updown", true, sa.clone(), None);
    assert_eq!((name, m.str("up")), ("ike-updown", Some("yes")));
    assert_eq!(m.section("site").unwrap().str("state"), Some("ESTABLISHED"));
    assert!(m.section("site").unwrap().section("child-sas").is_none(), "list_ike only, as charon");
    let mut one = sa.clone();
    one.children.truncate(1);
    let (name, m) = ev("child-updown", false, one.clone(), None);
    assert_eq!((name, m.str("up")), ("child-updown", None));
    let children = m.section("site").unwrap().section("child-sas").unwrap();
    assert_eq!(children.entries.len(), 1);
    let mut two = sa.clone();
    two.children.truncate(2);
    let (name, m) = ev("child-rekey", false, two.clone(), None);
    assert_eq!(name, "child-rekey");
    let lan = m.section("site").unwrap().section("child-sas").unwrap().section("lan").unwrap();
    assert_eq!(lan.section("old").unwrap().str("spi-in"), Some(two.children[0].in_spi.as_str()));
    assert_eq!(lan.section("new").unwrap().str("spi-in"), Some(two.children[1].in_spi.as_str()));
    assert!(daemon_event(&StreamItem::Event { event: Box::new(control::SaEvent { kind: "child-rekey".into(), up: false, sa: one, old: None }) }, &ids).is_none(), "a rekey needs both");
    let mut new = sa.clone();
    new.id = "00000000000000ff".into();
    let (name, m) = ev("ike-rekey", false, new, Some(sa));
    assert_eq!(name, "ike-rekey");
    let site = m.section("site").unwrap();
    assert_ne!(site.section("old").unwrap().str("uniqueid"), site.section("new").unwrap().str("uniqueid"));
    let line = LogLine { level: "WARN".into(), target: "esparto::daemon::ike_events".into(), message: "IKE authentication failed".into() };
    let (name, m) = daemon_event(&StreamItem::Log { log: line }, &ids).unwrap();
    let m = Section::parse(&m).unwrap();
    assert_eq!((name, m.str("group"), m.str("level"), m.str("msg")), ("log", Some("IKE"), Some("0"), Some("IKE authentication failed")));
    assert!(daemon_event(&StreamItem::Started { started: "events".into() }, &ids).is_none());
}
