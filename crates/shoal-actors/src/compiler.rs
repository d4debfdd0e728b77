//! The Compiler: consumes compile requests for the steps and architectures it serves, builds each
//! compile-time parameter set once in a child process (own process group, timeout), stores the
//! artifact under its content hash, and replies for every job that shares the build.
//!
//! Each slot is an actor ([`CompileSlot`], run by [`Served`]) with its own consumer at prefetch
//! 1, so a slot takes a request only when it can start it: the number of slots is the compile
//! concurrency.

use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use actix::prelude::*;
use shoal_backend::RunContext;
use shoal_bus::{Bus, QueueOptions};
use shoal_model::message::{CompileReply, CompileRequest, Phase, ReplyBody};
use shoal_model::{FailureKind, JobRef, Message};
use shoal_store::Store;
use tokio::sync::RwLock;

use crate::backends::SessionBackends;
use crate::serving::{served, Local, Served, Service};
use crate::shutdown::{DrainGuard, Signal};
use crate::supervise::Backoff;
use crate::ActorError;

/// What a Compiler needs. `cpu_gate`, when set, is shared with a CPU Evaluator: builds hold it
/// shared, timings hold it exclusively, so no build runs while a candidate is being timed on the
/// same CPU.
#[derive(Clone)]
pub struct CompilerConfig {
    pub store: Arc<dyn Store>,
    pub bus: Arc<dyn Bus>,
    pub backends: SessionBackends,
    /// Queues to consume (from `Namespace::compile_queue`).
    pub queues: Vec<String>,
    pub slots: usize,
    pub work_dir: PathBuf,
    pub worker: String,
    pub cpu_gate: Option<Arc<RwLock<()>>>,
    pub delivery_limit: u32,
    /// Where this process's presence record learns which jobs are being built.
    pub activity: crate::presence::Activity,
    /// How long a compile slot may fail run after run (a full disk) before the process gives
    /// up (see [`Backoff::give_up_after`]).
    pub give_up_after: std::time::Duration,
}

/// The Compiler of a process: one [`CompileSlot`] actor per queue and slot.
pub struct Compiler;

impl Compiler {
    /// Starts the slots, each under actix's `Supervisor`: a slot that fails restarts alone, so
    /// that one failed build does not cancel the other slots' work.
    pub fn start(config: CompilerConfig, stop: Signal, guard: DrainGuard) {
        for queue in &config.queues {
            for slot in 0..config.slots {
                let service = CompileSlot {
                    cfg: config.clone(),
                    queue: queue.clone(),
                    slot,
                };
                Served::start(service, stop.clone(), guard.clone());
            }
        }
    }
}

/// One compile slot: builds one request at a time, from its own consumer of its queue at
/// prefetch 1, in its own work directory.
pub(crate) struct CompileSlot {
    cfg: CompilerConfig,
    queue: String,
    slot: usize,
}

/// A compile request and its delivery, settled once its reply is confirmed.
pub(crate) struct Build(CompileRequest, shoal_bus::Delivery);

impl Service for CompileSlot {
    type Request = Build;
    /// The slot's work directory.
    type State = PathBuf;

    fn name(&self) -> String {
        format!("compiler[{}#{}]", self.queue, self.slot)
    }

    fn backoff(&self) -> Backoff {
        Backoff {
            give_up_after: self.cfg.give_up_after,
            ..Backoff::default()
        }
    }

    fn fresh_state(&self) -> Result<PathBuf, ActorError> {
        let work_dir = self.cfg.work_dir.join(format!("compile-{}", self.slot));
        std::fs::create_dir_all(&work_dir).map_err(|source| ActorError::Io {
            what: "cannot create",
            path: work_dir.clone(),
            source,
        })?;
        Ok(work_dir)
    }

    fn feed(
        self: Rc<Self>,
        to: Addr<Served<Self>>,
        mut stop: Signal,
    ) -> Local<'static, Result<(), ActorError>> {
        Box::pin(async move {
            let cfg = &self.cfg;
            let results = cfg.bus.namespace().results_queue();
            let opts = QueueOptions::limited(cfg.delivery_limit);
            cfg.bus.declare_queue(&self.queue, &opts).await?;
            let wait = crate::results_queue::WAIT;
            if !crate::results_queue::declare(&*cfg.bus, &results, &opts, wait, &mut stop).await? {
                return Ok(());
            }
            let mut consumer = cfg.bus.consume(&self.queue, 1).await?;
            while let Some((req, delivery)) = crate::next_request(
                cfg.bus.codec(),
                &mut *consumer,
                &mut stop,
                &self.queue,
                "compile",
                |m| match m {
                    Message::Compile(r) => Some(r),
                    _ => None,
                },
            )
            .await?
            {
                if !served(&to, Build(req, delivery)).await {
                    break;
                }
            }
            Ok(())
        })
    }

    fn serve<'a>(
        &'a self,
        work_dir: &'a mut PathBuf,
        Build(req, delivery): Build,
        stop: &'a Signal,
    ) -> Local<'a, Result<(), ActorError>> {
        Box::pin(self.build_request(work_dir, req, delivery, stop.clone()))
    }
}

impl CompileSlot {
    /// Builds one request and replies for every job that shares the build.
    async fn build_request(
        &self,
        work_dir: &Path,
        req: CompileRequest,
        delivery: shoal_bus::Delivery,
        mut stop: Signal,
    ) -> Result<(), ActorError> {
        let (cfg, queue, slot) = (&self.cfg, &self.queue, self.slot);
        let results = cfg.bus.namespace().results_queue();
        tracing::debug!(queue = %queue, slot, build = %req.build_key, "compile request received");
        // A redelivered request may name attempts the store has moved past (its lease ran out
        // and the job was dispatched again): those are not built again.
        let mut req = req;
        req.jobs = current_jobs(cfg, req.jobs, delivery.delivery_count).await?;
        if req.jobs.is_empty() {
            tracing::debug!(queue = %queue, build = %req.build_key, "stale compile request skipped");
            delivery.ack().await?;
            return Ok(());
        }
        // Build only a candidate of the session's registered spec: a request whose parameters
        // are not one (a forgery, a corrupted message) is refused before anything runs. (A
        // backend that cannot be loaded now is a failure of the machinery, reported below.)
        if let Some(reason) = refusal(cfg, &req).await {
            tracing::error!(queue = %queue, reason = %reason, "dead-lettering a message");
            delivery.dead_letter(reason).await?;
            return Ok(());
        }
        let started = ReplyBody::Started {
            session: req.session,
            phase: Phase::Compile,
            jobs: req.jobs.clone(),
            worker: cfg.worker.clone(),
        };
        crate::publish(&*cfg.bus, &results, &Message::Reply(started)).await?;

        let t0 = Instant::now();
        let build = build(cfg, &req, work_dir);
        let beat = ReplyBody::Heartbeat {
            session: req.session,
            phase: Phase::Compile,
            jobs: req.jobs.clone(),
            worker: cfg.worker.clone(),
        };
        let build = crate::with_heartbeats(&cfg.activity, &*cfg.bus, &results, beat, build);
        let result = tokio::select! {
            r = build => r,
            _ = stop.triggered() => {
                // The build's child group is killed as its future drops. Hand the jobs back.
                let reason = format!("{} shut down during the build", cfg.worker);
                crate::hand_back(&*cfg.bus, req.session, Phase::Compile, &req.jobs, reason, &cfg.worker).await?;
                delivery.ack().await?;
                return Ok(());
            }
        };
        // The artifact could not be stored (the database did not answer within its patience):
        // the build is this host's to redo, not the candidate's failure. The jobs go back
        // uncounted and the loop goes on.
        let result = match result {
            Err(BuildEnd::StoreGone(e)) => {
                let reason = format!("{} could not store the artifact: {e}", cfg.worker);
                tracing::warn!(build = %req.build_key, reason = %reason, "jobs handed back");
                crate::hand_back(
                    &*cfg.bus,
                    req.session,
                    Phase::Compile,
                    &req.jobs,
                    reason,
                    &cfg.worker,
                )
                .await?;
                delivery.ack().await?;
                return Ok(());
            }
            Err(BuildEnd::Failed(kind, detail)) => Err((kind, detail)),
            Ok(hash) => Ok(hash),
        };
        match &result {
            Ok(hash) => tracing::debug!(build = %req.build_key, artifact = %hash, "built"),
            Err((kind, detail)) => {
                tracing::debug!(params = %req.compile_params, kind = %kind, detail = %first_line(detail), "build failed")
            }
        }
        // A full disk is this host's state, not the build's: hand the jobs back without
        // counting a retry and fail the loop, whose supervisor backs off and, if the disk stays
        // full, gives up and ends the process (see `failure::host_cannot_write`).
        if let Err((_, detail)) = &result {
            if shoal_backend::failure::host_cannot_write(detail) {
                let reason = format!("{} cannot write its disk (full or read-only)", cfg.worker);
                crate::hand_back(
                    &*cfg.bus,
                    req.session,
                    Phase::Compile,
                    &req.jobs,
                    reason,
                    &cfg.worker,
                )
                .await?;
                delivery.ack().await?;
                return Err(ActorError::DiskFull(first_line(detail).to_string()));
            }
        }
        let reply = ReplyBody::Compiled(CompileReply {
            session: req.session,
            jobs: req.jobs,
            build_key: req.build_key,
            result,
            worker: cfg.worker.clone(),
            duration_ms: t0.elapsed().as_millis() as u64,
        });
        crate::publish_reply(&*cfg.bus, &results, &Message::Reply(reply)).await?;
        delivery.ack().await?;
        Ok(())
    }
}

/// Why a request must not be built, if it must not: its parameters are not a candidate of the
/// session's registered spec (a forgery, a corrupted message). A backend that cannot be loaded
/// now is a failure of the machinery, reported by the build instead.
async fn refusal(cfg: &CompilerConfig, req: &CompileRequest) -> Option<String> {
    let backend = cfg.backends.get(&*cfg.store, req.session).await.ok()?;
    backend
        .check_request(&req.config_params, &req.compile_params, None)
        .err()
        .map(|e| format!("compile request refused: {e}"))
}

/// Why a build produced no artifact hash.
enum BuildEnd {
    /// The candidate or the machinery failed: reported as the build's outcome.
    Failed(FailureKind, String),
    /// The store did not answer within its patience: the jobs are handed back.
    StoreGone(ActorError),
}

impl From<(FailureKind, String)> for BuildEnd {
    fn from((kind, detail): (FailureKind, String)) -> Self {
        BuildEnd::Failed(kind, detail)
    }
}

/// Builds the request's candidate (after checking that this host derives the same build key
/// from the same parameters) and stores its artifact; the artifact's hash, or why not.
async fn build(
    cfg: &CompilerConfig,
    req: &CompileRequest,
    work_dir: &Path,
) -> Result<String, BuildEnd> {
    let backend = match cfg.backends.get(&*cfg.store, req.session).await {
        Ok(b) => b,
        Err(e) if e.is_store_unreachable() => return Err(BuildEnd::StoreGone(e)),
        Err(e) => return Err(BuildEnd::Failed(FailureKind::Infrastructure, e.to_string())),
    };
    let expected = backend
        .build_key(req.step, &req.config_params, &req.compile_params)
        .map_err(|e| BuildEnd::Failed(FailureKind::Infrastructure, e.to_string()))?;
    if expected != req.build_key {
        return Err(BuildEnd::Failed(
            FailureKind::Infrastructure,
            format!(
                "build key mismatch on {}: the spec or its sources differ on this host",
                cfg.worker
            ),
        ));
    }
    let _shared = match &cfg.cpu_gate {
        Some(g) => Some(g.read().await),
        None => None,
    };
    let ctx = RunContext {
        work_dir,
        cpu: None,
        gpu_index: None,
        runner: None,
    };
    let artifact = backend
        .build(req.step, &req.config_params, &req.compile_params, &ctx)
        .await?;
    match cfg
        .store
        .put_artifact(&artifact.hash, &artifact.packed)
        .await
    {
        Ok(_) => Ok(artifact.hash),
        Err(e) if e.is_unreachable() => Err(BuildEnd::StoreGone(e.into())),
        Err(e) => Err(BuildEnd::Failed(FailureKind::Infrastructure, e.to_string())),
    }
}

pub(crate) fn first_line(s: &str) -> &str {
    s.lines().find(|l| !l.trim().is_empty()).unwrap_or("")
}

/// The jobs of a request still worth building. A first delivery is current, so the common path
/// costs no store read; a redelivery is checked job by job ([`crate::still_current`]).
async fn current_jobs(
    cfg: &CompilerConfig,
    jobs: Vec<JobRef>,
    delivery_count: u32,
) -> Result<Vec<JobRef>, ActorError> {
    if delivery_count <= 1 {
        return Ok(jobs);
    }
    tokio::time::sleep(crate::REDELIVERY_PAUSE).await;
    let mut current = Vec::with_capacity(jobs.len());
    for r in jobs {
        if crate::still_current(&*cfg.store, r, shoal_model::JobState::CompileQueued).await? {
            current.push(r)
        } else {
            tracing::debug!(job = %r.job, "stale compile job skipped")
        }
    }
    Ok(current)
}
