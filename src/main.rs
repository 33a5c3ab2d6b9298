//! The `corank` command: the library's [`corank::cli`] (feature `cli`); `corank --help` and
//! docs/cli.md say what it does.

fn main() -> std::process::ExitCode {
    corank::cli::main()
}
