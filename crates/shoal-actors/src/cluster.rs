//! The cluster mode: the actors of one `shoal worker` process, by role, over the RabbitMQ bus and
//! the MySQL store (or any `Bus` and `Store`). The same actors as the embedded mode, planned here
//! and started by [`crate::topology::start`]: the Scheduler serves every session with open work,
//! the Compiler consumes the compile queues of the steps and architectures it is given, each
//! device of the host gets an Evaluator per eval step, and the process listens to the control
//! topic (drain, restart, exports).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use shoal_bus::Bus;
use shoal_gpu::{Device, DeviceKind};
use shoal_model::queue::Namespace;
use shoal_model::Step;
use shoal_store::Store;

use crate::backends::SessionBackends;
use crate::scheduler::SchedulerConfig;
use crate::shutdown;
use crate::supervise::Backoff;
use crate::topology::{
    self, CompilePlan, EvalPlan, ExporterPlan, MonitorPlan, Running, Topology, STOP_DEADLINE,
};
use crate::ActorError;

pub use crate::restart::RESTARTABLE;

/// Which actors this process runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Roles {
    pub scheduler: bool,
    pub compile: bool,
    pub eval: bool,
    pub monitor: bool,
    pub exporter: bool,
}

/// How to run one worker process.
#[derive(Clone, Debug)]
pub struct WorkerOptions {
    pub roles: Roles,
    pub host: String,
    pub work_dir: PathBuf,
    /// Concurrent builds (default: one per core).
    pub compile_slots: Option<usize>,
    /// Compile steps served, and the architectures they are served for.
    pub compile_steps: Vec<Step>,
    pub compile_archs: Vec<String>,
    /// Eval steps served on every device of this host.
    pub eval_steps: Vec<Step>,
    /// Also evaluate on the CPU (always, when the host has no GPU).
    pub eval_on_cpu: bool,
    pub monitor_interval: Duration,
    pub scheduler: SchedulerConfig,
    /// The only directory the exporter role writes into; requests name directories inside it.
    pub export_dir: PathBuf,
    /// This host's devices (`shoal_gpu::discover`).
    pub devices: Vec<Device>,
    /// The argv of a library-mode runner (`shoal_backend::library::runner_program`).
    pub runner_program: Vec<String>,
    /// What the actors are doing, for this process's presence record (the same value the
    /// presence writer was given).
    pub activity: crate::presence::Activity,
}

/// A running worker process.
pub struct Worker {
    running: Running,
    /// What this process consumes, for the start-up log.
    pub queues: Vec<String>,
}

/// The topology of a worker process with these options: a pure function of them.
pub fn plan(ns: &Namespace, opts: &WorkerOptions) -> Result<Topology, ActorError> {
    let roles = opts.roles;
    let scheduler = roles.scheduler.then(|| SchedulerConfig {
        sessions: Vec::new(),
        ..opts.scheduler.clone()
    });
    let compiler = if roles.compile {
        let queues: Vec<String> = opts
            .compile_steps
            .iter()
            .flat_map(|step| {
                opts.compile_archs
                    .iter()
                    .map(|a| ns.compile_queue(*step, a))
            })
            .collect();
        if queues.is_empty() {
            return Err(topology::PlanError::NoCompileQueues.into());
        }
        let cores = topology::timing_core() + 1;
        Some(CompilePlan {
            queues,
            slots: opts.compile_slots.unwrap_or(cores).max(1),
        })
    } else {
        None
    };
    let mut evaluators = Vec::new();
    if roles.eval {
        // The CPU evaluates only where there is no GPU, or when asked to.
        let has_gpu = opts.devices.iter().any(|d| d.kind != DeviceKind::Cpu);
        for device in &opts.devices {
            let on_cpu = device.kind == DeviceKind::Cpu;
            if on_cpu && has_gpu && !opts.eval_on_cpu {
                continue;
            }
            for step in &opts.eval_steps {
                evaluators.push(EvalPlan {
                    queue: ns.eval_queue(*step, &device.arch, device.num_cu),
                    device: device.clone(),
                    pin_cpu: on_cpu.then(topology::timing_core),
                });
            }
        }
    }
    Ok(Topology {
        host: opts.host.clone(),
        work_dir: opts.work_dir.clone(),
        delivery_limit: opts.scheduler.delivery_limit,
        runner_program: opts.runner_program.clone(),
        give_up_after: Backoff::default().give_up_after,
        scheduler,
        compiler,
        monitor: (roles.eval || roles.monitor).then(|| MonitorPlan {
            devices: opts.devices.clone(),
            interval: opts.monitor_interval,
        }),
        evaluators,
        exporter: roles.exporter.then(|| ExporterPlan::OnControlTopic {
            export_dir: opts.export_dir.clone(),
        }),
        activity: opts.activity.clone(),
        control: true,
    })
}

/// Starts the actors of `opts.roles`. Must be called inside an actix System.
pub async fn start(
    store: Arc<dyn Store>,
    bus: Arc<dyn Bus>,
    backends: SessionBackends,
    opts: WorkerOptions,
) -> Result<Worker, ActorError> {
    let topology = plan(bus.namespace(), &opts)?;
    let running = topology::start(topology, store, bus, backends)?;
    Ok(Worker {
        queues: running.queues.clone(),
        running,
    })
}

impl Worker {
    /// Completes when an operator asked this host's workers to drain.
    /// Where this process learns that one of its actors gave up ([`Running::give_up`]).
    pub fn give_up(&self) -> shutdown::GiveUp {
        self.running.give_up()
    }

    pub fn drain_requested(&self) -> shutdown::Signal {
        self.running.drain_requested()
    }

    /// Workers stop taking work and hand in-flight jobs back; then the Scheduler applies what is
    /// on the results queue and stops ([`Running::stop`]). Jobs still in queues stay there,
    /// durable, for the next worker: unlike the embedded mode nothing is requeued in the store.
    pub async fn shutdown(self) {
        if let Err(e) = self.running.stop(STOP_DEADLINE).await {
            tracing::error!(error = %e, "stop incomplete");
        }
    }
}
