//! `shoal-bench`: the developers' bench, not shipped to users. It measures Shoal itself
//! (`dispatch`, `fleet`, `search`, `search-summary`) and attacks a running cluster the way an outsider or an
//! insider would (`hostile`, which `scripts/chaos` runs); the release `shoal` has none of these
//! commands. Scripts parse the one line each command prints, so those lines keep their format.
//!
//! The workers of a bench cluster, and a library-mode runner, are the `shoal` program built
//! beside this one ([`shoal_program`]): `cargo build -p shoal-cli -p shoal-bench`. What it shares
//! with `shoal` (settings, the host, signals, logging) is shoal-cli's library.

mod cluster;
mod dispatch;
mod fleet;
mod hostile;
mod netns;
mod overhead;
mod preload;
mod recorded;
mod search;
mod summary;
mod warm;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use shoal_cli::logging::{self, LogFormat};

/// Shoal's developers' bench: benchmarks of Shoal itself, and a hostile publisher to show a
/// running cluster refuses what it must.
#[derive(Debug, Parser)]
#[command(name = "shoal-bench", version, long_about = None)]
struct Cli {
    /// Log format on stderr (level from RUST_LOG, default info).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Push N jobs of the no-op backend through the whole path and print
    /// `dispatch mode=<mode> jobs=<N> secs=<S> jobs_per_s=<R>`.
    Dispatch(dispatch::DispatchArgs),
    /// A simulated fleet: `--devices N` simulated GPUs over `--hosts H` eval worker processes,
    /// each evaluation a sleep of a fixed or recorded time, and one line of figures: `fleet …
    /// busy_pct=<mean>/<worst> jobs_per_s=<R> scheduler_cpu_pct=<P> secs=<S>`.
    Fleet(fleet::FleetArgs),
    /// Shoal's search strategies on recorded spaces in the T4 format, offline: per strategy and
    /// budget, the median best-found over the optimum over `--reps` seeds, and the share of
    /// runs within 2 % of it.
    Search(search::SearchArgs),
    /// The forest on recorded spaces, cold and warm-started from an earlier recording
    /// (`--prior`), on the same seeds: `warm space=… budget=… prior=… cold=<median>:<share
    /// within 2%> warm=<median>:<share within 2%>`.
    SearchWarm(warm::WarmArgs),
    /// What choosing costs on a synthetic space of up to 10⁷ candidates: `overhead
    /// candidates=<N> budget=<n> … per_proposal_ms=<mean> worst_call_ms=<max> …`.
    SearchOverhead(overhead::OverheadArgs),
    /// Read the raw ratios of `search --ratios` and scripts/bench_search_kerneltuner.py
    /// (`search-ratios …`, `kerneltuner-ratios …` lines) and print each cell's figures with 90 %
    /// bootstrap intervals, the pooled figures, each side's best per space and budget and a
    /// verdict: the one summariser of scripts/bench-search.
    SearchSummary(summary::SummaryArgs),
    /// Publish what an attacker with broker access but without the signing key would send
    /// (garbage, a length bomb, forged replies and orders about real jobs) to the cluster
    /// named by the environment, and print `hostile published=<n> …`. The cluster must
    /// refuse all of it; `scripts/chaos` checks that nothing took effect.
    Hostile(hostile::HostileArgs),
}

/// Where the `shoal` program built beside this one is: the two are built together into the
/// same directory.
fn shoal_beside() -> PathBuf {
    std::env::current_exe()
        .map(|exe| exe.with_file_name("shoal"))
        .unwrap_or_else(|_| PathBuf::from("shoal"))
}

/// The `shoal` program beside this one, whose `worker` command runs a bench cluster's workers;
/// an error that says how to build it when it is not there.
pub fn shoal_program() -> anyhow::Result<PathBuf> {
    let shoal = shoal_beside();
    anyhow::ensure!(
        shoal.is_file(),
        "{} is missing: the bench's workers are `shoal worker` processes of the `shoal` built \
         beside shoal-bench (cargo build -p shoal-cli -p shoal-bench)",
        shoal.display()
    );
    Ok(shoal)
}

/// The argv that starts a library-mode runner in an embedded bench: `shoal runner` beside this
/// program (this one has no `runner`). The bench's no-op jobs never start one; the actors take
/// the argv all the same.
pub fn runner_program() -> Vec<String> {
    vec![shoal_beside().display().to_string(), "runner".into()]
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Dispatch(args) => dispatch::dispatch(args).await,
        Command::Fleet(args) => fleet::fleet(args).await,
        Command::Search(args) => search::search(args),
        Command::SearchWarm(args) => warm::search_warm(args),
        Command::SearchOverhead(args) => overhead::search_overhead(args),
        Command::SearchSummary(args) => summary::search_summary(args),
        Command::Hostile(args) => hostile::hostile(args).await,
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(e) = logging::init(cli.log_format) {
        eprintln!("shoal-bench: {e}");
        return ExitCode::from(2);
    }
    let system = actix::System::new();
    match system.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("shoal-bench: {}", shoal_cli::report(&e));
            ExitCode::from(1)
        }
    }
}
