#![deny(unsafe_code)]

use std::process::ExitCode;

/// A run's small allocations cut from a region (see `stockade_sys::arena`:
/// on only in a process that runs one jail), the rest the system's.
#[global_allocator]
static ALLOCATOR: stockade_sys::arena::Arena = stockade_sys::arena::Arena;

fn main() -> ExitCode {
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == stockade::spawner::SPAWNER_ARG)
    {
        // A spawner for a multi-threaded program's `stockade::Jail` (hidden).
        stockade::spawner::serve(stockade::spawner::stdin_socket());
    }
    let code = stockade::cli_main(std::env::args_os().collect());
    ExitCode::from(code.clamp(0, 255) as u8)
}
