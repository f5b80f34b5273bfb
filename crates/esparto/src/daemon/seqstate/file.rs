//! The state file's format: JSON an operator can read, with a SHA-256 of
//! its entries so that damage or an edit is noticed rather than trusted.
//!
//! ```json
//! {
//!   "format": "esparto static SA sequence numbers",
//!   "version": 1,
//!   "sas": [
//!     { "key_id": "5f0c…(32 hex digits)", "connection": "site", "child": "lan",
//!       "out_spi": "c0000200", "reserved": 2097152 }
//!   ],
//!   "sha256": "…(64 hex digits: SHA-256 of the compact JSON of `sas`)"
//! }
//! ```
//!
//! `reserved` is the highest sequence number any run may have sent under
//! the key; the next run continues after it.

use aws_lc_rs::digest;
use serde::{Deserialize, Serialize};

/// The `format` field: says what the file is to someone who finds it.
const FORMAT: &str = "esparto static SA sequence numbers";
/// The version written and the only one read.
const VERSION: u32 = 1;

/// One key's reservation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    /// [`super::key_id`] of the SA's KEYMAT.
    pub(crate) key_id: [u8; 16],
    /// The connection it was last configured in.
    pub(crate) connection: String,
    /// The child.
    pub(crate) child: String,
    /// The SPI it was last sent with.
    pub(crate) out_spi: u32,
    /// Highest sequence number reserved (and possibly sent).
    pub(crate) reserved: u64,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRepr {
    format: String,
    version: u32,
    sas: Vec<EntryRepr>,
    sha256: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct EntryRepr {
    key_id: String,
    connection: String,
    child: String,
    out_spi: String,
    reserved: u64,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex<const N: usize>(s: &str) -> Option<[u8; N]> {
    if s.len() != 2 * N || !s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return None;
    }
    let mut out = [0u8; N];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

fn checksum(sas: &[EntryRepr]) -> String {
    // Serialising plain structs of strings and integers cannot fail.
    let compact = serde_json::to_vec(sas).unwrap_or_default();
    hex(digest::digest(&digest::SHA256, &compact).as_ref())
}

/// The file's bytes for `entries`.
pub(crate) fn encode(entries: &[Entry]) -> Vec<u8> {
    let sas: Vec<EntryRepr> = entries
        .iter()
        .map(|e| EntryRepr {
            key_id: hex(&e.key_id),
            connection: e.connection.clone(),
            child: e.child.clone(),
            out_spi: format!("{:08x}", e.out_spi),
            reserved: e.reserved,
        })
        .collect();
    let sha256 = checksum(&sas);
    let f = FileRepr { format: FORMAT.into(), version: VERSION, sas, sha256 };
    let mut out = serde_json::to_vec_pretty(&f).unwrap_or_default();
    out.push(b'\n');
    out
}

/// The entries of a file, or why it cannot be trusted.
pub(crate) fn decode(bytes: &[u8]) -> Result<Vec<Entry>, String> {
    let f: FileRepr = serde_json::from_slice(bytes).map_err(|e| format!("not a valid state file ({e})"))?;
    if f.format != FORMAT {
        return Err(format!("not an Esparto state file (format '{}')", f.format));
    }
    if f.version != VERSION {
        return Err(format!(
            "state file version {} is not supported (this esparto reads version {VERSION})",
            f.version
        ));
    }
    if checksum(&f.sas) != f.sha256 {
        return Err("its SHA-256 does not match its entries: the file was damaged or edited".into());
    }
    let mut entries: Vec<Entry> = Vec::with_capacity(f.sas.len());
    for (i, s) in f.sas.into_iter().enumerate() {
        let key_id = unhex::<16>(&s.key_id).ok_or_else(|| format!("sas[{i}].key_id is not 32 hex digits"))?;
        let out_spi = unhex::<4>(&s.out_spi)
            .map(u32::from_be_bytes)
            .ok_or_else(|| format!("sas[{i}].out_spi is not 8 hex digits"))?;
        if entries.iter().any(|e| e.key_id == key_id) {
            return Err(format!("sas[{i}]: key id listed twice"));
        }
        entries.push(Entry { key_id, connection: s.connection, child: s.child, out_spi, reserved: s.reserved });
    }
    Ok(entries)
}
