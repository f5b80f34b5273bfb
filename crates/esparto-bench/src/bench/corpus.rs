//! Traffic corpora for the IPComp benchmarks, generated in code.
//!
//! IPComp's worth depends on the bytes it sees, so `esparto bench ipcomp`
//! and the test bed's `bench ipcomp` measure four kinds of traffic, the
//! same bytes in both (this module is their one source):
//!
//! - **text**: HTML pages of English prose, links and lists;
//! - **json**: JSON log lines, one event each, with the ids, timestamps
//!   and latencies that make real logs compress less than prose;
//! - **records**: database pages (8 KiB, a page header then fixed-width
//!   rows: sequential ids, foreign keys, timestamps, padded text columns)
//!   — binary, with the repeated columns a page dump has;
//! - **random**: bytes from a PRNG, which stand for already-compressed
//!   data (a `.gz`, a JPEG, TLS): nothing DEFLATE can shrink;
//! - **file**: the bytes of a file the operator names (`--file`), repeated
//!   as needed — a sample of their own traffic, which no generated corpus
//!   stands in for (RFC 3173's gain is the data's, packet by packet).
//!
//! Every generator is a pure function of the length and a fixed seed
//! (xorshift64*, not a secret: only varied), so runs and machines compare
//! byte for byte, and no binary corpus is kept in the repository. The
//! vocabulary is a small text seed, not a sample of any document.

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};

/// A kind of traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Corpus {
    /// HTML pages of prose.
    Text,
    /// JSON log lines.
    Json,
    /// Database pages of fixed-width rows.
    Records,
    /// PRNG bytes (as already-compressed data).
    Random,
    /// The bytes of a file given on the command line ([`CorpusFile`]).
    File,
}

impl Corpus {
    /// The four generated ones, in table order.
    pub const ALL: [Corpus; 4] = [Corpus::Text, Corpus::Json, Corpus::Records, Corpus::Random];

    /// The name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Corpus::Text => "text",
            Corpus::Json => "json",
            Corpus::Records => "records",
            Corpus::Random => "random",
            Corpus::File => "file",
        }
    }

    /// One line for tables.
    pub fn describe(self) -> &'static str {
        match self {
            Corpus::Text => "HTML pages of prose",
            Corpus::Json => "JSON log lines",
            Corpus::Records => "database pages, fixed-width rows",
            Corpus::Random => "random bytes (as compressed data)",
            Corpus::File => "the file given with --file",
        }
    }

    /// Parses a name.
    pub fn parse(s: &str) -> Result<Self> {
        match Corpus::ALL.iter().find(|c| c.name().eq_ignore_ascii_case(s.trim())) {
            Some(c) => Ok(*c),
            None => bail!("unknown corpus '{s}' (text, json, records, random)"),
        }
    }

    /// Exactly `len` bytes of this corpus: generated, or for
    /// [`Corpus::File`] the file's bytes repeated (an error without one).
    pub fn bytes(self, len: usize, file: Option<&CorpusFile>) -> Result<Vec<u8>> {
        match (self, file) {
            (Corpus::File, Some(f)) => Ok(f.repeat(len)),
            (Corpus::File, None) => bail!("the file corpus needs a file (--file PATH)"),
            _ => Ok(self.generate(len)),
        }
    }

    /// Exactly `len` bytes of a generated corpus (the same bytes every
    /// time). [`Corpus::bytes`] answers for [`Corpus::File`] before
    /// calling this.
    fn generate(self, len: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(len + 16 * 1024);
        let mut rng = Rng::new(SEED ^ self as u64);
        match self {
            Corpus::Text => {
                while out.len() < len {
                    html_page(&mut rng, &mut out);
                }
            }
            Corpus::Json => {
                let mut t = START_UNIX_MS;
                while out.len() < len {
                    t += rng.below(250);
                    json_line(&mut rng, t, &mut out);
                }
            }
            Corpus::Records => {
                let mut page = 0u64;
                while out.len() < len {
                    db_page(&mut rng, page, &mut out);
                    page += 1;
                }
            }
            Corpus::Random => {
                while out.len() < len {
                    out.extend_from_slice(&rng.next().to_le_bytes());
                }
            }
            // Not generated: `bytes` takes the file.
            Corpus::File => return Vec::new(),
        }
        out.truncate(len);
        out
    }
}

/// The largest file `--file` takes (it is read whole into memory).
pub const MAX_FILE: u64 = 64 << 20;

/// A file's bytes measured as a corpus: a sample of the operator's own
/// traffic.
#[derive(Debug, Clone)]
pub struct CorpusFile {
    path: std::path::PathBuf,
    bytes: std::sync::Arc<[u8]>,
}

impl CorpusFile {
    /// Reads `path` whole: not empty, at most [`MAX_FILE`] bytes. Errors
    /// name the file.
    pub fn read(path: &std::path::Path) -> Result<Self> {
        use anyhow::Context;
        let meta = std::fs::metadata(path).with_context(|| format!("--file {}", path.display()))?;
        if !meta.is_file() {
            bail!("--file {}: not a regular file", path.display());
        }
        if meta.len() > MAX_FILE {
            bail!("--file {}: {} bytes, more than the {} MiB it takes", path.display(), meta.len(), MAX_FILE >> 20);
        }
        let bytes = std::fs::read(path).with_context(|| format!("--file {}", path.display()))?;
        if bytes.is_empty() {
            bail!("--file {}: empty", path.display());
        }
        Ok(Self { path: path.to_path_buf(), bytes: bytes.into() })
    }

    /// The file's path as given.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// Its size in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether it is empty (never, once read).
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Exactly `len` bytes: the file, repeated as often as needed.
    pub fn repeat(&self, len: usize) -> Vec<u8> {
        self.bytes.iter().copied().cycle().take(len).collect()
    }
}

/// The generators' seed (any constant: the corpora are fixed by it).
const SEED: u64 = 0x5eed_1ab5_c0de_d00d;

/// The first log line's time: 2026-11-26T00:00:00Z.
const START_UNIX_MS: u64 = 1_795_651_200_000;

/// A database page's size (PostgreSQL's default block).
const PAGE: usize = 8192;

/// One row of the records corpus.
const ROW: usize = 128;

/// xorshift64* (Vigna): varied, repeatable, not a secret.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n` (n > 0; the bias is immaterial here).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// An index into `n` items, small ones much more often (word
    /// frequencies are Zipf-like: a few words make most of a text).
    fn skewed(&mut self, n: usize) -> usize {
        let u = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        ((u * u * u) * n as f64) as usize % n.max(1)
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len() as u64) as usize]
    }
}

/// The text corpus's vocabulary, most frequent first.
const WORDS: &[&str] = &[
    "the", "of", "and", "to", "a", "in", "is", "that", "for", "it", "as", "with", "was", "on", "be", "by", "this",
    "are", "from", "or", "at", "an", "which", "not", "have", "its", "but", "they", "can", "all", "their", "were",
    "one", "more", "has", "when", "will", "there", "been", "into", "each", "other", "than", "only", "also", "some",
    "time", "network", "packet", "gateway", "tunnel", "traffic", "link", "router", "address", "security", "data",
    "header", "protocol", "through", "between", "because", "before", "after", "under", "while", "where", "every",
    "first", "second", "local", "remote", "office", "branch", "server", "client", "message", "request", "response",
    "connection", "session", "bandwidth", "latency", "throughput", "compression", "encryption", "algorithm",
    "configuration", "administrator", "performance", "measurement", "experiment", "result", "figure", "table",
    "section", "chapter", "history", "river", "mountain", "village", "harbour", "summer", "winter", "morning",
    "evening", "market", "garden", "library", "museum", "station", "bridge", "forest", "island", "weather",
    "ordinary", "important", "different", "possible", "necessary", "particular", "several", "however",
    "therefore", "although", "perhaps", "usually", "quickly", "slowly", "carefully", "together", "against",
    "without", "within", "around", "towards", "describe", "explain", "measure", "compare", "consider", "develop",
    "remember", "continue", "provide", "require", "receive", "deliver", "protect", "discover",
];

const TAGS: &[&str] = &["p", "p", "p", "li", "h2", "blockquote"];

fn html_page(rng: &mut Rng, out: &mut Vec<u8>) {
    let title: Vec<&str> = (0..4).map(|_| WORDS[40 + rng.skewed(WORDS.len() - 40)]).collect();
    out.extend_from_slice(b"<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>");
    out.extend_from_slice(title.join(" ").as_bytes());
    out.extend_from_slice(b"</title>\n<link rel=\"stylesheet\" href=\"/static/site.css\">\n</head>\n<body>\n");
    out.extend_from_slice(b"<nav><a href=\"/\">Home</a> | <a href=\"/docs/\">Documentation</a> | <a href=\"/news/\">News</a></nav>\n<main>\n");
    for _ in 0..(8 + rng.below(16)) {
        let tag = rng.pick(TAGS);
        out.extend_from_slice(format!("<{tag}>").as_bytes());
        let sentences = if tag == "h2" { 1 } else { 1 + rng.below(5) };
        for s in 0..sentences {
            let n = if tag == "h2" { 3 + rng.below(4) } else { 6 + rng.below(18) };
            for i in 0..n {
                let w = WORDS[rng.skewed(WORDS.len())];
                if i > 0 || s > 0 {
                    out.push(b' ');
                }
                if rng.below(40) == 0 {
                    out.extend_from_slice(format!("<a href=\"/docs/{w}.html\">{w}</a>").as_bytes());
                } else if i == 0 {
                    let (first, rest) = w.split_at(1);
                    out.extend_from_slice(first.to_ascii_uppercase().as_bytes());
                    out.extend_from_slice(rest.as_bytes());
                } else {
                    out.extend_from_slice(w.as_bytes());
                }
                if i + 1 < n && rng.below(12) == 0 {
                    out.push(b',');
                }
            }
            if tag != "h2" {
                out.push(b'.');
            }
        }
        out.extend_from_slice(format!("</{tag}>\n").as_bytes());
    }
    out.extend_from_slice(b"</main>\n<footer>&copy; 2026 Example Site. All rights reserved.</footer>\n</body>\n</html>\n");
}

const LEVELS: &[&str] = &["info", "info", "info", "info", "debug", "debug", "warn", "error"];
const SERVICES: &[&str] = &["api", "auth", "billing", "search", "frontend", "worker"];
const METHODS: &[&str] = &["GET", "GET", "GET", "POST", "PUT", "DELETE"];
const PATHS: &[&str] = &[
    "/api/v1/users", "/api/v1/orders", "/api/v1/items", "/api/v2/search", "/login", "/health", "/static/app.js",
];
const MESSAGES: &[&str] = &[
    "request completed", "request completed", "cache miss", "upstream timeout, retrying", "user authenticated",
    "slow query", "connection reset by peer",
];
const STATUSES: &[u32] = &[200, 200, 200, 200, 201, 204, 304, 400, 404, 500];

fn json_line(rng: &mut Rng, unix_ms: u64, out: &mut Vec<u8>) {
    let (secs, ms) = (unix_ms / 1000, unix_ms % 1000);
    let (days, day_s) = (secs / 86_400, secs % 86_400);
    // 2026-11-26 plus whole days (the corpus spans hours, never a month end).
    let day = 26 + (days - START_UNIX_MS / 1000 / 86_400);
    let (h, m, s) = (day_s / 3600, day_s / 60 % 60, day_s % 60);
    let line = format!(
        "{{\"ts\":\"2026-11-{day:02}T{h:02}:{m:02}:{s:02}.{ms:03}Z\",\"level\":\"{}\",\"service\":\"{}\",\
         \"host\":\"node-{:02}.dc1.example.net\",\"trace_id\":\"{:016x}{:016x}\",\"method\":\"{}\",\
         \"path\":\"{}/{}\",\"status\":{},\"duration_ms\":{}.{:03},\"bytes\":{},\"user_id\":{},\"msg\":\"{}\"}}\n",
        rng.pick(LEVELS),
        rng.pick(SERVICES),
        rng.below(24),
        rng.next(),
        rng.next(),
        rng.pick(METHODS),
        rng.pick(PATHS),
        rng.below(100_000),
        STATUSES[rng.below(STATUSES.len() as u64) as usize],
        rng.below(400),
        rng.below(1000),
        rng.below(65_536),
        10_000 + rng.below(5_000),
        rng.pick(MESSAGES),
    );
    out.extend_from_slice(line.as_bytes());
}

const STATES: &[&str] = &["ACTIVE", "ACTIVE", "ACTIVE", "PENDING", "SHIPPED", "CANCELLED"];
const FIRST: &[&str] = &["Anna", "Ben", "Carla", "David", "Elena", "Farid", "Grace", "Hugo", "Ines", "Jonas"];
const LAST: &[&str] = &["Smith", "Garcia", "Müller", "Rossi", "Dubois", "Nowak", "Silva", "Jensen", "Ito", "Khan"];
const COUNTRIES: &[&str] = &["DE", "FR", "ES", "IT", "NL", "PL", "SE", "PT", "US", "JP"];

fn db_page(rng: &mut Rng, page: u64, out: &mut Vec<u8>) {
    let start = out.len();
    let rows = (PAGE - 24) / ROW;
    // Page header: LSN, checksum, flags, lower/upper free-space bounds.
    out.extend_from_slice(&(0x1_0000_0000 + page * 0x2000 + rng.below(0x100)).to_le_bytes());
    out.extend_from_slice(&(rng.next() as u16).to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&((24 + rows * 4) as u16).to_le_bytes());
    out.extend_from_slice(&((PAGE - rows * ROW) as u16).to_le_bytes());
    out.extend_from_slice(&[0x20, 0x20, 0x04, 0x20, 0, 0, 0, 0]);
    for r in 0..rows as u64 {
        let row_start = out.len();
        let id = page * rows as u64 + r + 1;
        // Row header: xmin (a transaction id that advances slowly), xmax,
        // the row's position, flags.
        out.extend_from_slice(&(700_000 + id / 7).to_le_bytes()[..4]);
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&(page as u32).to_le_bytes());
        out.extend_from_slice(&(r as u16 + 1).to_le_bytes());
        out.extend_from_slice(&[0x09, 0x00, 0x02, 0x09, 0x18, 0x00, 0x00, 0x00, 0x00, 0x00]);
        // Columns: id, customer id, created (µs since 2000), amount (cents),
        // status, country, name.
        out.extend_from_slice(&id.to_le_bytes());
        out.extend_from_slice(&(1 + rng.below(5_000) as u32).to_le_bytes());
        out.extend_from_slice(&(849_312_000_000_000 + id * 61_000_000 + rng.below(60_000_000)).to_le_bytes());
        out.extend_from_slice(&((rng.below(50_000) * 5) as i64).to_le_bytes());
        padded(out, rng.pick(STATES), 12);
        padded(out, rng.pick(COUNTRIES), 4);
        let name = format!("{} {}", rng.pick(FIRST), rng.pick(LAST));
        padded(out, &name, 32);
        out.resize(row_start + ROW, 0);
    }
    out.resize(start + PAGE, 0);
}

/// `s` in a fixed-width column of `width` bytes, space-padded (SQL `CHAR`).
fn padded(out: &mut Vec<u8>, s: &str, width: usize) {
    let b = &s.as_bytes()[..s.len().min(width)];
    out.extend_from_slice(b);
    out.extend(std::iter::repeat_n(b' ', width - b.len()));
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn corpora_have_the_length_asked_and_are_the_same_every_time() {
        for c in Corpus::ALL {
            for len in [0, 1, 1400, 100_000] {
                let a = c.generate(len);
                assert_eq!(a.len(), len, "{c:?}");
                assert_eq!(a, c.generate(len), "{c:?}");
            }
            assert_eq!(Corpus::parse(c.name()).unwrap(), c);
        }
        assert!(Corpus::parse("jpeg").is_err());
        // Distinct corpora, and a longer corpus starts with a shorter one.
        assert_ne!(Corpus::Text.generate(1000), Corpus::Json.generate(1000));
        assert_eq!(Corpus::Json.generate(5000)[..1000], Corpus::Json.generate(1000)[..]);
    }

    #[test]
    fn text_and_json_are_what_they_say() {
        let t = String::from_utf8(Corpus::Text.generate(50_000)).unwrap();
        assert!(t.starts_with("<!DOCTYPE html>") && t.contains("</p>\n"), "{}", &t[..200]);
        let j = String::from_utf8(Corpus::Json.generate(50_000)).unwrap();
        for line in j.lines().take(50) {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            assert!(v["ts"].as_str().unwrap().starts_with("2026-11-26T"), "{line}");
            assert!(v["status"].as_u64().unwrap() >= 200);
        }
    }

    #[test]
    fn a_file_is_read_whole_and_repeated_and_bad_ones_are_named() {
        let dir = std::env::temp_dir().join(format!("esparto-corpus-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("sample.html");
        std::fs::write(&f, b"<p>abc</p>").unwrap();
        let c = CorpusFile::read(&f).unwrap();
        assert_eq!(c.len(), 10);
        assert_eq!(Corpus::File.bytes(25, Some(&c)).unwrap(), b"<p>abc</p><p>abc</p><p>ab".to_vec());
        assert_eq!(Corpus::Text.bytes(100, Some(&c)).unwrap(), Corpus::Text.generate(100));
        let e = Corpus::File.bytes(10, None).unwrap_err().to_string();
        assert!(e.contains("--file"), "{e}");
        let empty = dir.join("empty");
        std::fs::write(&empty, b"").unwrap();
        for (p, want) in [(empty, "empty"), (dir.join("missing"), "missing"), (dir.clone(), "not a regular file")] {
            let e = format!("{:#}", CorpusFile::read(&p).unwrap_err());
            assert!(e.contains(&p.display().to_string()) && e.contains(want), "{e}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn records_are_pages_of_rows() {
        let r = Corpus::Records.generate(3 * PAGE);
        // Row 2 of page 1: its id column follows the 24-byte row header.
        let rows = (PAGE - 24) / ROW;
        let at = PAGE + 24 + ROW + 24;
        assert_eq!(u64::from_le_bytes(r[at..at + 8].try_into().unwrap()), rows as u64 + 2);
    }
}
