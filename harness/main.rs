//! The `gpucompat` binary: parse the command line, run it, map the outcome to an exit code.

use std::process::ExitCode;

fn main() -> ExitCode {
    gpucompat::cli::main()
}
