//! The embedded mode: every actor in one process, over the in-process bus and the SQLite store.
//! The same actors, queues, acknowledgements and compare-and-sets as the cluster, wired here
//! instead of across hosts.
//!
//! Shutdown is ordered: workers stop first (handing in-flight jobs back), then the Scheduler
//! applies what is left on the results queue and stops. Each phase is awaited through a drain
//! tracker, never a sleep.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use shoal_bus::Bus;
use shoal_gpu::{Device, DeviceKind};
use shoal_model::SessionId;
use shoal_store::Store;
use tokio::sync::RwLock;

use crate::backends::SessionBackends;
use crate::compiler::{Compiler, CompilerConfig};
use crate::evaluator::{Evaluator, EvaluatorConfig};
use crate::exporter::Exporter;
use crate::monitor::GpuMonitor;
use crate::scheduler::{Scheduler, SchedulerConfig};
use crate::shutdown::{self, Drain, Trigger};
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
}

/// The running actors.
pub struct Embedded {
    store: Arc<dyn Store>,
    session: SessionId,
    workers_stop: Trigger,
    scheduler_stop: Trigger,
    workers_drain: Drain,
    scheduler_drain: Drain,
    pub exporter: Addr<Exporter>,
    /// The first of `eval_devices`, for messages.
    pub eval_device: Device,
    /// Every device with an Evaluator.
    pub eval_devices: Vec<Device>,
    pub compile_slots: usize,
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
    let (workers_stop, workers_signal) = shutdown::channel();
    let (scheduler_stop, scheduler_signal) = shutdown::channel();
    let workers_drain = Drain::new();
    let scheduler_drain = Drain::new();

    let monitor = GpuMonitor::new(
        bus.clone(),
        opts.host.clone(),
        opts.devices.clone(),
        opts.monitor_interval,
        workers_signal.clone(),
        workers_drain.guard(),
    );
    // Every device of the session's architecture and size evaluates: one Evaluator each.
    let devices: Vec<Device> = monitor
        .devices()
        .iter()
        .filter(|d| d.arch == session.info.arch && d.num_cu == session.info.num_cu)
        .cloned()
        .collect();
    let Some(device) = devices.first().cloned() else {
        return Err(ActorError::Other(format!(
            "session {} targets {} with {} units, and no such device is on this host",
            session.id, session.info.arch, session.info.num_cu
        )));
    };
    let monitor_switches: Vec<_> = devices
        .iter()
        .map(|d| {
            let h = monitor
                .health_switch(&d.id)
                .expect("the monitor has a switch for every device it found");
            (d.id.clone(), h)
        })
        .collect();
    monitor.start();

    let on_cpu = device.kind == DeviceKind::Cpu;
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    // Timing on the CPU: builds and timings take turns through the gate, and timings are pinned
    // to the last core. On a GPU host, builds use every core while the GPU times.
    let cpu_gate = on_cpu.then(|| Arc::new(RwLock::new(())));
    let compile_slots = opts.compile_slots.unwrap_or(cores).max(1);

    let mut sched_cfg = opts.scheduler.clone();
    sched_cfg.sessions = vec![opts.session];
    sched_cfg.max_compile_in_flight = sched_cfg
        .max_compile_in_flight
        .max(4 * compile_slots as u64);
    let delivery_limit = sched_cfg.delivery_limit;
    Scheduler::new(
        store.clone(),
        bus.clone(),
        backends.clone(),
        sched_cfg,
        scheduler_signal,
        scheduler_drain.guard(),
    )
    .start();

    let (compile_step, eval_step) = backends.get(&*store, opts.session).await?.steps();
    let ns = bus.namespace().clone();
    Compiler::new(
        CompilerConfig {
            store: store.clone(),
            bus: bus.clone(),
            backends: backends.clone(),
            queues: vec![ns.compile_queue(compile_step, &session.info.arch)],
            slots: compile_slots,
            work_dir: opts.work_dir.clone(),
            worker: format!("{}/compiler", opts.host),
            cpu_gate: cpu_gate.clone(),
            delivery_limit,
            // One process: its loops give up together with its Scheduler.
            give_up_after: opts.scheduler.give_up_after,
        },
        workers_signal.clone(),
        workers_drain.guard(),
    )
    .start();

    for d in &devices {
        let healthy = monitor_switches
            .iter()
            .find(|(id, _)| id == &d.id)
            .map(|(_, h)| h.clone())
            .expect("the monitor has a switch for every device it found");
        Evaluator::new(
            EvaluatorConfig {
                store: store.clone(),
                bus: bus.clone(),
                backends: backends.clone(),
                queue: ns.eval_queue(eval_step, &d.arch, d.num_cu),
                device: d.id.clone(),
                pin_cpu: on_cpu.then(|| cores.saturating_sub(1)),
                gpu_index: d.visible_index,
                work_dir: opts.work_dir.clone(),
                worker: format!("{}/evaluator[{}]", opts.host, d.id),
                device_gate: cpu_gate.clone(),
                healthy,
                delivery_limit,
                runner_program: opts.runner_program.clone(),
                give_up_after: opts.scheduler.give_up_after,
            },
            workers_signal.clone(),
            workers_drain.guard(),
        )
        .start();
    }
    drop(workers_signal);

    let exporter = Exporter::new(store.clone(), backends).start();
    Ok(Embedded {
        store,
        session: opts.session,
        workers_stop,
        scheduler_stop,
        workers_drain,
        scheduler_drain,
        exporter,
        eval_device: device,
        eval_devices: devices,
        compile_slots,
    })
}

impl Embedded {
    /// Stops taking work, hands in-flight jobs back, applies every reply already sent, and
    /// returns when every loop has stopped. Jobs still waiting in the in-process queues die with
    /// them, so they are put back in the store before returning: nothing is left in flight.
    pub async fn shutdown(self) -> Result<(), ActorError> {
        self.workers_stop.trigger();
        self.workers_drain.wait().await;
        self.scheduler_stop.trigger();
        self.scheduler_drain.wait().await;
        crate::scheduler::requeue_in_flight(&*self.store, self.session).await?;
        Ok(())
    }

    /// A trigger that starts the same shutdown from another thread (a signal handler).
    pub fn stop_trigger(&self) -> Trigger {
        self.workers_stop.clone()
    }
}
