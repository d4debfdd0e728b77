//! The embedded mode: every actor in one process, over the in-process bus and the SQLite store.
//! The same actors, queues, acknowledgements and compare-and-sets as the cluster, planned here
//! for one session ([`plan`]) and started and stopped by [`crate::topology`], as a cluster
//! worker's are.
//!
//! Shutdown is ordered: workers stop first (handing in-flight jobs back), then the Scheduler
//! applies what is left on the results queue and stops. Each phase is awaited through a drain
//! tracker, never a sleep, up to a deadline.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use shoal_bus::Bus;
use shoal_gpu::{Device, DeviceKind};
use shoal_model::queue::Namespace;
use shoal_model::{Session, SessionId, Step};
use shoal_store::Store;

use crate::backends::SessionBackends;
use crate::exporter::Exporter;
use crate::scheduler::SchedulerConfig;
use crate::shutdown::Trigger;
use crate::topology::{
    self, CompilePlan, EvalPlan, ExporterPlan, MonitorPlan, Running, Topology, STOP_DEADLINE,
};
use crate::ActorError;

/// How to run one session in this process.
#[derive(Clone, Debug)]
pub struct EmbeddedOptions {
    pub session: SessionId,
    pub host: String,
    pub work_dir: PathBuf,
    /// Concurrent builds; `None` picks one per core.
    pub compile_slots: Option<usize>,
    pub monitor_interval: Duration,
    pub scheduler: SchedulerConfig,
    /// This host's devices (`shoal_gpu::discover`), of which the session's evaluate.
    pub devices: Vec<Device>,
    /// The argv of a library-mode runner (`shoal_backend::library::runner_program`).
    pub runner_program: Vec<String>,
    /// What the actors are doing, for this process's presence record (the same value the
    /// presence writer was given).
    pub activity: crate::presence::Activity,
}

/// The running actors.
pub struct Embedded {
    store: Arc<dyn Store>,
    session: SessionId,
    running: Running,
    pub exporter: Addr<Exporter>,
    /// The first of `eval_devices`, for messages.
    pub eval_device: Device,
    /// Every device with an Evaluator.
    pub eval_devices: Vec<Device>,
    pub compile_slots: usize,
}

/// The topology of one session in this process: a pure function of the session, its backend's
/// (compile, eval) steps, the namespace and the options. Every device of the session's
/// architecture and size evaluates, one Evaluator each; timings on the CPU take turns with the
/// builds (see [`crate::topology`]) and are pinned to the last core.
pub fn plan(
    session: &Session,
    steps: &[(Step, Step)],
    ns: &Namespace,
    opts: &EmbeddedOptions,
) -> Result<Topology, ActorError> {
    let devices: Vec<&Device> = opts
        .devices
        .iter()
        .filter(|d| d.arch == session.info.arch && d.num_cu == session.info.num_cu)
        .collect();
    if devices.is_empty() {
        return Err(topology::PlanError::NoDevice {
            session: session.id,
            arch: session.info.arch.clone(),
            units: session.info.num_cu,
        }
        .into());
    }
    let cores = topology::timing_core() + 1;
    let compile_slots = opts.compile_slots.unwrap_or(cores).max(1);
    let mut scheduler = opts.scheduler.clone();
    scheduler.sessions = vec![session.id];
    scheduler.max_compile_in_flight = scheduler
        .max_compile_in_flight
        .max(4 * compile_slots as u64);
    // A search keeps one candidate out per compile slot and device.
    scheduler.search_in_flight = compile_slots + devices.len();
    Ok(Topology {
        host: opts.host.clone(),
        work_dir: opts.work_dir.clone(),
        delivery_limit: scheduler.delivery_limit,
        runner_program: opts.runner_program.clone(),
        // One process: its loops give up together with its Scheduler.
        give_up_after: scheduler.give_up_after,
        compiler: Some(CompilePlan {
            queues: steps
                .iter()
                .map(|&(compile, _)| ns.compile_queue(compile, &session.info.arch))
                .collect(),
            slots: compile_slots,
        }),
        scheduler: Some(scheduler),
        monitor: Some(MonitorPlan {
            devices: opts.devices.clone(),
            interval: opts.monitor_interval,
        }),
        // One Evaluator per device and eval step; the device's gate times one at a time.
        evaluators: devices
            .into_iter()
            .flat_map(|d| {
                steps.iter().map(move |&(_, eval)| EvalPlan {
                    queue: ns.eval_queue(eval, &d.arch, d.num_cu),
                    device: d.clone(),
                    pin_cpu: (d.kind == DeviceKind::Cpu).then(topology::timing_core),
                })
            })
            .collect(),
        exporter: Some(ExporterPlan::InProcess),
        activity: opts.activity.clone(),
        control: false,
    })
}

/// Starts the Scheduler, Compiler, one Evaluator per device of the architecture and size the
/// session targets, the Exporter and the GpuMonitor. Must be called inside an actix System.
pub async fn start(
    store: Arc<dyn Store>,
    bus: Arc<dyn Bus>,
    backends: SessionBackends,
    opts: EmbeddedOptions,
) -> Result<Embedded, ActorError> {
    let session = store
        .session(opts.session)
        .await?
        .ok_or(ActorError::UnknownSession(opts.session))?;
    let steps = backends.get(&*store, opts.session).await?.steps();
    let topology = plan(&session, steps, bus.namespace(), &opts)?;
    let mut eval_devices: Vec<Device> = Vec::new();
    for e in &topology.evaluators {
        if !eval_devices.iter().any(|d| d.id == e.device.id) {
            eval_devices.push(e.device.clone());
        }
    }
    let compile_slots = topology.compiler.as_ref().map_or(1, |c| c.slots);
    let running = topology::start(topology, store.clone(), bus, backends)?;
    let exporter = running
        .exporter
        .clone()
        .expect("the embedded topology has an in-process exporter");
    Ok(Embedded {
        store,
        session: opts.session,
        running,
        exporter,
        eval_device: eval_devices[0].clone(),
        eval_devices,
        compile_slots,
    })
}

impl Embedded {
    /// Stops taking work, hands in-flight jobs back, applies every reply already sent, and
    /// returns when every loop has stopped ([`Running::stop`]). Jobs still waiting in the
    /// in-process queues die with them, so they are put back in the store before returning:
    /// nothing is left in flight.
    pub async fn shutdown(self) -> Result<(), ActorError> {
        self.running.stop(STOP_DEADLINE).await?;
        crate::scheduler::requeue_in_flight(&*self.store, self.session).await?;
        Ok(())
    }

    /// Where this process learns that one of its actors gave up ([`Running::give_up`]).
    pub fn give_up(&self) -> crate::shutdown::GiveUp {
        self.running.give_up()
    }

    /// A trigger that starts the same shutdown from another thread (a signal handler).
    pub fn stop_trigger(&self) -> Trigger {
        self.running.stop_trigger()
    }
}
