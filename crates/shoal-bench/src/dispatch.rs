//! `shoal-bench dispatch`: N jobs of the no-op backend through the whole path — load, schedule,
//! compile queue, eval queue, results, store — and one line of figures. Every message, lease and
//! commit is real; only the compile and eval steps do nothing, so the figure measures Shoal.
//!
//! Jobs share compile-time parameters in groups (`--builds` distinct builds), so one compile
//! request carries many jobs, and eval requests carry `--eval-batch` items: several jobs per
//! message, with a compare-and-set per job all the same. `--preload N` first fills the store
//! with N finished jobs of an earlier session, untimed (`preload.rs`), so that the run measures
//! a store with a history; the line then also gives the peak memory and the store's bytes per
//! job.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use shoal_actors::backends::SessionBackends;
use shoal_actors::embedded::{self, EmbeddedOptions};
use shoal_actors::scheduler::shape::ShapeConfig;
use shoal_actors::scheduler::SchedulerConfig;
use shoal_backend::session::noop_build_key;
use shoal_bus::MemoryBus;
use shoal_model::queue::Namespace;
use shoal_model::{
    ConfigId, JobState, NewConfig, NewJob, NewSession, NewSolver, Params, SessionId, SolverId,
};
use shoal_store::{SqliteStore, Store};

use crate::cluster::{self, worker, BenchCluster};
use crate::preload;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// Every actor in this process, in-process bus, SQLite store.
    Embedded,
    /// RabbitMQ and MariaDB (server URLs from SHOAL_TEST_AMQP and SHOAL_TEST_MYSQL, as
    /// `scripts/services-up` writes them): a fresh database and namespace, and a scheduler, a
    /// compile worker and an eval worker as separate `shoal worker` processes.
    Cluster,
}

#[derive(Debug, Args)]
pub struct DispatchArgs {
    #[arg(long, value_enum, default_value_t = Mode::Embedded)]
    pub mode: Mode,
    /// Jobs to push through.
    #[arg(long, default_value_t = 100_000)]
    pub jobs: u64,
    /// Distinct builds the jobs share.
    #[arg(long, default_value_t = 100)]
    pub builds: u64,
    /// Items per eval request.
    #[arg(long, default_value_t = 256)]
    pub eval_batch: usize,
    /// Finished jobs (evaluated, a result each) of an earlier session that the store holds
    /// before the timed run: inserted in batches, not timed, progress on stderr.
    #[arg(long, default_value_t = 0)]
    pub preload: u64,
}

/// The session, config, solver and jobs of a dispatch run: `--builds` builds shared in turn.
pub async fn load_noop(
    store: &dyn Store,
    args: &DispatchArgs,
    arch: &str,
    num_cu: u32,
) -> anyhow::Result<SessionId> {
    let builds = args.builds.max(1);
    let jobs = (0..args.jobs).map(|i| noop_params(i, builds));
    let reason = format!("bench-dispatch {} jobs", args.jobs);
    load_noop_jobs(store, &reason, (arch, num_cu), jobs).await
}

/// The compile and run parameters of no-op job `i` when `builds` builds are shared in turn:
/// job `i` uses build `i mod builds`.
pub fn noop_params(i: u64, builds: u64) -> (Params, Params) {
    let mut compile = Params::new();
    compile.push("B", (i % builds).to_string());
    let mut run = Params::new();
    run.push("R", (i / builds).to_string());
    (compile, run)
}

/// A new no-op session for the device kind (`arch`, `num_cu`), with the config and solver its
/// jobs name.
pub async fn noop_session(
    store: &dyn Store,
    reason: &str,
    (arch, num_cu): (&str, u32),
) -> anyhow::Result<(SessionId, ConfigId, SolverId)> {
    let session = store
        .create_session(&NewSession {
            reason: reason.to_string(),
            arch: arch.to_string(),
            num_cu,
            backend: shoal_model::Backend::Noop,
            spec: String::new(),
            spec_path: String::new(),
            library_version: format!("run {}", shoal_actors::now_ms()),
            driver_version: String::new(),
            max_retries: 3,
        })
        .await?;
    let config = store
        .upsert_configs(&[NewConfig {
            kind: "noop".into(),
            key: "noop".into(),
            params: Params::new(),
            tags: vec!["bench".into()],
        }])
        .await?[0]
        .0;
    let solver = store
        .upsert_solvers(&[NewSolver {
            name: "noop".into(),
            tunable: true,
        }])
        .await?
        .remove(0)
        .id;
    Ok((session, config, solver))
}

/// A no-op job of `session` with these parameters.
pub fn noop_job(
    session: SessionId,
    config: ConfigId,
    solver: SolverId,
    compile: Params,
    run: Params,
) -> NewJob {
    NewJob {
        session,
        config,
        solver,
        compile_step: shoal_model::Step::NoopBuild,
        eval_step: shoal_model::Step::NoopRun,
        build_key: noop_build_key(&compile),
        held: false,
        compile_params: compile,
        run_params: run,
    }
}

/// A no-op session for the device kind (`arch`, `num_cu`) with one job per (compile, run)
/// parameter pair, inserted in batches.
pub async fn load_noop_jobs(
    store: &dyn Store,
    reason: &str,
    (arch, num_cu): (&str, u32),
    jobs: impl Iterator<Item = (Params, Params)>,
) -> anyhow::Result<SessionId> {
    let (session, config, solver) = noop_session(store, reason, (arch, num_cu)).await?;
    let mut batch = Vec::with_capacity(5000);
    for (compile, run) in jobs {
        batch.push(noop_job(session, config, solver, compile, run));
        if batch.len() == 5000 {
            store.insert_jobs(&batch).await?;
            batch.clear();
        }
    }
    store.insert_jobs(&batch).await?;
    Ok(session)
}

/// Waits until every job of the session is final; returns how many were evaluated.
///
/// Polled with one indexed `LIMIT 1` look-up per open state rather than a count of the whole
/// session: on the embedded store every poll holds the one connection that the Scheduler writes
/// through, and counting 100,000 jobs five times a second took 3 % of it.
pub async fn wait_done(store: &dyn Store, session: SessionId, total: u64) -> anyhow::Result<u64> {
    let open: Vec<JobState> = JobState::ALL
        .into_iter()
        .filter(|s| !s.is_terminal())
        .collect();
    let mut last = Instant::now();
    loop {
        let mut done = true;
        for &state in &open {
            if !store.jobs_in_state(session, state, 1).await?.is_empty() {
                done = false;
                break;
            }
        }
        let report = last.elapsed() > Duration::from_secs(5);
        if done || report {
            let counts = store.state_counts(session).await?;
            let finished: u64 = counts
                .iter()
                .filter(|(s, _)| s.is_terminal())
                .map(|(_, n)| n)
                .sum();
            if done && finished >= total {
                return Ok(counts.get(&JobState::Evaluated).copied().unwrap_or(0));
            }
            if report {
                eprintln!("{finished}/{total} final");
                last = Instant::now();
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What one dispatch run measured.
pub(crate) struct Figures {
    /// From loading the timed session to its last job final (teardown not included).
    pub secs: f64,
    pub evaluated: u64,
    /// The peak resident memory of the bench's processes, summed, in KiB.
    pub peak_rss_kib: u64,
    /// The store's bytes (data and indexes) at the end, preloaded jobs included.
    pub db_bytes: u64,
}

pub async fn dispatch(args: DispatchArgs) -> anyhow::Result<ExitCode> {
    let f = match args.mode {
        Mode::Embedded => dispatch_embedded(&args).await?,
        Mode::Cluster => dispatch_cluster(&args).await?,
    };
    if f.evaluated != args.jobs {
        anyhow::bail!("only {} of {} jobs were evaluated", f.evaluated, args.jobs);
    }
    println!(
        "{}",
        figures_line(
            match args.mode {
                Mode::Embedded => "embedded",
                Mode::Cluster => "cluster",
            },
            &args,
            &f
        )
    );
    Ok(ExitCode::SUCCESS)
}

/// The last line of a run, `key=value` words for BENCHMARKS.md: the first four as before
/// `--preload` existed, then the preload, the peak memory in MiB and the store's bytes per job
/// (preloaded and timed jobs together).
pub(crate) fn figures_line(mode: &str, args: &DispatchArgs, f: &Figures) -> String {
    let all_jobs = (args.jobs + args.preload).max(1);
    format!(
        "dispatch mode={mode} jobs={} secs={:.2} jobs_per_s={:.0} preload={} peak_rss_mb={} db_bytes_per_job={}",
        args.jobs,
        f.secs,
        args.jobs as f64 / f.secs,
        args.preload,
        f.peak_rss_kib.div_ceil(1024),
        f.db_bytes / all_jobs
    )
}

/// Every actor in this process on a SQLite store; the peak memory is this process's.
async fn dispatch_embedded(args: &DispatchArgs) -> anyhow::Result<Figures> {
    let dir = tempfile::tempdir()?;
    let sqlite = SqliteStore::open(&dir.path().join("bench.db"))?;
    let store: Arc<dyn Store> = Arc::new(sqlite.clone());
    store.migrate().await?;
    let cpu = shoal_gpu::cpu_device(&shoal_gpu::SystemRoot::default());
    if args.preload > 0 {
        let kind = (cpu.arch.as_str(), cpu.num_cu);
        preload::preload(&*store, args.preload, args.builds, kind).await?;
    }
    let start = Instant::now();
    let session = load_noop(&*store, args, &cpu.arch, cpu.num_cu).await?;
    eprintln!(
        "loaded {} jobs in {:.2} s (timed)",
        args.jobs,
        start.elapsed().as_secs_f64()
    );
    let running = start_embedded(
        &store,
        dir.path(),
        session,
        (shoal_cli::host::devices(), None),
        bench_scheduler(args),
    )
    .await?;
    let evaluated = wait_done(&*store, session, args.jobs).await?;
    let secs = start.elapsed().as_secs_f64();
    running.shutdown().await?;
    Ok(Figures {
        secs,
        evaluated,
        peak_rss_kib: preload::peak_rss_kib(None).unwrap_or(0),
        db_bytes: sqlite.database_bytes().await?,
    })
}

/// A scheduler, a compile worker and an eval worker as processes of their own, on a database
/// and namespace of this run, removed at the end; the peak memory is the sum of the four
/// processes' peaks (this one, which loads and polls, and the three workers), each also said
/// on stderr.
async fn dispatch_cluster(args: &DispatchArgs) -> anyhow::Result<Figures> {
    let arch = std::env::consts::ARCH.to_string();
    let batch = args.eval_batch.to_string();
    let workers = vec![
        worker(
            "scheduler",
            &[
                "--role",
                "scheduler",
                "--eval-batch",
                &batch,
                "--max-in-flight",
                "20000",
            ],
        ),
        worker("compile", &["--role", "compile", "--arch", &arch]),
        worker("eval", &["--role", "eval"]),
    ];
    let mut cluster = BenchCluster::create("bench").await?;
    let store = cluster.store.clone();
    // The eval worker times on its CPU: the session targets it.
    let cpu = shoal_gpu::cpu_device(&shoal_gpu::SystemRoot::default());
    let run = cluster::until_interrupted(async {
        if args.preload > 0 {
            let kind = (cpu.arch.as_str(), cpu.num_cu);
            preload::preload(&*store, args.preload, args.builds, kind).await?;
        }
        // Started after the preload, as a deployment's workers start on a store with history
        // (and the Scheduler's first look at the store is part of the timed run).
        cluster.spawn_all(workers)?;
        let start = Instant::now();
        let session = load_noop(&*store, args, &cpu.arch, cpu.num_cu).await?;
        let evaluated = wait_done(&*store, session, args.jobs).await?;
        let secs = start.elapsed().as_secs_f64();
        let mut peak_rss_kib = preload::peak_rss_kib(None).unwrap_or(0);
        let mut each = format!("bench {} MiB", peak_rss_kib.div_ceil(1024));
        for (name, child) in &cluster.children {
            let kib = preload::peak_rss_kib(Some(child.id())).unwrap_or(0);
            peak_rss_kib += kib;
            each.push_str(&format!(", {name} {} MiB", kib.div_ceil(1024)));
        }
        eprintln!("peak resident memory (VmHWM) per process: {each}");
        Ok(Figures {
            secs,
            evaluated,
            peak_rss_kib,
            db_bytes: cluster.database_bytes().await?,
        })
    })
    .await;
    let teardown = Instant::now();
    cluster.stop().await;
    eprintln!(
        "cluster removed in {:.1} s",
        teardown.elapsed().as_secs_f64()
    );
    run
}

/// A fresh SQLite store in a temporary directory, for an embedded bench run.
pub async fn embedded_store() -> anyhow::Result<(tempfile::TempDir, Arc<dyn Store>)> {
    let dir = tempfile::tempdir()?;
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&dir.path().join("bench.db"))?);
    store.migrate().await?;
    Ok((dir, store))
}

/// Every actor of `session` in this process, on the in-process bus, evaluating on `devices`
/// with `compile_slots` builds at once (default: one per core).
pub async fn start_embedded(
    store: &Arc<dyn Store>,
    work_dir: &std::path::Path,
    session: SessionId,
    (devices, compile_slots): (Vec<shoal_gpu::Device>, Option<usize>),
    scheduler: SchedulerConfig,
) -> anyhow::Result<embedded::Embedded> {
    Ok(embedded::start(
        store.clone(),
        MemoryBus::new(Namespace::new("bench").expect("valid")),
        SessionBackends::new(shoal_cli::host::fin_path(None)),
        EmbeddedOptions {
            session,
            host: shoal_cli::host::hostname(),
            work_dir: PathBuf::from(work_dir),
            compile_slots,
            monitor_interval: Duration::from_secs(5),
            devices,
            runner_program: crate::runner_program(),
            activity: Default::default(),
            scheduler,
        },
    )
    .await?)
}

/// Limits sized for throughput: deep queues, big batches.
pub fn bench_scheduler(args: &DispatchArgs) -> SchedulerConfig {
    SchedulerConfig {
        max_compile_in_flight: 20_000,
        eval: ShapeConfig {
            fixed_batch: Some(args.eval_batch.max(1)),
            fixed_in_flight: Some(20_000),
            ..ShapeConfig::default()
        },
        result_batch: 1024,
        ..SchedulerConfig::default()
    }
}
