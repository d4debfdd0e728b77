//! What a process runs, as data, and the one function that starts it and stops it.
//!
//! Both modes run the same actors: the embedded mode all of them for one session, a cluster
//! worker the ones of its roles. They used to be started by two functions of about 300 lines each
//! that had drifted apart (a GPU timing was gated per device in one and not in the other). Now
//! each mode only *plans* — [`crate::embedded::plan`] and [`crate::cluster::plan`] are pure
//! functions from options and devices to a [`Topology`] — and [`start`] wires whatever a
//! topology says, the same way for both:
//! - **Gates.** One timing at a time per device: every evaluated device has a gate, which all
//!   its Evaluators (one per eval step) hold exclusively while they time. A process that both
//!   compiles and times on its own CPU takes turns: its builds hold the CPU's gate shared.
//! - **Groups.** The Scheduler, the Compiler, the Evaluators and the control-topic exporter each
//!   run as a group an operator can restart (`shoal control restart`), when the topology listens
//!   to the control topic.
//! - **Shutdown.** [`Running::stop`] stops the workers first (they hand their work back), then
//!   the Scheduler (it applies what is left on the results queue), each phase awaited through its
//!   drain tracker up to a deadline; past it, every child process group is killed and the phase
//!   gets a short grace before the stop fails with a clear error.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use shoal_bus::Bus;
use shoal_gpu::{Device, DeviceKind};
use shoal_model::message::Actor as ActorName;
use shoal_store::Store;
use tokio::sync::{broadcast, RwLock};

use crate::backends::SessionBackends;
use crate::compiler::{Compiler, CompilerConfig};
use crate::evaluator::{Evaluator, EvaluatorConfig};
use crate::exporter::Exporter;
use crate::monitor::GpuMonitor;
use crate::scheduler::{Scheduler, SchedulerConfig};
use crate::shutdown::{self, Drain, DrainGuard, Signal, Trigger};

use crate::ActorError;

/// Which actors a process runs, on which queues, behind which gates, with which devices.
#[derive(Clone, Debug)]
pub struct Topology {
    /// The host's name, in worker names and control routing keys.
    pub host: String,
    pub work_dir: PathBuf,
    /// Delivery limit of the queues the actors declare.
    pub delivery_limit: u32,
    /// The argv of a library-mode runner (`shoal_backend::library::runner_program`).
    pub runner_program: Vec<String>,
    /// How long a worker loop may fail run after run before the process gives up.
    pub give_up_after: Duration,
    pub scheduler: Option<SchedulerConfig>,
    pub compiler: Option<CompilePlan>,
    /// Devices the GpuMonitor watches (it runs whenever there are Evaluators).
    pub monitor: Option<MonitorPlan>,
    pub evaluators: Vec<EvalPlan>,
    pub exporter: Option<ExporterPlan>,
    /// What this process's actors are doing, for its presence record ([`crate::presence`]).
    pub activity: crate::presence::Activity,
    /// Whether operators reach this process over the bus: the control topic (drain, restart)
    /// and, where it runs the Scheduler, the commands queue ([`crate::commands`]). The cluster
    /// mode; an embedded run's CLI is in the process itself.
    pub control: bool,
}

/// The Compiler of a process.
#[derive(Clone, Debug, PartialEq)]
pub struct CompilePlan {
    /// Compile queues consumed (from `Namespace::compile_queue`).
    pub queues: Vec<String>,
    /// Concurrent builds.
    pub slots: usize,
}

/// The GpuMonitor of a process.
#[derive(Clone, Debug)]
pub struct MonitorPlan {
    pub devices: Vec<Device>,
    pub interval: Duration,
}

/// One Evaluator: a device and an eval queue.
#[derive(Clone, Debug)]
pub struct EvalPlan {
    pub queue: String,
    pub device: Device,
    /// Pin every run to this CPU core (timings on the CPU).
    pub pin_cpu: Option<usize>,
}

/// Which exporter a process runs.
#[derive(Clone, Debug, PartialEq)]
pub enum ExporterPlan {
    /// The actor the embedded mode's CLI asks for the tuned table at the end.
    InProcess,
    /// Export requests from the control topic, written only under `export_dir`.
    OnControlTopic { export_dir: PathBuf },
}

/// Why a process cannot run what was asked of it.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("the compile role needs at least one step and one architecture (--arch)")]
    NoCompileQueues,
    #[error(
        "session {session} targets {arch} with {units} units, and no such device is on this host"
    )]
    NoDevice {
        session: shoal_model::SessionId,
        arch: String,
        units: u32,
    },
    #[error("a topology with Evaluators needs a GpuMonitor for their health")]
    NoMonitor,
    #[error("the GpuMonitor does not watch {0}")]
    UnwatchedDevice(String),
}

/// The last core, where timings on the CPU are pinned (builds are kept off it by the gate).
pub fn timing_core() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .saturating_sub(1)
}

/// How long each phase of [`Running::stop`] may take before child processes are killed.
pub const STOP_DEADLINE: Duration = Duration::from_secs(30);

/// What a phase gets after its children were killed, before the stop gives up on it.
const KILLED_GRACE: Duration = Duration::from_secs(5);

/// A started topology.
pub struct Running {
    workers_stop: Trigger,
    scheduler_stop: Trigger,
    workers_drain: Drain,
    scheduler_drain: Drain,
    drain_requested: Signal,
    /// Kept so that `drain_requested` never fires by itself when nothing listens for orders.
    _drain_trigger: Option<Trigger>,
    /// Where this process's actors and loops say they gave up.
    give_up: shutdown::GiveUp,
    /// What this process consumes, for the start-up log.
    pub queues: Vec<String>,
    /// The in-process exporter, if the topology has one.
    pub exporter: Option<Addr<Exporter>>,
}

/// What every actor is built from.
#[derive(Clone)]
struct Parts {
    store: Arc<dyn Store>,
    bus: Arc<dyn Bus>,
    backends: SessionBackends,
}

/// Starts every actor of `topology`. Must be called inside an actix System.
pub fn start(
    topology: Topology,
    store: Arc<dyn Store>,
    bus: Arc<dyn Bus>,
    backends: SessionBackends,
) -> Result<Running, ActorError> {
    let (workers_stop, workers_signal) = shutdown::channel();
    let (scheduler_stop, scheduler_signal) = shutdown::channel();
    let give_up = shutdown::GiveUp::default();
    let workers_drain = Drain::with_give_up(give_up.clone());
    let scheduler_drain = Drain::with_give_up(give_up.clone());
    let ns = bus.namespace().clone();
    let parts = Parts {
        store,
        bus,
        backends,
    };
    let t = topology;
    let mut queues = Vec::new();
    let mut groups = Groups::new();
    let workers = || (workers_signal.clone(), workers_drain.guard());

    if let Some(cfg) = t.scheduler.clone() {
        let commands = t.control.then_some(t.delivery_limit);
        spawn_scheduler(
            &mut groups,
            parts.clone(),
            cfg,
            commands,
            t.work_dir.clone(),
            (scheduler_signal, scheduler_drain.guard()),
        );
        queues.push(ns.results_queue());
        if commands.is_some() {
            queues.push(ns.commands_queue());
        }
    }
    let gates = DeviceGates::new(&t.evaluators);
    if let Some(plan) = &t.compiler {
        queues.extend(plan.queues.iter().cloned());
        spawn_compiler(&mut groups, &parts, &t, plan, gates.cpu(), workers());
    }
    queues.extend(spawn_evaluators(&mut groups, &parts, &t, &gates, workers)?);

    let exporter = match &t.exporter {
        None => None,
        Some(ExporterPlan::InProcess) => {
            Some(Exporter::new(parts.store.clone(), parts.backends.clone()).start())
        }
        Some(ExporterPlan::OnControlTopic { export_dir }) => {
            spawn_control_exporter(&mut groups, parts.clone(), &t.host, export_dir, workers());
            queues.push(format!("{} (*.exporter, any.exporter)", ns.control_topic()));
            None
        }
    };

    let (drain_trigger, drain_requested) = shutdown::channel();
    let kept_trigger = if t.control {
        groups.listen(parts.bus, t.host.clone(), drain_trigger, workers());
        None
    } else {
        Some(drain_trigger)
    };

    Ok(Running {
        workers_stop,
        scheduler_stop,
        workers_drain,
        scheduler_drain,
        drain_requested,
        _drain_trigger: kept_trigger,
        give_up,
        queues,
        exporter,
    })
}

/// The Scheduler, as a restartable group of its own phase of the stop; with `commands` (the
/// delivery limit of the commands queue), its command inbox too, restarted with it.
fn spawn_scheduler(
    groups: &mut Groups,
    parts: Parts,
    cfg: SchedulerConfig,
    commands: Option<u32>,
    work_dir: std::path::PathBuf,
    (signal, guard): (Signal, DrainGuard),
) {
    groups.spawn(ActorName::Scheduler, signal, guard, move |stop, guard| {
        let p = parts.clone();
        if let Some(delivery_limit) = commands {
            let (store, bus) = (p.store.clone(), p.bus.clone());
            let tools = shoal_commands::HostTools {
                fin: p.backends.fin().to_path_buf(),
                scratch: work_dir.join("fin"),
                trees: p.backends.trees().clone(),
            };
            crate::commands::CommandInbox {
                store,
                bus,
                delivery_limit,
                tools,
            }
            .start(stop.clone(), guard.clone());
        }
        Scheduler::new(p.store, p.bus, p.backends, cfg.clone(), stop, guard).start_supervised();
    });
}

/// One timing at a time per device: a gate for every evaluated device, which its Evaluators
/// hold exclusively while they time.
struct DeviceGates(HashMap<String, (DeviceKind, Arc<RwLock<()>>)>);

impl DeviceGates {
    fn new(evaluators: &[EvalPlan]) -> Self {
        let mut gates = HashMap::new();
        for e in evaluators {
            gates
                .entry(e.device.id.clone())
                .or_insert_with(|| (e.device.kind, Arc::default()));
        }
        DeviceGates(gates)
    }

    fn of(&self, device: &str) -> Arc<RwLock<()>> {
        self.0[device].1.clone()
    }

    /// The CPU's gate, if this process times on its CPU: its builds then hold it shared, so
    /// that no build runs while a candidate is timed.
    fn cpu(&self) -> Option<Arc<RwLock<()>>> {
        self.0
            .values()
            .find(|(kind, _)| *kind == DeviceKind::Cpu)
            .map(|(_, gate)| gate.clone())
    }
}

fn spawn_compiler(
    groups: &mut Groups,
    parts: &Parts,
    t: &Topology,
    plan: &CompilePlan,
    cpu_gate: Option<Arc<RwLock<()>>>,
    (signal, guard): (Signal, DrainGuard),
) {
    let cfg = CompilerConfig {
        store: parts.store.clone(),
        bus: parts.bus.clone(),
        backends: parts.backends.clone(),
        queues: plan.queues.clone(),
        slots: plan.slots.max(1),
        work_dir: t.work_dir.clone(),
        worker: format!("{}/compiler", t.host),
        cpu_gate,
        delivery_limit: t.delivery_limit,
        activity: t.activity.clone(),
        give_up_after: t.give_up_after,
    };
    groups.spawn(ActorName::Compiler, signal, guard, move |stop, guard| {
        Compiler::start(cfg.clone(), stop, guard);
    });
}

/// The GpuMonitor and every Evaluator (one restartable group); returns the queues consumed.
fn spawn_evaluators(
    groups: &mut Groups,
    parts: &Parts,
    t: &Topology,
    gates: &DeviceGates,
    workers: impl Fn() -> (Signal, DrainGuard),
) -> Result<Vec<String>, ActorError> {
    let monitor = match (&t.monitor, t.evaluators.is_empty()) {
        (Some(m), _) => {
            let (signal, guard) = workers();
            GpuMonitor::new(
                parts.bus.clone(),
                t.host.clone(),
                m.devices.clone(),
                m.interval,
                t.activity.clone(),
                signal,
                guard,
            )
        }
        (None, true) => return Ok(Vec::new()),
        (None, false) => return Err(PlanError::NoMonitor.into()),
    };
    let mut evaluators = Vec::with_capacity(t.evaluators.len());
    for e in &t.evaluators {
        let healthy = monitor
            .health_switch(&e.device.id)
            .ok_or_else(|| PlanError::UnwatchedDevice(e.device.id.clone()))?;
        evaluators.push(EvaluatorConfig {
            store: parts.store.clone(),
            bus: parts.bus.clone(),
            backends: parts.backends.clone(),
            queue: e.queue.clone(),
            device: e.device.id.clone(),
            pin_cpu: e.pin_cpu,
            gpu_index: e.device.visible_index,
            work_dir: t.work_dir.clone(),
            worker: format!("{}/evaluator[{}]", t.host, e.device.id),
            device_gate: Some(gates.of(&e.device.id)),
            healthy,
            delivery_limit: t.delivery_limit,
            activity: t.activity.clone(),
            runner_program: t.runner_program.clone(),
            give_up_after: t.give_up_after,
        });
    }
    let queues = evaluators.iter().map(|e| e.queue.clone()).collect();
    if !evaluators.is_empty() {
        let (signal, guard) = workers();
        groups.spawn(ActorName::Evaluator, signal, guard, move |stop, guard| {
            for cfg in &evaluators {
                Evaluator::start(cfg.clone(), stop.clone(), guard.clone());
            }
        });
    }
    monitor.start_supervised();
    Ok(queues)
}

/// The exporter that serves export requests from the control topic, as a restartable group.
fn spawn_control_exporter(
    groups: &mut Groups,
    parts: Parts,
    host: &str,
    root: &std::path::Path,
    (signal, guard): (Signal, DrainGuard),
) {
    let (host, root) = (host.to_string(), root.to_path_buf());
    groups.spawn(ActorName::Exporter, signal, guard, move |stop, guard| {
        crate::exporter::ControlExporter {
            store: parts.store.clone(),
            bus: parts.bus.clone(),
            backends: parts.backends.clone(),
            host: host.clone(),
            export_root: root.clone(),
        }
        .start(stop, guard);
    });
}

impl Running {
    /// Completes when an operator asked this host's workers to drain (never, for a topology
    /// that does not listen to the control topic).
    pub fn drain_requested(&self) -> Signal {
        self.drain_requested.clone()
    }

    /// Where this process learns that an actor or loop gave up (see
    /// [`crate::supervise::Backoff::give_up_after`]): the process should then end non-zero.
    pub fn give_up(&self) -> shutdown::GiveUp {
        self.give_up.clone()
    }

    /// A trigger that starts the same stop from another thread (a signal handler).
    pub fn stop_trigger(&self) -> Trigger {
        self.workers_stop.clone()
    }

    /// The ordered stop: workers stop taking work and hand in-flight jobs back; then the
    /// Scheduler applies what is on the results queue and stops. Each phase may take `deadline`;
    /// past it every child process group is killed (a build or a run that ignores its stop) and
    /// the phase gets a few more seconds before this fails, naming it.
    pub async fn stop(self, deadline: Duration) -> Result<(), ActorError> {
        self.workers_stop.trigger();
        phase("workers", self.workers_drain, deadline).await?;
        self.scheduler_stop.trigger();
        phase("scheduler", self.scheduler_drain, deadline).await
    }
}

/// Waits for one phase of a stop: up to `deadline`, then kills every child process group and
/// waits a little longer.
async fn phase(name: &str, drain: Drain, deadline: Duration) -> Result<(), ActorError> {
    let wait = drain.wait();
    tokio::pin!(wait);
    if tokio::time::timeout(deadline, &mut wait).await.is_ok() {
        return Ok(());
    }
    tracing::warn!(
        phase = name,
        deadline_s = deadline.as_secs(),
        "stop past its deadline: killing every child process"
    );
    shoal_backend::process::kill_all();
    tokio::time::timeout(KILLED_GRACE, &mut wait)
        .await
        .map_err(|_| ActorError::StopTimedOut {
            phase: name.to_string(),
            secs: (deadline + KILLED_GRACE).as_secs(),
        })
}

/// The groups of actors an operator can restart, and the names they answer to.
struct Groups {
    restarts: broadcast::Sender<ActorName>,
    running: Vec<ActorName>,
}

impl Groups {
    fn new() -> Self {
        Groups {
            restarts: broadcast::channel(16).0,
            running: Vec::new(),
        }
    }

    fn spawn(
        &mut self,
        name: ActorName,
        parent: Signal,
        parent_guard: DrainGuard,
        start: impl Fn(Signal, DrainGuard) + 'static,
    ) {
        crate::restart::restartable(
            name,
            parent,
            parent_guard,
            (&self.restarts, &mut self.running),
            start,
        );
    }

    /// Listens to the control topic for this host's drain and restart orders.
    fn listen(
        self,
        bus: Arc<dyn Bus>,
        host: String,
        drain: Trigger,
        (signal, guard): (Signal, DrainGuard),
    ) {
        let Groups { restarts, running } = self;
        let listener = crate::restart::ControlListener {
            bus,
            host,
            drain,
            restarts,
            running,
        };
        crate::serving::Served::start(listener, signal, guard);
    }
}

#[cfg(test)]
mod tests;
