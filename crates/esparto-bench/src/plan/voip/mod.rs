//! `esparto plan voip`: how many full-duplex calls of each codec this
//! gateway carries, and what each costs on the wire.
//!
//! For every codec: the voice bytes per packet, the IP packet (voice, RTP,
//! UDP, IP), and the IPsec packet the packet-overhead model
//! ([`esparto_esp::Framing`]) gives for the suite, each with its bit rate
//! one way. Then the LANCOM method: a call is two flows, one each way, of
//! `1000 / ptime` packets per second, so the gateway carries
//!
//! ```text
//! calls = zero-loss packets/s at the IP packet's size ÷ (2 × packets/s per call)
//! ```
//!
//! with the zero-loss rate measured end to end, read at the IP packet's
//! size. The rate is of call-like traffic when there is one
//! (`esparto-testbed bench voip --rates SIZES --save`: hundreds of paced
//! 5-tuples both ways at once, the traffic calls are); otherwise the RFC
//! 2544 search of `esparto-testbed bench tunnel --save`, whose few bursty
//! flows a receiving kernel coalesces (GRO) into far fewer packets than
//! calls' interleaved flows: for calls that rate is an upper bound, and the
//! plan says so. It is read at the IP packet's size ([`super::curve`]: interpolated between measured sizes, and said
//! so). Calls are the quotient rounded to the nearest whole call, as the
//! LANCOM method rounds (8,192 packets/s ÷ (2 × 33.3) = 122.88 → 123: the
//! 123rd call asks 0.1 % more than was measured, inside any measurement's
//! noise); `--calls N` reports the exact headroom. A link's calls round
//! down: its bandwidth is a ceiling, not a measurement.
//!
//! `--link-mbps` adds the WAN link: each direction of a full-duplex link
//! carries one direction of every call, so it holds `link bits/s ÷ (IPsec
//! packet bits × packets/s per call)` calls (IP layer: the link layer's
//! framing is not counted). The answer is the lower of the two, and which
//! one it is. `--calls N` says whether N fit and with what headroom.
//!
//! Without an end-to-end measurement the table still gives bytes and bit
//! rates; if the data plane was measured in process, the calls it could
//! process without any kernel I/O are shown as what they are: an upper
//! bound, far above what the gateway carries.
//!
//! This module is the command line; [`calls`] computes the plan and
//! [`render`] prints it.

pub mod calls;
pub mod render;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use esparto_crypto::EspSuite;
use esparto_esp::{Family, Framing, Mode};

pub use calls::{
    Fit, Inputs, Limit, Plan, Row, call_rate_curve, fit, full_duplex_calls, link_calls, plan, whole, zero_loss_curve,
};
pub use render::render;

use super::{Common, codec};
use crate::results::Found;

/// The suite when neither `--suite` nor a configuration says.
pub const DEFAULT_SUITE: EspSuite = EspSuite::Aes256Gcm16;

/// The command line of `esparto plan voip`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// ESP suite in strongSwan syntax (default: the first ESP proposal in --config, else aes256gcm16).
    #[arg(long)]
    pub suite: Option<String>,
    /// A configuration file: the suite of its first child and the address family of its first peer.
    #[arg(long, short = 'c', value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The outer IP version (default: the peer's in --config, else 4).
    #[arg(long, value_enum)]
    pub outer: Option<IpVersion>,
    /// The voice packets' IP version.
    #[arg(long, value_enum, default_value = "4")]
    pub inner: IpVersion,
    /// ESP straight over IP rather than in UDP, as other gateways publish their figures (Esparto always sends ESP-in-UDP).
    #[arg(long)]
    pub raw_esp: bool,
    /// Codecs, comma separated (default: all), e.g. g711-20ms,g729-30.
    #[arg(long = "codecs", alias = "codec", value_delimiter = ',')]
    pub codec: Vec<String>,
    /// Whether this many concurrent calls fit, and with what headroom.
    #[arg(long, value_name = "N")]
    pub calls: Option<u64>,
    /// The WAN link's bandwidth each way, Mbit/s: calls are limited by the link or by the gateway, whichever is lower.
    #[arg(long, value_name = "MBPS")]
    pub link_mbps: Option<f64>,
    /// Where the measurements are, and how to print.
    #[command(flatten)]
    pub common: Common,
}

/// An IP version on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum IpVersion {
    /// IPv4.
    #[value(name = "4")]
    V4,
    /// IPv6.
    #[value(name = "6")]
    V6,
}

impl From<IpVersion> for Family {
    fn from(v: IpVersion) -> Self {
        match v {
            IpVersion::V4 => Family::V4,
            IpVersion::V6 => Family::V6,
        }
    }
}

/// What `--config FILE` takes from a gateway's configuration: the suite of
/// its first child with an ESP proposal, the address family of that
/// connection's first peer, and where the suite came from ("first ESP
/// proposal of site.lan in FILE"). Reading the file is the gateway's: the
/// command line that runs the plan hands in a [`ReadConfig`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Configured {
    /// The ESP suite.
    pub suite: EspSuite,
    /// The outer IP family, the peer's.
    pub outer: Family,
    /// Where the suite came from.
    pub from: String,
}

/// Reads a gateway's configuration file for `--config`.
pub type ReadConfig = fn(&Path) -> Result<Configured>;

/// `esparto plan voip`; `read_config` reads `--config FILE`.
pub fn main(a: &Args, read_config: ReadConfig) -> Result<ExitCode> {
    let codecs = codec::select(&a.codec).map_err(anyhow::Error::msg)?;
    let (suite, cfg_family, suite_from) = match (&a.suite, &a.config) {
        (Some(s), _) => (super::parse_suite(s)?, None, "--suite".to_string()),
        (None, Some(path)) => {
            let c = read_config(path)?;
            (c.suite, Some(c.outer), c.from)
        }
        (None, None) => (DEFAULT_SUITE, None, "the default".to_string()),
    };
    let outer = a.outer.map(Family::from).or(cfg_family).unwrap_or(Family::V4);
    if let Some(m) = a.link_mbps
        && !(m.is_finite() && m > 0.0)
    {
        bail!("--link-mbps must be a positive number of Mbit/s");
    }
    let framing = Framing { suite, esn: false, mode: Mode::Tunnel, udp_encap: !a.raw_esp, outer };
    let found: Found = super::load(&a.common, suite).context("reading the saved results")?;
    let inputs = Inputs {
        framing,
        inner: a.inner.into(),
        codecs,
        tunnel: found.newest_tunnel(),
        call_rate: found.newest_call_rate(),
        dataplane: found.newest_dataplane(suite.name()),
        calls: a.calls,
        link_mbps: a.link_mbps,
    };
    let mut p = plan(&inputs, &suite_from);
    if inputs.tunnel.is_none() && inputs.call_rate.is_none() && inputs.dataplane.is_none() {
        p.notes.push(super::how_to_measure(&found));
    }
    p.ignored = found.ignored.clone();
    if a.common.output.json {
        println!("{}", serde_json::to_string_pretty(&p)?);
    } else {
        print!("{}", render(&p));
    }
    Ok(ExitCode::SUCCESS)
}
