//! `shoal worker`: one process of the cluster, running the actors of its roles over RabbitMQ and
//! MySQL until SIGTERM or Ctrl-C, then draining.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, ValueEnum};
use shoal_actors::backends::SessionBackends;
use shoal_actors::cluster::{self, Roles, WorkerOptions};
use shoal_actors::presence;
use shoal_actors::scheduler::shape::ShapeConfig;
use shoal_actors::scheduler::SchedulerConfig;
use shoal_model::Step;
use shoal_store::Store;

use crate::connect::{open_bus_url, open_store_url, redact, Settings};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Role {
    Scheduler,
    Compile,
    Eval,
    Monitor,
    Exporter,
    All,
}

#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// What this process runs (repeatable): the Scheduler (one per deployment), Compilers (CPU
    /// hosts), Evaluators (one per GPU of the host), the GpuMonitor, the Exporter (writes tuned
    /// tables on request: `shoal export --cluster`), or all of them.
    #[arg(long, value_enum, required = true)]
    pub role: Vec<Role>,
    /// Steps to serve, e.g. `miopen_perf_compile,miopen_perf_eval` (default: every compile and
    /// eval step this build runs).
    #[arg(long, value_delimiter = ',')]
    pub fin_steps: Vec<Step>,
    /// Architectures whose compile queues to consume (default: those of the sessions in the
    /// store at start-up and of this host's devices).
    #[arg(long, value_delimiter = ',')]
    pub arch: Vec<String>,
    /// Concurrent builds (default: one per core).
    #[arg(short = 'j', long)]
    pub jobs: Option<usize>,
    /// Also evaluate on the CPU when the host has GPUs.
    #[arg(long)]
    pub eval_on_cpu: bool,
    /// Working directory for builds, MIOpen directories and the artifact cache.
    #[arg(long, default_value = "shoal-work")]
    pub work_dir: PathBuf,
    /// Config file with `broker`, `db`, `namespace`, `fin` (default: $SHOAL_CONFIG, else
    /// /etc/shoal/shoal.toml). The environment (SHOAL_BROKER, SHOAL_DB, SHOAL_NAMESPACE,
    /// SHOAL_FIN) wins over the file; passwords are never taken from the command line.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// The broker, e.g. amqp://shoal@mq-host:5672/%2f (no password: that comes from
    /// SHOAL_BROKER_PASSWORD), or a cluster's nodes between `@` and `/`, commas between them:
    /// amqp://shoal@mq1:5672,mq2:5672,mq3:5672/%2f (the worker connects to the first that
    /// answers and, when that node goes, to the next). Overrides SHOAL_BROKER and the config
    /// file, which take the same forms.
    #[arg(long)]
    pub broker: Option<String>,
    /// The database, e.g. mysql://shoal@db-host:3306/shoal (no password: that comes from
    /// SHOAL_DB_PASSWORD). Overrides SHOAL_DB and the config file.
    #[arg(long)]
    pub db_url: Option<String>,
    /// Items per eval request the Scheduler sends (default: adapted to how long the items
    /// take on a device, about 0.4 s of device time per request).
    #[arg(long)]
    pub eval_batch: Option<usize>,
    /// Jobs in flight per phase at most (Scheduler). Default: 256 in the compile phase, and in
    /// the eval phase three requests for every device consuming the session's eval queues.
    #[arg(long)]
    pub max_in_flight: Option<u64>,
    /// Candidates a searched session (a spec with `[search]`) keeps chosen and unfinished
    /// (Scheduler): about one per compile slot and GPU of the fleet keeps them busy; fewer lets
    /// each batch learn more from the last.
    #[arg(long, default_value_t = 16, value_name = "N")]
    pub search_in_flight: usize,
    /// Sessions of the replay backend (`backend = "replay"`): how long each recorded answer
    /// takes, `instant` or `scaled:F` (the recorded compile and run times × F), so that a fleet
    /// replaying a space is as busy as the recording's devices were.
    #[arg(long, value_name = "instant|scaled:F", default_value = "instant")]
    pub replay_time: shoal_backend::replay::ReplayTime,
    /// Evaluate on N simulated GPUs (architecture `sim`, 1 unit) instead of this host's devices:
    /// a benchmark aid (`shoal-bench fleet`), for sessions of the no-op backend, whose items
    /// sleep for their recorded time. Never on a real host.
    #[arg(long, value_name = "N", hide = true)]
    pub simulate_devices: Option<u32>,
    /// Evaluate on at most N of this host's GPUs: the first N that `shoal devices` lists
    /// (default: all of them).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub devices: Option<u32>,
    /// Exporter: the only directory it writes into (default: `<work-dir>/exports`). An export
    /// request (`shoal export --cluster -o NAME`) names a directory inside it.
    #[arg(long)]
    pub export_dir: Option<PathBuf>,
    /// The name of this host (default: the machine's hostname), in the worker's name on every
    /// reply, its presence record and the routing of control orders (`shoal control … --host`).
    /// A host's own broker user (`shoal_eval.<host>`) speaks for that name only.
    #[arg(long, value_parser = host_name)]
    pub host: Option<String>,
    /// Seconds to wait at start-up for a broker or database that cannot be reached (refused,
    /// reset, restarting) before exiting non-zero. A worker that systemd restarts while the
    /// broker or the database restarts then starts with them instead of failing again; a
    /// refused login or a bad URL fails at once.
    #[arg(long, default_value_t = 120, value_name = "SECS")]
    pub wait_for_services: u64,
    /// Serve Prometheus metrics on http://ADDR/metrics: jobs per state and session (Scheduler),
    /// results by kind, dispatch and apply latency, queue depths, loop restarts, each
    /// Evaluator's busy seconds, device temperature, utilisation and clock. A bare port
    /// (`9464`) listens on loopback; another address is reachable by anyone who can reach it.
    #[arg(long, value_name = "ADDR", value_parser = crate::metrics_endpoint::parse_addr)]
    pub metrics_addr: Option<std::net::SocketAddr>,
}

/// The steps this build's backends run.
const COMPILE_STEPS: [Step; 4] = [
    Step::ExecBuild,
    Step::MiopenPerfCompile,
    Step::MiopenFindCompile,
    Step::NoopBuild,
];
const EVAL_STEPS: [Step; 4] = [
    Step::ExecRun,
    Step::MiopenPerfEval,
    Step::MiopenFindEval,
    Step::NoopRun,
];

pub async fn run(args: WorkerArgs) -> anyhow::Result<ExitCode> {
    let stop = crate::signals::install()?;
    let settings = connection_settings(&args)?;
    crate::host::confine_children(args.config.as_deref())?;
    let db_url = settings
        .db
        .clone()
        .context("no database: set SHOAL_DB or `db` in the config file")?;
    let broker_url = settings
        .broker
        .clone()
        .context("no broker: set SHOAL_BROKER or `broker` in the config file")?;
    // Workers on several hosts share the store: SQLite cannot be it.
    crate::connect::require_cluster_store(&settings.db_from, &db_url)?;
    let wait = Duration::from_secs(args.wait_for_services);
    let store = open_store_url(&settings.db_from, &db_url, wait).await?;
    store.migrate().await?;
    let bus = open_bus_url(
        &settings.broker_from,
        &broker_url,
        settings.namespace()?,
        wait,
    )
    .await?;
    let roles = roles(&args.role);
    let (compile_steps, eval_steps) = (
        served_steps(&args, &COMPILE_STEPS),
        served_steps(&args, &EVAL_STEPS),
    );
    let archs = compile_archs(&args, &*store).await?;
    let (work_dir, export_dir) = work_dirs(&args)?;
    let backends = SessionBackends::new(crate::miopen::fin_path(settings.fin.clone()))
        .with_replay_time(args.replay_time);
    let devices = match args.simulate_devices {
        Some(n) => shoal_gpu::simulated(n),
        None => crate::host::devices_limited(args.devices.map(|n| n as usize)),
    };
    let host = args.host.clone().unwrap_or_else(crate::host::hostname);
    if let Some(why) = shoal_model::identity::Identity::of_user(bus.publisher())
        .misfit(&host, &identity_roles(roles))
    {
        anyhow::bail!("{why}");
    }
    let activity = presence::Activity::default();
    let presence = Presence::start(
        store.clone(),
        presence::Identity {
            activity: activity.clone(),
            host: host.clone(),
            pid: std::process::id(),
            version: env!("CARGO_PKG_VERSION").into(),
            roles: role_names(roles),
            // Devices are reported by the processes that evaluate on them or watch them.
            devices: if roles.eval || roles.monitor {
                devices.clone()
            } else {
                Vec::new()
            },
            started_ms: shoal_actors::now_ms(),
        },
    );
    let worker = cluster::start(
        store.clone(),
        bus.clone(),
        backends,
        WorkerOptions {
            roles,
            // Several workers may share a host: the pid tells them apart in the store and logs.
            host: format!("{host}:{}", std::process::id()),
            work_dir,
            compile_slots: args.jobs,
            compile_steps,
            compile_archs: archs,
            eval_steps,
            eval_on_cpu: args.eval_on_cpu,
            monitor_interval: Duration::from_secs(10),
            export_dir,
            devices,
            runner_program: crate::host::runner_program(),
            activity,
            scheduler: SchedulerConfig {
                max_compile_in_flight: args.max_in_flight.unwrap_or(256),
                eval: ShapeConfig {
                    fixed_batch: args.eval_batch.map(|n| n.max(1)),
                    fixed_in_flight: args.max_in_flight,
                    ..ShapeConfig::default()
                },
                search_in_flight: args.search_in_flight.max(1),
                ..SchedulerConfig::default()
            },
        },
    )
    .await?;
    let mut queues = worker.queues.clone();
    queues.push(bus.namespace().results_queue());
    if roles.scheduler {
        // How full the bounded dead-letter queue is (`shoal dead-letters`), for an alert.
        queues.push(bus.namespace().dead_letter_queue());
    }
    let metrics = match crate::metrics_endpoint::start(
        args.metrics_addr,
        store.clone(),
        if roles.scheduler {
            crate::metrics_endpoint::Counted::Newest
        } else {
            crate::metrics_endpoint::Counted::Nothing
        },
        Some((bus.clone(), queues)),
    )
    .await
    {
        Ok(m) => m,
        Err(e) => {
            // Hand back whatever was taken before saying why.
            worker.shutdown().await;
            presence.stop().await;
            return Err(e);
        }
    };
    tracing::info!(
        roles = ?args.role,
        broker = %redact(&broker_url),
        db = %redact(&db_url),
        namespace = %settings.namespace,
        queues = ?worker.queues,
        "worker started"
    );
    let mut stop = stop;
    let mut drain = worker.drain_requested();
    let give_up = worker.give_up();
    let gave_up = tokio::select! {
        _ = stop.triggered() => None,
        _ = drain.triggered() => None,
        reason = give_up.gave_up() => Some(reason),
    };
    tracing::info!("stopping: draining in-flight work");
    worker.shutdown().await;
    presence.stop().await;
    if let Some(m) = metrics {
        m.stop().await;
    }
    bus.close().await?;
    if let Some(reason) = gave_up {
        // Non-zero, so that systemd (Restart=on-failure) or an operator takes over.
        tracing::error!("stopped: {reason}");
        return Ok(ExitCode::FAILURE);
    }
    tracing::info!("stopped");
    Ok(ExitCode::SUCCESS)
}

/// The connection settings: the config file and the environment, then `--broker` and
/// `--db-url`, which win over both (without a password: that comes from the environment only).
fn connection_settings(args: &WorkerArgs) -> anyhow::Result<Settings> {
    let mut settings = Settings::load(args.config.as_deref())?;
    if let Some(url) = &args.broker {
        settings.broker = Some(crate::connect::url_from_flag(
            "--broker",
            url,
            "SHOAL_BROKER_PASSWORD",
        )?);
        settings.broker_from = "--broker".into();
    }
    if let Some(url) = &args.db_url {
        settings.db = Some(crate::connect::url_from_flag(
            "--db-url",
            url,
            "SHOAL_DB_PASSWORD",
        )?);
        settings.db_from = "--db-url".into();
    }
    Ok(settings)
}

/// The roles of the messages this process sends (the GpuMonitor's are the eval role's).
fn identity_roles(roles: Roles) -> Vec<shoal_model::identity::Role> {
    use shoal_model::identity::Role as R;
    [
        (roles.scheduler, R::Scheduler),
        (roles.compile, R::Compile),
        (roles.eval || roles.monitor, R::Eval),
        (roles.exporter, R::Exporter),
    ]
    .into_iter()
    .filter_map(|(on, r)| on.then_some(r))
    .collect()
}

/// The roles this process runs; `all` stands for every one.
fn roles(role: &[Role]) -> Roles {
    let all = role.contains(&Role::All);
    Roles {
        scheduler: all || role.contains(&Role::Scheduler),
        compile: all || role.contains(&Role::Compile),
        eval: all || role.contains(&Role::Eval),
        monitor: all || role.contains(&Role::Monitor),
        exporter: all || role.contains(&Role::Exporter),
    }
}

/// The names of the roles a process runs, as `shoal workers` shows them.
pub fn role_names(roles: Roles) -> Vec<String> {
    [
        (roles.scheduler, "scheduler"),
        (roles.compile, "compile"),
        (roles.eval, "eval"),
        (roles.monitor, "monitor"),
        (roles.exporter, "exporter"),
    ]
    .iter()
    .filter(|(on, _)| *on)
    .map(|(_, name)| name.to_string())
    .collect()
}

/// This process's presence writer ([`presence::run`]), stopped last so that its final record
/// says the process stopped cleanly.
pub struct Presence {
    trigger: shoal_actors::shutdown::Trigger,
    task: tokio::task::JoinHandle<()>,
}

impl Presence {
    pub fn start(store: std::sync::Arc<dyn Store>, me: presence::Identity) -> Self {
        let (trigger, signal) = shoal_actors::shutdown::channel();
        let task = tokio::spawn(presence::run_standard(store, me, signal));
        Presence { trigger, task }
    }

    pub async fn stop(self) {
        self.trigger.trigger();
        if let Err(e) = self.task.await {
            tracing::warn!(error = %e, "the presence writer ended badly");
        }
    }
}

/// The steps of `known` this worker serves: those named by `--fin-steps`, or all of them.
fn served_steps(args: &WorkerArgs, known: &[Step]) -> Vec<Step> {
    known
        .iter()
        .copied()
        .filter(|s| args.fin_steps.is_empty() || args.fin_steps.contains(s))
        .collect()
}

/// The architectures whose compile queues to consume: `--arch`, else those of the sessions
/// in the store and of this host's devices, since a Compiler builds for any host's devices.
async fn compile_archs(args: &WorkerArgs, store: &dyn Store) -> anyhow::Result<Vec<String>> {
    let mut archs = args.arch.clone();
    if archs.is_empty() {
        for s in store.sessions().await? {
            archs.push(s.info.arch);
        }
        for d in crate::host::devices() {
            archs.push(d.arch);
        }
        archs.sort();
        archs.dedup();
    }
    Ok(archs)
}

/// The working directory, created and made absolute (the actors keep paths under it), and the
/// Exporter's directory, `<work-dir>/exports` unless `--export-dir` says otherwise.
fn work_dirs(args: &WorkerArgs) -> anyhow::Result<(PathBuf, PathBuf)> {
    std::fs::create_dir_all(&args.work_dir)
        .with_context(|| format!("creating {}", args.work_dir.display()))?;
    let work_dir = args.work_dir.canonicalize()?;
    let export_dir = args
        .export_dir
        .clone()
        .unwrap_or_else(|| work_dir.join("exports"));
    Ok((work_dir, export_dir))
}

/// `--host`: a name without `/`, `:`, `.` or spaces (it is a word of routing keys and of
/// worker names).
fn host_name(s: &str) -> Result<String, String> {
    if s.is_empty() || s.contains(['/', ':', '.', ' ', '\t', '#', '*']) {
        return Err("a host name of letters, digits, `-` and `_`".into());
    }
    Ok(s.to_string())
}
