//! The `esparto-testbed` command: see `esparto-testbed --help`.

fn main() -> std::process::ExitCode {
    esparto_testbed::cli::main()
}
