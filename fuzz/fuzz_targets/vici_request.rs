//! Fuzz the VICI request handlers: a packet; a CMD_REQUEST whose message
//! parses runs the command against a daemon that answers from fixed data
//! (one IKE SA with a fallback and a sub-SA, one connection with a trap
//! child, two log lines for an initiate). Every event raised and every
//! reply must be a well-formed message; nothing may panic.
#![no_main]

use std::sync::Mutex;
use std::time::Duration;

use esparto::control::{Request, Response, StreamItem};
use esparto::daemon::watch::LogLine;
use esparto::status::{ChildConnStatus, ChildSaStatus, ConnStatus, IkeConnStatus, IkeSaStatus, Status};
use esparto::vici::commands::{Backend, Cx, Ids, Outcome, handle};
use esparto_wire::vici::{Packet, PacketType, Section};
use libfuzzer_sys::fuzz_target;

struct Fixed {
    sas: Vec<IkeSaStatus>,
    conns: Vec<ConnStatus>,
}

impl Backend for Fixed {
    fn request(&mut self, req: &Request) -> Response {
        match req {
            Request::Sas => Response::Sas(self.sas.clone()),
            Request::ListConns => Response::Conns(self.conns.clone()),
            Request::Status => Response::Status(Box::new(Status { ike_sas: self.sas.clone(), ..Status::default() })),
            Request::Down { name } | Request::Rekey { name, .. } if name == "site" => Response::Done("deleting 1 IKE SA(s) of site".into()),
            r => Response::Error(format!("{r:?}")),
        }
    }

    fn up(&mut self, name: &str, _timeout: Duration, each: &mut dyn FnMut(StreamItem)) -> Response {
        for level in ["INFO", "DEBUG"] {
            each(StreamItem::Log { log: LogLine { level: level.into(), target: "t".into(), message: name.into() } });
        }
        each(StreamItem::Dropped { dropped: 2 });
        Response::Done(name.into())
    }
}

fn fixed() -> Fixed {
    let child = |spi: &str, role: &str| ChildSaStatus {
        child: "lan".into(),
        in_spi: spi.into(),
        out_spi: "c1c2c3c4".into(),
        suite: "aes128-sha256".into(),
        role: role.into(),
        out_worker: Some(1),
        local_ts: vec!["10.1.0.0/24".into()],
        remote_ts: vec!["10.2.0.0/24[udp/53]".into()],
        in_idle_s: Some(1.5),
        ..ChildSaStatus::default()
    };
    Fixed {
        sas: vec![IkeSaStatus {
            id: "0123456789abcdef".into(),
            connection: "site".into(),
            state: "established".into(),
            local: "192.0.2.1:500".into(),
            remote: "[fd00::2]:4500".into(),
            proposal: "IKE:AES_CBC_256/HMAC_SHA2_256_128/PRF_HMAC_SHA2_256/MODP_2048/KE1_ML_KEM_768".into(),
            children: vec![child("c0000001", "fallback"), child("c0000002", "sub")],
            ..IkeSaStatus::default()
        }],
        conns: vec![ConnStatus {
            name: "site".into(),
            ike: Some(IkeConnStatus::default()),
            children: vec![
                ChildConnStatus { name: "lan".into(), ..ChildConnStatus::default() },
                ChildConnStatus { name: "dmz".into(), start_action: "trap".into(), ..ChildConnStatus::default() },
            ],
            ..ConnStatus::default()
        }],
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(p) = Packet::parse(data) else { return };
    if p.kind != PacketType::CmdRequest {
        return;
    }
    let Ok(req) = Section::parse(p.message) else { return };
    let ids = Mutex::new(Ids::default());
    let mut backend = fixed();
    let mut cx = Cx { backend: &mut backend, ids: &ids };
    let mut emit = |_name: &'static str, m: &[u8]| {
        Section::parse(m).expect("an event is a message");
        true
    };
    // Twice: the second run sees the numbers the first handed out.
    for _ in 0..2 {
        if let Outcome::Reply(m) = handle(p.name, &req, &mut cx, &mut emit) {
            Section::parse(&m).expect("a reply is a message");
        }
    }
});
