//! The cluster mode: the actors of one `shoal worker` process, by role, over the RabbitMQ bus and
//! the MySQL store (or any `Bus` and `Store`). The same actors as the embedded mode; only the
//! wiring differs: the Scheduler serves every session with open work, Compilers consume the
//! compile queues of the steps and architectures they are given, and each device of the host
//! gets Evaluators for the eval steps.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use shoal_bus::Bus;
use shoal_gpu::DeviceKind;
use shoal_store::Store;
use tokio::sync::RwLock;

use crate::backends::SessionBackends;
use crate::compiler::{Compiler, CompilerConfig};
use crate::evaluator::{Evaluator, EvaluatorConfig};
use crate::monitor::GpuMonitor;
use crate::scheduler::{Scheduler, SchedulerConfig};
use crate::shutdown::{self, Drain, Trigger};
use crate::ActorError;

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
    pub compile_steps: Vec<String>,
    pub compile_archs: Vec<String>,
    /// Eval steps served on every device of this host.
    pub eval_steps: Vec<String>,
    /// Also evaluate on the CPU (always, when the host has no GPU).
    pub eval_on_cpu: bool,
    pub monitor_interval: Duration,
    pub scheduler: SchedulerConfig,
    /// The only directory the exporter role writes into; requests name directories inside it.
    pub export_dir: PathBuf,
}

/// A running worker process.
pub struct Worker {
    workers_stop: Trigger,
    scheduler_stop: Trigger,
    workers_drain: Drain,
    scheduler_drain: Drain,
    /// What this process consumes, for the start-up log.
    pub queues: Vec<String>,
    drain_requested: shutdown::Signal,
}

/// Starts the actors of `opts.roles`. Must be called inside an actix System.
pub async fn start(
    store: Arc<dyn Store>,
    bus: Arc<dyn Bus>,
    backends: SessionBackends,
    opts: WorkerOptions,
) -> Result<Worker, ActorError> {
    let (workers_stop, workers_signal) = shutdown::channel();
    let (scheduler_stop, scheduler_signal) = shutdown::channel();
    let workers_drain = Drain::new();
    let scheduler_drain = Drain::new();
    let ns = bus.namespace().clone();
    let delivery_limit = opts.scheduler.delivery_limit;
    let mut queues = Vec::new();
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    // Timing on this host's CPU from the same process that builds: builds and timings take turns
    // through one gate, as in the embedded mode. (Builds in another process on the same host
    // cannot be gated; give them other cores, e.g. with `taskset`.)
    // (Unused when this process evaluates on GPUs only.)
    let cpu_gate = (opts.roles.compile && opts.roles.eval).then(|| Arc::new(RwLock::new(())));

    if opts.roles.scheduler {
        let mut cfg = opts.scheduler.clone();
        cfg.sessions.clear();
        Scheduler::new(
            store.clone(),
            bus.clone(),
            backends.clone(),
            cfg,
            scheduler_signal,
            scheduler_drain.guard(),
        )
        .start();
        queues.push(ns.results_queue());
    }

    if opts.roles.compile {
        let compile_queues: Vec<String> = opts
            .compile_steps
            .iter()
            .flat_map(|step| {
                opts.compile_archs
                    .iter()
                    .map(|arch| ns.compile_queue(step, arch))
                    .collect::<Vec<_>>()
            })
            .collect();
        if compile_queues.is_empty() {
            return Err(ActorError::Other(
                "the compile role needs at least one step and one architecture (--arch)".into(),
            ));
        }
        queues.extend(compile_queues.iter().cloned());
        Compiler::new(
            CompilerConfig {
                store: store.clone(),
                bus: bus.clone(),
                backends: backends.clone(),
                queues: compile_queues,
                slots: opts.compile_slots.unwrap_or(cores).max(1),
                work_dir: opts.work_dir.clone(),
                worker: format!("{}/compiler", opts.host),
                cpu_gate: cpu_gate.clone(),
                delivery_limit,
            },
            workers_signal.clone(),
            workers_drain.guard(),
        )
        .start();
    }

    if opts.roles.eval || opts.roles.monitor {
        let monitor = GpuMonitor::new(
            bus.clone(),
            opts.host.clone(),
            opts.monitor_interval,
            workers_signal.clone(),
            workers_drain.guard(),
        );
        if opts.roles.eval {
            let has_gpu = monitor.devices().iter().any(|d| d.kind != DeviceKind::Cpu);
            for device in monitor.devices() {
                if device.kind == DeviceKind::Cpu && has_gpu && !opts.eval_on_cpu {
                    continue;
                }
                // One timing at a time per device, whatever the step; on the CPU the gate is the
                // one the builds of this process share, and timings run on the last core.
                let on_cpu = device.kind == DeviceKind::Cpu;
                let gate = match (&cpu_gate, on_cpu) {
                    (Some(g), true) => g.clone(),
                    _ => Arc::new(RwLock::new(())),
                };
                for step in &opts.eval_steps {
                    let queue = ns.eval_queue(step, &device.arch, device.num_cu);
                    queues.push(queue.clone());
                    Evaluator::new(
                        EvaluatorConfig {
                            store: store.clone(),
                            bus: bus.clone(),
                            backends: backends.clone(),
                            queue,
                            device: device.id.clone(),
                            pin_cpu: on_cpu.then(|| cores.saturating_sub(1)),
                            gpu_index: device.visible_index,
                            work_dir: opts.work_dir.clone(),
                            worker: format!("{}/evaluator[{}]", opts.host, device.id),
                            device_gate: Some(gate.clone()),
                            healthy: monitor
                                .health_switch(&device.id)
                                .expect("the monitor has a switch for every device it found"),
                            delivery_limit,
                        },
                        workers_signal.clone(),
                        workers_drain.guard(),
                    )
                    .start();
                }
            }
        }
        monitor.start();
    }

    if opts.roles.exporter {
        let (store, bus, backends, host, root) = (
            store.clone(),
            bus.clone(),
            backends.clone(),
            opts.host.clone(),
            opts.export_dir.clone(),
        );
        let signal = workers_signal.clone();
        crate::supervise::supervise(
            "exporter".into(),
            crate::supervise::Backoff::default(),
            workers_signal.clone(),
            workers_drain.guard(),
            move || {
                crate::exporter::serve_requests(
                    store.clone(),
                    bus.clone(),
                    backends.clone(),
                    host.clone(),
                    root.clone(),
                    signal.clone(),
                )
            },
        );
        queues.push(format!("{} (*.exporter, any.exporter)", ns.control_topic()));
    }

    // Operators drain a host with a control message (`<host>.worker` or `any.worker`): the
    // process finishes what it holds, takes no more, and exits.
    let (drain_trigger, drain_requested) = shutdown::channel();
    {
        let (bus, host) = (bus.clone(), opts.host.clone());
        let signal = workers_signal.clone();
        crate::supervise::supervise(
            "worker.control".into(),
            crate::supervise::Backoff::default(),
            workers_signal.clone(),
            workers_drain.guard(),
            move || {
                drain_loop(
                    bus.clone(),
                    host.clone(),
                    drain_trigger.clone(),
                    signal.clone(),
                )
            },
        );
    }

    Ok(Worker {
        drain_requested,
        workers_stop,
        scheduler_stop,
        workers_drain,
        scheduler_drain,
        queues,
    })
}

async fn drain_loop(
    bus: Arc<dyn Bus>,
    host: String,
    drain: Trigger,
    mut stop: shutdown::Signal,
) -> Result<(), ActorError> {
    let mut inbox = crate::control::ControlInbox::open(&*bus, &host, "worker").await?;
    while let Some(c) = inbox.next(&mut stop).await? {
        if c == shoal_model::message::Control::Drain {
            tracing::warn!("drain requested by an operator");
            drain.trigger();
        }
    }
    Ok(())
}

impl Worker {
    /// Completes when an operator asked this host's workers to drain.
    pub fn drain_requested(&self) -> shutdown::Signal {
        self.drain_requested.clone()
    }

    /// Workers stop taking work and hand in-flight jobs back; then the Scheduler applies what is
    /// on the results queue and stops. Jobs still in queues stay there, durable, for the next
    /// worker: unlike the embedded mode nothing is requeued in the store.
    pub async fn shutdown(self) {
        self.workers_stop.trigger();
        self.workers_drain.wait().await;
        self.scheduler_stop.trigger();
        self.scheduler_drain.wait().await;
    }
}
