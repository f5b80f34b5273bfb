//! Configuration: one TOML file, checked completely before anything runs.
//!
//! The file's key names follow strongSwan's `swanctl.conf` where the
//! concept is the same (`local_addrs`, `remote_addrs`, `local_ts`,
//! `remote_ts`, `esp_proposals`, `rekey_time`, `start_action`, …) and its
//! proposal strings are strongSwan's (`aes256gcm16`, `aes128-sha256`,
//! `aes256gcm16-prfsha256-x25519`), so an operator who runs strongSwan can
//! read it and a peer's settings can be copied across. `docs/CONFIG.md`
//! lists every key, its default and its swanctl equivalent.
//!
//! Loading is a walk over the parsed file ([`tree`]) that collects **every**
//! error, each naming the file, line, column and key path
//! ([`ConfigError`]); only a walk without errors produces a [`Config`], so
//! the daemon never runs on a half-valid one. Unknown keys are errors (with
//! a "did you mean" for typos); swanctl keys Esparto does not implement
//! say so. After the sections are parsed, checks across the file refuse
//! children with overlapping selectors and SPIs used twice ([`check`]).
//!
//! The validated types are in [`model`]; the core crates receive them, or
//! the `esparto_ike` configuration built from them, and never see the file.

mod certs;
mod check;
mod child;
mod connection;
mod daemon;
mod error;
mod hygiene;
pub mod instance;
mod layer;
pub mod model;
mod routing;
mod secrets;
mod static_sas;
mod tree;
mod value;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

pub use child::{DEFAULT_ESP_PROPOSALS, DEFAULT_REKEY_TIME, MIN_REPLAY_WINDOW};
pub use connection::{DEFAULT_IKE_PROPOSALS, DEFAULT_REMOTE_PORT};
pub use daemon::{
    DEFAULT_CONTROL, DEFAULT_IKE_PORT, DEFAULT_LOG, DEFAULT_PATH_MTU, DEFAULT_PORT, DEFAULT_ROUTING_TABLE,
    DEFAULT_ROUTING_TABLE_PRIO, DEFAULT_STATE_DIR, DEFAULT_TUN, DEFAULT_TUN_QUEUE_LEN, MAX_CPU, MAX_ROUTING_TABLE_PRIO,
    MAX_TUN_QUEUE_LEN, MAX_WORKERS, MIN_PATH_MTU, DEFAULT_VICI_NAME, default_workers,
};
pub use error::{ConfigError, ConfigErrors, ConfigWarning};
pub use hygiene::MIN_PSK_LEN;
pub use layer::{INLINE, Layer, LoadedCert, PrivateKey, Value as LayerValue, inline};
pub use routing::{Host, MAX_ROUTES_NAMED};
pub use model::*;

use error::KeyPath;
use tree::{Cx, Kind};

/// Largest configuration file accepted (a typo'd path to a disk image
/// should fail fast, not be read into memory). A hub's spoke takes about
/// 500 bytes (`esparto-testbed bench setup`'s generated files), so this admits
/// some 100,000 tunnels; 4 MiB refused a 10,000-spoke hub.
pub const MAX_FILE_SIZE: u64 = 64 << 20;

/// Where `esparto run` reads its configuration, and where the client
/// commands look for the control socket's path, when not told otherwise.
pub const DEFAULT_CONFIG: &str = "/etc/esparto/esparto.toml";

const TOP_KEYS: &[&str] = &["daemon", "authorities", "connections", "secrets"];
const TOP_UNSUPPORTED: &[(&str, &str)] = &[
    ("pools", "virtual IP address pools are not implemented"),
];

/// Load and validate the file at `path`. Relative paths inside it
/// (`*_file`, `daemon.control`, `daemon.state_dir`) are relative to its
/// directory. [`Config::warnings`] holds what can be said without looking
/// at the host; [`load_on`] compares the file with the host's routing too.
pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
    load_on(path, &Host::default())
}

/// [`load`], with warnings that compare the file with `host`'s routing
/// (`Host::read()`: the calling thread's network namespace).
pub fn load_on(path: &Path, host: &Host) -> Result<Config, ConfigErrors> {
    load_layered(path, host, &Layer::default())
}

/// [`load_on`], with what was loaded over VICI ([`Layer`]) beside the
/// file's connections and secrets, checked as one file.
pub fn load_layered(path: &Path, host: &Host, layer: &Layer) -> Result<Config, ConfigErrors> {
    let text = read(path)?;
    parse_in(&text, path.display().to_string(), dir_of(path), path.to_path_buf(), host, true, layer)
}

/// The text `running` was read from, again, with `layer` beside it: what
/// a load over VICI is checked with (the file as the daemon runs it, not
/// as it may have been edited since).
pub fn relayer(running: &Config, host: &Host, layer: &Layer) -> Result<Config, ConfigErrors> {
    let path = &running.path;
    parse_in(&running.text, path.display().to_string(), dir_of(path), path.clone(), host, true, layer)
}

/// The control socket that the file at `path` names (`[daemon] control`,
/// relative to the file's directory), or `None` if it names none. Only that
/// key is read and checked: a client looking for the daemon needs no more,
/// and a file being edited while the daemon runs may be invalid elsewhere.
pub fn control_socket(path: &Path) -> Result<Option<PathBuf>, ConfigErrors> {
    let text = read(path)?;
    let mut cx = Cx::new(path.display().to_string(), &text, dir_of(path));
    let control = match tree::parse(&text) {
        Ok(root) => daemon::control_only(&mut cx, &root),
        Err(e) => {
            cx.err(&e.span, &KeyPath::root(), format!("TOML syntax: {}", e.message));
            None
        }
    };
    if cx.has_errors() { Err(ConfigErrors(cx.into_errors())) } else { Ok(control) }
}

/// The file's text, refused early if it cannot be a configuration.
fn read(path: &Path) -> Result<String, ConfigErrors> {
    let fail = |message: String| {
        ConfigErrors(vec![ConfigError {
            file: path.display().to_string(),
            line: 0,
            column: 0,
            key: String::new(),
            message,
        }])
    };
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => return Err(fail("is a directory".into())),
        Ok(m) if m.len() > MAX_FILE_SIZE => {
            return Err(fail(format!(
                "{} bytes: larger than any configuration ({MAX_FILE_SIZE} bytes at most)",
                m.len()
            )));
        }
        Ok(_) => {}
        Err(e) => return Err(fail(format!("cannot read: {e}"))),
    }
    let bytes = std::fs::read(path).map_err(|e| fail(format!("cannot read: {e}")))?;
    String::from_utf8(bytes).map_err(|e| {
        // Where: the byte, and its line and column.
        let at = e.utf8_error().valid_up_to();
        let good = &e.as_bytes()[..at];
        let line = good.iter().filter(|&&b| b == b'\n').count() + 1;
        let column = good.iter().rev().take_while(|&&b| b != b'\n').count() + 1;
        fail(format!("not UTF-8 at byte {at} (line {line}, column {column}): a TOML file is UTF-8 text"))
    })
}

/// The directory relative paths in the file at `path` are resolved against.
fn dir_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Validate `text` as if read from `path_for_messages` (which names the file
/// in errors; relative `*_file` paths are resolved against its directory).
pub fn parse_str(text: &str, path_for_messages: &str) -> Result<Config, ConfigErrors> {
    parse_str_on(text, path_for_messages, &Host::default())
}

/// [`parse_str`] with what was loaded over VICI beside the text's
/// connections and secrets.
pub fn parse_str_layered(text: &str, path_for_messages: &str, layer: &Layer) -> Result<Config, ConfigErrors> {
    let path = PathBuf::from(path_for_messages);
    parse_in(text, path_for_messages.to_string(), dir_of(&path), path, &Host::default(), false, layer)
}

/// [`parse_str`], compared with `host`'s routing (see [`load_on`]).
pub fn parse_str_on(text: &str, path_for_messages: &str, host: &Host) -> Result<Config, ConfigErrors> {
    let path = PathBuf::from(path_for_messages);
    parse_in(text, path_for_messages.to_string(), dir_of(&path), path, host, false, &Layer::default())
}

/// `on_disk`: `path` is the file `text` was read from (its permissions
/// are checked when it holds a secret).
fn parse_in(
    text: &str,
    file: String,
    dir: PathBuf,
    path: PathBuf,
    host: &Host,
    on_disk: bool,
    layer: &Layer,
) -> Result<Config, ConfigErrors> {
    let fingerprint = if layer.is_empty() { 0 } else { layer::fingerprint(text, &dir, layer) };
    let mut cx = Cx::new(file, text, dir);
    let mut root = match tree::parse(text) {
        Ok(r) => r,
        Err(e) => {
            cx.err(
                &e.span,
                &KeyPath::root(),
                format!("TOML syntax: {}", e.message),
            );
            return Err(ConfigErrors(cx.into_errors()));
        }
    };
    debug_assert!(matches!(root.kind, Kind::Table(_)));
    let grafted = layer::graft(&mut cx, &mut root, layer, fingerprint);
    let root = root;
    cx.check_keys(&root, &KeyPath::root(), TOP_KEYS, TOP_UNSUPPORTED);
    let daemon = daemon::parse(&mut cx, &root);
    let authorities = certs::authorities(&mut cx, &root);
    let parsed = connection::parse_all(&mut cx, &root, &daemon, &authorities, &grafted);
    let secrets = secrets::parse(&mut cx, &root, &grafted);
    layer.check_overlaps(&mut cx, &parsed.seen);
    check::spis(&mut cx, &parsed.seen);
    check::static_keys(&mut cx, &parsed.seen);
    if !parsed.psk_needs.is_empty() {
        let psks = layer.psk_index(&secrets);
        let known = layer.psks_known(&psks, &parsed.connections);
        let errors = cx.error_count();
        for need in parsed.psk_needs.iter().filter(|n| n.conn >= known) {
            let conn = &parsed.connections[need.conn];
            let path = || KeyPath::root().key("connections").key(&conn.name);
            match connection::psk_ids(conn) {
                Some((l, r)) if psks.find(&l, &r).is_none() => cx.err(
                    &need.span,
                    &path(),
                    format!("no [secrets] entry holds a PSK for local id '{l}' and remote id '{r}'"),
                ),
                // Identities known only at run time: at least some PSK must exist.
                None if secrets.psks.is_empty() => cx.err(
                    &need.span,
                    &path(),
                    "authenticates with a PSK, but the file has no [secrets] section",
                ),
                _ => {}
            }
        }
        if cx.error_count() == errors {
            layer.psks_found(&psks, &parsed.connections);
        }
    }
    if !cx.has_errors() {
        check::runnable(&mut cx, &root, &parsed.connections, &grafted);
    }
    if cx.has_errors() {
        return Err(ConfigErrors(cx.into_errors()));
    }
    if let (true, Some((span, key))) = (on_disk, cx.inline_secret.clone()) {
        if let Some(w) = hygiene::exposed(&path) {
            cx.warn(&span, &key, format!("{w} (or move the secret to a file of its own)"));
        }
    }
    routing::warn(&mut cx, &root, &parsed.seen, &parsed.connections, &daemon, host);
    check::cpus_allowed(&mut cx, &root, &daemon.cpus, &host.cpus);
    Ok(Config {
        path,
        text: text.into(),
        layer: layer.clone(),
        daemon,
        connections: parsed.connections,
        secrets,
        warnings: cx.take_warnings(),
    })
}

impl Config {
    /// Number of children over all connections.
    pub fn child_count(&self) -> usize {
        self.connections.iter().map(|c| c.children.len()).sum()
    }
}
