//! The `pi-repl` binary: parse arguments, set up logging, run, map the result to an exit code.

use std::process::ExitCode;

fn main() -> ExitCode {
    pi_repl::cli::main()
}
