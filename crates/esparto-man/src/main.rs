//! `esparto-man DIR`: writes the manual pages of `esparto` into DIR —
//! `esparto.8` and one page per command (`esparto-run.8`,
//! `esparto-status.8`, …) — from the same clap definition that parses the
//! command line, so the pages cannot drift from `esparto --help`. Run by
//! `make man` (and so by `make install` and `make deb`); the gateway binary
//! itself carries no page generator.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::CommandFactory;

/// Daemons and administration commands.
const SECTION: &str = "8";
const MANUAL: &str = "Esparto";

fn main() -> ExitCode {
    let Some(dir) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: esparto-man DIR");
        return ExitCode::FAILURE;
    };
    let mut cmd = esparto::cli::Cli::command().disable_help_subcommand(true);
    cmd.build();
    match std::fs::create_dir_all(&dir).and_then(|()| write(&cmd, &dir)) {
        Ok(n) => {
            println!("{n} manual pages in {}", dir.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("esparto-man: {}: {e}", dir.display());
            ExitCode::FAILURE
        }
    }
}

/// Writes the page of `cmd` and of each of its visible subcommands, depth
/// first; returns how many.
fn write(cmd: &clap::Command, dir: &Path) -> std::io::Result<usize> {
    let mut n = 0;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        n += write(sub, dir)?;
    }
    clap_mangen::Man::new(cmd.clone())
        .section(SECTION)
        .manual(MANUAL)
        .source(concat!("esparto ", env!("CARGO_PKG_VERSION")))
        .generate_to(dir)?;
    Ok(n + 1)
}
