//! The validated configuration: what `config::load` produces from the TOML
//! file and what the daemon runs on. Every value here has been checked; the
//! daemon never re-validates.
//!
//! Names follow strongSwan's `swanctl.conf` where the concept is the same.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use esparto_crypto::{EspSuite, SecretBytes};
use esparto_esp::{Lifetime, Selector};
/// `per_cpu_sas`: the engine's own type (the file's default, `on-demand`,
/// is set by the loader).
pub use esparto_ike::PerCpuSas;

/// A whole configuration file.
pub struct Config {
    /// The file it came from.
    pub path: PathBuf,
    /// The file's text as read (connections loaded over VICI are checked
    /// beside it, [`super::relayer`]).
    pub text: std::sync::Arc<str>,
    /// What was loaded over VICI, checked beside the file's connections
    /// and secrets (empty unless a VICI client loaded something).
    pub layer: super::Layer,
    /// Daemon-wide settings (`[daemon]`).
    pub daemon: Daemon,
    /// Connections (`[connections.NAME]`), in file order, then those
    /// loaded over VICI. Shared: a load that leaves a connection as it
    /// was keeps the same one.
    pub connections: Vec<std::sync::Arc<Connection>>,
    /// Pre-shared keys (`[secrets.NAME]`), for IKE.
    pub secrets: esparto_ike::Secrets,
    /// What runs, but maybe not as meant (`check-config` prints these;
    /// `run` logs them), in file order.
    pub warnings: Vec<super::ConfigWarning>,
}

// By hand: the file's text and the layer may hold secrets.
impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("path", &self.path)
            .field("text", &format_args!("{} bytes", self.text.len()))
            .field("layer", &self.layer)
            .field("daemon", &self.daemon)
            .field("connections", &self.connections)
            .field("secrets", &self.secrets)
            .field("warnings", &self.warnings)
            .finish()
    }
}

/// `[daemon]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Daemon {
    /// Worker threads (default: the CPUs listed in `cpus`, else the CPUs
    /// the process may use).
    pub workers: usize,
    /// CPUs the workers are pinned to, in order: worker k runs on
    /// `cpus[k % cpus.len()]` (empty: the CPUs the process may use, in
    /// ascending order).
    pub cpus: Vec<usize>,
    /// Control socket path (default `/run/esparto/esparto.sock`).
    pub control: PathBuf,
    /// VICI socket, for `swanctl` and other VICI clients.
    pub vici: ViciSocket,
    /// TUN device name (default `esparto0`).
    pub tun: String,
    /// UDP port for ESP-in-UDP and IKE with NAT-T (default 4500).
    pub port: u16,
    /// UDP port for IKE (default 500).
    pub ike_port: u16,
    /// Path MTU towards peers (default 1500); the TUN MTU follows from it.
    pub path_mtu: u16,
    /// Packets each TUN queue holds before the kernel drops (default 4096).
    pub tun_queue_len: u32,
    /// Log filter (default `info`), tracing's `EnvFilter` syntax.
    pub log: String,
    /// Where the daemon keeps state across restarts (default
    /// `/var/lib/esparto`): the sequence numbers reserved for statically
    /// keyed SAs. Used only when there are static children.
    pub state_dir: PathBuf,
    /// IKE endpoint limits.
    pub ike: IkeLimits,
    /// Where the tunnel routes and their policy rules go.
    pub routing: Routing,
    /// Where the Prometheus metrics endpoint listens (default: off).
    pub metrics: Option<SocketAddr>,
}

/// `[daemon] vici`: where the VICI socket is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ViciSocket {
    /// Not set: `charon.vici` beside the control socket the daemon uses
    /// (`/run/esparto/charon.vici` with the default control socket).
    Default,
    /// `vici = ""`: no VICI socket.
    Off,
    /// This path.
    Path(PathBuf),
}

impl ViciSocket {
    /// The socket's path for a daemon whose control socket is `control`.
    pub fn path(&self, control: &std::path::Path) -> Option<PathBuf> {
        match self {
            ViciSocket::Default => Some(control.with_file_name(super::daemon::DEFAULT_VICI_NAME)),
            ViciSocket::Off => None,
            ViciSocket::Path(p) => Some(p.clone()),
        }
    }
}

/// The routing table of the tunnel routes and the policy rules that lead
/// to it (`[daemon] routing_table`, `routing_table_prio`, `routing_mark`;
/// `esparto_io::routing` describes the rules).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Routing {
    /// The table (default 220, as strongSwan's); never main, local, default
    /// or 0.
    pub table: u32,
    /// The first of the three rule priorities (default 220).
    pub priority: u32,
    /// The firewall mark of the daemon's own sockets, whose packets skip the
    /// tunnel (default: the table's number, as wg-quick does).
    pub mark: u32,
}

impl Default for Routing {
    fn default() -> Self {
        Self {
            table: super::daemon::DEFAULT_ROUTING_TABLE,
            priority: super::daemon::DEFAULT_ROUTING_TABLE_PRIO,
            mark: super::daemon::DEFAULT_ROUTING_TABLE,
        }
    }
}

impl From<Routing> for esparto_io::routing::RoutingConfig {
    fn from(r: Routing) -> Self {
        Self { table: r.table, priority: r.priority, mark: r.mark }
    }
}

/// IKE endpoint limits (`[daemon]`): the denial-of-service defence of RFC
/// 7296 §2.6 and the message window of §2.3. Defaults are the engine's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IkeLimits {
    /// Half-open IKE SAs above which IKE_SA_INIT must carry a COOKIE.
    pub cookie_threshold: usize,
    /// The same, counted per source address.
    pub cookie_threshold_per_source: usize,
    /// Half-open IKE SAs one source may hold; beyond, requests are dropped.
    pub half_open_per_source: usize,
    /// `cookie_threshold_per_source` for an address a connection names.
    pub cookie_threshold_per_peer: usize,
    /// `half_open_per_source` for an address a connection names.
    pub half_open_per_peer: usize,
    /// Half-open IKE SAs in all; beyond, requests are dropped.
    pub max_half_open: usize,
    /// Our IKE SAs being set up to one peer address at once (0: no limit).
    pub initiating_per_peer: usize,
    /// IKE requests in flight per IKE SA (SET_WINDOW_SIZE).
    pub window_size: u32,
    /// Largest datagram an IKE message fills before it is fragmented
    /// (RFC 7383), IP and UDP headers included.
    pub fragment_size: usize,
}

impl Default for IkeLimits {
    fn default() -> Self {
        let e = esparto_ike::EndpointConfig::default();
        Self {
            cookie_threshold: e.cookie_threshold,
            cookie_threshold_per_source: e.cookie_threshold_per_source,
            half_open_per_source: e.half_open_per_source,
            cookie_threshold_per_peer: e.cookie_threshold_per_peer,
            half_open_per_peer: e.half_open_per_peer,
            max_half_open: e.max_half_open,
            initiating_per_peer: e.initiating_per_peer,
            window_size: e.window_size,
            fragment_size: e.fragment_size,
        }
    }
}

/// `[connections.NAME]`. Equal when every setting, of the connection and
/// of each child in order, is equal (what a reload calls unchanged).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connection {
    /// The name.
    pub name: String,
    /// Our outer addresses; the first is the one we use.
    pub local_addrs: Vec<IpAddr>,
    /// The peer's outer addresses; the first is the one we send to.
    pub remote_addrs: Vec<IpAddr>,
    /// The host names among `remote_addrs` (IKE only: the daemon resolves
    /// them when it initiates).
    pub remote_hosts: Vec<esparto_ike::RemoteHost>,
    /// The peer's UDP port for ESP-in-UDP (default 4500).
    pub remote_port: u16,
    /// IKE settings, when any child is negotiated by IKE.
    pub ike: Option<esparto_ike::ConnectionConfig>,
    /// Children.
    pub children: Vec<Child>,
}

/// `[connections.NAME.children.CHILD]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Child {
    /// The name.
    pub name: String,
    /// Our side's selectors.
    pub local_ts: Vec<Selector>,
    /// The peer's side.
    pub remote_ts: Vec<Selector>,
    /// Anti-replay window in packets (default 4096).
    pub replay_window: u32,
    /// SA lifetimes (from `rekey_time`, `life_time`, `rekey_bytes`, …).
    pub lifetime: Lifetime,
    /// Per-CPU sub-SAs (RFC 9611; default `on-demand`).
    pub per_cpu_sas: PerCpuSas,
    /// Most sub-SAs to have (default: the worker count).
    pub per_cpu_max: usize,
    /// Statically keyed SAs (no IKE), like `ip xfrm state add`.
    pub static_sas: Option<StaticSas>,
    /// IPComp (RFC 3173, DEFLATE): `None` without (`ipcomp = "no"`).
    pub ipcomp: Option<esparto_esp::IpcompMode>,
    /// The WAN link rate toward the peer in Mbit/s (`link_mbps`), for
    /// adaptive IPComp; `None`: judged from the send path's back-pressure.
    pub link_mbps: Option<u32>,
}

/// Statically keyed SAs of a child.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticSas {
    /// The suite (the child's single `esp_proposals` entry).
    pub suite: EspSuite,
    /// Extended sequence numbers.
    pub esn: bool,
    /// SA pairs: the first is the fallback SA, each further one the sub-SA
    /// of worker 0, 1, … (a gateway with fewer workers than pairs installs
    /// the extra pairs inbound only).
    pub pairs: Vec<StaticPair>,
}

/// One statically keyed SA pair.
#[derive(Debug, PartialEq, Eq)]
pub struct StaticPair {
    /// SPI of the SA we receive on.
    pub in_spi: u32,
    /// SPI of the SA we send on.
    pub out_spi: u32,
    /// KEYMAT of the inbound SA (`suite.keymat_len()` bytes).
    pub in_key: SecretBytes,
    /// KEYMAT of the outbound SA.
    pub out_key: SecretBytes,
}

// By hand: the copies of the keys are zeroized on drop like the originals.
impl Clone for StaticPair {
    fn clone(&self) -> Self {
        StaticPair {
            in_spi: self.in_spi,
            out_spi: self.out_spi,
            in_key: SecretBytes::from_slice(self.in_key.as_slice()),
            out_key: SecretBytes::from_slice(self.out_key.as_slice()),
        }
    }
}
