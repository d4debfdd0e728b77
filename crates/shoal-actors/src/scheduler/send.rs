//! The Scheduler's sending side: requests owed to the bus, published and confirmed.
//!
//! Every move of a job into a queued state writes an outbox row in the same transaction
//! ([`shoal_store::outbox`]). Requests then leave two ways, both through [`Inner::send`]:
//! - **at once**, right after the commit that owed them, built from the jobs as dispatch claimed
//!   them (the fast path: no read back);
//! - **from the outbox** ([`Inner::send_owed`]), built from the job rows: everything owed when
//!   the Scheduler starts (a previous one died between commit and publish), then, every second,
//!   whatever has been owed for longer than [`OWED_GRACE`] (a publish that failed, a broker that
//!   was down).
//!
//! A request's row is removed only after the broker confirmed it. A publish that fails leaves
//! the rows, logs, and does not fail the loop: the sender tries again on the next sweep, for as
//! long as the broker is down. A request sent twice (confirmed, but the removal was lost) is
//! harmless: the second copy finds the job at another state or attempt and changes nothing.

use std::collections::HashMap;
use std::time::Duration;

use shoal_model::message::{CompileRequest, EvalItem, EvalRequest, JobRef};
use shoal_model::{Job, JobState, Message, Session, SessionId, Step};
use shoal_store::outbox::is_queued;

use super::Inner;
use crate::ActorError;

/// How long a request may be owed before the sender sends it from the outbox: longer than the
/// fast path takes from commit to confirm, so the two rarely send the same request.
pub(crate) const OWED_GRACE: Duration = Duration::from_secs(2);

/// Requests read from the outbox per sweep, at most.
const OWED_BATCH: u32 = 1000;

/// One request ready to publish, with the jobs (at their queued attempt) it carries.
pub(crate) struct Outgoing {
    pub queue: String,
    pub message: Message,
    pub jobs: Vec<JobRef>,
}

impl Inner {
    /// Publishes requests in order, requests to the same queue together, and removes the outbox
    /// rows of those the broker confirmed. Stops at the first failure: what is left stays owed
    /// for [`Inner::send_owed`]. Returns how many requests were confirmed.
    pub(crate) async fn send(&mut self, outgoing: Vec<Outgoing>) -> usize {
        let mut sent: Vec<JobRef> = Vec::new();
        let mut confirmed = 0;
        let mut rest = outgoing.into_iter().peekable();
        while let Some(first) = rest.next() {
            let queue = first.queue;
            let mut payloads = vec![self.bus.codec().encode(&first.message)];
            let mut jobs = first.jobs;
            while let Some(next) = rest.next_if(|o| o.queue == queue) {
                payloads.push(self.bus.codec().encode(&next.message));
                jobs.extend(next.jobs);
            }
            let n = payloads.len();
            let published = match self.ensure_queue(&queue).await {
                Ok(()) => self.bus.publish(&queue, payloads).await.map_err(Into::into),
                Err(e) => Err(e),
            };
            if let Err(e) = published {
                tracing::warn!(queue = %queue, error = %e, "publish failed; the requests stay in the outbox and are sent again");
                break;
            }
            confirmed += n;
            sent.extend(jobs);
        }
        if let Err(e) = self.store.mark_sent(&sent).await {
            // The rows stay: the requests go out once more, which changes nothing.
            tracing::warn!(error = %e, requests = sent.len(), "could not clear sent requests from the outbox");
        }
        confirmed
    }

    /// Sends what has been owed since before `before_ms`, rebuilt from the job rows, in the order
    /// it was owed. Returns how many requests were confirmed.
    pub(crate) async fn send_owed(&mut self, before_ms: i64) -> Result<usize, ActorError> {
        let jobs = self.store.unsent(before_ms, OWED_BATCH).await?;
        let serves_all = self.config.sessions.is_empty();
        let mut by_session: Vec<(SessionId, Vec<Job>)> = Vec::new();
        for j in jobs {
            if !is_queued(j.state) || !(serves_all || self.config.sessions.contains(&j.session)) {
                continue;
            }
            match by_session.iter_mut().find(|(s, _)| *s == j.session) {
                Some((_, v)) => v.push(j),
                None => by_session.push((j.session, vec![j])),
            }
        }
        let mut confirmed = 0;
        for (session, jobs) in by_session {
            let session = self.session(session).await?;
            tracing::info!(session = %session.id, requests = jobs.len(), "sending requests owed from the outbox");
            let (compile, eval): (Vec<Job>, Vec<Job>) = jobs
                .into_iter()
                .partition(|j| j.state == JobState::CompileQueued);
            let mut outgoing = Vec::new();
            let mut requests = Vec::new();
            for j in &compile {
                let r = JobRef {
                    job: j.id,
                    attempt: j.attempt,
                };
                let mut claimed = j.clone();
                claimed.attempt -= 1;
                self.add_to_compile_requests(&mut requests, &claimed, r)
                    .await?;
                // As if just claimed: its compile result may chain its eval dispatch.
                self.compiling.insert(j.id, claimed);
            }
            outgoing.extend(self.compile_outgoing(&session, requests));
            let mut items = Vec::new();
            for j in &eval {
                let Some(artifact) = j.artifact.clone() else {
                    tracing::warn!(job = %j.id, "job queued for eval has no artifact");
                    continue;
                };
                items.push(self.eval_item_at(j, j.attempt, artifact).await?);
            }
            outgoing.extend(self.eval_outgoing(&session, items));
            confirmed += self.send(outgoing).await;
        }
        Ok(confirmed)
    }

    /// Adds job `r` (claimed as `j`) to the compile request of its build, the last one if it is
    /// for the same build and step, or a new one.
    pub(crate) async fn add_to_compile_requests(
        &mut self,
        requests: &mut Vec<CompileRequest>,
        j: &Job,
        r: JobRef,
    ) -> Result<(), ActorError> {
        match requests.last_mut() {
            Some(req) if req.build_key == j.build_key && req.step == j.compile_step => {
                req.jobs.push(r)
            }
            _ => requests.push(CompileRequest {
                session: j.session,
                step: j.compile_step,
                build_key: j.build_key.clone(),
                config_params: self.config(j.config).await?.params,
                compile_params: j.compile_params.clone(),
                jobs: vec![r],
            }),
        }
        Ok(())
    }

    /// Compile requests as [`Outgoing`], noting each build as out.
    pub(crate) fn compile_outgoing(
        &mut self,
        session: &Session,
        requests: Vec<CompileRequest>,
    ) -> Vec<Outgoing> {
        let building = &mut self.building;
        requests
            .into_iter()
            .filter(|req| !req.jobs.is_empty())
            .map(|req| {
                building.insert((session.id, req.build_key.clone()));
                tracing::debug!(jobs = req.jobs.len(), build = %req.build_key, "compile request");
                Outgoing {
                    queue: self
                        .bus
                        .namespace()
                        .compile_queue(req.step, &session.info.arch),
                    jobs: req.jobs.clone(),
                    message: Message::Compile(req),
                }
            })
            .collect()
    }

    /// Eval requests, one step per request, each of the step's shaped batch of items
    /// ([`super::shape`]), the items of one artifact together, as [`Outgoing`].
    pub(crate) fn eval_outgoing(
        &self,
        session: &Session,
        items: Vec<(Step, EvalItem)>,
    ) -> Vec<Outgoing> {
        let mut by_step: HashMap<Step, Vec<EvalItem>> = HashMap::new();
        let mut order = Vec::new();
        for (step, item) in items {
            by_step
                .entry(step)
                .or_insert_with(|| {
                    order.push(step);
                    Vec::new()
                })
                .push(item);
        }
        let mut out = Vec::new();
        for step in order {
            let mut items = by_step.remove(&step).unwrap_or_default();
            // One artifact's items side by side: a request then fetches and loads fewer.
            items.sort_by(|a, b| a.artifact.cmp(&b.artifact));
            let queue =
                self.bus
                    .namespace()
                    .eval_queue(step, &session.info.arch, session.info.num_cu);
            for chunk in items.chunks(self.eval_batch(session.id, step)) {
                out.push(Outgoing {
                    queue: queue.clone(),
                    jobs: chunk.iter().map(|i| i.job).collect(),
                    message: Message::Eval(EvalRequest {
                        session: session.id,
                        step,
                        items: chunk.to_vec(),
                    }),
                });
            }
        }
        out
    }

    /// The eval request item of job `j` for its queued `attempt`.
    pub(crate) async fn eval_item_at(
        &mut self,
        j: &Job,
        attempt: u32,
        artifact: String,
    ) -> Result<(Step, EvalItem), ActorError> {
        let config = self.config(j.config).await?;
        Ok((
            j.eval_step,
            EvalItem {
                job: JobRef { job: j.id, attempt },
                config: j.config,
                config_params: config.params,
                compile_params: j.compile_params.clone(),
                run_params: j.run_params.clone(),
                artifact,
            },
        ))
    }
}

/// When the sender next looks at the outbox: at once on start, then every second.
pub(crate) struct OwedSweep {
    next_ms: i64,
    started: bool,
}

impl OwedSweep {
    pub(crate) fn new() -> Self {
        OwedSweep {
            next_ms: 0,
            started: false,
        }
    }

    /// The `before_ms` to sweep with now, if a sweep is due: everything on the first sweep
    /// (what a previous Scheduler left), then what is older than [`OWED_GRACE`].
    pub(crate) fn due(&mut self, now: i64) -> Option<i64> {
        if now < self.next_ms {
            return None;
        }
        self.next_ms = now + 1_000;
        if !self.started {
            self.started = true;
            return Some(i64::MAX);
        }
        Some(now - OWED_GRACE.as_millis() as i64)
    }
}
