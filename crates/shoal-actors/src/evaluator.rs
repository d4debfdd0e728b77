//! The Evaluator: one per device. Consumes eval requests for its (step, arch, CU count), fetches
//! each candidate's artifact (local cache, else the store), times it on its device only, and
//! replies with the outcomes.
//!
//! It stops consuming while its device is reported unhealthy by the GpuMonitor (health events on
//! the bus). On the CPU it pins runs to one core and holds the CPU gate exclusively, so no build
//! disturbs a timing.
//!
//! **The device never waits for the broker.** A request's reply is published and, once the
//! broker confirms it, its delivery acked, by a task of its own ([`Replies`]), while the actor
//! goes on to the next request, which the consumer already holds ([`PREFETCH`]), and the
//! request's started notice is confirmed while the device already works. So a short evaluation
//! waits for no round trip at all. The invariants stay: a
//! delivery is acked only after its reply is confirmed, and one timing at a time per device.

use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;

use actix::prelude::*;
use shoal_backend::exec::ArtifactCache;
use shoal_backend::library::RunnerSlot;
use shoal_backend::{EvalInput, RunContext};
use shoal_bus::{Bus, QueueOptions};
use shoal_model::message::{EvalItem, EvalReply, Phase, ReplyBody};
use shoal_model::{FailureKind, JobRef, Message, Outcome, SessionId, Step};
use shoal_store::Store;
use tokio::sync::{watch, RwLock};

use crate::backends::SessionBackends;
use crate::serving::{served, Local, Served, Service};
use crate::shutdown::{DrainGuard, Signal};
use crate::supervise::Backoff;
use crate::ActorError;

#[derive(Clone)]
pub struct EvaluatorConfig {
    pub store: Arc<dyn Store>,
    pub bus: Arc<dyn Bus>,
    pub backends: SessionBackends,
    /// The eval queue of this device (from `Namespace::eval_queue`).
    pub queue: String,
    /// Device id for replies and health (`cpu`, `amdgpu0`).
    pub device: String,
    /// Pin every run to this CPU core.
    pub pin_cpu: Option<usize>,
    /// The GPU this Evaluator owns, made visible to its children alone.
    pub gpu_index: Option<u32>,
    pub work_dir: PathBuf,
    pub worker: String,
    /// Held exclusively while timing: shared with the CPU's Compiler when timing on the CPU (no
    /// build disturbs a timing), and with the other Evaluators of the same device (one timing
    /// at a time per device, whatever the step).
    pub device_gate: Option<Arc<RwLock<()>>>,
    /// Device health, fed by the GpuMonitor's events: false pauses consumption.
    pub healthy: watch::Receiver<bool>,
    /// Where this process's presence record learns which jobs are being timed.
    pub activity: crate::presence::Activity,
    pub delivery_limit: u32,
    /// The argv of this device's library-mode runner (`shoal_backend::library::runner_program`).
    pub runner_program: Vec<String>,
    /// How long the loop may fail run after run (a full disk) before the process gives up (see
    /// [`Backoff::give_up_after`]).
    pub give_up_after: std::time::Duration,
}

/// One device's Evaluator, as an actor ([`Served`]): a request at a time, timed on its device.
pub(crate) struct Evaluator {
    cfg: EvaluatorConfig,
}

impl Evaluator {
    /// Starts the Evaluator under actix's `Supervisor`.
    pub fn start(config: EvaluatorConfig, stop: Signal, guard: DrainGuard) {
        Served::start(Evaluator { cfg: config }, stop, guard);
    }
}

/// What a run of an Evaluator keeps between requests.
pub(crate) struct EvalRun {
    cache: ArtifactCache,
    eval_dir: PathBuf,
    /// The device's runner for library-mode specs: started on first use, killed with the run.
    runner: RunnerSlot,
    replies: Replies,
}

/// An eval request and its delivery, settled once its reply is confirmed.
pub(crate) struct Evaluate(shoal_model::message::EvalRequest, shoal_bus::Delivery);

impl Service for Evaluator {
    type Request = Evaluate;
    type State = EvalRun;

    fn name(&self) -> String {
        format!("evaluator[{}]", self.cfg.device)
    }

    fn backoff(&self) -> Backoff {
        Backoff {
            give_up_after: self.cfg.give_up_after,
            ..Backoff::default()
        }
    }

    /// The artifact cache, the evaluation directory, no runner yet and no replies in flight.
    fn fresh_state(&self) -> Result<EvalRun, ActorError> {
        let cfg = &self.cfg;
        let cache_dir = cfg.work_dir.join("artifacts");
        let cache = ArtifactCache::new(cache_dir.clone()).map_err(|source| ActorError::Io {
            what: "cannot create the artifact cache",
            path: cache_dir.clone(),
            source,
        })?;
        let eval_dir = cfg.work_dir.join(format!("eval-{}", cfg.device));
        std::fs::create_dir_all(&eval_dir).map_err(|source| ActorError::Io {
            what: "cannot create",
            path: eval_dir.clone(),
            source,
        })?;
        Ok(EvalRun {
            cache,
            eval_dir,
            runner: RunnerSlot::new(cfg.runner_program.clone()),
            replies: Replies {
                tasks: tokio::task::JoinSet::new(),
            },
        })
    }

    /// Declares the queues, then takes requests while the device is healthy.
    fn feed(
        self: Rc<Self>,
        to: Addr<Served<Self>>,
        mut stop: Signal,
    ) -> Local<'static, Result<(), ActorError>> {
        Box::pin(async move {
            let cfg = &self.cfg;
            let results = cfg.bus.namespace().results_queue();
            let opts = QueueOptions::limited(cfg.delivery_limit);
            cfg.bus.declare_queue(&cfg.queue, &opts).await?;
            let wait = crate::results_queue::WAIT;
            if !crate::results_queue::declare(&*cfg.bus, &results, &opts, wait, &mut stop).await? {
                return Ok(());
            }
            let mut healthy = cfg.healthy.clone();
            let mut consumer = cfg.bus.consume(&cfg.queue, PREFETCH).await?;
            loop {
                // Paused while the device is unhealthy.
                while !*healthy.borrow() {
                    tracing::warn!(device = %cfg.device, "device unhealthy; evaluation paused");
                    tokio::select! {
                        r = healthy.changed() => if r.is_err() { return Ok(()) },
                        _ = stop.triggered() => return Ok(()),
                    }
                }
                let Some((req, delivery)) = crate::next_request(
                    cfg.bus.codec(),
                    &mut *consumer,
                    &mut stop,
                    &cfg.queue,
                    "eval",
                    |m| match m {
                        Message::Eval(r) => Some(r),
                        _ => None,
                    },
                )
                .await?
                else {
                    return Ok(());
                };
                if !served(&to, Evaluate(req, delivery)).await {
                    return Ok(());
                }
            }
        })
    }

    fn serve<'a>(
        &'a self,
        run: &'a mut EvalRun,
        Evaluate(req, delivery): Evaluate,
        stop: &'a Signal,
    ) -> Local<'a, Result<(), ActorError>> {
        Box::pin(self.evaluate_request(run, req, delivery, stop.clone()))
    }

    /// The replies already computed are sent and their deliveries acked.
    fn finish<'a>(&'a self, run: &'a mut EvalRun) -> Local<'a, Result<(), ActorError>> {
        Box::pin(run.replies.drain())
    }
}

/// Requests a consumer holds: the one being timed and the next, so the next is at hand when a
/// timing ends (and no more, so that idle devices elsewhere are not starved of work).
pub const PREFETCH: u16 = 2;

/// Replies being published and acked in the background, at most [`Replies::MAX`] at once.
struct Replies {
    tasks: tokio::task::JoinSet<Result<(), ActorError>>,
}

impl Replies {
    const MAX: usize = 4;

    /// Publishes `reply` and then acks `delivery`, in the background; waits first while
    /// [`Self::MAX`] are already pending. A failure of an earlier one is returned here.
    async fn send(
        &mut self,
        bus: Arc<dyn Bus>,
        reply: ReplyBody,
        delivery: shoal_bus::Delivery,
    ) -> Result<(), ActorError> {
        while self.tasks.len() >= Self::MAX {
            self.next().await?;
        }
        while let Some(done) = self.tasks.try_join_next() {
            flatten(done)?;
        }
        self.tasks.spawn_local(async move {
            let results = bus.namespace().results_queue();
            crate::publish_reply(&*bus, &results, &Message::Reply(reply)).await?;
            delivery.ack().await?;
            Ok(())
        });
        Ok(())
    }

    async fn next(&mut self) -> Result<(), ActorError> {
        match self.tasks.join_next().await {
            Some(done) => flatten(done),
            None => Ok(()),
        }
    }

    /// Waits for every pending reply (its ack included).
    async fn drain(&mut self) -> Result<(), ActorError> {
        let mut first = Ok(());
        while !self.tasks.is_empty() {
            if let Err(e) = self.next().await {
                first = first.and(Err(e));
            }
        }
        first
    }
}

fn flatten(done: Result<Result<(), ActorError>, tokio::task::JoinError>) -> Result<(), ActorError> {
    done.map_err(|source| ActorError::Task {
        what: "reply",
        source,
    })?
}

impl Evaluator {
    /// Times one request's items and sends its reply in the background ([`Replies`]).
    async fn evaluate_request(
        &self,
        run: &mut EvalRun,
        req: shoal_model::message::EvalRequest,
        delivery: shoal_bus::Delivery,
        mut stop: Signal,
    ) -> Result<(), ActorError> {
        let cfg = &self.cfg;
        let results = cfg.bus.namespace().results_queue();
        let items = current_items(cfg, req.items, delivery.delivery_count).await?;
        if items.is_empty() {
            delivery.ack().await?;
            return Ok(());
        }
        // Run only candidates of the session's registered spec (see the Compiler).
        if let Some(reason) = refusal(cfg, req.session, &items).await {
            tracing::error!(queue = %cfg.queue, reason = %reason, "dead-lettering a message");
            delivery.dead_letter(reason).await?;
            return Ok(());
        }
        let refs: Vec<_> = items.iter().map(|i| i.job).collect();
        let notice = |started: bool| {
            let (session, phase, jobs, worker) =
                (req.session, Phase::Eval, refs.clone(), cfg.worker.clone());
            if started {
                ReplyBody::Started {
                    session,
                    phase,
                    jobs,
                    worker,
                }
            } else {
                ReplyBody::Heartbeat {
                    session,
                    phase,
                    jobs,
                    worker,
                }
            }
        };
        // The started notice is confirmed while the device already works, so it costs the
        // device no round trip; the reply is published only after it, so the Scheduler reads
        // the two in order.
        let started_notice = Message::Reply(notice(true));
        let started = crate::publish(&*cfg.bus, &results, &started_notice);
        let dirs = (&run.cache, run.eval_dir.as_path(), &run.runner);
        let work = async {
            let clock = std::time::Instant::now();
            let timed = evaluate(cfg, (req.session, req.step), &items, dirs).await;
            (timed, clock.elapsed())
        };
        let work = crate::with_heartbeats(&cfg.activity, &*cfg.bus, &results, notice(false), work);
        let (timed, busy) = tokio::select! {
            (sent, done) = async { tokio::join!(started, work) } => {
                // A notice the broker would not take is no reason to drop the measurements:
                // the Scheduler takes a result whose notice it never saw.
                if let Err(e) = sent {
                    tracing::warn!(error = %e, "started notice not sent; the result goes on");
                }
                done
            }
            _ = stop.triggered() => {
                let reason = format!("{} shut down during the evaluation", cfg.worker);
                crate::hand_back(&*cfg.bus, req.session, Phase::Eval, &refs, reason, &cfg.worker).await?;
                delivery.ack().await?;
                return Ok(());
            }
        };
        // Items that could not be timed because the store did not answer go back uncounted;
        // the ones timed are replied with their measurements.
        let Timed {
            outcomes,
            store_gone,
            why,
        } = timed;
        if !store_gone.is_empty() {
            let reason = format!(
                "{} could not read what the items need from the store: {}",
                cfg.worker,
                why.unwrap_or_default()
            );
            tracing::warn!(items = store_gone.len(), reason = %reason, "items handed back");
            crate::hand_back(
                &*cfg.bus,
                req.session,
                Phase::Eval,
                &store_gone,
                reason,
                &cfg.worker,
            )
            .await?;
            if outcomes.is_empty() {
                delivery.ack().await?;
                return Ok(());
            }
        }
        // A full disk (an artifact that cannot be installed) is this host's state: hand the
        // items back uncounted and fail the loop, as the Compiler does.
        if let Some(detail) = cannot_write(&outcomes) {
            let reason = format!("{} cannot write its disk (full or read-only)", cfg.worker);
            let timed: Vec<JobRef> = outcomes.iter().map(|(j, _)| *j).collect();
            crate::hand_back(
                &*cfg.bus,
                req.session,
                Phase::Eval,
                &timed,
                reason,
                &cfg.worker,
            )
            .await?;
            delivery.ack().await?;
            return Err(ActorError::DiskFull(detail.to_string()));
        }
        shoal_metrics::metrics().evaluator_busy(&cfg.device, busy);
        let reply = ReplyBody::Evaluated(EvalReply {
            session: req.session,
            step: req.step,
            outcomes,
            worker: cfg.worker.clone(),
            device: cfg.device.clone(),
            busy_us: u64::try_from(busy.as_micros()).unwrap_or(u64::MAX),
        });
        run.replies.send(cfg.bus.clone(), reply, delivery).await
    }
}

/// The items of a request still worth timing. A redelivered request may be stale (its lease
/// expired and the Scheduler dispatched a newer attempt): the items the store has moved past are
/// skipped rather than timed again. A first delivery is current, so the common path costs no
/// store read.
async fn current_items(
    cfg: &EvaluatorConfig,
    items: Vec<EvalItem>,
    delivery_count: u32,
) -> Result<Vec<EvalItem>, ActorError> {
    if delivery_count <= 1 {
        return Ok(items);
    }
    tokio::time::sleep(crate::REDELIVERY_PAUSE).await;
    let mut current = Vec::with_capacity(items.len());
    for item in items {
        if crate::still_current(&*cfg.store, item.job, shoal_model::JobState::EvalQueued).await? {
            current.push(item)
        } else {
            tracing::debug!(job = %item.job.job, "stale eval item skipped")
        }
    }
    Ok(current)
}

/// Why a request must not be run, if it must not: an item that is not a candidate of the
/// session's registered spec (see the Compiler's).
async fn refusal(cfg: &EvaluatorConfig, session: SessionId, items: &[EvalItem]) -> Option<String> {
    let backend = cfg.backends.get(&*cfg.store, session).await.ok()?;
    items.iter().find_map(|i| {
        backend
            .check_request(&i.config_params, &i.compile_params, Some(&i.run_params))
            .err()
            .map(|e| format!("eval request refused: job {}: {e}", i.job.job))
    })
}

/// What timing a request's items gave: an outcome per item timed, and the items that could not
/// be, because the store did not answer within its patience (their session or artifact could
/// not be read), with why.
#[derive(Default)]
struct Timed {
    outcomes: Vec<(JobRef, Outcome)>,
    store_gone: Vec<JobRef>,
    why: Option<String>,
}

/// Times every item, one at a time under the device's gate.
async fn evaluate(
    cfg: &EvaluatorConfig,
    (session, step): (SessionId, Step),
    items: &[EvalItem],
    (cache, eval_dir, runner): (&ArtifactCache, &Path, &RunnerSlot),
) -> Timed {
    let mut timed = Timed {
        outcomes: Vec::with_capacity(items.len()),
        ..Timed::default()
    };
    let backend = cfg.backends.get(&*cfg.store, session).await;
    let ctx = RunContext {
        work_dir: eval_dir,
        cpu: cfg.pin_cpu,
        gpu_index: cfg.gpu_index,
        runner: Some(runner),
    };
    for item in items {
        let outcome = match &backend {
            Err(e) if e.is_store_unreachable() => {
                timed.store_gone.push(item.job);
                timed.why = Some(e.to_string());
                continue;
            }
            Err(e) => Outcome::failed(FailureKind::Infrastructure, e.to_string()),
            Ok(backend) => match fetch(cfg, cache, &item.artifact).await {
                Err(Fetch::StoreGone(e)) => {
                    timed.store_gone.push(item.job);
                    timed.why = Some(e);
                    continue;
                }
                Err(Fetch::Failed(e)) => Outcome::failed(FailureKind::Infrastructure, e),
                Ok(path) => {
                    let _exclusive = match &cfg.device_gate {
                        Some(g) => Some(g.write().await),
                        None => None,
                    };
                    let input = EvalInput {
                        step,
                        config: &item.config_params,
                        compile: &item.compile_params,
                        run: &item.run_params,
                        artifact: &path,
                    };
                    // Timing alone, the device held: what a progress estimate splits the
                    // elapsed time by (the batch's busy time also counts the waits for the gate).
                    let timing = std::time::Instant::now();
                    let outcome = backend.evaluate(input, &ctx).await;
                    shoal_metrics::metrics().timed(timing.elapsed());
                    outcome
                }
            },
        };
        if let Outcome::Failed { kind, detail } = &outcome {
            tracing::debug!(job = %item.job.job, kind = %kind, detail = %crate::compiler::first_line(detail), "candidate failed");
        }
        timed.outcomes.push((item.job, outcome));
    }
    timed
}

/// The first line of an outcome that says this host cannot write its disk, if one does.
fn cannot_write(outcomes: &[(JobRef, Outcome)]) -> Option<String> {
    outcomes.iter().find_map(|(_, o)| match o {
        Outcome::Failed { detail, .. } if shoal_backend::failure::host_cannot_write(detail) => {
            Some(crate::compiler::first_line(detail).to_string())
        }
        _ => None,
    })
}

/// Why an artifact is not at hand.
enum Fetch {
    /// The store did not answer within its patience: the item is handed back.
    StoreGone(String),
    /// Anything else: the item fails as the machinery's fault.
    Failed(String),
}

impl From<String> for Fetch {
    fn from(e: String) -> Self {
        Fetch::Failed(e)
    }
}

/// The artifact as an executable file: from the local cache, else from the store.
async fn fetch(cfg: &EvaluatorConfig, cache: &ArtifactCache, hash: &str) -> Result<PathBuf, Fetch> {
    if let Some(p) = cache.path(hash) {
        return Ok(p);
    }
    let packed = match cfg.store.artifact(hash).await {
        Ok(Some(packed)) => packed,
        Ok(None) => return Err(format!("artifact {hash} is not in the store").into()),
        Err(e) if e.is_unreachable() => return Err(Fetch::StoreGone(e.to_string())),
        Err(e) => return Err(e.to_string().into()),
    };
    // Decompressing, hashing and writing it is blocking work: off the async thread.
    let (cache, owned) = (cache.clone(), hash.to_string());
    let installed = tokio::task::spawn_blocking(move || cache.install(&owned, &packed))
        .await
        .map_err(|e| format!("installing artifact {hash}: {e}"))?
        .map_err(|e| format!("installing artifact {hash}: {e}"))?;
    Ok(installed)
}
