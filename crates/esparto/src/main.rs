//! The `esparto` command: see `esparto --help`.

fn main() -> std::process::ExitCode {
    esparto::cli::main()
}
