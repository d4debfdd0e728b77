//! The flags of `shoal tune` ([`TuneArgs`]), and `--max-candidates`, which `check` shares:
//! kept apart from `args.rs`, which holds every other command's.

use std::path::PathBuf;

use clap::Args;

#[derive(Debug, Args)]
pub struct TuneArgs {
    /// The tuning spec (TOML): commands, parameters, rules, shapes, output parsing.
    pub spec: PathBuf,
    /// Where to write tuned.csv and tuned.json (default: shoal-out/<spec name>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Concurrent builds (default: one per core). Timings on the CPU never overlap a build.
    #[arg(long, short = 'j')]
    pub jobs: Option<usize>,
    /// Why this tuning runs; part of the session's identity.
    #[arg(long, default_value = "")]
    pub reason: String,
    /// Infrastructure failures a job survives before it is marked errored.
    #[arg(long, default_value_t = 3)]
    pub max_retries: u32,
    /// Working directory for builds and the artifact cache (default: <db>.work).
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
    /// The device to time on, by its id in `shoal devices` (e.g. `nvidia1`). Default: the CPU
    /// for a spec with `device = "cpu"`; for `device = "gpu"`, every GPU of the same model as
    /// the first one found (one Evaluator and one runner each).
    #[arg(long, conflicts_with = "cluster")]
    pub device: Option<String>,
    /// Evaluate on at most N GPUs: the first N that `shoal devices` lists (default: every GPU
    /// of the model). For measuring how tuning scales with the GPU count.
    #[arg(long, value_name = "N", conflicts_with = "cluster", value_parser = clap::value_parser!(u32).range(1..))]
    pub devices: Option<u32>,
    /// Cluster mode: ask the cluster's Scheduler to load the session and jobs (a command on the
    /// broker, SHOAL_BROKER: one node's URL or a cluster's, `amqp://u:p@mq1:5672,mq2:5672/%2f`),
    /// wait while the running `shoal worker` processes tune them, then export (reading the
    /// store, SHOAL_DB). Nothing runs in this process.
    #[arg(long)]
    pub cluster: bool,
    /// Cluster mode: seconds to wait for the Scheduler to answer. A command it has not answered
    /// by then is not lost: it is applied when a Scheduler runs.
    #[arg(long, value_name = "SECS", default_value_t = 60, requires = "cluster")]
    pub reply_timeout: u64,
    /// Cluster mode: the architecture of the hosts that evaluate (default: this host's CPU).
    #[arg(long, requires = "cluster")]
    pub arch: Option<String>,
    /// Cluster mode: their unit count (default: this host's cores).
    #[arg(long, requires = "cluster")]
    pub num_cu: Option<u32>,
    /// Refuse a spec that would produce more candidates than this (compile sets × run sets ×
    /// shapes, before the rules); at most 100000000, past which no host holds the list.
    #[arg(long, value_name = "N", default_value_t = shoal_backend::spec::DEFAULT_MAX_CANDIDATES,
          value_parser = max_candidates)]
    pub max_candidates: u64,
    /// A replay spec (`backend = "replay"`): how long each recorded answer takes, `instant` or
    /// `scaled:F`, the recorded compile and run times × F (e.g. scaled:0.01), to study
    /// scheduling at the recording's pace.
    #[arg(long, value_name = "instant|scaled:F", default_value = "instant")]
    pub replay_time: shoal_backend::replay::ReplayTime,
    /// Start each shape's search from earlier results, as a prior (not as the answer): a T4
    /// file (`shoal export --format t4` of another tuning: another shape, device or version of
    /// this kernel) or `session:<id>`, a session of this store. Overrides the spec's `[search]
    /// prior`; the spec needs a `[search]` with a strategy and a budget. In cluster mode, name
    /// it in the spec instead.
    #[arg(long, value_name = "FILE|session:ID", conflicts_with = "cluster",
          value_parser = |s: &str| shoal_model::search::PriorSource::parse(s).map_err(|e| e.to_string()))]
    pub prior: Option<shoal_model::search::PriorSource>,
    /// Serve Prometheus metrics on http://ADDR/metrics while tuning (jobs per state, results
    /// by kind, dispatch and apply latency, device temperature, utilisation and clock). A bare
    /// port (`9464`) listens on loopback.
    #[arg(long, value_name = "ADDR", value_parser = crate::metrics_endpoint::parse_addr)]
    pub metrics_addr: Option<std::net::SocketAddr>,
}

/// `--max-candidates`: a count from 1 to [`shoal_backend::spec::MAX_CANDIDATES_CEILING`].
pub(crate) fn max_candidates(value: &str) -> Result<u64, String> {
    use shoal_backend::spec::MAX_CANDIDATES_CEILING as CEILING;
    let n: u64 = value
        .parse()
        .map_err(|e| format!("not a count of candidates: {e}"))?;
    if n == 0 || n > CEILING {
        return Err(format!(
            "{n} is not from 1 to {CEILING}: a list of more candidates than that is past the \
             memory of any host (each takes about half a KiB while a spec is loaded)"
        ));
    }
    Ok(n)
}

/// The spec limits of a command, with `--max-candidates` applied.
pub fn spec_limits(max_candidates: u64) -> shoal_backend::spec::Limits {
    shoal_backend::spec::Limits {
        max_candidates,
        ..Default::default()
    }
}
