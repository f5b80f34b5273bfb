//! A deterministic network for two (or more) IKE endpoints: fake clocks
//! (monotonic, and a calendar one for certificates that starts at a fixed
//! date, [`WALL_CLOCK_START`]), seeded randomness, configurable loss,
//! duplication, reordering, a NAT in front of a peer, hooks to drop or
//! capture chosen packets, and certificates ([`pki`]) instead of PSKs.
//!
//! Every run with the same seed is the same run: the endpoints draw from
//! `DeterministicRng`s seeded from the test seed, the network's own
//! decisions come from a small xorshift generator, and both clocks are the
//! simulation's. The one exception is in the bytes of ECDSA and RSA-PSS
//! signatures, whose randomness aws-lc-rs draws itself.

#![allow(dead_code, unreachable_pub, missing_docs, clippy::unwrap_used)]

pub mod dataplane;
pub mod pki;

use esparto_crypto::{DeterministicRng, Rng};
use esparto_ike::cert::{LocalCredential, TrustStore};
use esparto_ike::{
    ChildConfig, ChildSaEstablished, ConnectionConfig, Endpoint, EndpointConfig, Event, Identity,
    RandomSpiAllocator, SpiAllocator, SteeringSpiAllocator, Transmit, UnixTime,
};
use esparto_wire::ike::{ExchangeType, Header, HeaderRepr};
use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The calendar time a simulation starts at, in seconds since the Unix
/// epoch (2033-05-18 03:33:20 UTC): fixed, so that no run depends on the
/// machine's clock. Certificates in the tests are valid around it.
pub const WALL_CLOCK_START: u64 = 2_000_000_000;

/// The calendar time `elapsed` after [`WALL_CLOCK_START`].
pub fn wall_clock_at(elapsed: Duration) -> UnixTime {
    UnixTime::since_unix_epoch(Duration::from_secs(WALL_CLOCK_START) + elapsed)
}

/// Inbound SPIs an endpoint holds, seen from outside (to check nothing leaks).
pub type LiveSpis = Arc<Mutex<HashSet<u32>>>;

/// A data plane's steering as the tests model it: SPI `s` goes to
/// resource `s % resources`.
pub fn steered(spi: u32, resources: usize) -> usize {
    (spi % u32::try_from(resources.max(1)).unwrap()) as usize
}

fn steer(random: u32, resource: usize, resources: usize) -> Option<u32> {
    let n = u32::try_from(resources).ok()?;
    let k = u32::try_from(resource).ok()?;
    (k < n).then(|| random - random % n + k)
}

/// A `SteeringSpiAllocator` (by [`steered`]) whose live set the test can
/// read.
pub struct CountingSpis {
    inner: SteeringSpiAllocator,
    live: LiveSpis,
}

impl CountingSpis {
    fn record(&self, spi: u32) -> u32 {
        assert!(
            self.live.lock().unwrap().insert(spi),
            "SPI {spi:08x} handed out twice"
        );
        spi
    }
}

impl SpiAllocator for CountingSpis {
    fn allocate(&mut self, rng: &mut dyn Rng, resource: Option<u16>) -> u32 {
        let spi = self.inner.allocate(rng, resource);
        self.record(spi)
    }
    fn allocate_like(&mut self, rng: &mut dyn Rng, like: u32) -> u32 {
        let spi = self.inner.allocate_like(rng, like);
        self.record(spi)
    }
    fn release(&mut self, spi: u32) {
        assert!(
            self.live.lock().unwrap().remove(&spi),
            "SPI {spi:08x} released twice or never allocated"
        );
        self.inner.release(spi);
    }
}

/// One datagram in flight.
#[derive(Debug, Clone)]
pub struct Packet {
    pub at: Instant,
    pub from: SocketAddr,
    pub to: SocketAddr,
    pub data: Vec<u8>,
}

impl Packet {
    /// The IKE header, if this is IKE (marker stripped on 4500).
    pub fn header(&self) -> Option<HeaderRepr> {
        let d = if self.to.port() == 4500 || self.from.port() == 4500 {
            self.data.strip_prefix(&[0, 0, 0, 0])?
        } else {
            &self.data[..]
        };
        HeaderRepr::parse(&Header::new_checked(d).ok()?).ok()
    }
    pub fn is(&self, ex: ExchangeType, response: bool) -> bool {
        self.header()
            .is_some_and(|h| h.exchange == ex && h.response == response)
    }
}

pub struct Peer {
    pub ep: Endpoint,
    pub addr: IpAddr,
    pub events: Vec<Event>,
    pub sent: Vec<Packet>,
    /// Its inbound SPIs allocated and not released (if it counts them).
    pub live: Option<LiveSpis>,
}

impl Peer {
    /// Inbound SPIs held by the allocator.
    pub fn live_spis(&self) -> usize {
        self.live.as_ref().map_or(0, |l| l.lock().unwrap().len())
    }
}

/// A NAT in front of one peer: its private address is rewritten to
/// `public` with a fresh port per private source (port-restricted cone).
pub struct Nat {
    pub private: IpAddr,
    pub public: IpAddr,
    map: HashMap<SocketAddr, SocketAddr>,
    next_port: u16,
}

impl Nat {
    pub fn new(private: &str, public: &str) -> Self {
        Nat {
            private: private.parse().unwrap(),
            public: public.parse().unwrap(),
            map: HashMap::new(),
            next_port: 40000,
        }
    }
    /// Forget all mappings: the next packets get new public ports.
    pub fn rebind(&mut self) {
        self.map.clear();
        self.next_port += 100;
    }
    fn out(&mut self, src: SocketAddr) -> SocketAddr {
        if let Some(m) = self.map.get(&src) {
            return *m;
        }
        let m = SocketAddr::new(self.public, self.next_port);
        self.next_port += 1;
        self.map.insert(src, m);
        m
    }
    fn back(&self, dst: SocketAddr) -> Option<SocketAddr> {
        self.map.iter().find(|(_, m)| **m == dst).map(|(p, _)| *p)
    }
}

pub type Filter = Box<dyn FnMut(&Packet) -> bool>;

pub struct Net {
    pub base: Instant,
    pub now: Instant,
    pub peers: Vec<Peer>,
    pub latency: Duration,
    pub loss: f64,
    pub dup: f64,
    pub reorder: f64,
    pub nat: Option<Nat>,
    /// Return true to drop a packet (after NAT).
    pub drop_if: Option<Filter>,
    pub in_flight: Vec<Packet>,
    pub delivered: Vec<Packet>,
    state: u64,
}

pub fn endpoint(seed: u64) -> Endpoint {
    Endpoint::new(
        EndpointConfig::default(),
        Box::new(DeterministicRng::new(seed)),
        Box::new(RandomSpiAllocator::new()),
    )
}

/// An endpoint whose inbound SPIs the test can count.
pub fn counting_endpoint(seed: u64, config: EndpointConfig) -> (Endpoint, LiveSpis) {
    let live = LiveSpis::default();
    let inner = SteeringSpiAllocator::new(usize::from(config.resources), steer, steered);
    let ep = Endpoint::new(
        config,
        Box::new(DeterministicRng::new(seed)),
        Box::new(CountingSpis {
            inner,
            live: live.clone(),
        }),
    );
    (ep, live)
}

impl Net {
    pub fn new(seed: u64) -> Self {
        let base = Instant::now();
        Net {
            base,
            now: base,
            peers: Vec::new(),
            latency: Duration::from_millis(10),
            loss: 0.0,
            dup: 0.0,
            reorder: 0.0,
            nat: None,
            drop_if: None,
            in_flight: Vec::new(),
            delivered: Vec::new(),
            state: seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
        }
    }

    pub fn add(&mut self, addr: &str, ep: Endpoint) -> usize {
        self.peers.push(Peer {
            ep,
            addr: addr.parse().unwrap(),
            events: Vec::new(),
            sent: Vec::new(),
            live: None,
        });
        self.peers.len() - 1
    }

    fn rand(&mut self) -> f64 {
        // xorshift64*
        let mut x = self.state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.state = x;
        (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn elapsed(&self) -> Duration {
        self.now - self.base
    }

    /// The calendar time now: [`WALL_CLOCK_START`] plus the simulated
    /// time elapsed. The endpoints get it with every datagram.
    pub fn wall_clock(&self) -> UnixTime {
        wall_clock_at(self.elapsed())
    }

    fn collect(&mut self) {
        for i in 0..self.peers.len() {
            while let Some(ev) = self.peers[i].ep.poll_event() {
                self.peers[i].events.push(ev);
            }
            while let Some(Transmit {
                local,
                remote,
                data,
            }) = self.peers[i].ep.poll_transmit()
            {
                let mut p = Packet {
                    at: self.now,
                    from: local,
                    to: remote,
                    data,
                };
                self.peers[i].sent.push(p.clone());
                if let Some(nat) = &mut self.nat {
                    if p.from.ip() == nat.private {
                        p.from = nat.out(p.from);
                    }
                }
                if self.drop_if.as_mut().is_some_and(|f| f(&p)) {
                    continue;
                }
                if self.loss > 0.0 && self.rand() < self.loss {
                    continue;
                }
                let copies = if self.dup > 0.0 && self.rand() < self.dup {
                    2
                } else {
                    1
                };
                for _ in 0..copies {
                    let mut q = p.clone();
                    q.at = self.now + self.latency;
                    if self.reorder > 0.0 && self.rand() < self.reorder {
                        q.at += Duration::from_millis((self.rand() * 50.0) as u64);
                    }
                    self.in_flight.push(q);
                }
            }
        }
    }

    fn deliver(&mut self, p: Packet) {
        let mut to = p.to;
        if let Some(nat) = &self.nat {
            if to.ip() == nat.public {
                match nat.back(to) {
                    Some(priv_) => to = priv_,
                    None => return,
                }
            }
        }
        let wall_clock = self.wall_clock();
        if let Some(peer) = self.peers.iter_mut().find(|q| q.addr == to.ip()) {
            peer.ep.handle_datagram(self.now, wall_clock, to, p.from, &p.data);
        }
        self.delivered.push(p);
    }

    /// Inject a datagram as if it arrived now.
    pub fn inject(&mut self, p: Packet) {
        self.deliver(p);
        self.collect();
    }

    /// Run until nothing is scheduled before `now + d`; the clock ends at `now + d`.
    pub fn run_for(&mut self, d: Duration) {
        let end = self.now + d;
        self.collect();
        loop {
            let next_packet = self.in_flight.iter().map(|p| p.at).min();
            let mut next_timer = None;
            for p in &mut self.peers {
                if let Some(t) = p.ep.poll_timeout() {
                    next_timer = Some(next_timer.map_or(t, |n: Instant| n.min(t)));
                }
            }
            let next = match (next_packet, next_timer) {
                (Some(a), Some(b)) => a.min(b),
                (a, b) => match a.or(b) {
                    Some(t) => t,
                    None => break,
                },
            };
            if next > end {
                break;
            }
            self.now = self.now.max(next);
            // Deliver due packets in arrival order (stable for equal times).
            self.in_flight.sort_by_key(|p| p.at);
            while self.in_flight.first().is_some_and(|p| p.at <= self.now) {
                let p = self.in_flight.remove(0);
                self.deliver(p);
            }
            for p in &mut self.peers {
                if p.ep.poll_timeout().is_some_and(|t| t <= self.now) {
                    p.ep.handle_timeout(self.now);
                }
            }
            self.collect();
        }
        self.now = end;
    }

    pub fn children(&self, i: usize) -> Vec<&ChildSaEstablished> {
        self.peers[i]
            .events
            .iter()
            .filter_map(|e| match e {
                Event::ChildSaEstablished(c) => Some(&**c),
                _ => None,
            })
            .collect()
    }

    pub fn count(&self, i: usize, f: impl Fn(&Event) -> bool) -> usize {
        self.peers[i].events.iter().filter(|e| f(e)).count()
    }

    /// Seconds since the start at which peer `i` sent requests of `ex`
    /// (retransmissions included).
    pub fn request_times(&self, i: usize, ex: ExchangeType) -> Vec<f64> {
        self.peers[i]
            .sent
            .iter()
            .filter(|p| p.is(ex, false))
            .map(|p| (p.at - self.base).as_secs_f64())
            .collect()
    }

    /// Child SAs of peer `i` announced and not deleted, by inbound SPI.
    pub fn live_children(&self, i: usize) -> Vec<&ChildSaEstablished> {
        let mut live: Vec<&ChildSaEstablished> = Vec::new();
        for e in &self.peers[i].events {
            match e {
                Event::ChildSaEstablished(c) => live.push(c),
                Event::ChildSaDeleted { inbound_spi, .. } => {
                    live.retain(|c| c.inbound_spi != *inbound_spi)
                }
                _ => {}
            }
        }
        live
    }

    /// The IKE SA peer `i` holds now, following `IkeSaRekeyed`.
    pub fn current_ike(&self, i: usize) -> Option<esparto_ike::IkeSaId> {
        let mut cur = None;
        for e in &self.peers[i].events {
            match e {
                Event::IkeSaEstablished { ike_sa, .. } => cur = Some(*ike_sa),
                Event::IkeSaRekeyed { old, new, .. } if Some(*old) == cur => cur = Some(*new),
                Event::IkeSaDeleted { ike_sa, .. } if Some(*ike_sa) == cur => cur = None,
                _ => {}
            }
        }
        cur
    }

    /// Check that nothing leaked: the allocator holds exactly the inbound
    /// SPIs of the Child SAs the endpoint holds, and the endpoint's Child
    /// SAs are the announced, undeleted ones.
    pub fn assert_no_leak(&self, i: usize) {
        let live = self.live_children(i).len();
        assert_eq!(
            self.peers[i].ep.child_sa_count(),
            live,
            "peer {i}: Child SAs held vs announced"
        );
        if self.peers[i].live.is_some() {
            assert_eq!(
                self.peers[i].live_spis(),
                live,
                "peer {i}: SPIs held vs Child SAs"
            );
        }
        assert_eq!(
            self.peers[i].ep.ike_spi_count(),
            self.peers[i].ep.ike_sa_count(),
            "peer {i}: IKE SPIs held vs IKE SAs"
        );
    }
}

/// A site-to-site pair of connections: `moon` (10.0.0.1, subnet
/// 10.1.0.0/16) initiates to `sun` (10.0.0.2, subnet 10.2.0.0/16).
pub struct Setup {
    pub ike_i: String,
    pub ike_r: String,
    pub esp_i: String,
    pub esp_r: String,
    pub psk_i: Vec<u8>,
    pub psk_r: Vec<u8>,
    pub ts_i: (String, String),
    pub ts_r: (String, String),
    pub encap_i: bool,
    pub dpd: Option<Duration>,
    pub extra_child: bool,
    /// Endpoint settings of each side.
    pub cfg_i: EndpointConfig,
    pub cfg_r: EndpointConfig,
    /// Last changes to each side's connection before it is added.
    pub tweak_i: fn(&mut ConnectionConfig),
    pub tweak_r: fn(&mut ConnectionConfig),
    /// Certificates instead of the PSK, both ways.
    pub certs: Option<Certs>,
}

/// Each side's credential, and the CAs both trust for the other.
#[derive(Clone)]
pub struct Certs {
    pub moon: Arc<LocalCredential>,
    pub sun: Arc<LocalCredential>,
    pub trust: Arc<TrustStore>,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            ike_i: "aes256gcm16-prfsha256-x25519".into(),
            ike_r: "aes256gcm16-prfsha256-x25519".into(),
            esp_i: "aes256gcm16".into(),
            esp_r: "aes256gcm16".into(),
            psk_i: b"a shared secret".to_vec(),
            psk_r: b"a shared secret".to_vec(),
            ts_i: ("10.1.0.0/16".into(), "10.2.0.0/16".into()),
            ts_r: ("10.2.0.0/16".into(), "10.1.0.0/16".into()),
            encap_i: false,
            dpd: None,
            extra_child: false,
            cfg_i: EndpointConfig::default(),
            cfg_r: EndpointConfig::default(),
            tweak_i: |_| {},
            tweak_r: |_| {},
            certs: None,
        }
    }
}

pub const MOON: &str = "10.0.0.1";
pub const SUN: &str = "10.0.0.2";

impl Setup {
    pub fn build(&self, seed: u64) -> Net {
        let mut net = Net::new(seed);
        let moon_id = Identity::parse("@moon.example").unwrap();
        let sun_id = Identity::parse("@sun.example").unwrap();

        let (mut i, live_i) = counting_endpoint(seed ^ 0x1111, self.cfg_i.clone());
        let mut c = ConnectionConfig::new("gw", &self.ike_i).unwrap();
        c.local_addrs = vec![MOON.parse().unwrap()];
        c.remote_addrs = vec![SUN.parse().unwrap()];
        c.local.id = Some(moon_id.clone());
        c.remote.id = Some(sun_id.clone());
        c.encap = self.encap_i;
        c.dpd_delay = self.dpd;
        c.children
            .push(ChildConfig::new("net", &self.ts_i.0, &self.ts_i.1, &self.esp_i).unwrap());
        if self.extra_child {
            c.children.push(
                ChildConfig::new(
                    "host",
                    "10.1.0.5/32",
                    "10.2.0.7/32[tcp/443]",
                    "aes128-sha256-curve25519",
                )
                .unwrap(),
            );
        }
        if let Some(certs) = &self.certs {
            c.local.credential = Some(certs.moon.clone());
            c.remote.trust = Some(certs.trust.clone());
        }
        (self.tweak_i)(&mut c);
        i.add_connection(c).unwrap();
        i.secrets_mut()
            .add_psk(&[moon_id.clone(), sun_id.clone()], &self.psk_i);

        let (mut r, live_r) = counting_endpoint(seed ^ 0x2222, self.cfg_r.clone());
        let mut c = ConnectionConfig::new("gw", &self.ike_r).unwrap();
        c.local_addrs = vec![SUN.parse().unwrap()];
        c.local.id = Some(sun_id.clone());
        c.remote.id = Some(moon_id.clone());
        c.children
            .push(ChildConfig::new("net", &self.ts_r.0, &self.ts_r.1, &self.esp_r).unwrap());
        if self.extra_child {
            c.children.push(
                ChildConfig::new(
                    "host",
                    "10.2.0.0/16",
                    "10.1.0.0/16",
                    "aes128-sha256-curve25519",
                )
                .unwrap(),
            );
        }
        if let Some(certs) = &self.certs {
            c.local.credential = Some(certs.sun.clone());
            c.remote.trust = Some(certs.trust.clone());
        }
        (self.tweak_r)(&mut c);
        r.add_connection(c).unwrap();
        r.secrets_mut().add_psk(&[moon_id, sun_id], &self.psk_r);

        net.add(MOON, i);
        net.add(SUN, r);
        net.peers[0].live = Some(live_i);
        net.peers[1].live = Some(live_r);
        net
    }
}

/// Both ends of one Child SA agree: SPIs cross, keys cross, suites and
/// selectors mirror each other.
pub fn assert_pair(a: &ChildSaEstablished, b: &ChildSaEstablished) {
    assert_eq!(
        a.inbound_spi, b.outbound_spi,
        "A inbound SPI = B outbound SPI"
    );
    assert_eq!(
        a.outbound_spi, b.inbound_spi,
        "A outbound SPI = B inbound SPI"
    );
    assert!(
        a.inbound_key == b.outbound_key,
        "A inbound KEYMAT = B outbound KEYMAT"
    );
    assert!(
        a.outbound_key == b.inbound_key,
        "A outbound KEYMAT = B inbound KEYMAT"
    );
    assert!(
        a.inbound_key != a.outbound_key,
        "directions have different keys"
    );
    assert_eq!(a.inbound_key.len(), a.suite.keymat_len());
    assert_eq!(a.suite, b.suite);
    assert_eq!(a.esn, b.esn);
    assert_eq!(a.local_ts, b.remote_ts);
    assert_eq!(a.remote_ts, b.local_ts);
    assert_eq!(a.encap, b.encap);
    assert!(a.inbound_spi >= 256 && a.outbound_spi >= 256);
}
