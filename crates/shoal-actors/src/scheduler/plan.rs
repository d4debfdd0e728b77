//! What the Scheduler writes for each reply, as pure functions from a reply to store changes.
//!
//! A worker does not know whether its "started" notice was applied before its result arrives,
//! so a result is expressed as two compare-and-sets, one from each possible state (queued and
//! started). They exclude each other: at most one matches, and neither matches a stale attempt.

use shoal_model::message::{CompileReply, EvalReply, Phase, ReplyBody};
use shoal_model::{FailureKind, JobRef, JobState, Outcome, ResultRow, SessionId, Transition};
use shoal_store::{BuildRecord, Change, LeaseRenewal};

/// Changes for one reply, plus the build it recorded (if a compile).
#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    pub changes: Vec<Change>,
    pub builds: Vec<BuildRecord>,
}

/// Lease deadlines to give jobs whose work has started.
#[derive(Clone, Copy, Debug)]
pub struct Leases {
    pub compile_started_ms: i64,
    pub eval_started_ms: i64,
}

fn queued_and_started(phase: Phase) -> (JobState, JobState) {
    match phase {
        Phase::Compile => (JobState::CompileQueued, JobState::Compiling),
        Phase::Eval => (JobState::EvalQueued, JobState::Evaluating),
    }
}

/// Both compare-and-sets (from queued, from started) for a move to `to`, built by `f`.
fn from_either(
    phase: Phase,
    r: JobRef,
    to: JobState,
    f: impl Fn(Transition) -> Transition,
    result: Option<ResultRow>,
) -> [Change; 2] {
    let (queued, started) = queued_and_started(phase);
    let mk = |from: JobState| Change {
        transition: f(Transition::new(r.job, from, r.attempt, to)
            .expect("queued/started → terminal or retry are edges")),
        result: result.clone(),
    };
    [mk(started), mk(queued)]
}

/// Longest worker or device name, artifact hash or build key a reply may carry.
const MAX_NAME: usize = 256;

/// A value no honest worker sends, found by [`check_reply`].
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum ImpossibleReply {
    #[error("{what} is not a name: {bytes} bytes")]
    NotAName { what: &'static str, bytes: usize },
    #[error("it names no job")]
    NoJob,
    #[error("it carries no outcome")]
    NoOutcome,
    #[error("artifact hash `{0}` is not a hash")]
    NotAHash(String),
    #[error("job {job} measured {time_us} us: a time must be finite and positive")]
    BadTime {
        job: shoal_model::JobId,
        time_us: f64,
    },
    #[error("job {job} has a sample of {sample_us} us: samples must be finite and not negative")]
    BadSample {
        job: shoal_model::JobId,
        sample_us: f64,
    },
}

/// What no honest worker sends: checked before a reply is planned, so that a reply with an
/// impossible value is refused alone, with this reason, and never reaches the store. (Whether
/// the sender may send at all is the envelope's signature; this is about the values.)
pub fn check_reply(reply: &ReplyBody) -> Result<(), ImpossibleReply> {
    let name = |what: &'static str, s: &str| {
        if s.len() > MAX_NAME || s.chars().any(char::is_control) {
            Err(ImpossibleReply::NotAName {
                what,
                bytes: s.len(),
            })
        } else {
            Ok(())
        }
    };
    let some_jobs = |jobs: &[JobRef]| {
        if jobs.is_empty() {
            Err(ImpossibleReply::NoJob)
        } else {
            Ok(())
        }
    };
    match reply {
        ReplyBody::Started { jobs, worker, .. } => {
            some_jobs(jobs)?;
            name("worker", worker)
        }
        ReplyBody::HandedBack { jobs, worker, .. } => {
            some_jobs(jobs)?;
            name("worker", worker)
        }
        ReplyBody::Heartbeat { jobs, worker, .. } => {
            some_jobs(jobs)?;
            name("worker", worker)
        }
        ReplyBody::Compiled(c) => {
            some_jobs(&c.jobs)?;
            name("worker", &c.worker)?;
            name("build key", &c.build_key)?;
            match &c.result {
                Ok(hash) if hash.is_empty() || hash.chars().any(char::is_whitespace) => {
                    Err(ImpossibleReply::NotAHash(hash.escape_debug().to_string()))
                }
                Ok(hash) => name("artifact hash", hash),
                Err(_) => Ok(()),
            }
        }
        ReplyBody::Evaluated(e) => {
            if e.outcomes.is_empty() {
                return Err(ImpossibleReply::NoOutcome);
            }
            name("worker", &e.worker)?;
            name("device", &e.device)?;
            for (r, outcome) in &e.outcomes {
                if let Outcome::Measured(m) = outcome {
                    if !(m.time_us.is_finite() && m.time_us > 0.0) {
                        return Err(ImpossibleReply::BadTime {
                            job: r.job,
                            time_us: m.time_us,
                        });
                    }
                    if let Some(bad) = m.samples_us.iter().find(|s| !(s.is_finite() && **s >= 0.0))
                    {
                        return Err(ImpossibleReply::BadSample {
                            job: r.job,
                            sample_us: *bad,
                        });
                    }
                }
            }
            Ok(())
        }
    }
}

/// Turns one reply into store changes. `now_ms` stamps result rows.
pub fn plan_reply(reply: &ReplyBody, leases: Leases, now_ms: i64) -> Plan {
    let mut plan = Plan::default();
    match reply {
        ReplyBody::Started {
            phase,
            jobs,
            worker,
            ..
        } => plan.changes = started_changes(*phase, jobs, worker, leases),
        ReplyBody::Compiled(c) => plan = compiled_plan(c, now_ms),
        ReplyBody::Evaluated(e) => plan.changes = evaluated_changes(e, now_ms),
        ReplyBody::HandedBack {
            phase,
            jobs,
            reason,
            count_retry,
            worker,
            ..
        } => {
            for r in jobs {
                // The worker rides along: only the lease holder's hand-back applies.
                plan.changes
                    .extend(hand_back(*phase, *r, reason, *count_retry).map(|mut c| {
                        c.transition.worker = Some(worker.clone());
                        c
                    }));
            }
        }
        // Not a state change: see `renewals`.
        ReplyBody::Heartbeat { .. } => {}
    }
    plan
}

/// A started notice: each job it names moves from queued to started, at the same attempt,
/// with the running lease of its phase and the worker that holds it.
fn started_changes(phase: Phase, jobs: &[JobRef], worker: &str, leases: Leases) -> Vec<Change> {
    let (queued, started) = queued_and_started(phase);
    let deadline = match phase {
        Phase::Compile => leases.compile_started_ms,
        Phase::Eval => leases.eval_started_ms,
    };
    jobs.iter()
        .map(|r| {
            Transition::new(r.job, queued, r.attempt, started)
                .expect("queued → started is an edge")
                .with_lease(deadline)
                .with_worker(worker.to_string())
                .into()
        })
        .collect()
}

/// A compile result: the build's record, when it is a verdict on the build, and each job's move
/// to compiled (or its failure).
fn compiled_plan(c: &CompileReply, now_ms: i64) -> Plan {
    let mut plan = Plan::default();
    // A build's record is reused by every later job of its key, so only a verdict on the build
    // itself is recorded: an artifact, or a fault of the tuned code. A failure of the machinery
    // (a store that was unreachable, a compiler missing on one host) says nothing about the
    // build; its jobs are retried, within their bound.
    let verdict = match &c.result {
        Ok(_) => true,
        Err((kind, _)) => kind.is_candidate_fault(),
    };
    if verdict {
        plan.builds.push(BuildRecord {
            session: c.session,
            build_key: c.build_key.clone(),
            result: c.result.clone(),
        });
    }
    for r in &c.jobs {
        match &c.result {
            Ok(hash) => plan.changes.extend(from_either(
                Phase::Compile,
                *r,
                JobState::Compiled,
                |t| t.with_artifact(hash.clone()).with_worker(c.worker.clone()),
                None,
            )),
            Err((kind, detail)) => plan.changes.extend(failure_changes(
                Phase::Compile,
                c.session,
                *r,
                *kind,
                detail,
                &c.worker,
                "",
                now_ms,
            )),
        }
    }
    plan
}

/// An eval result: each job's move to evaluated with its measurement, or its failure.
fn evaluated_changes(e: &EvalReply, now_ms: i64) -> Vec<Change> {
    let mut changes = Vec::new();
    for (r, outcome) in &e.outcomes {
        match outcome {
            Outcome::Measured(_) => {
                let row = ResultRow {
                    job: r.job,
                    session: e.session,
                    attempt: r.attempt,
                    outcome: outcome.clone(),
                    worker: e.worker.clone(),
                    device: e.device.clone(),
                    created_ms: now_ms,
                };
                changes.extend(from_either(
                    Phase::Eval,
                    *r,
                    JobState::Evaluated,
                    |t| t.with_worker(e.worker.clone()),
                    Some(row),
                ));
            }
            Outcome::Failed { kind, detail } => {
                changes.extend(failure_changes(
                    Phase::Eval,
                    e.session,
                    *r,
                    *kind,
                    detail,
                    &e.worker,
                    &e.device,
                    now_ms,
                ));
            }
        }
    }
    changes
}

/// The leases a heartbeat renews: each job it names, if its work is still running at that
/// attempt, keeps running until `deadline_ms`.
pub fn renewals(reply: &ReplyBody, deadline_ms: i64) -> Vec<LeaseRenewal> {
    let ReplyBody::Heartbeat { phase, jobs, .. } = reply else {
        return Vec::new();
    };
    let (_, started) = queued_and_started(*phase);
    jobs.iter()
        .map(|&job| LeaseRenewal {
            job,
            state: started,
            deadline_ms,
        })
        .collect()
}

/// A failure: a candidate fault is final (→ errored, with a result row saying what happened);
/// an infrastructure failure hands the job back to be tried again, counted against its bound.
#[allow(clippy::too_many_arguments)]
fn failure_changes(
    phase: Phase,
    session: SessionId,
    r: JobRef,
    kind: FailureKind,
    detail: &str,
    worker: &str,
    device: &str,
    now_ms: i64,
) -> Vec<Change> {
    if !kind.is_candidate_fault() {
        // The worker rides along so that only the lease holder's failure hands the job back.
        return hand_back(phase, r, detail, true)
            .map(|mut c| {
                c.transition.worker = Some(worker.to_string());
                c
            })
            .to_vec();
    }
    let row = ResultRow {
        job: r.job,
        session,
        attempt: r.attempt,
        outcome: Outcome::failed(kind, detail),
        worker: worker.to_string(),
        device: device.to_string(),
        created_ms: now_ms,
    };
    from_either(
        phase,
        r,
        JobState::Errored,
        |t| t.with_failure(kind, detail).with_worker(worker.to_string()),
        Some(row),
    )
    .to_vec()
}

/// Back to the start of the phase, lease cleared.
fn hand_back(phase: Phase, r: JobRef, reason: &str, count_retry: bool) -> [Change; 2] {
    let (queued, _) = queued_and_started(phase);
    let to = queued
        .retry_state()
        .expect("queued states have a retry state");
    from_either(
        phase,
        r,
        to,
        |t| {
            let mut t = t;
            t.count_retry = count_retry;
            t.failure = Some((FailureKind::Infrastructure, reason.to_string()));
            t
        },
        None,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_model::message::{CompileReply, EvalReply};
    use shoal_model::{JobId, Measurement};

    const LEASES: Leases = Leases {
        compile_started_ms: 1_000,
        eval_started_ms: 2_000,
    };

    fn r(job: i64, attempt: u32) -> JobRef {
        JobRef {
            job: JobId(job),
            attempt,
        }
    }

    #[test]
    fn a_result_is_two_exclusive_compare_and_sets() {
        let reply = ReplyBody::Evaluated(EvalReply {
            session: SessionId(1),
            step: shoal_model::Step::NoopRun,
            outcomes: vec![(
                r(5, 2),
                Outcome::Measured(Measurement {
                    time_us: 3.0,
                    samples_us: vec![3.0],
                    workspace: 0,
                    details: Default::default(),
                }),
            )],
            worker: "w".into(),
            device: "cpu".into(),
            busy_us: 0,
        });
        let plan = plan_reply(&reply, LEASES, 7);
        assert_eq!(plan.changes.len(), 2);
        let froms: Vec<_> = plan.changes.iter().map(|c| c.transition.from).collect();
        assert_eq!(froms, vec![JobState::Evaluating, JobState::EvalQueued]);
        assert!(plan.changes.iter().all(|c| c.transition.attempt == 2
            && c.transition.to == JobState::Evaluated
            && c.result.as_ref().unwrap().attempt == 2));
    }

    #[test]
    fn a_build_failure_is_final_and_recorded_for_every_job_that_shared_it() {
        let reply = ReplyBody::Compiled(CompileReply {
            session: SessionId(1),
            jobs: vec![r(1, 1), r(2, 1)],
            build_key: "k".into(),
            result: Err((FailureKind::BuildFailed, "error: x".into())),
            worker: "w".into(),
            duration_ms: 5,
        });
        let plan = plan_reply(&reply, LEASES, 7);
        assert_eq!(plan.builds.len(), 1);
        assert_eq!(plan.changes.len(), 4);
        for c in &plan.changes {
            assert_eq!(c.transition.to, JobState::Errored);
            assert_eq!(
                c.transition.failure.as_ref().unwrap().0,
                FailureKind::BuildFailed
            );
            assert!(c.result.is_some());
        }
    }

    #[test]
    fn infrastructure_failures_are_retried_not_final() {
        let reply = ReplyBody::Evaluated(EvalReply {
            session: SessionId(1),
            step: shoal_model::Step::NoopRun,
            outcomes: vec![(
                r(9, 4),
                Outcome::failed(FailureKind::Infrastructure, "artifact missing"),
            )],
            worker: "w".into(),
            device: "cpu".into(),
            busy_us: 0,
        });
        let plan = plan_reply(&reply, LEASES, 7);
        assert!(plan
            .changes
            .iter()
            .all(|c| c.transition.to == JobState::Compiled
                && c.transition.count_retry
                && c.result.is_none()));
    }

    #[test]
    fn an_infrastructure_failure_of_a_build_is_retried_and_never_recorded() {
        let reply = ReplyBody::Compiled(CompileReply {
            session: SessionId(1),
            jobs: vec![r(1, 1), r(2, 1)],
            build_key: "k".into(),
            result: Err((FailureKind::Infrastructure, "store unreachable".into())),
            worker: "w".into(),
            duration_ms: 5,
        });
        let plan = plan_reply(&reply, LEASES, 7);
        assert!(plan.builds.is_empty(), "no build record to reuse");
        assert!(plan.changes.iter().all(|c| c.transition.to == JobState::New
            && c.transition.count_retry
            && c.result.is_none()));
    }

    fn measured(time_us: f64, samples: Vec<f64>) -> ReplyBody {
        ReplyBody::Evaluated(EvalReply {
            session: SessionId(1),
            step: shoal_model::Step::NoopRun,
            outcomes: vec![(
                r(5, 2),
                Outcome::Measured(Measurement {
                    time_us,
                    samples_us: samples,
                    workspace: 0,
                    details: Default::default(),
                }),
            )],
            worker: "w".into(),
            device: "cpu".into(),
            busy_us: 0,
        })
    }

    #[test]
    fn impossible_replies_are_refused_with_a_reason() {
        assert_eq!(check_reply(&measured(3.0, vec![3.0])), Ok(()));
        for t in [-1.0, 0.0, f64::NAN, f64::INFINITY] {
            let err = check_reply(&measured(t, vec![3.0])).unwrap_err();
            assert!(matches!(err, ImpossibleReply::BadTime { .. }), "{t}: {err}");
            assert!(
                err.to_string().contains("finite and positive"),
                "{t}: {err}"
            );
        }
        assert!(check_reply(&measured(3.0, vec![f64::NAN])).is_err());
        let empty = ReplyBody::Started {
            session: SessionId(1),
            phase: Phase::Eval,
            jobs: vec![],
            worker: "w".into(),
        };
        assert_eq!(check_reply(&empty), Err(ImpossibleReply::NoJob));
        let odd = ReplyBody::Compiled(CompileReply {
            session: SessionId(1),
            jobs: vec![r(1, 1)],
            build_key: "k".into(),
            result: Ok("a b".into()),
            worker: "w".into(),
            duration_ms: 5,
        });
        assert!(check_reply(&odd).is_err());
    }

    #[test]
    fn a_heartbeat_renews_running_leases_and_changes_no_state() {
        let beat = |phase, jobs| ReplyBody::Heartbeat {
            session: SessionId(1),
            phase,
            jobs,
            worker: "w".into(),
        };
        let reply = beat(Phase::Eval, vec![r(3, 2), r(4, 2)]);
        assert_eq!(check_reply(&reply), Ok(()));
        assert!(plan_reply(&reply, LEASES, 7).changes.is_empty());
        let renewed = renewals(&reply, 99);
        assert_eq!(renewed.len(), 2);
        assert!(renewed
            .iter()
            .all(|l| l.state == JobState::Evaluating && l.deadline_ms == 99));
        assert_eq!(renewed[1].job, r(4, 2));
        let compile = renewals(&beat(Phase::Compile, vec![r(1, 1)]), 5);
        assert_eq!(compile[0].state, JobState::Compiling);
        assert!(check_reply(&beat(Phase::Compile, vec![])).is_err());
        // Other replies renew nothing.
        assert!(renewals(&measured(3.0, vec![3.0]), 99).is_empty());
    }

    #[test]
    fn started_renews_the_lease() {
        let reply = ReplyBody::Started {
            session: SessionId(1),
            phase: Phase::Eval,
            jobs: vec![r(3, 2)],
            worker: "w".into(),
        };
        let plan = plan_reply(&reply, LEASES, 7);
        assert_eq!(plan.changes.len(), 1);
        let t = &plan.changes[0].transition;
        assert_eq!((t.from, t.to), (JobState::EvalQueued, JobState::Evaluating));
        assert_eq!(t.lease_deadline_ms, Some(2_000));
    }
}
