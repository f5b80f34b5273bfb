//! The control socket: how `esparto status`, `sas`, `up`, `down`,
//! `rekey`, `reload` and `list-conns` talk to a running daemon.
//!
//! A Unix stream socket, mode 0600 (only root — or whoever runs the daemon
//! — may ask), one JSON request per line and one JSON response per line:
//!
//! ```text
//! → {"cmd":"status"}
//! ← {"ok":true,"status":{"version":"0.1.0","pid":1234,…}}
//! → {"cmd":"up","name":"site"}
//! ← {"ok":false,"error":"site: no IKE connections are configured"}
//! ```
//!
//! The server side ([`ControlServer`], in `server`) is for the daemon's control loop and
//! never blocks it: the listener and every client are non-blocking, each
//! client has its own input and output buffer, a request longer than
//! [`MAX_REQUEST`] is answered with an error and the client closed, a
//! client that makes no progress for [`CLIENT_TIMEOUT`] is dropped, a
//! client that does not read its answers is not read from until it does
//! (so it cannot make the daemon buffer without bound), and at most
//! [`MAX_CLIENTS`] are served at once. [`ControlServer::poll`] does
//! whatever is ready and returns; the daemon calls it when the listener or
//! a client fd ([`ControlServer::client_fds`]) is readable, or writable
//! while its answer is still going out, or on its periodic tick.
//!
//! The client side is [`request`] (in `client`), or a [`Session`] of
//! requests over one connection; [`locate`] finds the
//! socket the way the daemon chose it (`--control`, else the
//! configuration's `[daemon] control`, else the default).
//!
//! The socket file: the daemon creates it, and removes it at exit — only if
//! it is still the one it created. A socket file nobody listens on (a
//! daemon that crashed) is replaced; a live one means another daemon runs,
//! and `bind` fails rather than steal its socket. The socket is bound under
//! a temporary name, made 0600, then renamed into place, so it is never
//! reachable with looser permissions.

mod client;
mod locate;
mod server;

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::LayerValue;
use crate::status::{ConnStatus, IkeSaStatus, ReloadReport, Status};

pub use client::{ClientError, Session, request, stream};
pub use locate::{Socket, Source, locate};
pub use server::{Answer, ControlServer, Streams};
pub(crate) use server::{bind_socket, remove_socket};

/// Longest request line accepted, in bytes.
pub const MAX_REQUEST: usize = 64 * 1024;
/// Longest response line the client accepts, in bytes (a status with
/// hundreds of thousands of SAs still fits).
pub const MAX_RESPONSE: usize = 256 * 1024 * 1024;
/// Clients served at once; more are told so and closed.
pub const MAX_CLIENTS: usize = 32;
/// A client that neither sends nor reads for this long is dropped.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);
/// Requests answered per client per [`ControlServer::poll`] call (fairness).
const REQUESTS_PER_POLL: usize = 16;

/// A request to the daemon.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "lowercase")]
pub enum Request {
    /// The whole status: workers, SAs, drops.
    Status,
    /// The SAs only (`esparto sas`).
    Sas,
    /// Bring a connection up (initiate IKE). With an IKE SA up already,
    /// only the children without a Child SA are negotiated, within it; if
    /// none is missing, or an IKE SA is being negotiated, nothing starts
    /// (an error says so) unless `force`.
    Up {
        /// Connection name.
        name: String,
        /// Stream the negotiation's log lines, then its outcome
        /// ([`StreamItem`]s), instead of one answer.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        watch: bool,
        /// Start another IKE SA even if one is up or being negotiated.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        force: bool,
    },
    /// Take a connection down (delete its SAs).
    Down {
        /// Connection name.
        name: String,
    },
    /// Delete one Child SA of a connection (INFORMATIONAL Delete), named
    /// by our inbound SPI; its IKE SA stays.
    DownChild {
        /// Connection name.
        name: String,
        /// Our inbound SPI of the Child SA.
        in_spi: u32,
    },
    /// Rekey a connection's Child SAs, or (`ike`) its IKE SA.
    Rekey {
        /// Connection name.
        name: String,
        /// Rekey the IKE SA instead of the Child SAs.
        #[serde(default)]
        ike: bool,
    },
    /// Install a child's trap policy (VICI `install`): traffic for it
    /// starts its negotiation.
    Install {
        /// Connection name.
        name: String,
        /// Child name.
        child: String,
    },
    /// Take a child's trap policy away (VICI `uninstall`).
    Uninstall {
        /// Connection name.
        name: String,
        /// Child name.
        child: String,
    },
    /// Read the configuration file again and apply what changed.
    Reload,
    /// The loaded connections (`esparto list-conns`).
    #[serde(rename = "list-conns")]
    ListConns,
    /// Load a connection beside the file's, or replace one loaded so
    /// before (VICI `load-conn`): checked and applied as a reload.
    #[serde(rename = "load-conn")]
    LoadConn {
        /// Connection name.
        name: String,
        /// Its settings, as the VICI client gave them.
        conn: LayerValue,
    },
    /// Unload a connection loaded over VICI (`unload-conn`).
    #[serde(rename = "unload-conn")]
    UnloadConn {
        /// Connection name.
        name: String,
    },
    /// Load a PSK beside the file's (`load-shared`).
    #[serde(rename = "load-shared")]
    LoadShared {
        /// Its VICI id.
        id: String,
        /// `ids` and `secret`, as a `[secrets.NAME]` table has them.
        secret: LayerValue,
    },
    /// Unload a PSK loaded over VICI (`unload-shared`).
    #[serde(rename = "unload-shared")]
    UnloadShared {
        /// Its VICI id.
        id: String,
    },
    /// Load a certificate beside the file's (`load-cert`); a CA one is
    /// trusted as the `[authorities]` are.
    #[serde(rename = "load-cert")]
    LoadCert {
        /// The certificate, DER.
        der: Vec<u8>,
        /// A CA certificate (swanctl's `x509ca/`).
        #[serde(default)]
        ca: bool,
    },
    /// Load a private key (`load-key`): a connection loaded over VICI
    /// signs with the one that is its certificate's.
    #[serde(rename = "load-key")]
    LoadKey {
        /// Its id (SHA-1 of the public key, hex).
        id: String,
        /// PKCS#8 DER (wiped when dropped).
        pkcs8: zeroize::Zeroizing<Vec<u8>>,
    },
    /// Unload a private key loaded over VICI (`unload-key`).
    #[serde(rename = "unload-key")]
    UnloadKey {
        /// Its id.
        id: String,
    },
    /// Load an authority beside the file's (`load-authority`).
    #[serde(rename = "load-authority")]
    LoadAuthority {
        /// Its name.
        name: String,
        /// Its settings, as an `[authorities.NAME]` table has them.
        authority: LayerValue,
    },
    /// Unload an authority loaded over VICI (`unload-authority`).
    #[serde(rename = "unload-authority")]
    UnloadAuthority {
        /// Its name.
        name: String,
    },
    /// Forget every credential loaded over VICI (`clear-creds`).
    #[serde(rename = "clear-creds")]
    ClearCreds,
    /// Follow the daemon's SA events, and with `log` its log lines, as a
    /// stream ([`StreamItem`]s) that lasts until the client leaves (VICI
    /// `ike-updown`, `child-updown`, `ike-rekey`, `child-rekey`, `log`).
    Events {
        /// Log lines too.
        #[serde(default)]
        log: bool,
    },
    /// What was loaded over VICI (`get-conns`, `get-shared`, `get-keys`,
    /// `get-authorities`, `list-authorities`).
    Loaded,
    /// The certificates the configuration holds (`list-certs`).
    Certs,
}

/// A certificate the configuration holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CertInfo {
    /// The certificate, DER.
    pub der: Vec<u8>,
    /// A CA certificate (a trust anchor, or an intermediate we send),
    /// else an end entity.
    pub ca: bool,
    /// We hold its private key (our own certificate).
    pub private_key: bool,
}

/// Names of what was loaded over VICI.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Loaded {
    /// Connections, in the order they were loaded.
    pub conns: Vec<String>,
    /// Ids of PSKs.
    pub shared: Vec<String>,
    /// Ids of private keys.
    #[serde(default)]
    pub keys: Vec<String>,
    /// Authorities (`load-authority`): name and CA certificate (DER).
    #[serde(default)]
    pub authorities: Vec<(String, Vec<u8>)>,
}

/// The daemon's answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Response {
    /// The status (`{"ok":true,"status":{…}}`).
    Status(Box<Status>),
    /// The SAs (`{"ok":true,"sas":[…]}`).
    Sas(Vec<IkeSaStatus>),
    /// Done, with a human-readable note (`{"ok":true,"message":"…"}`).
    Done(String),
    /// What a reload did (`{"ok":true,"reload":{…}}`).
    Reload(Box<ReloadReport>),
    /// The loaded connections (`{"ok":true,"conns":[…]}`).
    Conns(Vec<ConnStatus>),
    /// What was loaded over VICI (`{"ok":true,"loaded":{…}}`).
    Loaded(Loaded),
    /// The certificates (`{"ok":true,"certs":[…]}`).
    Certs(Vec<CertInfo>),
    /// Refused or failed (`{"ok":false,"error":"…"}`).
    Error(String),
}

/// One line of a streamed answer (`up` with `watch`): that it started, log lines, a count
/// of lines the daemon dropped because the client read too slowly, and
/// last the outcome as an ordinary [`Response`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum StreamItem {
    /// `{"started":"site"}`: the request was accepted and this stream
    /// follows the connection named (first line of every stream).
    Started {
        /// The connection.
        started: String,
    },
    /// `{"log":{"level":"INFO","target":"…","message":"…"}}`.
    Log {
        /// The line.
        log: crate::daemon::watch::LogLine,
    },
    /// `{"dropped":3}`: lines (or events) lost before the next one.
    Dropped {
        /// How many.
        dropped: u64,
    },
    /// `{"event":{…}}`: an SA came up, went down or was rekeyed
    /// ([`Request::Events`]).
    Event {
        /// What happened.
        event: Box<SaEvent>,
    },
    /// The outcome (`{"ok":true,"message":"…"}` or `{"ok":false,"error":"…"}`).
    End(Response),
}

/// An SA event, as VICI's `ike-updown`, `child-updown`, `ike-rekey` and
/// `child-rekey` report them. Traffic counters in it are zero: the
/// workers' counters are gathered for `sas`, not per event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SaEvent {
    /// `ike-updown`, `child-updown`, `ike-rekey` or `child-rekey`.
    pub kind: String,
    /// Up (else down), for the up-down events.
    #[serde(default)]
    pub up: bool,
    /// The IKE SA (the new one of an IKE rekey). In a Child SA's event it
    /// holds that Child SA only, or for a rekey the old and the new one.
    pub sa: IkeSaStatus,
    /// The old IKE SA of an IKE rekey.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old: Option<IkeSaStatus>,
}

/// The JSON shape of a [`Response`]: `ok` plus one payload field.
#[derive(Deserialize)]
struct WireResponse {
    ok: bool,
    #[serde(default)]
    status: Option<Box<Status>>,
    #[serde(default)]
    sas: Option<Vec<IkeSaStatus>>,
    #[serde(default)]
    reload: Option<Box<ReloadReport>>,
    #[serde(default)]
    conns: Option<Vec<ConnStatus>>,
    #[serde(default)]
    loaded: Option<Loaded>,
    #[serde(default)]
    certs: Option<Vec<CertInfo>>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

/// [`WireResponse`] for sending, borrowing the payload.
#[derive(Serialize)]
struct WireResponseRef<'a> {
    ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<&'a Status>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sas: Option<&'a [IkeSaStatus]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reload: Option<&'a ReloadReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    conns: Option<&'a [ConnStatus]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    loaded: Option<&'a Loaded>,
    #[serde(skip_serializing_if = "Option::is_none")]
    certs: Option<&'a [CertInfo]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
}

impl Serialize for Response {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut w = WireResponseRef {
            ok: true,
            status: None,
            sas: None,
            reload: None,
            conns: None,
            loaded: None,
            certs: None,
            message: None,
            error: None,
        };
        match self {
            Response::Status(st) => w.status = Some(st),
            Response::Sas(sas) => w.sas = Some(sas),
            Response::Reload(r) => w.reload = Some(r),
            Response::Conns(c) => w.conns = Some(c),
            Response::Loaded(l) => w.loaded = Some(l),
            Response::Certs(c) => w.certs = Some(c),
            Response::Done(m) => w.message = Some(m),
            Response::Error(e) => {
                w.ok = false;
                w.error = Some(e);
            }
        }
        w.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Response {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let w = WireResponse::deserialize(d)?;
        Ok(match w {
            WireResponse {
                ok: false, error, ..
            } => Response::Error(error.unwrap_or_else(|| "unspecified error".into())),
            WireResponse {
                status: Some(s), ..
            } => Response::Status(s),
            WireResponse { sas: Some(s), .. } => Response::Sas(s),
            WireResponse { reload: Some(r), .. } => Response::Reload(r),
            WireResponse { conns: Some(c), .. } => Response::Conns(c),
            WireResponse { loaded: Some(l), .. } => Response::Loaded(l),
            WireResponse { certs: Some(c), .. } => Response::Certs(c),
            WireResponse { message, .. } => Response::Done(message.unwrap_or_default()),
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn fake_status() -> Status {
        Status {
            version: "9.9.9".into(),
            pid: 42,
            tun: "esparto0".into(),
            ..Status::default()
        }
    }

    #[test]
    fn wire_format() {
        assert_eq!(
            serde_json::to_string(&Request::Status).unwrap(),
            r#"{"cmd":"status"}"#
        );
        assert_eq!(
            serde_json::to_string(&Request::Up {
                name: "site".into(),
                watch: false,
                force: false,
            })
            .unwrap(),
            r#"{"cmd":"up","name":"site"}"#
        );
        assert_eq!(
            serde_json::to_string(&Response::Error("x".into())).unwrap(),
            r#"{"ok":false,"error":"x"}"#
        );
        let s = serde_json::to_string(&Response::Status(Box::new(fake_status()))).unwrap();
        assert!(
            s.starts_with(r#"{"ok":true,"status":{"version":"9.9.9","pid":42,"#),
            "{s}"
        );
        for r in [
            Response::Status(Box::new(fake_status())),
            Response::Sas(vec![]),
            Response::Reload(Box::new(ReloadReport { added: vec!["a".into()], unchanged: 3, ..ReloadReport::default() })),
            Response::Conns(vec![ConnStatus { name: "site".into(), remote_port: 4500, ..ConnStatus::default() }]),
            Response::Conns(vec![]),
            Response::Done("d".into()),
            Response::Error("e".into()),
        ] {
            let back: Response = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
            assert_eq!(back, r);
        }
        assert!(
            serde_json::from_str::<Request>(r#"{"cmd":"up"}"#).is_err(),
            "up needs a name"
        );
        assert!(serde_json::from_str::<Request>(r#"{"cmd":"reboot"}"#).is_err());
        assert_eq!(serde_json::to_string(&Request::Reload).unwrap(), r#"{"cmd":"reload"}"#);
        assert_eq!(
            serde_json::from_str::<Request>(r#"{"cmd":"up","name":"s","watch":true}"#).unwrap(),
            Request::Up { name: "s".into(), watch: true, force: false }
        );
        let log = crate::daemon::watch::LogLine { level: "INFO".into(), target: "t".into(), message: "m".into() };
        for item in [
            StreamItem::Started { started: "site".into() },
            StreamItem::Log { log },
            StreamItem::Dropped { dropped: 3 },
            StreamItem::End(Response::Done("up".into())),
            StreamItem::End(Response::Error("no".into())),
        ] {
            let line = serde_json::to_string(&item).unwrap();
            assert_eq!(serde_json::from_str::<StreamItem>(&line).unwrap(), item, "{line}");
        }
        assert_eq!(
            serde_json::to_string(&StreamItem::Dropped { dropped: 3 }).unwrap(),
            r#"{"dropped":3}"#
        );
        assert_eq!(serde_json::to_string(&Request::ListConns).unwrap(), r#"{"cmd":"list-conns"}"#);
    }
}
