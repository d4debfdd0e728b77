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
use tokio::sync::{broadcast, RwLock};

use crate::backends::SessionBackends;
use crate::compiler::{Compiler, CompilerConfig};
use crate::evaluator::{Evaluator, EvaluatorConfig};
use crate::monitor::GpuMonitor;
use crate::scheduler::{Scheduler, SchedulerConfig};
use crate::shutdown::{self, Drain, DrainGuard, Trigger};
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
    /// This host's devices (`shoal_gpu::discover`).
    pub devices: Vec<shoal_gpu::Device>,
    /// The argv of a library-mode runner (`shoal_backend::library::runner_program`).
    pub runner_program: Vec<String>,
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

    // Operators restart an actor of a host with a control message (see `control_loop`); each
    // restartable group listens here.
    let (restarts, _) = broadcast::channel::<String>(16);
    let mut running: Vec<&'static str> = Vec::new();

    if opts.roles.scheduler {
        let mut cfg = opts.scheduler.clone();
        cfg.sessions.clear();
        let (store, bus, backends) = (store.clone(), bus.clone(), backends.clone());
        restartable(
            "scheduler",
            scheduler_signal,
            scheduler_drain.guard(),
            (&restarts, &mut running),
            move |stop, guard| {
                Scheduler::new(
                    store.clone(),
                    bus.clone(),
                    backends.clone(),
                    cfg.clone(),
                    stop,
                    guard,
                )
                .start();
            },
        );
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
        let cfg = CompilerConfig {
            store: store.clone(),
            bus: bus.clone(),
            backends: backends.clone(),
            queues: compile_queues,
            slots: opts.compile_slots.unwrap_or(cores).max(1),
            work_dir: opts.work_dir.clone(),
            worker: format!("{}/compiler", opts.host),
            cpu_gate: cpu_gate.clone(),
            delivery_limit,
            give_up_after: crate::supervise::Backoff::default().give_up_after,
        };
        restartable(
            "compiler",
            workers_signal.clone(),
            workers_drain.guard(),
            (&restarts, &mut running),
            move |stop, guard| {
                Compiler::new(cfg.clone(), stop, guard).start();
            },
        );
    }

    if opts.roles.eval || opts.roles.monitor {
        let monitor = GpuMonitor::new(
            bus.clone(),
            opts.host.clone(),
            opts.devices.clone(),
            opts.monitor_interval,
            workers_signal.clone(),
            workers_drain.guard(),
        );
        let mut evaluators = Vec::new();
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
                    evaluators.push(EvaluatorConfig {
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
                        runner_program: opts.runner_program.clone(),
                        give_up_after: crate::supervise::Backoff::default().give_up_after,
                    });
                }
            }
        }
        if !evaluators.is_empty() {
            restartable(
                "evaluator",
                workers_signal.clone(),
                workers_drain.guard(),
                (&restarts, &mut running),
                move |stop, guard| {
                    for cfg in &evaluators {
                        Evaluator::new(cfg.clone(), stop.clone(), guard.clone()).start();
                    }
                },
            );
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
        restartable(
            "exporter",
            workers_signal.clone(),
            workers_drain.guard(),
            (&restarts, &mut running),
            move |stop, guard| {
                let (store, bus, backends, host, root) = (
                    store.clone(),
                    bus.clone(),
                    backends.clone(),
                    host.clone(),
                    root.clone(),
                );
                let signal = stop.clone();
                crate::supervise::supervise(
                    "exporter".into(),
                    crate::supervise::Backoff::default(),
                    stop,
                    guard,
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
            },
        );
        queues.push(format!("{} (*.exporter, any.exporter)", ns.control_topic()));
    }

    // Operators drain a host, or restart one of its actors, with a control message
    // (`<host>.worker` or `any.worker`).
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
                control_loop(
                    bus.clone(),
                    host.clone(),
                    drain_trigger.clone(),
                    (restarts.clone(), running.clone()),
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

/// The actors `shoal control restart` can name.
pub const RESTARTABLE: [&str; 4] = ["scheduler", "compiler", "evaluator", "exporter"];

/// Runs a group of actors that an operator can restart: `start` starts them under a stop signal
/// and a drain guard of their own. On `shoal control restart <name>` the group is stopped as at
/// shutdown (work in hand is handed back, the Scheduler applies what it holds), waited for, and
/// started again from nothing: fresh actors, fresh state, the same configuration. When `parent`
/// stops, the group stops for good; `parent_guard` holds the process's drain until it has.
fn restartable(
    name: &'static str,
    mut parent: shutdown::Signal,
    parent_guard: DrainGuard,
    (restarts, running): (&broadcast::Sender<String>, &mut Vec<&'static str>),
    start: impl Fn(shutdown::Signal, DrainGuard) + 'static,
) {
    running.push(name);
    let mut requests = restarts.subscribe();
    actix::spawn(async move {
        let _parent_guard = parent_guard;
        let mut generation = 0u32;
        loop {
            let (trigger, signal) = shutdown::channel();
            let drain = Drain::new();
            start(signal, drain.guard());
            let restart = loop {
                tokio::select! {
                    _ = parent.triggered() => break false,
                    r = requests.recv() => match r {
                        Ok(actor) if actor == name => break true,
                        Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(broadcast::error::RecvError::Closed) => {
                            parent.triggered().await;
                            break false;
                        }
                    },
                }
            };
            trigger.trigger();
            drain.wait().await;
            if !restart {
                return;
            }
            generation += 1;
            tracing::warn!(
                actor = name,
                generation,
                "restarted by an operator: stopped and started again with clean state"
            );
        }
    });
}

async fn control_loop(
    bus: Arc<dyn Bus>,
    host: String,
    drain: Trigger,
    (restarts, running): (broadcast::Sender<String>, Vec<&'static str>),
    mut stop: shutdown::Signal,
) -> Result<(), ActorError> {
    use shoal_model::message::Control;
    let mut inbox = crate::control::ControlInbox::open(&*bus, &host, "worker").await?;
    while let Some(c) = inbox.next(&mut stop).await? {
        match c {
            Control::Drain => {
                tracing::warn!("drain requested by an operator");
                drain.trigger();
            }
            Control::Restart { actor } => {
                if running.contains(&actor.as_str()) {
                    tracing::warn!(actor = %actor, "restart requested by an operator");
                    let _ = restarts.send(actor);
                } else {
                    tracing::warn!(actor = %actor, running = ?running, "restart requested for an actor this process does not run; ignored");
                }
            }
            other => tracing::debug!(order = ?other, "control order for another actor ignored"),
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::rc::Rc;

    /// A restart request for the group stops its actors (they see their stop signal and release
    /// their drain guard) and starts fresh ones; a request for another actor changes nothing;
    /// the parent's stop ends the group for good, and only then is the parent drained.
    #[actix::test]
    async fn a_restart_stops_the_group_and_starts_it_again() {
        let (parent_trigger, parent) = shutdown::channel();
        let parent_drain = Drain::new();
        let (restarts, _) = broadcast::channel::<String>(4);
        let mut running = Vec::new();
        let starts = Rc::new(Cell::new(0));
        let stops = Rc::new(Cell::new(0));
        let (s, t) = (starts.clone(), stops.clone());
        restartable(
            "compiler",
            parent,
            parent_drain.guard(),
            (&restarts, &mut running),
            move |mut stop, guard| {
                s.set(s.get() + 1);
                let t = t.clone();
                actix::spawn(async move {
                    let _guard = guard;
                    stop.triggered().await;
                    t.set(t.get() + 1);
                });
            },
        );
        assert_eq!(running, vec!["compiler"]);
        let settle = || tokio::time::sleep(Duration::from_millis(50));
        settle().await;
        assert_eq!((starts.get(), stops.get()), (1, 0));
        restarts.send("scheduler".into()).unwrap();
        settle().await;
        assert_eq!((starts.get(), stops.get()), (1, 0), "not this group");
        restarts.send("compiler".into()).unwrap();
        settle().await;
        assert_eq!(
            (starts.get(), stops.get()),
            (2, 1),
            "stopped, then started again"
        );
        parent_trigger.trigger();
        tokio::time::timeout(Duration::from_secs(5), parent_drain.wait())
            .await
            .expect("the group ends with its parent");
        assert_eq!((starts.get(), stops.get()), (2, 2));
    }
}
