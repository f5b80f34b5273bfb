//! The flags Esparto's command lines share, each defined once: `--json`
//! ([`Json`]), `--save` with `--results DIR` ([`Save`]), `--results DIR`
//! alone ([`ResultsDir`]) and the values `--workers` takes ([`workers`]).
//!
//! `esparto` (the gateway's commands and `bench` and `plan`) and
//! `esparto-testbed` flatten these into their commands with
//! `#[command(flatten)]`, so a flag has one name, type, default and help
//! text wherever it appears. They live in this crate because it is the
//! lowest one both command lines link, and the results directory is its
//! store's ([`crate::results`]).

use std::path::{Path, PathBuf};

use clap::builder::RangedU64ValueParser;

pub use esparto_io::cpu::MAX_WORKERS;

use crate::results;

/// `--json`: the output as JSON.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::Args)]
pub struct Json {
    /// Print the output as JSON on stdout (any text goes to stderr).
    #[arg(long)]
    pub json: bool,
}

/// `--results DIR`: the directory of saved results.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct ResultsDir {
    /// The results directory: --save writes into it, `esparto plan` reads from it.
    #[arg(long = "results", id = "results", value_name = "DIR", default_value = results::DEFAULT_DIR)]
    pub dir: PathBuf,
}

/// `--save` and `--results DIR`: keep what was measured.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct Save {
    /// Save the results, with this machine, the commit and the date, into --results.
    #[arg(long)]
    pub save: bool,
    /// The directory it saves into.
    #[command(flatten)]
    pub results: ResultsDir,
}

impl Save {
    /// The directory to save into, if `--save` was given.
    pub fn dir(&self) -> Option<&Path> {
        self.save.then_some(self.results.dir.as_path())
    }
}

/// The values `--workers` takes: 1 to [`MAX_WORKERS`], as `[daemon]
/// workers` does (`#[arg(long, value_parser = workers())]`).
pub fn workers() -> RangedU64ValueParser<usize> {
    RangedU64ValueParser::new().range(1..=MAX_WORKERS as u64)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        output: Json,
        #[command(flatten)]
        save: Save,
        #[arg(long, value_parser = workers())]
        workers: Option<usize>,
    }

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("t").chain(args.iter().copied()))
    }

    #[test]
    fn defaults_and_values() {
        let c = parse(&[]).unwrap();
        assert!(!c.output.json && c.save.dir().is_none() && c.workers.is_none());
        assert_eq!(c.save.results.dir, Path::new(results::DEFAULT_DIR));
        let c = parse(&["--json", "--save", "--results", "/tmp/r", "--workers", "1024"]).unwrap();
        assert!(c.output.json);
        assert_eq!(c.save.dir(), Some(Path::new("/tmp/r")));
        assert_eq!(c.workers, Some(MAX_WORKERS));
    }

    #[test]
    fn workers_outside_the_daemons_limit_are_refused_by_name() {
        for bad in ["0", "1025", "-1", "many"] {
            let e = parse(&[&format!("--workers={bad}")]).unwrap_err().to_string();
            assert!(e.contains("--workers"), "{bad}: {e}");
        }
        let e = parse(&["--workers", "1025"]).unwrap_err().to_string();
        assert!(e.contains("1..=1024"), "{e}");
    }
}
