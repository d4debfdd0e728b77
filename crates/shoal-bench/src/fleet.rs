//! `shoal-bench fleet`: a simulated fleet of GPUs, to see whether the cluster keeps devices
//! busy before there are hundreds of real ones. `--devices N` simulated GPUs are spread over
//! `--hosts H` eval worker processes (`shoal worker --role eval --simulate-devices k`); a
//! Scheduler and a compile worker complete the cluster, on the RabbitMQ and MariaDB that
//! `scripts/services-up` started. Every job is a no-op job whose build sleeps `--build-ms` and
//! whose evaluation sleeps for a time drawn from a distribution: fixed (`--eval-ms`), or the
//! recorded times of a T4 space (`--space`: one valid configuration's summed runtimes per job),
//! or of a session tuned before (`--session-times N --db store.db`: its measured jobs' device
//! times).
//!
//! Each evaluation records when it started and how long it slept, with its device, so the
//! busy share of every device is read back from the store: its sleeping time over the
//! evaluation window (from the first evaluation's start to the last one's end, fleet-wide).
//! The Scheduler's CPU time over the run comes from `/proc`. `--mode embedded` runs the same
//! fleet in one process (in-process bus, SQLite): the ceiling of each row.
//!
//! `--netns` puts each eval worker in a network namespace of its own (`netns.rs`).
//!
//! Prints: `fleet devices=<N> hosts=<H> eval_ms=<mean> busy_pct=<mean>/<min> jobs_per_s=<R>
//! scheduler_cpu_pct=<P> secs=<S>` (in embedded mode the CPU is the whole process's).

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use shoal_actors::scheduler::shape::ShapeConfig;
use shoal_actors::scheduler::SchedulerConfig;
use shoal_backend::noop::{BUILD_SLEEP_MS, EVAL_SLEEP_US};
use shoal_bus::Bus;
use shoal_gpu::SIMULATED_ARCH;
use shoal_model::{Outcome, Params, SessionId, Step};
use shoal_store::Store;

use crate::cluster::{worker, BenchCluster};
use crate::dispatch::Mode;

#[derive(Debug, Args)]
pub struct FleetArgs {
    /// Cluster (worker processes over RabbitMQ and MariaDB) or embedded (one process).
    #[arg(long, value_enum, default_value_t = Mode::Cluster)]
    pub mode: Mode,
    /// Simulated GPUs.
    #[arg(long, default_value_t = 1)]
    pub devices: u32,
    /// Eval worker processes the devices are spread over.
    #[arg(long, default_value_t = 1)]
    pub hosts: u32,
    /// Every evaluation sleeps this long (milliseconds).
    #[arg(long, default_value_t = 50.0)]
    pub eval_ms: f64,
    /// Draw evaluation times from a recorded space in the T4 format (`.json` or `.json.gz`):
    /// each job sleeps the summed runtimes of one valid configuration, drawn at random.
    #[arg(long, conflicts_with_all = ["eval_ms", "session_times"])]
    pub space: Option<PathBuf>,
    /// Draw evaluation times from the measured jobs of session N of the `--db` store instead
    /// (each one's device time, `eval_wall_us`, or its timed runs summed).
    #[arg(long, value_name = "N", requires = "db", conflicts_with = "eval_ms")]
    pub session_times: Option<i64>,
    /// The SQLite store `--session-times` reads.
    #[arg(long)]
    pub db: Option<PathBuf>,
    /// Every build sleeps this long (milliseconds).
    #[arg(long, default_value_t = 100)]
    pub build_ms: u64,
    /// Jobs that share one build.
    #[arg(long, default_value_t = 64)]
    pub jobs_per_build: u64,
    /// Concurrent builds of the compile worker.
    #[arg(long, default_value_t = 8)]
    pub compile_slots: usize,
    /// Evaluation work to load, in seconds of the whole fleet: jobs = devices × secs / mean
    /// evaluation time.
    #[arg(long, default_value_t = 20.0)]
    pub secs: f64,
    /// Jobs to load instead of `--secs` worth.
    #[arg(long)]
    pub jobs: Option<u64>,
    /// Run each eval worker in a network namespace of its own, joined to this machine by a
    /// veth pair, so its traffic crosses a network interface (needs root and iproute2).
    #[arg(long)]
    pub netns: bool,
    /// Fix the items per eval request instead of letting the Scheduler shape them (to compare
    /// with the fixed batches of earlier releases).
    #[arg(long)]
    pub eval_batch: Option<usize>,
    /// Seed of the draws from `--space`.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// What a run measured.
struct Figures {
    secs: f64,
    jobs: u64,
    cpu_secs: f64,
    /// (mean, worst) busy share of the devices over the evaluation window, in percent.
    busy: (f64, f64),
}

pub async fn fleet(args: FleetArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(args.devices >= 1, "--devices must be at least 1");
    anyhow::ensure!(
        (1..=args.devices).contains(&args.hosts),
        "--hosts must be between 1 and --devices"
    );
    let times = eval_times(&args).await?;
    let mean_us = times.iter().sum::<u64>() as f64 / times.len() as f64;
    eprintln!(
        "fleet: {} jobs, mean evaluation {:.1} ms, {} devices over {} hosts",
        times.len(),
        mean_us / 1000.0,
        args.devices,
        args.hosts
    );
    anyhow::ensure!(
        !(args.netns && args.mode == Mode::Embedded),
        "--netns needs --mode cluster: the embedded mode is one process"
    );
    let figures = match args.mode {
        Mode::Cluster => run_cluster(&args, &times).await?,
        Mode::Embedded => run_embedded(&args, &times).await?,
    };
    println!(
        "fleet mode={}{} devices={} hosts={} eval_ms={:.1} busy_pct={:.1}/{:.1} jobs_per_s={:.0} scheduler_cpu_pct={:.1} secs={:.2}",
        match args.mode {
            Mode::Cluster => "cluster",
            Mode::Embedded => "embedded",
        },
        if args.netns { " netns=yes" } else { "" },
        args.devices,
        args.hosts,
        mean_us / 1000.0,
        figures.busy.0,
        figures.busy.1,
        figures.jobs as f64 / figures.secs,
        100.0 * figures.cpu_secs / figures.secs,
        figures.secs,
    );
    Ok(ExitCode::SUCCESS)
}

/// Each job's evaluation time, in microseconds.
async fn eval_times(args: &FleetArgs) -> anyhow::Result<Vec<u64>> {
    let pool: Vec<u64> = match (&args.space, args.session_times, &args.db) {
        (Some(path), _, _) => space_times(path)?,
        (None, Some(session), Some(db)) => session_times(db, SessionId(session)).await?,
        _ => vec![(args.eval_ms * 1000.0).round().max(1.0) as u64],
    };
    let mean = pool.iter().sum::<u64>() as f64 / pool.len() as f64;
    let jobs = args
        .jobs
        .unwrap_or_else(|| (f64::from(args.devices) * args.secs * 1e6 / mean).ceil() as u64);
    let mut rng = shoal_model::search::Rng::new(args.seed);
    Ok((0..jobs.max(1))
        .map(|_| pool[rng.below(pool.len())])
        .collect())
}

/// The evaluation time of every valid configuration of a T4 space: its runtimes summed (the
/// timed runs of one candidate), in microseconds.
fn space_times(path: &std::path::Path) -> anyhow::Result<Vec<u64>> {
    let times: Vec<u64> = shoal_backend::replay::t4::read(path)
        .map_err(anyhow::Error::msg)?
        .entries
        .iter()
        .filter(|e| e.valid)
        .map(|e| (e.runtimes_ms.iter().sum::<f64>() * 1000.0).round() as u64)
        .filter(|us| *us > 0)
        .collect();
    anyhow::ensure!(
        !times.is_empty(),
        "{}: no valid configuration with runtimes",
        path.display()
    );
    Ok(times)
}

/// The device time of every measured job of a session: what the Evaluator recorded
/// (`eval_wall_us`, warm-up and process start included), else its timed runs summed.
async fn session_times(db: &std::path::Path, session: SessionId) -> anyhow::Result<Vec<u64>> {
    let store = shoal_cli::store_open::open_store(db).await?;
    let times: Vec<u64> = store
        .final_results(session)
        .await?
        .into_iter()
        .filter_map(|r| match r.outcome? {
            Outcome::Measured(m) => {
                let wall = m.details.get_i64("eval_wall_us").map(|us| us as f64);
                let runs = m.samples_us.iter().sum::<f64>();
                let us = wall.unwrap_or(runs);
                (us >= 1.0).then_some(us.round() as u64)
            }
            Outcome::Failed { .. } => None,
        })
        .collect();
    anyhow::ensure!(
        !times.is_empty(),
        "session {session} of {} has no measured job",
        db.display()
    );
    Ok(times)
}

/// The jobs: `jobs_per_build` in a row share a build that sleeps `--build-ms`.
fn jobs<'a>(args: &FleetArgs, times: &'a [u64]) -> impl Iterator<Item = (Params, Params)> + 'a {
    let (per_build, build_ms) = (args.jobs_per_build.max(1), args.build_ms);
    times.iter().copied().enumerate().map(move |(i, us)| {
        let mut compile = Params::new();
        compile.push("B", (i as u64 / per_build).to_string());
        compile.push(BUILD_SLEEP_MS, build_ms.to_string());
        let mut run = Params::new();
        run.push("R", i.to_string());
        run.push(EVAL_SLEEP_US, us.to_string());
        (compile, run)
    })
}

async fn run_cluster(args: &FleetArgs, times: &[u64]) -> anyhow::Result<Figures> {
    let slots = args.compile_slots.to_string();
    let batch = args.eval_batch.map(|n| n.to_string());
    let mut scheduler = vec!["--role", "scheduler"];
    if let Some(n) = &batch {
        scheduler.extend(["--eval-batch", n]);
    }
    let mut workers = vec![
        worker("scheduler", &scheduler),
        worker(
            "compile",
            &[
                "--role",
                "compile",
                "--arch",
                SIMULATED_ARCH,
                "--fin-steps",
                "noop_build",
                "-j",
                &slots,
            ],
        ),
    ];
    let servers = if args.netns {
        let var = |k: &str| std::env::var(k).with_context(|| format!("{k} is not set"));
        let (db, _) = crate::netns::relayed(&var("SHOAL_TEST_MYSQL")?, [0, 0, 0, 0].into())?;
        let (broker, _) = crate::netns::relayed(&var("SHOAL_TEST_AMQP")?, [0, 0, 0, 0].into())?;
        vec![db, broker]
    } else {
        Vec::new()
    };
    for h in 0..args.hosts {
        let k = args.devices / args.hosts + u32::from(h < args.devices % args.hosts);
        let k = k.to_string();
        let mut w = worker(
            &format!("eval{h}"),
            &[
                "--role",
                "eval",
                "--fin-steps",
                "noop_run",
                "--simulate-devices",
                &k,
            ],
        );
        if args.netns {
            let host = crate::netns::HostNamespace::create(h, &servers)?;
            w.host = Some(Arc::new(host));
        }
        workers.push(w);
    }
    let mut cluster = BenchCluster::start("fleet", workers).await?;
    cluster.kinds.push((SIMULATED_ARCH.to_string(), 1));
    let run = async {
        wait_consumers(&cluster, args.devices).await?;
        let scheduler = cluster.pid("scheduler").context("no scheduler")?;
        let store = &*cluster.store;
        // The clock runs from the load: the Scheduler dispatches while the jobs go in.
        let clock = Clock::start(move || cpu_secs(scheduler));
        let session = load(store, args, times).await?;
        finish(store, args, session, clock).await
    };
    let figures = crate::cluster::until_interrupted(run).await;
    cluster.stop().await;
    figures
}

/// Waits until every simulated device consumes the eval queue, so that the run measures work,
/// not start-up.
async fn wait_consumers(cluster: &BenchCluster, devices: u32) -> anyhow::Result<()> {
    let bus = cluster.bus().await?;
    let queue = bus.namespace().eval_queue(Step::NoopRun, SIMULATED_ARCH, 1);
    // Declared as the workers declare it, so that asking about it never meets a missing queue.
    let options = shoal_bus::QueueOptions::limited(SchedulerConfig::default().delivery_limit);
    bus.declare_queue(&queue, &options).await?;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let n = bus.consumer_count(&queue).await.unwrap_or(0);
        if n >= devices {
            bus.close().await?;
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "only {n} of {devices} simulated devices consume {queue} after 120 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn run_embedded(args: &FleetArgs, times: &[u64]) -> anyhow::Result<Figures> {
    let (dir, store) = crate::dispatch::embedded_store().await?;
    // The embedded mode serves one session, loaded before it starts.
    let session = load(&*store, args, times).await?;
    let own = std::process::id();
    let clock = Clock::start(move || cpu_secs(own));
    // The compile bound counts jobs: two builds per slot, as its default means, when
    // `--jobs-per-build` jobs share each build.
    let scheduler = SchedulerConfig {
        max_compile_in_flight: 2 * args.compile_slots as u64 * args.jobs_per_build.max(1),
        eval: ShapeConfig {
            fixed_batch: args.eval_batch,
            ..ShapeConfig::default()
        },
        ..SchedulerConfig::default()
    };
    let devices = shoal_gpu::simulated(args.devices);
    let running = crate::dispatch::start_embedded(
        &store,
        dir.path(),
        session,
        (devices, Some(args.compile_slots)),
        scheduler,
    )
    .await?;
    let figures = finish(&*store, args, session, clock).await;
    running.shutdown().await?;
    figures
}

/// Wall time and the CPU time of one process, from a start.
struct Clock<F> {
    start: Instant,
    cpu_before: f64,
    cpu: F,
}

impl<F: Fn() -> f64> Clock<F> {
    fn start(cpu: F) -> Self {
        Clock {
            start: Instant::now(),
            cpu_before: cpu(),
            cpu,
        }
    }
}

/// Waits until every job is final and reads back what the devices did.
async fn finish(
    store: &dyn Store,
    args: &FleetArgs,
    session: SessionId,
    clock: Clock<impl Fn() -> f64>,
) -> anyhow::Result<Figures> {
    let total = store.state_counts(session).await?.values().sum::<u64>();
    let evaluated = crate::dispatch::wait_done(store, session, total).await?;
    let secs = clock.start.elapsed().as_secs_f64();
    let cpu_secs = (clock.cpu)() - clock.cpu_before;
    anyhow::ensure!(
        evaluated == total,
        "only {evaluated} of {total} jobs were evaluated"
    );
    let busy = busy_shares(store, session, args.devices).await?;
    Ok(Figures {
        secs,
        jobs: total,
        cpu_secs,
        busy,
    })
}

async fn load(store: &dyn Store, args: &FleetArgs, times: &[u64]) -> anyhow::Result<SessionId> {
    let reason = format!("bench-fleet {} devices, {} jobs", args.devices, times.len());
    crate::dispatch::load_noop_jobs(store, &reason, (SIMULATED_ARCH, 1), jobs(args, times)).await
}

/// Each device's sleeping time over the evaluation window, fleet-wide, as (mean, worst)
/// percentages; a device that evaluated nothing counts as idle.
async fn busy_shares(
    store: &dyn Store,
    session: SessionId,
    devices: u32,
) -> anyhow::Result<(f64, f64)> {
    let mut busy: HashMap<(String, String), f64> = HashMap::new();
    let (mut first, mut last) = (f64::MAX, f64::MIN);
    for r in store.final_results(session).await? {
        let Some(Outcome::Measured(m)) = &r.outcome else {
            continue;
        };
        let (Some(start_ms), Some(wall_us)) = (
            m.details.get_i64("eval_started_ms"),
            m.details.get_i64("eval_wall_us"),
        ) else {
            continue;
        };
        let (start, wall) = (start_ms as f64 / 1000.0, wall_us as f64 / 1e6);
        first = first.min(start);
        last = last.max(start + wall);
        let device = (r.worker.unwrap_or_default(), r.device.unwrap_or_default());
        *busy.entry(device).or_default() += wall;
    }
    anyhow::ensure!(last > first, "no evaluation was recorded");
    let window = last - first;
    let mut shares: Vec<f64> = busy.values().map(|b| 100.0 * b / window).collect();
    shares.resize(shares.len().max(devices as usize), 0.0);
    let mean = shares.iter().sum::<f64>() / shares.len() as f64;
    let worst = shares.iter().copied().fold(f64::MAX, f64::min);
    Ok((mean, worst))
}

/// CPU seconds (user and system) process `pid` has used, from `/proc/<pid>/stat`; 0 where it
/// cannot be read.
fn cpu_secs(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // The command name may hold spaces: fields are counted after its closing parenthesis.
    let Some(after) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
        return 0.0;
    };
    let fields: Vec<&str> = after.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line: 11 and 12 counted from the state.
    let ticks: f64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i)?.parse::<f64>().ok())
        .sum();
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    if hz > 0.0 {
        ticks / hz
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        fleet: FleetArgs,
    }

    fn args(argv: &[&str]) -> FleetArgs {
        Cli::parse_from(std::iter::once("fleet").chain(argv.iter().copied())).fleet
    }

    #[tokio::test]
    async fn fixed_times_fill_the_asked_seconds() {
        let times = eval_times(&args(&[
            "--devices",
            "4",
            "--eval-ms",
            "50",
            "--secs",
            "10",
        ]))
        .await
        .unwrap();
        // 4 devices × 10 s / 50 ms.
        assert_eq!(times.len(), 800);
        assert!(times.iter().all(|&t| t == 50_000));
    }

    #[tokio::test]
    async fn a_space_gives_its_valid_configurations_summed_runtimes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("space.json");
        std::fs::write(
            &path,
            r#"{"schema_version": "1.0", "metadata": {"timeunit": "milliseconds"}, "results": [
                {"configuration": {"x": 1}, "invalidity": "correct", "times": {"runtimes": [1.0, 2.0]}},
                {"configuration": {"x": 2}, "invalidity": "runtime", "times": {"runtimes": [9.0]}},
                {"configuration": {"x": 3}, "invalidity": "correct", "times": {"runtimes": [0.5, 0.5]}}
            ]}"#,
        )
        .unwrap();
        let mut pool = space_times(&path).unwrap();
        pool.sort();
        assert_eq!(
            pool,
            vec![1_000, 3_000],
            "the failed configuration is left out"
        );
        let a = args(&[
            "--space",
            path.to_str().unwrap(),
            "--jobs",
            "50",
            "--seed",
            "7",
        ]);
        let first = eval_times(&a).await.unwrap();
        assert_eq!(first.len(), 50);
        assert!(first.iter().all(|t| pool.contains(t)));
        assert!(
            first.contains(&1_000) && first.contains(&3_000),
            "both drawn"
        );
        assert_eq!(
            first,
            eval_times(&a).await.unwrap(),
            "the same seed, the same draws"
        );
        std::fs::write(&path, r#"{"results": []}"#).unwrap();
        assert!(space_times(&path).is_err());
    }
}
