//! Writes the seed corpora of the fuzz targets, `fuzz/seeds/<target>/`:
//! real packets and messages, made by Esparto's own code with fixed keys
//! and seeded RNGs, so the same source always writes the same bytes.
//!
//! ```text
//! cargo run -p esparto --example fuzz_seeds [DIR]     # default: fuzz/seeds (make fuzz-seeds)
//! ```
//!
//! - wire targets: the hex packets of `crates/esparto-wire/testdata/` and
//!   packets built with the wire crate's emitters (IPv4/IPv6, UDP, TCP with
//!   options, ICMP and ICMPv6 echo and errors, fragments, extension headers),
//!   each target given the layer it parses;
//! - ESP and ESP-in-UDP: packets from `OutboundSa::encapsulate` for every
//!   suite of the `esp_decapsulate` target, their decrypted plaintexts, NAT
//!   keepalives and marked IKE messages;
//! - `ike_message`: every datagram of a full exchange between two
//!   `esparto_ike` endpoints (IKE_SA_INIT, IKE_AUTH, CREATE_CHILD_SA for a
//!   Child SA, a rekey and an IKE rekey, INFORMATIONAL liveness and delete),
//!   and a COOKIE round;
//! - `config_parse`: `examples/*.toml` and variants, valid and not;
//! - `wire_vici`, `vici_request`: VICI packets as swanctl sends them (each
//!   command with its keys, registrations, a `load-conn`) and answers;
//! - `esp_decapsulate`, `ike_responder`, `ike_cookie`, `ike_reassembly`, `tun_gro`: inputs in
//!   each target's own format (see the targets' module comments) that
//!   deliver packets, run exchanges and fill batches.
//!
//! It lives in the main workspace (not the nightly fuzz crate) so it builds
//! with the code whose output it records: `cargo test` compiles it and runs
//! its tests, so an API change shows up here at once. The `esp_decapsulate`
//! format is one file shared with the target.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use esparto_crypto::{DeterministicRng, EspCipher};
use esparto_esp::{HEADROOM, OutboundSa, TAILROOM, next_header_for};
use esparto_ike::{
    ChildConfig, ConnectionConfig, Endpoint, EndpointConfig, Event, Identity, IkeSaId, PerCpuSas,
    RandomSpiAllocator, Transmit,
};
use esparto_wire::ike::{Header, HeaderRepr};
use esparto_wire::{icmp, ipv4, ipv6, tcp, udp};

#[path = "../../../fuzz/formats/esp_decapsulate.rs"]
mod esp_input;

use esp_input::{Kind, Record, SLOTS, Seq, Setup};

/// Target name → file name → contents.
type Corpus = BTreeMap<&'static str, BTreeMap<String, Vec<u8>>>;

fn main() -> std::io::Result<()> {
    let dir = std::env::args().nth(1).map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds"),
        PathBuf::from,
    );
    let corpus = generate();
    write(&dir, &corpus)?;
    for (target, files) in &corpus {
        let bytes: usize = files.values().map(Vec::len).sum();
        println!("{target:<18} {:>3} seeds {bytes:>7} bytes", files.len());
    }
    Ok(())
}

/// Replaces each target's directory under `dir` with its seeds.
fn write(dir: &Path, corpus: &Corpus) -> std::io::Result<()> {
    for (target, files) in corpus {
        let d = dir.join(target);
        if d.exists() {
            for e in std::fs::read_dir(&d)? {
                let p = e?.path();
                if p.is_file() {
                    std::fs::remove_file(p)?;
                }
            }
        }
        std::fs::create_dir_all(&d)?;
        for (name, bytes) in files {
            std::fs::write(d.join(name), bytes)?;
        }
    }
    Ok(())
}

/// Fragment streams in the `ike_reassembly` target's format (flags, ID,
/// number, total, length / 64, seconds): a message in order, one out of
/// order with a duplicate, a retransmission with a larger total, one that
/// never completes, one too large.
fn reassembly_streams() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("in_order", vec![0, 1, 1, 3, 8, 0, 0, 1, 2, 3, 8, 0, 0, 1, 3, 3, 2, 0]),
        ("shuffled_duplicate", vec![1, 2, 2, 2, 4, 0, 1, 2, 2, 2, 4, 0, 1, 2, 1, 2, 4, 1]),
        ("larger_total", vec![0, 1, 1, 2, 10, 0, 0, 1, 1, 3, 6, 0, 0, 1, 2, 2, 6, 0, 0, 1, 2, 3, 6, 0, 0, 1, 3, 3, 6, 0]),
        ("never_completes", vec![0, 3, 1, 5, 8, 0, 0, 3, 2, 5, 8, 39, 0, 3, 3, 5, 8, 0]),
        ("too_large", vec![0, 1, 1, 2, 100, 0, 0, 1, 2, 2, 100, 0]),
    ]
}

/// IPComp payloads as they arrive inside ESP: header and DEFLATE data of
/// some of the IP packets, from the data plane's own compressor.
fn ipcomp_payloads() -> Vec<(String, Vec<u8>)> {
    let mut d = esparto_esp::Deflate::new();
    let mut out = Vec::new();
    let mut text = Vec::new();
    while text.len() < 1400 {
        text.extend_from_slice(b"<tr><td>gateway</td><td>tunnel</td></tr> {\"level\":\"info\"} ");
    }
    text.truncate(1400);
    let zeros = vec![0u8; 1400];
    for (name, nh, data) in [("text_ipv4", 4u8, &text), ("zeros_ipv6", 41, &zeros)] {
        let Some(n) = d.compress(data) else { continue };
        let mut p = vec![nh, 0, 0x12, 0x34];
        p.extend_from_slice(&d.scratch()[..n]);
        out.push((name.to_string(), p));
    }
    // A bomb: 60,000 zeros, far past the 1,500-byte bound.
    if let Some(n) = d.compress(&vec![0u8; 60_000]) {
        let mut p = vec![4, 0, 0x12, 0x34];
        p.extend_from_slice(&d.scratch()[..n]);
        out.push(("bomb".to_string(), p));
    }
    out
}

fn generate() -> Corpus {
    let mut c = Corpus::new();
    let pkts = ip_packets();
    let mut add = |target: &'static str, name: &str, bytes: Vec<u8>| {
        c.entry(target).or_default().insert(name.to_string(), bytes);
    };
    for (name, p) in &pkts {
        add("wire_five_tuple", name, p.clone());
        // Whole packets are offending packets for the ICMP error emitters.
        add("wire_icmp", &format!("offending_{name}"), p.clone());
        let (l4, proto) = if p[0] >> 4 == 4 {
            add("wire_ipv4", name, p.clone());
            (&p[usize::from(p[0] & 15) * 4..], p[9])
        } else {
            add("wire_ipv6", name, p.clone());
            // The extension-header walk: next header, then the chain.
            let mut walk = vec![p[6]];
            walk.extend_from_slice(&p[40..]);
            add("wire_ipv6", &format!("walk_{name}"), walk);
            let last = ipv6::Packet::new_checked(&p[..]).ok().and_then(|v| v.upper_layer().ok());
            match last {
                Some(ul) => (&p[40 + ul.offset..], ul.protocol),
                None => (&p[40..], p[6]),
            }
        };
        match proto {
            17 => add("wire_udp", name, l4.to_vec()),
            6 => add("wire_tcp", name, l4.to_vec()),
            1 => add("wire_icmp", name, l4.to_vec()),
            58 => {
                // ICMPv6 is checked against its pseudo header: addresses first.
                let mut v = p[8..40].to_vec();
                v.extend_from_slice(l4);
                add("wire_icmp", name, v);
            }
            _ => {}
        }
    }
    for (name, p) in ipcomp_payloads() {
        add("wire_ipcomp", &name, p.clone());
        // The SA's bound: 1500 bytes, as a path MTU.
        let mut input = 1500u16.to_be_bytes().to_vec();
        input.extend_from_slice(&p);
        add("ipcomp_decompress", &name, input);
    }
    for (name, p) in esp_packets() {
        add("wire_esp", &name, p.clone());
        if !name.starts_with("plain_") {
            add("wire_espinudp", &name, p.clone());
            let mut dgram = udp_datagram(4500, 4500, &p);
            fill_udp4(&mut dgram, Ipv4Addr::new(192, 0, 2, 1), Ipv4Addr::new(192, 0, 2, 2));
            add("wire_udp", &format!("espinudp_{name}"), dgram);
        }
    }
    add("wire_espinudp", "nat_keepalive", vec![0xff]);
    let exchange = ike_exchange();
    for (name, msg) in &exchange {
        add("ike_message", name, msg.clone());
        let mut marked = vec![0; 4];
        marked.extend_from_slice(msg);
        add("wire_espinudp", &format!("ike_{name}"), marked);
    }
    for (name, msg) in ike_cookie_round() {
        add("ike_message", &name, msg);
    }
    for (name, text) in configs() {
        add("config_parse", &name, text.into_bytes());
    }
    for (name, input) in esp_decapsulate_inputs() {
        add("esp_decapsulate", &name, input);
    }
    for (name, ops) in ike_responder_inputs() {
        add("ike_responder", name, ops);
    }
    for (name, ops) in ike_cookie_inputs() {
        add("ike_cookie", name, ops);
    }
    for (name, input) in tun_gro_inputs() {
        add("tun_gro", &name, input);
    }
    for (name, input) in ike_cert_inputs() {
        add("ike_cert", &name, input);
    }
    for (name, records) in reassembly_streams() {
        add("ike_reassembly", name, records);
    }
    for (name, packet) in vici_packets() {
        add("wire_vici", &name, packet.clone());
        add("vici_request", &name, packet);
    }
    for (name, message) in vici_load_messages() {
        add("config_layer", &name, message);
    }
    c
}

// ---------------------------------------------------------------- VICI

/// VICI packets (without the length header) as `swanctl` sends them and
/// as the server answers: registrations, each command's request with the
/// keys swanctl sets, a `load-conn` of a whole connection, a response, a
/// `list-sa` event.
fn vici_packets() -> Vec<(String, Vec<u8>)> {
    use esparto_wire::vici::{Builder, Packet, PacketType};
    let packet = |kind, name: &str, message: &[u8]| {
        let mut out = Vec::new();
        Packet { kind, name, message }.emit(&mut out).expect("a seed packet");
        out.split_off(esparto_wire::vici::HEADER_LEN)
    };
    let kv = |pairs: &[(&str, &str)]| {
        let mut b = Builder::new();
        for (k, v) in pairs {
            b.kv(k, v);
        }
        b.finish().expect("a seed message")
    };
    let request = |name: &str, pairs: &[(&str, &str)]| packet(PacketType::CmdRequest, name, &kv(pairs));
    let mut conn = Builder::new();
    conn.begin("site")
        .list("local_addrs", ["192.0.2.1"])
        .list("remote_addrs", ["192.0.2.2"])
        .kv("version", "2")
        .list("proposals", ["aes256gcm16-prfsha256-x25519"])
        .begin("local-1")
        .kv("auth", "psk")
        .kv("id", "west")
        .end()
        .begin("remote-1")
        .kv("auth", "psk")
        .kv("id", "east")
        .end()
        .begin("children")
        .begin("lan")
        .list("local_ts", ["10.1.0.0/24"])
        .list("remote_ts", ["10.2.0.0/24"])
        .list("esp_proposals", ["aes256gcm16"])
        .kv("start_action", "trap")
        .end()
        .end()
        .end();
    let conn = conn.finish().expect("a seed message");
    let mut sa = Builder::new();
    sa.begin("site")
        .kv("uniqueid", "1")
        .kv("state", "ESTABLISHED")
        .begin("child-sas")
        .begin("lan-2")
        .kv("spi-in", "c0000001")
        .list("local-ts", ["10.1.0.0/24"])
        .end()
        .end()
        .end();
    let sa = sa.finish().expect("a seed message");
    vec![
        ("register_control_log".into(), packet(PacketType::EventRegister, "control-log", &[])),
        ("register_list_sa".into(), packet(PacketType::EventRegister, "list-sa", &[])),
        ("unregister_list_sa".into(), packet(PacketType::EventUnregister, "list-sa", &[])),
        ("register_log".into(), packet(PacketType::EventRegister, "log", &[])),
        ("version".into(), request("version", &[])),
        ("stats".into(), request("stats", &[])),
        ("list_sas".into(), request("list-sas", &[])),
        ("list_sas_filtered".into(), request("list-sas", &[("ike", "site"), ("ike-id", "1"), ("child-id", "2"), ("noblock", "yes")])),
        ("list_conns".into(), request("list-conns", &[("ike", "site")])),
        ("list_pols".into(), request("list-policies", &[("trap", "yes"), ("drop", "yes"), ("pass", "yes")])),
        ("initiate".into(), request("initiate", &[("child", "lan"), ("timeout", "20000"), ("loglevel", "1")])),
        ("initiate_nowait".into(), request("initiate", &[("ike", "site"), ("timeout", "-1")])),
        ("terminate".into(), request("terminate", &[("ike", "site"), ("loglevel", "1")])),
        ("terminate_id".into(), request("terminate", &[("ike-id", "1"), ("force", "yes"), ("timeout", "2000")])),
        ("rekey".into(), request("rekey", &[("child", "lan")])),
        ("rekey_ike_id".into(), request("rekey", &[("ike_id", "1"), ("reauth", "yes")])),
        ("get_counters".into(), request("get-counters", &[("all", "yes")])),
        ("get_conns".into(), request("get-conns", &[])),
        ("load_conn".into(), packet(PacketType::CmdRequest, "load-conn", &conn)),
        ("load_cert".into(), request("load-cert", &[("type", "X509"), ("flag", "CA"), ("data", "0\u{82}\u{1}\n")])),
        ("load_key".into(), request("load-key", &[("type", "ecdsa"), ("data", "0w\u{2}\u{1}\u{1}\u{4} ")])),
        ("unload_key".into(), request("unload-key", &[("id", "00112233445566778899aabbccddeeff00112233")])),
        ("list_authorities".into(), request("list-authorities", &[("name", "site-ca")])),
        ("clear_creds".into(), request("clear-creds", &[])),
        ("unknown_command".into(), request("reboot", &[])),
        ("response".into(), packet(PacketType::CmdResponse, "", &kv(&[("success", "yes")]))),
        ("event_list_sa".into(), packet(PacketType::Event, "list-sa", &sa)),
        ("confirm".into(), packet(PacketType::EventConfirm, "", &[])),
        ("cmd_unknown".into(), packet(PacketType::CmdUnknown, "", &[])),
    ]
}

/// The messages of `load-conn` and `load-shared` requests, for the
/// `config_layer` target (the message alone, no packet header).
fn vici_load_messages() -> Vec<(String, Vec<u8>)> {
    use esparto_wire::vici::Builder;
    let mut conn = Builder::new();
    conn.begin("site")
        .list("local_addrs", ["192.0.2.1"])
        .list("remote_addrs", ["192.0.2.2"])
        .kv("version", "2")
        .kv("rekey_time", "4h")
        .kv("encap", "yes")
        .begin("local-1")
        .kv("auth", "psk")
        .kv("id", "west")
        .end()
        .begin("remote-1")
        .kv("auth", "psk")
        .kv("id", "east")
        .end()
        .begin("children")
        .begin("lan")
        .list("local_ts", ["10.1.0.0/24"])
        .list("remote_ts", ["10.2.0.0/24"])
        .list("esp_proposals", ["aes256gcm16"])
        .kv("replay_window", "128")
        .kv("start_action", "trap")
        .end()
        .end()
        .end();
    let mut shared = Builder::new();
    shared.kv("id", "ike-site").kv("type", "IKE").kv("data", [0u8, 1, 2, 3, 0xff, 0x7f, 0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48, 0x49, 0x4a, 0x4b, 0x4c, 0x4d, 0x4e]);
    shared.list("owners", ["west", "east"]);
    let mut typo = Builder::new();
    typo.begin("other")
        .list("remote_addrs", ["192.0.2.3"])
        .begin("children")
        .begin("net")
        .list("esp_proposal", ["aes256gcm16"])
        .end()
        .end()
        .end();
    let mut certs = Builder::new();
    certs
        .begin("certs")
        .list("remote_addrs", ["192.0.2.4"])
        .begin("local")
        .kv("auth", "pubkey")
        .list("certs", [b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n".as_slice(), &[0x30, 0x82, 0x01, 0x00]])
        .end()
        .begin("remote")
        .kv("auth", "pubkey")
        .list("cacerts", [[0x30u8, 0x03, 0x02, 0x01, 0x00]])
        .end()
        .end();
    let mut authority = Builder::new();
    authority.begin("site-ca").kv("cacert", [0x30u8, 0x82, 0x01, 0x0a, 0x02]).end();
    vec![
        ("load_conn".into(), conn.finish().expect("a seed message")),
        ("load_conn_certs".into(), certs.finish().expect("a seed message")),
        ("load_authority".into(), authority.finish().expect("a seed message")),
        ("load_conn_typo".into(), typo.finish().expect("a seed message")),
        ("load_shared".into(), shared.finish().expect("a seed message")),
    ]
}

// ---------------------------------------------------------------- packets

/// Decodes a hex dump of `crates/esparto-wire/testdata/` (`#` comments).
fn hex(text: &str) -> Vec<u8> {
    let digits: String =
        text.lines().map(|l| l.split('#').next().unwrap_or("")).flat_map(str::split_whitespace).collect();
    (0..digits.len() / 2)
        .map(|i| u8::from_str_radix(&digits[2 * i..2 * i + 2], 16).expect("hex digits"))
        .collect()
}

const V4_SRC: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 2);
const V4_DST: Ipv4Addr = Ipv4Addr::new(10, 2, 0, 3);
const V6_SRC: Ipv6Addr = Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 2);
const V6_DST: Ipv6Addr = Ipv6Addr::new(0xfd00, 2, 0, 0, 0, 0, 0, 3);

/// Options of a Linux data segment: NOP, NOP, timestamps.
const TCP_TS: [u8; 12] = [1, 1, 8, 10, 0, 0, 0x10, 0, 0, 0, 0x20, 0];
/// Options of a SYN: MSS 1460, SACK permitted, timestamps, NOP, window scale 7.
const TCP_SYN: [u8; 20] = [2, 4, 5, 180, 4, 2, 8, 10, 0, 0, 0x10, 0, 0, 0, 0, 0, 1, 3, 3, 7];

/// An IPv4 packet around `payload` (DF, TTL 64, header checksum filled).
fn v4(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, ident: u16, frag: Option<(bool, u16)>, payload: &[u8]) -> Vec<u8> {
    let (more_frags, frag_offset) = frag.unwrap_or((false, 0));
    let r = ipv4::Repr {
        src_addr: src,
        dst_addr: dst,
        protocol,
        payload_len: payload.len(),
        ttl: 64,
        dscp: 0,
        ecn: 0,
        ident,
        dont_frag: frag.is_none(),
        more_frags,
        frag_offset,
    };
    let mut v = vec![0u8; r.buffer_len()];
    let mut p = ipv4::Packet::new_unchecked(&mut v[..]);
    r.emit(&mut p).expect("sized for the repr");
    p.payload_mut().copy_from_slice(payload);
    v
}

/// An IPv6 packet around `payload`.
fn v6(src: Ipv6Addr, dst: Ipv6Addr, next_header: u8, payload: &[u8]) -> Vec<u8> {
    let r = ipv6::Repr {
        src_addr: src,
        dst_addr: dst,
        next_header,
        payload_len: payload.len(),
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0x12345,
    };
    let mut v = vec![0u8; r.buffer_len()];
    let mut p = ipv6::Packet::new_unchecked(&mut v[..]);
    r.emit(&mut p).expect("sized for the repr");
    p.payload_mut().copy_from_slice(payload);
    v
}

/// A UDP header and data; the checksum is left for `fill_udp4/6`.
fn udp_datagram(src_port: u16, dst_port: u16, data: &[u8]) -> Vec<u8> {
    let r = udp::Repr { src_port, dst_port, payload_len: data.len() };
    let mut v = vec![0u8; r.buffer_len()];
    let mut p = udp::Packet::new_unchecked(&mut v[..]);
    r.emit(&mut p).expect("sized for the repr");
    p.payload_mut().copy_from_slice(data);
    v
}

fn fill_udp4(d: &mut [u8], src: Ipv4Addr, dst: Ipv4Addr) {
    udp::Packet::new_unchecked(d).fill_checksum_v4(src, dst);
}

fn udp4(src: Ipv4Addr, dst: Ipv4Addr, ports: (u16, u16), ident: u16, data: &[u8]) -> Vec<u8> {
    let mut d = udp_datagram(ports.0, ports.1, data);
    fill_udp4(&mut d, src, dst);
    v4(src, dst, 17, ident, None, &d)
}

fn udp6(ports: (u16, u16), data: &[u8]) -> Vec<u8> {
    let mut d = udp_datagram(ports.0, ports.1, data);
    udp::Packet::new_unchecked(&mut d[..]).fill_checksum_v6(V6_SRC, V6_DST);
    v6(V6_SRC, V6_DST, 17, &d)
}

/// A TCP segment (header, options, data); `Some((src, dst))` fills the
/// checksum for that IP version's pseudo header.
struct Seg<'a> {
    ports: (u16, u16),
    seq: u32,
    ack: u32,
    flags: u8,
    options: &'a [u8],
    data: &'a [u8],
}

fn tcp_segment(s: &Seg<'_>) -> Vec<u8> {
    let r = tcp::Repr {
        src_port: s.ports.0,
        dst_port: s.ports.1,
        seq_number: s.seq,
        ack_number: s.ack,
        flags: s.flags,
        window: 502,
        urgent_ptr: 0,
        options: s.options,
        payload_len: s.data.len(),
    };
    let mut v = vec![0u8; r.buffer_len()];
    let mut p = tcp::Packet::new_unchecked(&mut v[..]);
    r.emit(&mut p).expect("sized for the repr");
    p.payload_mut().copy_from_slice(s.data);
    v
}

fn tcp4(ident: u16, s: &Seg<'_>) -> Vec<u8> {
    let mut t = tcp_segment(s);
    tcp::Packet::new_unchecked(&mut t[..]).fill_checksum_v4(V4_SRC, V4_DST).expect("segment fits");
    v4(V4_SRC, V4_DST, 6, ident, None, &t)
}

fn tcp6(s: &Seg<'_>) -> Vec<u8> {
    let mut t = tcp_segment(s);
    tcp::Packet::new_unchecked(&mut t[..]).fill_checksum_v6(V6_SRC, V6_DST).expect("segment fits");
    v6(V6_SRC, V6_DST, 6, &t)
}

const SYN: u8 = 0x02;
const ACK: u8 = 0x10;
const PSH: u8 = 0x08;
const FIN: u8 = 0x01;

/// Bytes 0, 1, 2, … (mod 251, so no period of 256 lines up with anything).
fn data(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8).collect()
}

/// An ICMP echo request with its checksum (ICMPv6: over the pseudo header too).
fn echo(v6: bool, data: &[u8]) -> Vec<u8> {
    let mut m = vec![if v6 { 128 } else { 8 }, 0, 0, 0, 0x42, 0x42, 0, 7];
    m.extend_from_slice(data);
    let mut sum = esparto_wire::checksum::data(&m);
    if v6 {
        let ph = esparto_wire::checksum::pseudo_header_v6(V6_SRC, V6_DST, 58, m.len() as u32);
        sum = esparto_wire::checksum::combine(&[sum, ph]);
    }
    m[2..4].copy_from_slice(&(!sum).to_be_bytes());
    m
}

/// Real IP packets: the wire crate's test data and packets its emitters
/// build, of every kind the data plane meets.
fn ip_packets() -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = [
        ("ipv4_icmp_echo", include_str!("../../esparto-wire/testdata/ipv4_icmp_echo.hex")),
        ("ipv4_options_igmp", include_str!("../../esparto-wire/testdata/ipv4_options_igmp.hex")),
        ("ipv4_tcp_syn_options", include_str!("../../esparto-wire/testdata/ipv4_tcp_syn_options.hex")),
        ("ipv4_udp_dns", include_str!("../../esparto-wire/testdata/ipv4_udp_dns.hex")),
        ("ipv6_hbh_frag_udp", include_str!("../../esparto-wire/testdata/ipv6_hbh_frag_udp.hex")),
        ("ipv6_icmpv6_echo", include_str!("../../esparto-wire/testdata/ipv6_icmpv6_echo.hex")),
    ]
    .into_iter()
    .map(|(n, t)| (n.to_string(), hex(t)))
    .collect();
    let mut add = |n: &str, p: Vec<u8>| v.push((n.to_string(), p));
    add("ipv4_udp", udp4(V4_SRC, V4_DST, (40000, 5201), 1, &data(64)));
    let seg = Seg { ports: (40000, 443), seq: 0x1234_5679, ack: 0x0bad_cafe, flags: ACK | PSH, options: &TCP_TS, data: &data(120) };
    let tcp_data = tcp4(2, &seg);
    add("ipv4_tcp_data", tcp_data.clone());
    add("ipv4_tcp_syn_mss", tcp4(3, &Seg { flags: SYN, ack: 0, options: &TCP_SYN, data: &[], ..seg }));
    add("ipv4_tcp_fin", tcp4(4, &Seg { flags: FIN | ACK, options: &[], data: &[], ..seg }));
    add("ipv4_icmp_echo_built", v4(V4_SRC, V4_DST, 1, 5, None, &echo(false, &data(32))));
    // A UDP datagram in two fragments: the first has the ports, the second none.
    let big = {
        let mut d = udp_datagram(40001, 5201, &data(1400));
        fill_udp4(&mut d, V4_SRC, V4_DST);
        d
    };
    add("ipv4_frag_first", v4(V4_SRC, V4_DST, 17, 6, Some((true, 0)), &big[..1000]));
    add("ipv4_frag_last", v4(V4_SRC, V4_DST, 17, 6, Some((false, 1000)), &big[1000..]));
    add("ipv6_udp", udp6((40000, 5201), &data(64)));
    let tcp6_data = tcp6(&seg);
    add("ipv6_tcp_data", tcp6_data.clone());
    add("ipv6_tcp_syn_mss", tcp6(&Seg { flags: SYN, ack: 0, options: &TCP_SYN, data: &[], ..seg }));
    add("ipv6_icmpv6_echo_built", v6(V6_SRC, V6_DST, 58, &echo(true, &data(32))));
    // Destination options (PadN) in front of UDP.
    let mut dst_opts = vec![17, 0, 1, 4, 0, 0, 0, 0];
    let mut d = udp_datagram(40000, 53, &data(24));
    udp::Packet::new_unchecked(&mut d[..]).fill_checksum_v6(V6_SRC, V6_DST);
    dst_opts.extend_from_slice(&d);
    add("ipv6_dstopts_udp", v6(V6_SRC, V6_DST, 60, &dst_opts));
    // The data plane's own ICMP errors about packets too big for the tunnel.
    let mut out = [0u8; 1500];
    let n = icmp::frag_needed_v4(&tcp_data, 1380, Ipv4Addr::new(192, 0, 2, 1), &mut out).expect("an error fits");
    add("ipv4_icmp_frag_needed", out[..n].to_vec());
    let gw = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
    let n = icmp::packet_too_big_v6(&tcp6_data, 1360, gw, &mut out).expect("an error fits");
    add("ipv6_icmpv6_packet_too_big", out[..n].to_vec());
    v
}

// -------------------------------------------------------------------- ESP

fn now() -> Instant {
    use std::sync::OnceLock;
    static T: OnceLock<Instant> = OnceLock::new();
    *T.get_or_init(Instant::now)
}

fn suite_name(slot: usize) -> String {
    esp_input::SUITES[slot].name().replace(['-', '/'], "_")
}

/// Inner packets the ESP seeds carry: inside the `esp_decapsulate` SAs'
/// selectors, of both families.
fn inner_packets() -> Vec<Vec<u8>> {
    let seg = Seg { ports: (40000, 443), seq: 1, ack: 1, flags: ACK | PSH, options: &TCP_TS, data: &data(60) };
    vec![
        udp4(V4_SRC, V4_DST, (40000, 5201), 1, &data(40)),
        tcp6(&seg),
        v4(V4_SRC, V4_DST, 1, 2, None, &echo(false, &data(16))),
        udp4(Ipv4Addr::new(192, 0, 2, 7), V4_DST, (53, 33000), 3, &data(30)),
    ]
}

/// `inner` encapsulated by the real outbound path of `sa`.
fn encapsulate(sa: &mut OutboundSa, inner: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; HEADROOM + inner.len() + TAILROOM];
    buf[HEADROOM..HEADROOM + inner.len()].copy_from_slice(inner);
    let nh = next_header_for(inner).expect("an IP packet");
    let mut expiry = None;
    let esp = sa.encapsulate(now(), &mut buf, HEADROOM..HEADROOM + inner.len(), nh, &mut expiry).expect("fits the MTU");
    buf[esp].to_vec()
}

/// The plaintext of an ESP packet of `slot` (padding and trailer included).
fn decrypt(slot: usize, seq: u64, esn: bool, packet: &[u8]) -> Vec<u8> {
    let c = EspCipher::new(esp_input::SUITES[slot], &esp_input::keymat(slot)).expect("test keys fit");
    let mut p = packet.to_vec();
    let r = c.open(seq, esn, &mut p).expect("our own packet opens");
    p[r].to_vec()
}

/// ESP packets of every `esp_decapsulate` suite, with and without ESN, and
/// their plaintexts (for the trailer parser).
fn esp_packets() -> Vec<(String, Vec<u8>)> {
    let mut v = Vec::new();
    for slot in 0..SLOTS {
        for esn in [false, true] {
            let setup = Setup { esn, window: 64, lifetime: false };
            let mut sa = OutboundSa::owned(&setup.sa_config(slot), now()).expect("test keys fit");
            for (i, inner) in inner_packets().iter().enumerate().take(2) {
                let p = encapsulate(&mut sa, inner);
                let tag = format!("{}{}_{i}", suite_name(slot), if esn { "_esn" } else { "" });
                if !esn {
                    v.push((format!("plain_{tag}"), decrypt(slot, i as u64 + 1, esn, &p)));
                }
                v.push((tag, p));
            }
        }
    }
    v
}

fn rec(slot: usize, kind: Kind<'_>) -> Record<'_> {
    Record { slot, placed: false, kind }
}

fn encode(setup: Setup, records: &[Record<'_>]) -> Vec<u8> {
    let mut out = vec![setup.encode()];
    for r in records {
        r.encode(&mut out);
    }
    out
}

/// Inputs for `esp_decapsulate`: per suite and setup, real packets from
/// the outbound path delivered as they are, their plaintexts sealed again,
/// and the cases after the integrity check (dummy, bad padding, outside
/// the selectors, port selector, replays, reordering, a flipped byte, an
/// old packet left of the window); the ESN subspace boundary; a lifetime
/// running out.
fn esp_decapsulate_inputs() -> Vec<(String, Vec<u8>)> {
    let inner = inner_packets();
    let outside = udp4(Ipv4Addr::new(10, 9, 0, 1), V4_DST, (40000, 5201), 4, &data(20));
    let bad_padding = {
        let mut p = inner[0].clone();
        p.extend_from_slice(&[1, 3, 2, 4]); // padding 1, 3: not 1, 2
        p
    };
    // Version nibble 0: the harness gives it next header 59.
    let dummy: &[u8] = b"\0dummy";
    // An IPv4 header whose total length runs past the payload.
    let not_ip = &inner[0][..30];
    let mut v = Vec::new();
    let setups = [
        ("", Setup { esn: false, window: 64, lifetime: false }),
        ("esn_", Setup { esn: true, window: 128, lifetime: false }),
        ("nowindow_", Setup { esn: false, window: 0, lifetime: false }),
    ];
    for (prefix, setup) in setups {
        for slot in 0..SLOTS {
            let mut sa = OutboundSa::owned(&setup.sa_config(slot), now()).expect("test keys fit");
            let real: Vec<Vec<u8>> = inner.iter().map(|p| encapsulate(&mut sa, p)).collect();
            let plain1 = decrypt(slot, 2, setup.esn, &real[1]);
            let records = [
                rec(slot, Kind::Raw { seq: None, bytes: &real[0] }),
                rec(slot, Kind::Sealed { seq: Seq::Next, fix: false, bytes: &plain1 }),
                Record { placed: true, ..rec(slot, Kind::Raw { seq: None, bytes: &real[2] }) },
                rec(slot, Kind::Raw { seq: None, bytes: &real[3] }),
                rec(slot, Kind::Resend(1)),
                rec(slot, Kind::Flipped { seq: Seq::Next, fix: true, pos: 30, xor: 1, bytes: &inner[0] }),
                rec(slot, Kind::Sealed { seq: Seq::Next, fix: true, bytes: dummy }),
                rec(slot, Kind::Sealed { seq: Seq::Next, fix: true, bytes: &outside }),
                rec(slot, Kind::Sealed { seq: Seq::Next, fix: false, bytes: &bad_padding }),
                rec(slot, Kind::Sealed { seq: Seq::Back(3), fix: true, bytes: &inner[1] }),
                rec(slot, Kind::Raw { seq: Some(Seq::Next), bytes: &real[0] }),
                rec(slot, Kind::Sealed { seq: Seq::Ahead(300), fix: true, bytes: &inner[2] }),
                rec(slot, Kind::Sealed { seq: Seq::Back(200), fix: true, bytes: &inner[2] }),
            ];
            v.push((format!("{prefix}{}", suite_name(slot)), encode(setup, &records)));
        }
    }
    // ESN: across the boundary of the first 2^32 subspace, and back.
    let esn = Setup { esn: true, window: 64, lifetime: false };
    let boundary = [
        rec(0, Kind::Sealed { seq: Seq::At(0xffff_fff0), fix: true, bytes: &inner[0] }),
        rec(0, Kind::Sealed { seq: Seq::Ahead(0x20), fix: true, bytes: &inner[1] }),
        rec(0, Kind::Sealed { seq: Seq::Back(0x18), fix: true, bytes: &inner[2] }),
        rec(0, Kind::Sealed { seq: Seq::At(0x2_0000_0001), fix: true, bytes: &inner[0] }),
    ];
    v.push(("esn_boundary".to_string(), encode(esn, &boundary)));
    // Without ESN the counter stops short of wrapping: the next is 0.
    let no_esn = Setup { esn: false, window: 64, lifetime: false };
    let wrap = [
        rec(2, Kind::Sealed { seq: Seq::At(0xffff_ffff), fix: true, bytes: &inner[0] }),
        rec(2, Kind::Sealed { seq: Seq::Next, fix: true, bytes: &inner[0] }),
    ];
    v.push(("seq_wrap".to_string(), encode(no_esn, &wrap)));
    // A packet lifetime: soft after SOFT_PACKETS, hard after HARD_PACKETS.
    let lifetime = Setup { esn: false, window: 1024, lifetime: true };
    let expiring: Vec<Record<'_>> = (0..esp_input::HARD_PACKETS as usize + 2)
        .map(|i| rec(1, Kind::Sealed { seq: Seq::Next, fix: true, bytes: &inner[i % inner.len()] }))
        .collect();
    v.push(("lifetime".to_string(), encode(lifetime, &expiring)));
    // The same with packets refused after the integrity check, which count
    // all the same: a dummy, the one that crosses the soft limit (outside
    // the selectors), one that is not IP; the next crosses the hard limit.
    let crossing: Vec<Record<'_>> = [&inner[0][..], dummy, &outside[..], not_ip, &inner[2][..], &inner[0][..]]
        .into_iter()
        .map(|p| rec(0, Kind::Sealed { seq: Seq::Next, fix: true, bytes: p }))
        .collect();
    v.push(("lifetime_crossed_by_refused_packets".to_string(), encode(lifetime, &crossing)));
    v
}

// -------------------------------------------------------------------- IKE

fn endpoint(seed: u64, cfg: EndpointConfig, me: &str, peer: &str, local: &str, remote: &str, ts: (&str, &str)) -> Endpoint {
    let mut ep = Endpoint::new(cfg, Box::new(DeterministicRng::new(seed)), Box::new(RandomSpiAllocator::new()));
    let mut c = ConnectionConfig::new("gw", "aes256gcm16-prfsha256-x25519, aes128-sha256-ecp256").expect("valid proposals");
    c.local_addrs = vec![local.parse().expect("address")];
    c.remote_addrs = vec![remote.parse().expect("address")];
    c.local.id = Some(Identity::parse(me).expect("identity"));
    c.remote.id = Some(Identity::parse(peer).expect("identity"));
    let mut net = ChildConfig::new("net", ts.0, ts.1, "aes256gcm16, aes128-sha256-x25519").expect("valid child");
    net.per_cpu_sas = PerCpuSas::OnDemand;
    net.per_cpu_max = 3;
    c.children.push(net);
    c.children.push(ChildConfig::new("pfs", ts.0, ts.1, "aes128gcm16-x25519").expect("valid child"));
    ep.add_connection(c).expect("valid connection");
    let ids = [Identity::parse(me).expect("identity"), Identity::parse(peer).expect("identity")];
    ep.secrets_mut().add_psk(&ids, b"fuzz psk");
    ep
}

/// The IKE message in a datagram (after the non-ESP marker on port 4500).
fn ike_payload(t: &Transmit) -> &[u8] {
    if t.local.port() == 4500 { t.data.get(4..).unwrap_or(&[]) } else { &t.data }
}

/// A name for a datagram: its order, exchange and direction.
fn ike_name(i: usize, t: &Transmit) -> String {
    let h = Header::new_checked(ike_payload(t)).ok().and_then(|h| HeaderRepr::parse(&h).ok());
    match h {
        Some(h) => format!(
            "{i:02}_{}_{}",
            h.exchange.name().unwrap_or("unknown").to_lowercase(),
            if h.response { "response" } else { "request" }
        ),
        None => format!("{i:02}_datagram"),
    }
}

/// Delivers every datagram both ways until both are quiet; records them.
fn pump(a: &mut Endpoint, b: &mut Endpoint, now: Instant, log: &mut Vec<(String, Vec<u8>)>) {
    loop {
        let mut moved = false;
        for a_to_b in [true, false] {
            let (from, to) = if a_to_b { (&mut *a, &mut *b) } else { (&mut *b, &mut *a) };
            while let Some(t) = from.poll_transmit() {
                log.push((ike_name(log.len(), &t), ike_payload(&t).to_vec()));
                to.handle_datagram(now, esparto_ike::UnixTime::now(), t.remote, t.local, &t.data);
                moved = true;
            }
        }
        if !moved {
            return;
        }
    }
}

/// Every message of a full exchange: IKE_SA_INIT, IKE_AUTH, a second
/// Child SA with PFS, a per-CPU Child SA, a Child SA rekey, a liveness
/// check, an IKE SA rekey, and the delete.
fn ike_exchange() -> Vec<(String, Vec<u8>)> {
    const MOON: &str = "10.0.0.1";
    const SUN: &str = "10.0.0.2";
    let mut i = endpoint(1, EndpointConfig::default(), "@moon", "@sun", MOON, SUN, ("10.1.0.0/16", "10.2.0.0/16"));
    let mut r = endpoint(2, EndpointConfig::default(), "@sun", "@moon", SUN, MOON, ("10.2.0.0/16", "10.1.0.0/16"));
    let mut now = now();
    let mut log = Vec::new();
    let mut ike = i.initiate(now, "gw", None).expect("connection exists");
    pump(&mut i, &mut r, now, &mut log);
    let mut children = Vec::new();
    let drain = |ep: &mut Endpoint, ike: &mut IkeSaId, children: &mut Vec<u32>| {
        while let Some(e) = ep.poll_event() {
            match e {
                Event::ChildSaEstablished(c) => children.push(c.inbound_spi),
                Event::IkeSaRekeyed { new, .. } => *ike = new,
                _ => {}
            }
        }
    };
    drain(&mut i, &mut ike, &mut children);
    let _ = i.acquire(now, "gw", "pfs", None);
    pump(&mut i, &mut r, now, &mut log);
    let _ = i.acquire(now, "gw", "net", Some(1));
    pump(&mut i, &mut r, now, &mut log);
    drain(&mut i, &mut ike, &mut children);
    if let Some(&spi) = children.first() {
        let _ = i.rekey_child(now, ike, spi);
        pump(&mut i, &mut r, now, &mut log);
    }
    now += Duration::from_secs(1);
    let _ = i.liveness_check(now, ike);
    pump(&mut i, &mut r, now, &mut log);
    let _ = i.rekey_ike(now, ike);
    pump(&mut i, &mut r, now, &mut log);
    drain(&mut i, &mut ike, &mut children);
    let _ = i.terminate(now, ike);
    pump(&mut i, &mut r, now, &mut log);
    log
}

/// IKE_SA_INIT under load: the responder asks for a cookie, the initiator
/// comes back with it.
fn ike_cookie_round() -> Vec<(String, Vec<u8>)> {
    let strict = EndpointConfig { cookie_threshold: 0, ..EndpointConfig::default() };
    let mut i = endpoint(3, EndpointConfig::default(), "@moon", "@sun", "10.0.0.1", "10.0.0.2", ("10.1.0.0/16", "10.2.0.0/16"));
    let mut r = endpoint(4, strict, "@sun", "@moon", "10.0.0.2", "10.0.0.1", ("10.2.0.0/16", "10.1.0.0/16"));
    let now = now();
    let mut log = Vec::new();
    let _ = i.initiate(now, "gw", None);
    pump(&mut i, &mut r, now, &mut log);
    log.into_iter().take(4).map(|(n, m)| (format!("cookie_{n}"), m)).collect()
}

/// Operation sequences in `ike_responder`'s format (its module comment):
/// 0 delivers the initiator's next datagram, 1 p x delivers it with a byte
/// flipped, 2 n … injects n bytes, 3 t advances the clock t × 250 ms, 4 k
/// replays, 5 asks for the PFS child and a liveness check, 6 k rekeys a
/// child (k even) or the IKE SA (k odd), 7 k asks for a per-CPU child.
fn ike_responder_inputs() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("exchange", vec![0, 0]),
        ("exchange_pfs_liveness", vec![0, 0, 5, 0, 0, 0]),
        ("exchange_per_cpu", vec![0, 0, 7, 0, 0, 7, 1, 0, 7, 2, 0, 7, 3, 0]),
        ("exchange_rekey_child", vec![0, 0, 6, 0, 0, 0]),
        ("exchange_rekey_ike", vec![0, 0, 6, 1, 0, 0]),
        ("exchange_rekey_both", vec![0, 0, 7, 1, 0, 6, 2, 6, 1, 0, 0, 0, 0]),
        ("exchange_replayed", vec![0, 4, 0, 0, 4, 1, 4, 0]),
        ("exchange_retransmit", vec![0, 3, 8, 0, 3, 40, 0]),
        ("exchange_timeout", vec![0, 3, 255, 3, 255, 3, 255, 0]),
        ("flipped_init", vec![1, 9, 0x40, 0, 0]),
        ("flipped_auth", vec![0, 1, 60, 1, 0]),
        ("injected", vec![2, 8, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0, 2, 5, 0, 0, 0, 0, 0, 0, 0]),
    ]
}

/// Operation sequences in `ike_cookie`'s format (its module comment): a
/// threshold byte, then (op, a, b) triples: op % 7 = 0 request, 1 with a
/// cookie received earlier, 2 with op / 7 % 70 arbitrary cookie bytes,
/// 3 time passes, 4 mangled, 5 raw datagram, 6 on port 4500.
fn ike_cookie_inputs() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("cookie_round", vec![0, 0, 4, 1, 1, 4, 1]),
        ("cookie_other_address", vec![0, 0, 4, 1, 1, 5, 1]),
        ("cookie_other_nonce", vec![0, 0, 4, 1, 1, 8, 1]),
        ("cookie_other_spi", vec![0, 0, 4, 1, 1, 4, 2]),
        ("cookie_expired", vec![0, 0, 4, 1, 3, 200, 0, 3, 200, 0, 1, 4, 1]),
        ("cookie_grace", vec![0, 0, 4, 1, 3, 84, 0, 1, 4, 1]),
        ("cookie_forged", vec![0, 0, 4, 1, 2 + 7 * 16, 4, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]),
        ("no_cookie_needed", vec![9, 0, 0, 1, 0, 1, 2, 0, 2, 3]),
        ("per_source_limit", vec![9, 0, 0, 1, 0, 0, 2, 0, 0, 3, 0, 0, 4, 0, 0, 5]),
        ("global_cap", vec![9, 0, 0, 1, 0, 1, 2, 0, 2, 3, 0, 3, 4, 0, 4, 5, 0, 5, 6, 0, 6, 7, 0, 7, 8, 0, 0, 9, 0, 1, 10]),
        ("nat_t", vec![9, 6, 0, 1, 6, 1, 2]),
        ("mangled", vec![9, 4, 10, 1, 4, 99, 2]),
        ("raw", vec![9, 5 + 7 * 8, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 5 + 7 * 4, 1, 0, 0, 0, 0, 0]),
    ]
}

// ----------------------------------------------------------------- config

/// `examples/*.toml` and variants: other suites and options, and errors of
/// each kind the loader reports.
fn configs() -> Vec<(String, String)> {
    let psk = include_str!("../../../examples/site-to-site-psk.toml");
    let west = include_str!("../../../examples/static-west.toml");
    let east = include_str!("../../../examples/static-east.toml");
    let key = |n: usize, seed: u8| format!("\"0x{}\"", (0..n).map(|i| format!("{:02x}", (i as u8).wrapping_mul(37) ^ seed)).collect::<String>());
    let first_key = "\"0x1b24b8eaeca43a2fb039351545c35b31e02d7aa660145e8a05669890be8a24af6d3e526f\"";
    let v = vec![
        ("site_to_site_psk", psk.to_string()),
        ("static_west", west.to_string()),
        ("static_east", east.to_string()),
        ("psk_eager_restart", psk.replace("\"on-demand\"", "\"eager\"").replace("start_action = \"start\"", "start_action = \"trap\"\ndpd_action = \"restart\"")),
        ("psk_ipv6_outer", psk.replace("192.0.2.1", "2001:db8::1").replace("192.0.2.2", "2001:db8::2")),
        ("psk_limits", psk.replace("rekey_time = \"1h\"", "rekey_time = \"20m\"\nlife_time = \"30m\"\nrekey_bytes = 1000000000\nrekey_packets = 1000000\nreplay_window = 32768")),
        ("static_chacha", west.replace("\"aes256gcm16\"", "\"chacha20poly1305\"")),
        ("static_cbc_sha256", {
            let mut t = west.replace("\"aes256gcm16\"", "\"aes128-sha256\"");
            for (i, line) in west.lines().filter(|l| l.contains("_key = ")).enumerate() {
                let (k, _) = line.split_once('=').expect("a key line");
                t = t.replace(line, &format!("{k}= {}", key(48, i as u8)));
            }
            t
        }),
        ("static_daemon_options", west.replace("workers = 2", "workers = 4\ncpus = [0, 1]\ntun_queue_len = 1024\nwindow_size = 4\ncookie_threshold = 10")),
        ("err_unclosed_table", psk.replace("[connections.site.children.lan]", "[connections.site.children.lan")),
        ("err_unknown_key", psk.replace("encap = true", "encapsulation = true")),
        ("err_reserved_spi", west.replace("in_spi = 0xc0000100", "in_spi = 255")),
        ("err_short_key", west.replacen(first_key, "\"0x1b24b8ea\"", 1)),
        ("err_duplicate_spi", west.replace("in_spi = 0xc0000101", "in_spi = 0xc0000100")),
        ("err_bad_duration", psk.replace("\"1h\"", "\"1 fortnight\"")),
        ("err_bad_selector", psk.replace("\"10.1.0.0/16\"", "\"10.1.0.0/33\"")),
        ("err_two_proposals", west.replace("[\"aes256gcm16\"]", "[\"aes256gcm16\", \"aes128gcm16\"]")),
        ("err_wrong_type", west.replace("workers = 2", "workers = \"two\"")),
        ("err_no_children", "[connections.a]\nremote_addrs = [\"192.0.2.2\"]\n".to_string()),
    ];
    v.into_iter().map(|(n, t)| (format!("{n}.toml"), t)).collect()
}

// -------------------------------------------------------------------- GRO

/// One packet in `tun_gro`'s format: flags (bit 0: fix lengths and
/// checksums; never set here, the packets are right), 16-bit length, bytes.
fn gro_packet(out: &mut Vec<u8>, p: &[u8]) {
    out.push(0);
    out.extend_from_slice(&(p.len() as u16).to_be_bytes());
    out.extend_from_slice(p);
}

fn gro_input(uso: bool, packets: &[Vec<u8>]) -> Vec<u8> {
    let mut out = vec![u8::from(uso)];
    for p in packets {
        gro_packet(&mut out, p);
    }
    out
}

// ------------------------------------------------------------ ike_cert

/// A PKCS#8 (v1) Ed25519 key from a fixed seed: Ed25519 signs
/// deterministically, so the certificates below are the same every run.
fn ed25519_key(seed: u8) -> rcgen::KeyPair {
    let mut der = vec![0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20];
    der.extend_from_slice(&[seed; 32]);
    rcgen::KeyPair::try_from(der.as_slice()).expect("Ed25519 key")
}

/// A CA and a certificate for `moon.example` it signed (DER), fixed serial
/// numbers and rcgen's fixed default validity.
fn ike_cert_chain() -> (Vec<u8>, Vec<u8>) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyUsagePurpose, SerialNumber};
    let ca_key = ed25519_key(1);
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca.serial_number = Some(SerialNumber::from(1u64));
    let ca_der = ca.self_signed(&ca_key).expect("ca").der().to_vec();
    let issuer = Issuer::from_params(&ca, &ca_key);
    let mut ee = CertificateParams::new(vec!["moon.example".to_string()]).expect("params");
    ee.serial_number = Some(SerialNumber::from(2u64));
    let ee_der = ee.signed_by(&ed25519_key(2), &issuer).expect("ee").der().to_vec();
    (ca_der, ee_der)
}

/// Inputs for `ike_cert`: a selector byte (identity in bits 0–1, bit 7 puts
/// the target's own end-entity certificate first), CERT bodies each after a
/// two-octet length, then AUTH data.
fn ike_cert_inputs() -> Vec<(String, Vec<u8>)> {
    let (ca, ee) = ike_cert_chain();
    let body = |enc: u8, der: &[u8]| {
        let mut b = ((der.len() + 1) as u16).to_be_bytes().to_vec();
        b.push(enc);
        b.extend_from_slice(der);
        b
    };
    let auth = [0x5a; 64];
    let input = |sel: u8, bodies: &[Vec<u8>]| {
        let mut v = vec![sel];
        bodies.iter().for_each(|b| v.extend_from_slice(b));
        v.extend_from_slice(&auth);
        v
    };
    vec![
        ("genuine_alone".into(), input(0x80, &[])),
        ("genuine_wrong_id".into(), input(0x81, &[])),
        ("genuine_with_intermediate".into(), input(0x80, &[body(4, &ca)])),
        ("foreign_chain".into(), input(0x00, &[body(4, &ee), body(4, &ca)])),
        ("foreign_dn_id".into(), input(0x02, &[body(4, &ee)])),
        ("unknown_encoding_first".into(), input(0x80, &[body(7, &ee), body(4, &ca)])),
        ("only_unknown_encodings".into(), input(0x03, &[body(1, &ee), body(12, &ca)])),
        ("truncated".into(), input(0x00, &[body(4, &ee[..ee.len() / 2])])),
    ]
}

/// Batches for `tun_gro`: segments of one TCP flow (IPv4 and IPv6), UDP
/// datagrams of one flow for USO, two flows interleaved with a pure ACK, a
/// corrupt segment in the middle of a run.
fn tun_gro_inputs() -> Vec<(String, Vec<u8>)> {
    const MSS: usize = 200;
    let payload = data(MSS * 4);
    let seg = |i: usize, flags: u8, len: usize, port: u16| Seg {
        ports: (port, 443),
        seq: 1000 + (i * MSS) as u32,
        ack: 77,
        flags,
        options: &TCP_TS,
        data: &payload[i * MSS..i * MSS + len],
    };
    let flow4: Vec<Vec<u8>> = (0..4).map(|i| tcp4(100 + i as u16, &seg(i, if i == 3 { ACK | PSH } else { ACK }, if i == 3 { 120 } else { MSS }, 40000))).collect();
    let flow6: Vec<Vec<u8>> = (0..3).map(|i| tcp6(&seg(i, ACK, MSS, 40000))).collect();
    let udp: Vec<Vec<u8>> = (0..4).map(|i| udp4(V4_SRC, V4_DST, (40000, 5201), 200 + i, &payload[..if i == 3 { 50 } else { 150 }])).collect();
    let udp6: Vec<Vec<u8>> = (0..3).map(|_| udp6((40000, 5201), &payload[..150])).collect();
    let mut mixed = Vec::new();
    for i in 0..3 {
        mixed.push(tcp4(300 + i as u16, &seg(i, ACK, MSS, 40000)));
        mixed.push(tcp4(400 + i as u16, &seg(i, ACK, MSS, 40001)));
    }
    mixed.insert(3, tcp4(500, &Seg { data: &[], ..seg(0, ACK, 0, 40000) }));
    let mut corrupt = flow4.clone();
    let n = corrupt[1].len();
    corrupt[1][n - 1] ^= 0xff;
    vec![
        ("tcp4_flow".to_string(), gro_input(false, &flow4)),
        ("tcp6_flow".to_string(), gro_input(false, &flow6)),
        ("udp4_uso".to_string(), gro_input(true, &udp)),
        ("udp6_uso".to_string(), gro_input(true, &udp6)),
        ("udp4_no_uso".to_string(), gro_input(false, &udp)),
        ("tcp4_two_flows_and_ack".to_string(), gro_input(false, &mixed)),
        ("tcp4_corrupt_segment".to_string(), gro_input(false, &corrupt)),
    ]
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Two runs write the same bytes (no clock, no OS randomness, no hash
    /// order leaks into a seed).
    #[test]
    fn generation_is_deterministic() {
        let a = generate();
        assert_eq!(a, generate());
        for (target, files) in &a {
            assert!(files.len() >= 3, "{target}: {} seeds", files.len());
            assert!(files.values().all(|f| !f.is_empty() && f.len() <= 16 * 1024), "{target}: a seed is empty or large");
        }
        // Every target of fuzz/Cargo.toml has seeds.
        let manifest = include_str!("../../../fuzz/Cargo.toml");
        for line in manifest.lines().filter(|l| l.starts_with("name = ") && !l.contains("esparto-fuzz")) {
            let name = line.trim_start_matches("name = ").trim_matches('"');
            assert!(a.contains_key(name), "no seeds for {name}");
        }
    }

    /// The config seeds are what their names say: the variants load, the
    /// `err_` ones are refused.
    #[test]
    fn config_variants_load_or_fail_as_named() {
        for (name, text) in configs() {
            let r = esparto::config::parse_str(&text, "seed.toml");
            assert_eq!(r.is_err(), name.starts_with("err_"), "{name}: {:?}", r.err());
        }
    }

    /// The `esp_decapsulate` inputs read back as the records written.
    #[test]
    fn esp_decapsulate_inputs_decode() {
        for (name, input) in esp_decapsulate_inputs() {
            let mut rest = &input[1..];
            let mut n = 0;
            while let Some(r) = Record::decode(&mut rest) {
                let mut again = Vec::new();
                r.encode(&mut again);
                assert_eq!(Record::decode(&mut &again[..]), Some(r), "{name}");
                n += 1;
            }
            assert!(rest.is_empty() && n >= 2, "{name}: {n} records, {} bytes left", rest.len());
        }
    }

    /// The exchange got as far as the delete: both SA_INITs, both AUTHs, and
    /// CREATE_CHILD_SA and INFORMATIONAL both ways.
    #[test]
    fn ike_exchange_is_complete() {
        let names: Vec<String> = ike_exchange().into_iter().map(|(n, _)| n).collect();
        for want in ["ike_sa_init_request", "ike_sa_init_response", "ike_auth_request", "ike_auth_response", "create_child_sa_request", "create_child_sa_response", "informational_request", "informational_response"] {
            assert!(names.iter().any(|n| n.ends_with(want)), "no {want} in {names:?}");
        }
        assert!(names.len() >= 14, "{names:?}");
        let cookie: Vec<String> = ike_cookie_round().into_iter().map(|(n, _)| n).collect();
        assert_eq!(cookie.len(), 4, "{cookie:?}");
    }
}
