#![deny(unsafe_code)]

use std::process::ExitCode;

fn main() -> ExitCode {
    let code = stockade::cli::main(std::env::args_os().collect());
    ExitCode::from(code.clamp(0, 255) as u8)
}
