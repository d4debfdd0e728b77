//! `shoal`: the command line. A thin layer over the crates: it parses arguments, opens the store
//! and the bus, starts actors, and prints. Every decision about jobs lives below it.
//!
//! **Architecture invariant:** only this crate uses `anyhow`, reads the process environment for
//! settings, installs signal handlers and writes to the terminal.

mod args;
mod bench;
mod cli;
mod commands;
mod compare;
mod connect;
mod dead_letters;
mod fleet;
mod host;
mod hostile;
mod logging;
mod metrics_endpoint;
mod miopen;
mod retime;
mod run;
mod ship;
mod signals;
mod status;
mod store_open;
mod tune;
mod tune_args;
mod tune_cluster;
mod waiting;
mod web;
mod worker;

use std::process::ExitCode;

use clap::Parser;

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

/// The error and its causes, each said once. The crates' errors already put their source in
/// their own message, so anyhow's `{:#}` would print the same cause two or three times over.
fn report(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}
