//! Fuzz what `load-conn`, `load-shared` and `load-authority` load: a VICI
//! message becomes a connection tree (as the VICI server translates
//! swanctl's; certificates in it become data), an authority, or a PSK, is grafted
//! beside a small TOML file with a PSK for it, and the whole is checked;
//! then checked again, reusing the kept walks. Nothing may panic, and the
//! second check must say what the first said.
#![no_main]

use esparto::config::{Layer, parse_str_layered};
use esparto_wire::vici::Section;
use libfuzzer_sys::fuzz_target;

const FILE: &str = "[daemon]\nworkers = 2\n\n[secrets.s]\nsecret = \"a fuzzed secret long enough to pass\"\n";

fuzz_target!(|data: &[u8]| {
    let Ok(req) = Section::parse(data) else { return };
    let mut layer = Layer::default();
    if let Ok((name, conn)) = esparto::vici::conn_tree(&req) {
        layer.set_conn(&name, conn);
    }
    if let Ok((id, secret)) = esparto::vici::shared_value(&req) {
        layer.set_secret(&id, secret);
    }
    if let Ok((name, authority)) = esparto::vici::authority_value(&req) {
        layer.set_authority(&name, authority);
    }
    let first = parse_str_layered(FILE, "fuzz.toml", &layer).map(|c| c.connections.len()).map_err(|e| e.to_string());
    let again = parse_str_layered(FILE, "fuzz.toml", &layer).map(|c| c.connections.len()).map_err(|e| e.to_string());
    assert_eq!(first, again);
});
