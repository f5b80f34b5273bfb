//! A minimal UDP driver for the sans-IO endpoint, for interoperability
//! tests against a real IKE peer (tests/interop/strongswan.sh).
//!
//! It binds UDP 500 and 4500 on `--local`, runs one connection as
//! initiator or responder for `--seconds`, and prints one line per event.
//! With `--print-keys` it also prints Child SA KEYMAT in hex so a test can
//! compare it with the peer's debug log — a test-only convenience: never
//! do that on a real gateway. The clock and the CSPRNG are read here, in
//! the driver, never in the library.
//!
//! ```text
//! ike_peer --local 192.0.2.1 --remote 192.0.2.2 --local-id @moon --remote-id @sun \
//!          --psk secret --local-ts 10.1.0.0/16 --remote-ts 10.2.0.0/16 \
//!          --ike aes256gcm16-prfsha256-x25519 --esp aes256gcm16 --initiate
//! ```
//!
//! Lifecycle options: `--rekey-child-after S` / `--rekey-ike-after S` ask
//! the endpoint to rekey the first Child SA / the IKE SA S seconds after
//! the start; `--child-rekey-time S` / `--ike-rekey-time S` set the
//! lifetimes (the endpoint rekeys by itself, with jitter).

#![allow(clippy::unwrap_used, missing_docs)]

use esparto_crypto::SystemRng;
use esparto_ike::{
    ChildConfig, ChildSaEstablished, ConnectionConfig, Endpoint, EndpointConfig, Event, Identity,
    IkeSaId, RandomSpiAllocator, UnixTime,
};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The command line: `--key value` pairs and `--flag`s.
struct Args(Vec<String>);

impl Args {
    fn get(&self, k: &str) -> Option<String> {
        self.0
            .iter()
            .position(|a| a == k)
            .and_then(|i| self.0.get(i + 1))
            .cloned()
    }

    fn has(&self, k: &str) -> bool {
        self.0.iter().any(|a| a == k)
    }

    /// A number of seconds.
    fn secs(&self, k: &str) -> Option<Duration> {
        self.get(k).map(|s| Duration::from_secs(s.parse().unwrap()))
    }
}

/// The one connection, "interop", with child "net" and optionally "net2".
fn connection(a: &Args, local: IpAddr, remote: Option<IpAddr>) -> ConnectionConfig {
    let mut conn = ConnectionConfig::new(
        "interop",
        &a.get("--ike")
            .unwrap_or("aes256gcm16-prfsha256-x25519".into()),
    )
    .unwrap();
    conn.local_addrs = vec![local];
    conn.remote_addrs = remote.into_iter().collect();
    conn.local.id = a.get("--local-id").map(|s| Identity::parse(&s).unwrap());
    conn.remote.id = a.get("--remote-id").map(|s| Identity::parse(&s).unwrap());
    conn.encap = a.has("--encap");
    conn.dpd_delay = a.secs("--dpd");
    if let Some(t) = a.secs("--ike-rekey-time") {
        conn.rekey_time = Some(t);
    }
    let esp = a.get("--esp").unwrap_or("aes256gcm16".into());
    let mut net = ChildConfig::new(
        "net",
        &a.get("--local-ts").unwrap_or("dynamic".into()),
        &a.get("--remote-ts").unwrap_or("dynamic".into()),
        &esp,
    )
    .unwrap();
    if let Some(t) = a.secs("--child-rekey-time") {
        net.rekey_time = Some(t);
    }
    conn.children.push(net);
    if let Some(esp2) = a.get("--child2-esp") {
        conn.children.push(
            ChildConfig::new(
                "net2",
                &a.get("--child2-local-ts").unwrap_or("dynamic".into()),
                &a.get("--child2-remote-ts").unwrap_or("dynamic".into()),
                &esp2,
            )
            .unwrap(),
        );
    }
    conn
}

/// Operator actions due at a time after the start.
struct Plan {
    terminate_at: Option<Instant>,
    rekey_child_at: Option<Instant>,
    rekey_ike_at: Option<Instant>,
}

impl Plan {
    /// Do what is due at `now` on IKE SA `ike` (whose "net" Child SA has
    /// our inbound SPI `net_spi`), once each.
    fn run(&mut self, ep: &mut Endpoint, now: Instant, ike: Option<IkeSaId>, net_spi: Option<u32>) {
        if let (Some(t), Some(id)) = (self.terminate_at, ike) {
            if now >= t {
                ep.terminate(now, id).unwrap();
                self.terminate_at = None;
            }
        }
        if let (Some(t), Some(id), Some(spi)) = (self.rekey_child_at, ike, net_spi) {
            if now >= t {
                println!("REKEY_CHILD in={spi:08x}");
                ep.rekey_child(now, id, spi).unwrap();
                self.rekey_child_at = None;
            }
        }
        if let (Some(t), Some(id)) = (self.rekey_ike_at, ike) {
            if now >= t {
                println!("REKEY_IKE spi={id}");
                ep.rekey_ike(now, id).unwrap();
                self.rekey_ike_at = None;
            }
        }
    }
}

fn print_child(c: &ChildSaEstablished, keys: bool) {
    println!(
        "CHILD_UP child={} in={:08x} out={:08x} rekeys={} active={} suite={} esn={} encap={} local={} remote={} lts={:?} rts={:?}",
        c.child,
        c.inbound_spi,
        c.outbound_spi,
        c.rekeys.map_or("-".to_string(), |s| format!("{s:08x}")),
        c.outbound_active,
        c.suite.name(),
        c.esn,
        c.encap,
        c.local,
        c.remote,
        c.local_ts
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        c.remote_ts
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
    );
    if keys {
        println!(
            "KEYS in={:08x} inkey={} outkey={}",
            c.inbound_spi,
            hex(c.inbound_key.as_slice()),
            hex(c.outbound_key.as_slice())
        );
    }
}

/// One line per event; notes the IKE SA and the "net" Child SA.
fn print_event(e: &Event, ike: &mut Option<IkeSaId>, net_spi: &mut Option<u32>, keys: bool) {
    match e {
        Event::ChildSaEstablished(c) => {
            if &*c.child == "net" {
                *net_spi = Some(c.inbound_spi);
            }
            print_child(c, keys);
        }
        Event::IkeSaEstablished {
            ike_sa,
            remote_id,
            local,
            remote,
            ..
        } => {
            *ike = Some(*ike_sa);
            println!("IKE_UP spi={ike_sa} remote_id={remote_id} local={local} remote={remote}");
        }
        Event::IkeSaRekeyed { old, new, .. } => {
            *ike = Some(*new);
            println!("IKE_REKEYED old={old} new={new}");
        }
        Event::ChildSaDeleted {
            inbound_spi,
            outbound_spi,
            reason,
            ..
        } => println!(
            "CHILD_DOWN in={inbound_spi:08x} out={outbound_spi:08x} reason={reason:?} {e:?}"
        ),
        other => println!("{other:?}"),
    }
}

fn main() {
    let a = Args(std::env::args().skip(1).collect());
    let local: IpAddr = a.get("--local").expect("--local").parse().unwrap();
    let remote: Option<IpAddr> = a.get("--remote").map(|r| r.parse().unwrap());
    let seconds: u64 = a.get("--seconds").map_or(10, |s| s.parse().unwrap());
    let conn = connection(&a, local, remote);
    let ids: Vec<Identity> = [conn.local.id.clone(), conn.remote.id.clone()]
        .into_iter()
        .flatten()
        .collect();
    let mut ep = Endpoint::new(
        EndpointConfig::default(),
        Box::new(SystemRng),
        Box::new(RandomSpiAllocator::new()),
    );
    ep.add_connection(conn).unwrap();
    ep.secrets_mut()
        .add_psk(&ids, a.get("--psk").expect("--psk").as_bytes());

    let s500 = UdpSocket::bind(SocketAddr::new(local, 500)).unwrap();
    let s4500 = UdpSocket::bind(SocketAddr::new(local, 4500)).unwrap();
    s500.set_nonblocking(true).unwrap();
    s4500.set_nonblocking(true).unwrap();

    let start = Instant::now();
    let mut ike = None;
    if a.has("--initiate") {
        ike = Some(ep.initiate(start, "interop", None).unwrap());
    }
    let mut child2_done = false;
    let mut plan = Plan {
        terminate_at: a.secs("--terminate-after").map(|d| start + d),
        rekey_child_at: a.secs("--rekey-child-after").map(|d| start + d),
        rekey_ike_at: a.secs("--rekey-ike-after").map(|d| start + d),
    };
    // Our inbound SPI of the current "net" Child SA.
    let mut net_spi: Option<u32> = None;
    let mut buf = vec![0u8; 65536];
    while start.elapsed() < Duration::from_secs(seconds) {
        let now = Instant::now();
        if ep.poll_timeout().is_some_and(|t| t <= now) {
            ep.handle_timeout(now);
        }
        plan.run(&mut ep, now, ike, net_spi);
        for (sock, port) in [(&s500, 500u16), (&s4500, 4500u16)] {
            while let Ok((n, from)) = sock.recv_from(&mut buf) {
                ep.handle_datagram(
                    Instant::now(),
                    UnixTime::now(),
                    SocketAddr::new(local, port),
                    from,
                    &buf[..n],
                );
            }
        }
        while let Some(t) = ep.poll_transmit() {
            let sock = if t.local.port() == 4500 {
                &s4500
            } else {
                &s500
            };
            let _ = sock.send_to(&t.data, t.remote);
        }
        while let Some(e) = ep.poll_event() {
            print_event(&e, &mut ike, &mut net_spi, a.has("--print-keys"));
            let child_up = matches!(e, Event::ChildSaEstablished(_));
            if child_up && !child2_done && a.has("--child2-esp") && a.has("--initiate") {
                child2_done = true;
                ep.acquire(Instant::now(), "interop", "net2", None).unwrap();
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    println!("END sas={}", ep.ike_sa_count());
}
