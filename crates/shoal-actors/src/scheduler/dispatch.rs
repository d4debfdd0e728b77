//! The Scheduler's dispatch side: claiming jobs, reusing known builds, publishing requests,
//! bounding what is in flight, and the lease sweep.

use std::collections::{HashMap, HashSet};

use shoal_model::message::{CompileRequest, EvalItem, EvalRequest};
use shoal_model::{
    FailureKind, Job, JobState, Message, Outcome, ResultRow, Session, SessionId, Transition,
};
use shoal_store::{Batch, Change};

use super::Inner;
use crate::{now_ms, ActorError};

impl Inner {
    /// Jobs whose retries are used up go to `errored` instead of being dispatched again.
    async fn split_exhausted(
        &self,
        session: &Session,
        jobs: Vec<Job>,
        to_start: JobState,
    ) -> Result<Vec<Job>, ActorError> {
        let (dead, live): (Vec<Job>, Vec<Job>) = jobs
            .into_iter()
            .partition(|j| j.retries > session.info.max_retries);
        if !dead.is_empty() {
            let now = now_ms();
            let changes = dead
                .iter()
                .map(|j| {
                    let reason = format!(
                        "gave up after {} retries; last error: {}",
                        j.retries,
                        j.last_error.as_deref().unwrap_or("none")
                    );
                    let t = Transition::new(j.id, to_start, j.attempt, JobState::Errored)
                        .expect("new/compiled → errored is an edge")
                        .with_failure(FailureKind::Infrastructure, reason.clone());
                    Change {
                        transition: t,
                        result: Some(ResultRow {
                            job: j.id,
                            session: j.session,
                            attempt: j.attempt,
                            outcome: Outcome::failed(FailureKind::Infrastructure, reason),
                            worker: String::new(),
                            device: String::new(),
                            created_ms: now,
                        }),
                    }
                })
                .collect();
            self.store
                .apply(&Batch {
                    changes,
                    builds: vec![],
                })
                .await?;
        }
        Ok(live)
    }

    pub(super) async fn dispatch_compile(&self, session_id: SessionId) -> Result<bool, ActorError> {
        let in_flight = self.in_flight_of(session_id).await?.compile.max(0) as u64;
        let room = self.config.max_compile_in_flight.saturating_sub(in_flight);
        if room == 0 {
            return Ok(false);
        }
        let session = self.session(session_id).await?;
        let jobs = self
            .store
            .jobs_in_state(session_id, JobState::New, room.min(4096) as u32)
            .await?;
        let jobs = self.split_exhausted(&session, jobs, JobState::New).await?;
        // Leave jobs whose build is already out; they are completed from its record.
        let jobs: Vec<Job> = {
            let building = self.building.lock().unwrap();
            jobs.into_iter()
                .filter(|j| !building.contains(&(session_id, j.build_key.clone())))
                .collect()
        };
        if jobs.is_empty() {
            return Ok(false);
        }
        let mut keys: Vec<String> = jobs.iter().map(|j| j.build_key.clone()).collect();
        keys.dedup();
        let known: HashMap<String, Result<String, (FailureKind, String)>> = self
            .store
            .builds(session_id, &keys)
            .await?
            .into_iter()
            .map(|b| (b.build_key, b.result))
            .collect();
        let deadline = now_ms() + self.config.queue_lease.as_millis() as i64;
        let now = now_ms();
        let mut changes = Vec::new();
        let mut requests: Vec<CompileRequest> = Vec::new();
        for j in &jobs {
            let queue = Transition::new(j.id, JobState::New, j.attempt, JobState::CompileQueued)
                .expect("new → compile_queued")
                .with_lease(deadline);
            let attempt = queue.next_attempt();
            changes.push(Change::from(queue));
            match known.get(&j.build_key) {
                Some(Ok(hash)) => {
                    let t =
                        Transition::new(j.id, JobState::CompileQueued, attempt, JobState::Compiled)
                            .expect("compile_queued → compiled")
                            .with_artifact(hash.clone());
                    changes.push(t.into());
                }
                Some(Err((kind, detail))) => {
                    let t =
                        Transition::new(j.id, JobState::CompileQueued, attempt, JobState::Errored)
                            .expect("compile_queued → errored")
                            .with_failure(*kind, detail.clone());
                    changes.push(Change {
                        transition: t,
                        result: Some(ResultRow {
                            job: j.id,
                            session: session_id,
                            attempt,
                            outcome: Outcome::failed(*kind, detail.clone()),
                            worker: "build cache".into(),
                            device: String::new(),
                            created_ms: now,
                        }),
                    });
                }
                None => {
                    let r = shoal_model::JobRef { job: j.id, attempt };
                    match requests.last_mut() {
                        Some(req) if req.build_key == j.build_key && req.step == j.compile_step => {
                            req.jobs.push(r)
                        }
                        _ => requests.push(CompileRequest {
                            session: session_id,
                            step: j.compile_step.clone(),
                            build_key: j.build_key.clone(),
                            config_params: self.config(j.config).await?.params,
                            compile_params: j.compile_params.clone(),
                            jobs: vec![r],
                        }),
                    }
                }
            }
        }
        let sessions = vec![session_id; changes.len()];
        let applied = self
            .apply_counted(
                &Batch {
                    changes: changes.clone(),
                    builds: vec![],
                },
                &sessions,
            )
            .await?;
        // Publish only for jobs whose move to compile_queued applied.
        let queued: HashSet<shoal_model::JobRef> = changes
            .iter()
            .zip(&applied)
            .filter(|(c, ok)| **ok && c.transition.to == JobState::CompileQueued)
            .map(|(c, _)| shoal_model::JobRef {
                job: c.transition.job,
                attempt: c.transition.next_attempt(),
            })
            .collect();
        for mut req in requests {
            req.jobs.retain(|r| queued.contains(r));
            if req.jobs.is_empty() {
                continue;
            }
            let queue_name = self
                .bus
                .namespace()
                .compile_queue(&req.step, &session.info.arch);
            self.building
                .lock()
                .unwrap()
                .insert((session_id, req.build_key.clone()));
            tracing::debug!(queue = %queue_name, jobs = req.jobs.len(), build = %req.build_key, "compile request");
            self.ensure_queue(&queue_name).await?;
            crate::publish(&*self.bus, &queue_name, &Message::Compile(req)).await?;
        }
        Ok(true)
    }

    pub(super) async fn dispatch_eval(&self, session_id: SessionId) -> Result<bool, ActorError> {
        let in_flight = self.in_flight_of(session_id).await?.eval.max(0) as u64;
        let room = self.config.max_eval_in_flight.saturating_sub(in_flight);
        if room == 0 {
            return Ok(false);
        }
        let session = self.session(session_id).await?;
        let jobs = self
            .store
            .jobs_in_state(session_id, JobState::Compiled, room as u32)
            .await?;
        let jobs = self
            .split_exhausted(&session, jobs, JobState::Compiled)
            .await?;
        if jobs.is_empty() {
            return Ok(false);
        }
        let deadline = now_ms() + self.config.queue_lease.as_millis() as i64;
        let changes: Vec<Change> = jobs
            .iter()
            .map(|j| {
                Transition::new(j.id, JobState::Compiled, j.attempt, JobState::EvalQueued)
                    .expect("compiled → eval_queued")
                    .with_lease(deadline)
                    .into()
            })
            .collect();
        let sessions = vec![session_id; changes.len()];
        let applied = self
            .apply_counted(
                &Batch {
                    changes,
                    builds: vec![],
                },
                &sessions,
            )
            .await?;
        let mut items: Vec<(String, EvalItem)> = Vec::new();
        for (j, ok) in jobs.iter().zip(applied) {
            if !ok {
                continue;
            }
            let Some(artifact) = j.artifact.clone() else {
                tracing::warn!(job = %j.id, "compiled job has no artifact");
                continue;
            };
            let config = self.config(j.config).await?;
            items.push((
                j.eval_step.clone(),
                EvalItem {
                    job: shoal_model::JobRef {
                        job: j.id,
                        attempt: j.attempt + 1,
                    },
                    config: j.config,
                    config_params: config.params,
                    compile_params: j.compile_params.clone(),
                    run_params: j.run_params.clone(),
                    artifact,
                },
            ));
        }
        let mut i = 0;
        while i < items.len() {
            let step = items[i].0.clone();
            let mut req = EvalRequest {
                session: session_id,
                step: step.clone(),
                items: Vec::new(),
            };
            while i < items.len() && items[i].0 == step && req.items.len() < self.config.eval_batch
            {
                req.items.push(items[i].1.clone());
                i += 1;
            }
            let queue_name =
                self.bus
                    .namespace()
                    .eval_queue(&step, &session.info.arch, session.info.num_cu);
            self.ensure_queue(&queue_name).await?;
            crate::publish(&*self.bus, &queue_name, &Message::Eval(req)).await?;
        }
        Ok(true)
    }

    /// Expired leases: back to the start of the phase, counted as a retry.
    pub(super) async fn sweep_leases(&self) -> Result<(), ActorError> {
        let expired = self.store.expired_leases(now_ms(), 1000).await?;
        let served: HashSet<SessionId> = self.config.sessions.iter().copied().collect();
        let serves_all = served.is_empty();
        let mut sessions = Vec::new();
        let changes: Vec<Change> = expired
            .iter()
            .filter(|j| serves_all || served.contains(&j.session))
            .filter_map(|j| {
                let to = j.state.retry_state()?;
                tracing::warn!(job = %j.id, state = %j.state, worker = ?j.worker, "lease expired; job goes back");
                if to == JobState::New {
                    // Its build request may be lost: let the next dispatch ask again.
                    self.building
                        .lock()
                        .unwrap()
                        .remove(&(j.session, j.build_key.clone()));
                }
                let mut t = Transition::new(j.id, j.state, j.attempt, to).ok()?;
                t.count_retry = true;
                t.failure = Some((
                    FailureKind::Infrastructure,
                    format!("lease expired in state {}", j.state),
                ));
                sessions.push(j.session);
                Some(t.into())
            })
            .collect();
        if !changes.is_empty() {
            self.apply_counted(
                &Batch {
                    changes,
                    builds: vec![],
                },
                &sessions,
            )
            .await?;
        }
        Ok(())
    }
}
