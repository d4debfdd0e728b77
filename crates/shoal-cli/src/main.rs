//! `shoal`: the command line. A thin layer over the crates: it parses arguments, opens the store
//! and the bus, starts actors, and prints. Every decision about jobs lives below it.
//!
//! What it shares with the developers' `shoal-bench` (settings, the host, signals, logging) is
//! the crate's library (`lib.rs`), imported here under the same names, so that every module
//! below reaches it as `crate::connect`, `crate::host`, ….
//!
//! **Architecture invariant:** only this crate (and `shoal-bench`) uses `anyhow`, reads the
//! process environment for settings, installs signal handlers and writes to the terminal.

mod args;
mod cli;
mod commands;
mod compare;
mod dead_letters;
mod fleet;
mod metrics_endpoint;
mod miopen;
mod retime;
mod run;
mod ship;
mod status;
mod tune;
mod tune_args;
mod tune_cluster;
mod web;
mod worker;

use std::process::ExitCode;

use clap::Parser;
use shoal_cli::{connect, host, logging, report, signals, store_open, waiting};

fn main() -> ExitCode {
    // `shoal runner`: the per-device runner of library mode, started by an Evaluator with pipes
    // for stdin and stdout. Taken before anything else runs (no logging, no runtime, no other
    // thread), since it rearranges the standard descriptors and then runs tuned code.
    if std::env::args_os().nth(1).is_some_and(|a| a == "runner") {
        return ExitCode::from(shoal_backend::library::runner::main().clamp(0, 255) as u8);
    }
    let cli = args::Cli::parse();
    if let Err(e) = logging::init(cli.log_format) {
        eprintln!("shoal: {e}");
        return ExitCode::from(2);
    }
    // Undumpable: a process of the same user (tuned code where the sandbox is off) cannot read
    // this one's environment or memory, nor attach to it (shoal_backend::sandbox).
    if let Err(e) = shoal_backend::sandbox::harden_this_process() {
        tracing::warn!(error = %e, "could not make this process undumpable");
    }
    let system = actix::System::new();
    let result = system.block_on(cli::run(cli));
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("shoal: {}", report(&e));
            ExitCode::from(1)
        }
    }
}
