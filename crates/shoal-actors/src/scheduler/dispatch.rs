//! The Scheduler's dispatch side: claiming jobs, reusing known builds, publishing requests,
//! bounding what is in flight, and the lease sweep.

use std::collections::{HashMap, HashSet};

use shoal_model::message::{CompileRequest, EvalItem};
use shoal_model::{
    FailureKind, Job, JobRef, JobState, Outcome, ResultRow, Session, SessionId, Step, Transition,
};
use shoal_store::{Batch, Change};

use super::{Inner, Tag};
use crate::ActorError;

/// An eval dispatch added to a batch of results by [`Inner::chain_evals`] at `index`, right
/// after the compile result it follows: published once it and that result applied.
pub(crate) struct Chained {
    index: usize,
    /// Where the compile result (or its alternatives) of the job is in the batch.
    results: Vec<usize>,
    session: SessionId,
    /// The job as claimed, with the attempt it is compiled at.
    job: Job,
    artifact: String,
}

impl Inner {
    /// Jobs whose retries are used up go to `errored` instead of being dispatched again.
    async fn split_exhausted(
        &mut self,
        session: &Session,
        jobs: Vec<Job>,
        to_start: JobState,
    ) -> Result<Vec<Job>, ActorError> {
        let (dead, live): (Vec<Job>, Vec<Job>) = jobs
            .into_iter()
            .partition(|j| j.retries > session.info.max_retries);
        if !dead.is_empty() {
            let now = self.now();
            let changes: Vec<Change> = dead
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
            // Through the counted path like every change into a final state, so that a
            // search learns of it (see `search`).
            let sessions = vec![session.id; changes.len()];
            self.apply_counted(&Batch::from_changes(changes), &sessions)
                .await?;
        }
        Ok(live)
    }

    pub(super) async fn dispatch_compile(
        &mut self,
        session_id: SessionId,
    ) -> Result<bool, ActorError> {
        let in_flight = self.in_flight_of(session_id).await?.compile.max(0) as u64;
        let room = self.config.max_compile_in_flight.saturating_sub(in_flight);
        if room == 0 {
            return Ok(false);
        }
        let session = self.session(session_id).await?;
        let jobs = self.new_jobs_to_compile(&session, room).await?;
        if jobs.is_empty() {
            return Ok(false);
        }
        let known = self.known_builds(session_id, &jobs).await?;
        let (deadline, eval_deadline) = self.queue_deadlines(session_id).await?;
        let now = self.now();
        let eval_room = self.eval_room(session_id).await?;
        let mut plan = CompileDispatch {
            changes: Vec::new(),
            requests: Vec::new(),
            evals: Vec::new(),
            eval_room,
        };
        for j in &jobs {
            let queue = Transition::new(j.id, JobState::New, j.attempt, JobState::CompileQueued)
                .expect("new → compile_queued")
                .with_lease(deadline);
            let attempt = queue.next_attempt();
            plan.changes.push(Change::from(queue));
            match known.get(&j.build_key) {
                Some(Ok(hash)) => plan.reuse_build(j, attempt, hash, eval_deadline),
                Some(Err((kind, detail))) => {
                    plan.changes
                        .push(cached_failure(j, attempt, *kind, detail, now));
                }
                None => {
                    let r = shoal_model::JobRef { job: j.id, attempt };
                    self.add_to_compile_requests(&mut plan.requests, j, r)
                        .await?;
                }
            }
        }
        let sessions = vec![session_id; plan.changes.len()];
        let applied = self
            .apply_counted(
                &Batch {
                    changes: plan.changes.clone(),
                    builds: vec![],
                },
                &sessions,
            )
            .await?;
        let queued = queued_refs(&plan.changes, &applied);
        self.track_compiling(&jobs, &queued, &known);
        self.publish_compile_dispatch(&session, plan, &applied, &queued)
            .await?;
        Ok(true)
    }

    /// Up to `room` new jobs of the session to dispatch, less those whose retries are used up
    /// (errored instead) and those whose build is already out (they are completed from its
    /// record).
    async fn new_jobs_to_compile(
        &mut self,
        session: &Session,
        room: u64,
    ) -> Result<Vec<Job>, ActorError> {
        let session_id = session.id;
        let jobs = self
            .store
            .jobs_in_state(session_id, JobState::New, room.min(4096) as u32)
            .await?;
        let jobs = self.split_exhausted(session, jobs, JobState::New).await?;
        let building = &mut self.building;
        Ok(jobs
            .into_iter()
            .filter(|j| !building.contains(&(session_id, j.build_key.clone())))
            .collect())
    }

    /// The recorded verdicts on the jobs' builds: an artifact hash, or a failure of the
    /// candidate. A job with one needs no build.
    async fn known_builds(
        &mut self,
        session_id: SessionId,
        jobs: &[Job],
    ) -> Result<KnownBuilds, ActorError> {
        let mut keys: Vec<String> = jobs.iter().map(|j| j.build_key.clone()).collect();
        keys.dedup();
        Ok(self
            .store
            .builds(session_id, &keys)
            .await?
            .into_iter()
            // Records of infrastructure failures (written by versions before they stopped
            // being recorded) are no verdict on the build: build again.
            .filter(|b| match &b.result {
                Ok(_) => true,
                Err((kind, _)) => kind.is_candidate_fault(),
            })
            .map(|b| (b.build_key, b.result))
            .collect())
    }

    /// Remembers the jobs now being compiled (queued, and with no known build), for their
    /// compile results.
    fn track_compiling(&mut self, jobs: &[Job], queued: &HashSet<JobRef>, known: &KnownBuilds) {
        let compiling = &mut self.compiling;
        for j in jobs {
            let r = JobRef {
                job: j.id,
                attempt: j.attempt + 1,
            };
            if queued.contains(&r) && !known.contains_key(&j.build_key) {
                compiling.insert(j.id, j.clone());
            }
        }
    }

    /// Publishes what a compile dispatch decided, for the jobs whose moves applied only: the
    /// compile requests, and the eval requests of jobs whose build was known.
    async fn publish_compile_dispatch(
        &mut self,
        session: &Session,
        plan: CompileDispatch,
        applied: &[bool],
        queued: &HashSet<JobRef>,
    ) -> Result<(), ActorError> {
        let mut requests = plan.requests;
        for req in &mut requests {
            req.jobs.retain(|r| queued.contains(r));
        }
        let mut outgoing = self.compile_outgoing(session, requests);
        let mut items = Vec::new();
        for (i, job, artifact) in plan.evals {
            if applied[i] {
                items.push(self.eval_item(&job, artifact).await?);
            }
        }
        outgoing.extend(self.eval_outgoing(session, items));
        self.send(outgoing).await;
        Ok(())
    }

    pub(super) async fn dispatch_eval(
        &mut self,
        session_id: SessionId,
    ) -> Result<bool, ActorError> {
        let room = self.eval_room(session_id).await?;
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
        let (_, deadline) = self.queue_deadlines(session_id).await?;
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
        let mut items: Vec<(Step, EvalItem)> = Vec::new();
        for (j, ok) in jobs.iter().zip(applied) {
            if !ok {
                continue;
            }
            let Some(artifact) = j.artifact.clone() else {
                tracing::warn!(job = %j.id, "compiled job has no artifact");
                continue;
            };
            items.push(self.eval_item(j, artifact).await?);
        }
        self.send(self.eval_outgoing(&session, items)).await;
        Ok(true)
    }

    /// The eval request item of a job moved from `compiled` (at `job.attempt`) to `eval_queued`.
    async fn eval_item(
        &mut self,
        j: &Job,
        artifact: String,
    ) -> Result<(Step, EvalItem), ActorError> {
        self.eval_item_at(j, j.attempt + 1, artifact).await
    }

    /// Adds, right after the compile result of a job (`→ compiled`), the eval dispatch of that
    /// job (`compiled → eval_queued`, next attempt, queue lease), while the session has eval
    /// room. The store writes the two as one compare-and-set (a chain of one job's changes
    /// applies whole, or falls back to one by one), so a job costs one row write fewer and
    /// dispatch does not read it back. A result sent as two alternatives (from queued, from
    /// compiling) is chained after the second: whichever applies, the dispatch follows it.
    /// Only jobs this Scheduler claimed for compile are chained (it needs their parameters), and
    /// only when every compile result of the job in the batch is for the same attempt and
    /// artifact; the rest stay `compiled` for [`Inner::dispatch_eval`].
    pub(super) async fn chain_evals(
        &mut self,
        changes: Vec<Change>,
        tags: Vec<Tag>,
    ) -> Result<(Vec<Change>, Vec<Tag>, Vec<Chained>), ActorError> {
        // Per job: the position of its last compile result, and whether all agree.
        let mut results: HashMap<shoal_model::JobId, (usize, bool)> = HashMap::new();
        let mut room: HashMap<SessionId, u64> = HashMap::new();
        // Per session: the eval queue lease of what is chained now.
        let mut deadlines: HashMap<SessionId, i64> = HashMap::new();
        for (i, (c, tag)) in changes.iter().zip(&tags).enumerate() {
            let s = &tag.session;
            let t = &c.transition;
            if t.to != JobState::Compiled {
                continue;
            }
            let agrees = |j: usize| {
                let u = &changes[j].transition;
                (u.attempt, &u.artifact) == (t.attempt, &t.artifact)
            };
            let e = results.entry(t.job).or_insert((i, true));
            e.1 &= agrees(e.0);
            e.0 = i;
            if !room.contains_key(s) {
                room.insert(*s, self.eval_room(*s).await?);
                deadlines.insert(*s, self.queue_deadlines(*s).await?.1);
            }
        }
        let mut out = Vec::with_capacity(changes.len());
        let mut out_tags = Vec::with_capacity(changes.len());
        let mut chained = Vec::new();
        // Where each job's compile results landed in `out`.
        let mut landed: HashMap<shoal_model::JobId, Vec<usize>> = HashMap::new();
        let compiling = &mut self.compiling;
        for (i, (c, tag)) in changes.into_iter().zip(tags).enumerate() {
            let s = tag.session;
            let t = &c.transition;
            if t.to == JobState::Compiled {
                landed.entry(t.job).or_default().push(out.len());
            }
            let compile_ended = matches!(t.from, JobState::CompileQueued | JobState::Compiling)
                && t.to != JobState::Compiling;
            let last = results.get(&t.job).is_some_and(|&(at, _)| at == i);
            let claimed = if compile_ended && (t.to != JobState::Compiled || last) {
                match compiling.get(&t.job) {
                    Some(j) if j.attempt + 1 == t.attempt => compiling.remove(&t.job),
                    _ => None,
                }
            } else {
                None
            };
            let next = match (claimed, &t.artifact) {
                (Some(j), Some(artifact))
                    if t.to == JobState::Compiled && results.get(&t.job) == Some(&(i, true)) =>
                {
                    let left = room.entry(s).or_default();
                    (*left > 0).then(|| {
                        *left -= 1;
                        let mut j = j;
                        j.attempt = t.attempt;
                        (j, artifact.clone())
                    })
                }
                _ => None,
            };
            let attempt = t.next_attempt();
            out.push(c);
            out_tags.push(tag);
            if let Some((job, artifact)) = next {
                let t = Transition::new(job.id, JobState::Compiled, attempt, JobState::EvalQueued)
                    .expect("compiled → eval_queued")
                    .with_lease(deadlines[&s]);
                chained.push(Chained {
                    index: out.len(),
                    results: landed.remove(&job.id).unwrap_or_default(),
                    session: s,
                    job,
                    artifact,
                });
                out.push(t.into());
                out_tags.push(Tag {
                    session: s,
                    origin: None,
                    publisher: "".into(),
                });
            }
        }
        Ok((out, out_tags, chained))
    }

    /// Sends the eval requests of the chained dispatches that applied.
    pub(super) async fn publish_chained(
        &mut self,
        chained: Vec<Chained>,
        applied: &[bool],
    ) -> Result<(), ActorError> {
        let mut by_session: Vec<(SessionId, Vec<(Step, EvalItem)>)> = Vec::new();
        for c in chained {
            // The dispatch and the compile result it follows (one of its alternatives) applied.
            // (The dispatch without the result cannot: the job left this Scheduler's claims with
            // the first result of its attempt. Were it to, the job would wait in `eval_queued`
            // for its lease, as after a lost publish.)
            let ok = |i: &usize| applied.get(*i).copied().unwrap_or(false);
            if !(ok(&c.index) && c.results.iter().any(ok)) {
                continue;
            }
            let item = self.eval_item(&c.job, c.artifact).await?;
            match by_session.iter_mut().find(|(s, _)| *s == c.session) {
                Some((_, items)) => items.push(item),
                None => by_session.push((c.session, vec![item])),
            }
        }
        for (session, items) in by_session {
            let session = self.session(session).await?;
            self.send(self.eval_outgoing(&session, items)).await;
        }
        Ok(())
    }

    /// Expired leases: back to the start of the phase, counted as a retry. First, if the store
    /// did not answer, or this Scheduler had no connection to the broker, for a while since the
    /// last sweep, every in-flight lease moves later by that long: the heartbeats and replies
    /// that would have renewed or settled them were held or are sent again, not lost; a job whose
    /// worker died meanwhile still comes back a running lease after the outage.
    pub(super) async fn sweep_leases(&mut self) -> Result<(), ActorError> {
        let ended = outages_ended();
        let outage = ended.saturating_sub(std::mem::replace(&mut self.outage_seen, ended));
        if !outage.is_zero() {
            let moved = self
                .store
                .extend_leases(outage.as_millis() as i64, self.now())
                .await?;
            tracing::warn!(
                outage_s = outage.as_secs_f64(),
                leases = moved,
                "the database or the broker was away for a while: the leases of the jobs in flight move later by that long"
            );
        }
        let expired = self.store.expired_leases(self.now(), 1000).await?;
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
                        .remove(&(j.session, j.build_key.clone()));
                    self.compiling.remove(&j.id);
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

/// The recorded verdict on each build key: the artifact's hash, or the candidate's failure.
type KnownBuilds = HashMap<String, Result<String, (FailureKind, String)>>;

/// What one compile dispatch writes and then publishes.
struct CompileDispatch {
    changes: Vec<Change>,
    /// Requests for the jobs whose build is not known.
    requests: Vec<CompileRequest>,
    /// (index of the eval dispatch in `changes`, the job at its compiled attempt, artifact)
    evals: Vec<(usize, Job, String)>,
    /// Eval dispatches the in-flight bound still allows.
    eval_room: u64,
}

impl CompileDispatch {
    /// A job whose build is known is compiled at once, and goes on to eval in the same write
    /// while there is room, as after a compile result (`chain_evals`): the store applies the
    /// three as one.
    fn reuse_build(&mut self, j: &Job, attempt: u32, hash: &str, eval_deadline: i64) {
        let t = Transition::new(j.id, JobState::CompileQueued, attempt, JobState::Compiled)
            .expect("compile_queued → compiled")
            .with_artifact(hash.to_string());
        self.changes.push(t.into());
        if self.eval_room > 0 {
            self.eval_room -= 1;
            let t = Transition::new(j.id, JobState::Compiled, attempt, JobState::EvalQueued)
                .expect("compiled → eval_queued")
                .with_lease(eval_deadline);
            let mut job = j.clone();
            job.attempt = attempt;
            self.evals.push((self.changes.len(), job, hash.to_string()));
            self.changes.push(t.into());
        }
    }
}

/// A job whose build is known to fail ends errored with the recorded failure, as if it had been
/// built again, without building it.
fn cached_failure(j: &Job, attempt: u32, kind: FailureKind, detail: &str, now: i64) -> Change {
    let t = Transition::new(j.id, JobState::CompileQueued, attempt, JobState::Errored)
        .expect("compile_queued → errored")
        .with_failure(kind, detail.to_string());
    Change {
        transition: t,
        result: Some(ResultRow {
            job: j.id,
            session: j.session,
            attempt,
            outcome: Outcome::failed(kind, detail.to_string()),
            worker: "build cache".into(),
            device: String::new(),
            created_ms: now,
        }),
    }
}

/// The jobs whose move to `compile_queued` applied, at the attempt they were queued at: only
/// those are published.
fn queued_refs(changes: &[Change], applied: &[bool]) -> HashSet<JobRef> {
    changes
        .iter()
        .zip(applied)
        .filter(|(c, ok)| **ok && c.transition.to == JobState::CompileQueued)
        .map(|(c, _)| JobRef {
            job: c.transition.job,
            attempt: c.transition.next_attempt(),
        })
        .collect()
}

/// How long this process's outages of the store and of the broker that ended have lasted, in
/// all: the time no lease should count.
pub(super) fn outages_ended() -> std::time::Duration {
    shoal_store::patient::outages().ended_total + shoal_bus::outages::outages().ended_total
}
