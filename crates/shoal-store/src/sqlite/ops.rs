//! The store's operations as plain synchronous functions on a `rusqlite::Connection`.
//!
//! [`super::SqliteStore`] runs each of them on tokio's blocking pool while holding the connection
//! lock; keeping them free of async and of the lock makes each one a straight transaction that
//! reads top to bottom. Every write that touches more than one row runs in one `IMMEDIATE`
//! transaction: it takes the write lock up front, so a second process on the same file waits on
//! `busy_timeout` instead of failing half-way with `SQLITE_BUSY` on lock upgrade.

use std::collections::BTreeMap;

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use shoal_model::message::JobRef;
use shoal_model::{
    Config, ConfigId, FinalResult, Job, JobId, JobState, NewConfig, NewJob, NewSession, NewSolver,
    ResultRow, Session, SessionId, Solver, SolverId, Transition,
};

use super::queries as q;
use super::rows::{self, outcome_columns, to_json};
use crate::encoding::{build_columns, decode_build, decode_state_counts, timestamps, RowWrite};
use crate::{Batch, BuildRecord, Change, Result, StoreError};

/// Adds what was being done to a rusqlite error.
pub(crate) trait Ctx<T> {
    fn ctx(self, what: &str) -> Result<T>;
}

impl<T> Ctx<T> for rusqlite::Result<T> {
    fn ctx(self, what: &str) -> Result<T> {
        self.map_err(|e| StoreError::backend(what, e))
    }
}

fn begin<'c>(conn: &'c mut Connection, what: &str) -> Result<rusqlite::Transaction<'c>> {
    conn.transaction_with_behavior(TransactionBehavior::Immediate)
        .ctx(what)
}

/// The in-flight state names, bound into `IN (...)`; derived from the model so the store never
/// disagrees with the state machine about what "in flight" means.
fn in_flight_states() -> [&'static str; 4] {
    let mut names = JobState::ALL
        .into_iter()
        .filter(|s| s.is_in_flight())
        .map(JobState::as_str);
    let mut next = || names.next().expect("four in-flight states");
    [next(), next(), next(), next()]
}

pub(crate) fn create_session(conn: &Connection, s: &NewSession, now: i64) -> Result<SessionId> {
    let what = "creating a session";
    conn.prepare_cached(q::INSERT_SESSION)
        .and_then(|mut st| {
            st.execute(params![
                s.reason,
                s.arch,
                s.num_cu,
                s.backend.as_str(),
                s.spec,
                s.spec_path,
                s.library_version,
                s.driver_version,
                s.max_retries,
                now
            ])
        })
        .ctx(what)?;
    Ok(SessionId(conn.last_insert_rowid()))
}

pub(crate) fn session(conn: &Connection, id: SessionId) -> Result<Option<Session>> {
    conn.prepare_cached(q::SESSION)
        .and_then(|mut st| st.query_row([id.0], rows::session).optional())
        .ctx("reading a session")
}

pub(crate) fn sessions(conn: &Connection) -> Result<Vec<Session>> {
    conn.prepare_cached(q::SESSIONS)
        .and_then(|mut st| st.query_map([], rows::session)?.collect())
        .ctx("listing sessions")
}

pub(crate) fn find_session(conn: &Connection, s: &NewSession) -> Result<Option<Session>> {
    conn.prepare_cached(q::FIND_SESSION)
        .and_then(|mut st| {
            st.query_row(
                params![
                    s.reason,
                    s.arch,
                    s.num_cu,
                    s.backend.as_str(),
                    s.spec,
                    s.spec_path,
                    s.library_version,
                    s.driver_version,
                    s.max_retries
                ],
                rows::session,
            )
            .optional()
        })
        .ctx("finding a session")
}

pub(crate) fn upsert_configs(
    conn: &mut Connection,
    configs: &[NewConfig],
) -> Result<Vec<(ConfigId, bool)>> {
    let what = "upserting configs";
    let tx = begin(conn, what)?;
    let mut out = Vec::with_capacity(configs.len());
    {
        let mut insert = tx.prepare_cached(q::INSERT_CONFIG).ctx(what)?;
        let mut id_of = tx.prepare_cached(q::CONFIG_ID_BY_KEY).ctx(what)?;
        let mut tag = tx.prepare_cached(q::INSERT_CONFIG_TAG).ctx(what)?;
        for c in configs {
            let params = to_json("config params", &c.params)?;
            let created = insert.execute(params![c.kind, c.key, params]).ctx(what)? == 1;
            let id: i64 = id_of.query_row([&c.key], |r| r.get(0)).ctx(what)?;
            for t in &c.tags {
                tag.execute(params![id, t]).ctx(what)?;
            }
            out.push((ConfigId(id), created));
        }
    }
    tx.commit().ctx(what)?;
    Ok(out)
}

pub(crate) fn config(conn: &Connection, id: ConfigId) -> Result<Option<Config>> {
    conn.prepare_cached(q::CONFIG)
        .and_then(|mut st| st.query_row([id.0], rows::config).optional())
        .ctx("reading a config")
}

pub(crate) fn configs_with_tag(conn: &Connection, tag: &str) -> Result<Vec<Config>> {
    conn.prepare_cached(q::CONFIGS_WITH_TAG)
        .and_then(|mut st| st.query_map([tag], rows::config)?.collect())
        .ctx("listing configs by tag")
}

pub(crate) fn upsert_solvers(conn: &mut Connection, solvers: &[NewSolver]) -> Result<Vec<Solver>> {
    let what = "upserting solvers";
    let tx = begin(conn, what)?;
    let mut out = Vec::with_capacity(solvers.len());
    {
        let mut insert = tx.prepare_cached(q::INSERT_SOLVER).ctx(what)?;
        let mut by_name = tx.prepare_cached(q::SOLVER_BY_NAME).ctx(what)?;
        for s in solvers {
            insert.execute(params![s.name, s.tunable]).ctx(what)?;
            out.push(by_name.query_row([&s.name], rows::solver).ctx(what)?);
        }
    }
    tx.commit().ctx(what)?;
    Ok(out)
}

pub(crate) fn solvers(conn: &Connection) -> Result<Vec<Solver>> {
    conn.prepare_cached(q::SOLVERS)
        .and_then(|mut st| st.query_map([], rows::solver)?.collect())
        .ctx("listing solvers")
}

pub(crate) fn set_applicability(
    conn: &mut Connection,
    session: SessionId,
    rows: &[(ConfigId, SolverId, bool)],
    now: i64,
) -> Result<()> {
    let what = "recording applicability";
    let tx = begin(conn, what)?;
    {
        let mut upsert = tx.prepare_cached(q::UPSERT_APPLICABILITY).ctx(what)?;
        for (config, solver, applicable) in rows {
            upsert
                .execute(params![session.0, config.0, solver.0, applicable, now])
                .ctx(what)?;
        }
    }
    tx.commit().ctx(what)
}

pub(crate) fn applicable_solvers(
    conn: &Connection,
    session: SessionId,
    config: ConfigId,
) -> Result<Vec<SolverId>> {
    conn.prepare_cached(q::APPLICABLE_SOLVERS)
        .and_then(|mut st| {
            st.query_map(params![session.0, config.0], |r| Ok(SolverId(r.get(0)?)))?
                .collect()
        })
        .ctx("reading applicability")
}

pub(crate) fn insert_jobs(conn: &mut Connection, jobs: &[NewJob], now: i64) -> Result<u64> {
    let what = "inserting jobs";
    let tx = begin(conn, what)?;
    let mut created = 0u64;
    {
        let mut insert = tx.prepare_cached(q::INSERT_JOB).ctx(what)?;
        for j in jobs {
            let n = insert
                .execute(params![
                    j.session.0,
                    j.config.0,
                    j.solver.0,
                    j.compile_step.as_str(),
                    j.eval_step.as_str(),
                    to_json("compile params", &j.compile_params)?,
                    to_json("run params", &j.run_params)?,
                    j.candidate_key(),
                    j.build_key,
                    if j.held {
                        JobState::Held
                    } else {
                        JobState::New
                    }
                    .as_str(),
                    now
                ])
                .ctx(what)?;
            created += n as u64;
        }
    }
    tx.commit().ctx(what)?;
    Ok(created)
}

pub(crate) fn job(conn: &Connection, id: JobId) -> Result<Option<Job>> {
    conn.prepare_cached(q::JOB)
        .and_then(|mut st| st.query_row([id.0], rows::job).optional())
        .ctx("reading a job")
}

pub(crate) fn job_progress(conn: &Connection, id: JobId) -> Result<Option<(JobState, u32)>> {
    conn.prepare_cached(q::JOB_PROGRESS)
        .and_then(|mut st| {
            st.query_row([id.0], |r| Ok((rows::parsed(r, 0)?, r.get(1)?)))
                .optional()
        })
        .ctx("reading a job's state")
}

pub(crate) fn jobs_in_state(
    conn: &Connection,
    session: SessionId,
    state: JobState,
    limit: u32,
) -> Result<Vec<Job>> {
    let what = "listing jobs by state";
    conn.prepare_cached(q::JOBS_IN_STATE)
        .and_then(|mut st| {
            st.query_map(params![session.0, state.as_str(), limit], rows::job)?
                .collect()
        })
        .ctx(what)
}

pub(crate) fn in_flight(conn: &Connection, session: SessionId) -> Result<Vec<Job>> {
    let [a, b, c, d] = in_flight_states();
    conn.prepare_cached(q::IN_FLIGHT)
        .and_then(|mut st| {
            st.query_map(params![session.0, a, b, c, d], rows::job)?
                .collect()
        })
        .ctx("listing in-flight jobs")
}

pub(crate) fn expired_leases(conn: &Connection, now_ms: i64, limit: u32) -> Result<Vec<Job>> {
    let [a, b, c, d] = in_flight_states();
    conn.prepare_cached(q::EXPIRED_LEASES)
        .and_then(|mut st| {
            st.query_map(params![a, b, c, d, now_ms, limit], rows::job)?
                .collect()
        })
        .ctx("listing expired leases")
}

pub(crate) fn extend_leases(conn: &Connection, by_ms: i64, changed_before_ms: i64) -> Result<u64> {
    let [a, b, c, d] = in_flight_states();
    conn.prepare_cached(q::EXTEND_LEASES)
        .and_then(|mut st| st.execute(params![by_ms, a, b, c, d, changed_before_ms]))
        .map(|n| n as u64)
        .ctx("extending leases after an outage")
}

pub(crate) fn renew_leases(conn: &mut Connection, renewals: &[crate::LeaseRenewal]) -> Result<u64> {
    let what = "renewing leases";
    let tx = begin(conn, what)?;
    let mut renewed = 0;
    {
        let mut st = tx.prepare_cached(q::RENEW_LEASE).ctx(what)?;
        for r in renewals {
            renewed += st
                .execute(params![
                    r.deadline_ms,
                    r.job.job.0,
                    r.state.as_str(),
                    r.job.attempt
                ])
                .ctx(what)? as u64;
        }
    }
    tx.commit().ctx(what)?;
    Ok(renewed)
}

pub(crate) fn unsent(conn: &Connection, before_ms: i64, limit: u32) -> Result<Vec<Job>> {
    conn.prepare_cached(q::UNSENT)
        .and_then(|mut st| {
            st.query_map(params![before_ms, limit], rows::job)?
                .collect()
        })
        .ctx("reading the outbox")
}

pub(crate) fn mark_sent(conn: &mut Connection, sent: &[JobRef]) -> Result<()> {
    let what = "clearing sent requests from the outbox";
    let tx = begin(conn, what)?;
    {
        let mut st = tx.prepare_cached(q::OUTBOX_SENT).ctx(what)?;
        for r in sent {
            st.execute(params![r.job.0, r.attempt]).ctx(what)?;
        }
    }
    tx.commit().ctx(what)
}

pub(crate) fn state_counts(
    conn: &Connection,
    session: SessionId,
) -> Result<BTreeMap<JobState, u64>> {
    let what = "counting jobs by state";
    let mut st = conn.prepare_cached(q::STATE_COUNTS).ctx(what)?;
    let pairs = st
        .query_map([session.0], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
        })
        .and_then(|it| it.collect::<rusqlite::Result<Vec<_>>>())
        .ctx(what)?;
    decode_state_counts(pairs)
}

fn insert_result(st: &mut rusqlite::CachedStatement<'_>, r: &ResultRow) -> Result<()> {
    let o = outcome_columns(&r.outcome)?;
    st.execute(params![
        r.job.0,
        r.session.0,
        r.attempt,
        o.status,
        o.time_us,
        o.samples,
        o.workspace,
        o.detail,
        r.worker,
        r.device,
        r.created_ms
    ])
    .ctx("recording a result")?;
    Ok(())
}

/// Whether `next` can only apply if `prev` did, and then surely does: the same job, the state
/// `prev` leaves it in, the attempt `prev` leaves it at. Such a chain is written as one UPDATE.
fn continues(prev: &Transition, next: &Transition) -> bool {
    next.job == prev.job && next.from == prev.to && next.attempt == prev.next_attempt()
}

/// The row a chain of transitions of one job leaves behind, as the parameters of `CAS_UPDATE`:
/// applying them one after the other sets what the last one sets, keeps the last artifact
/// given, counts every retry and stamps the time of every state entered. The compare-and-set is
/// the first one's, since each later one holds exactly when the one before applied.
struct Fused<'a> {
    row: RowWrite<'a>,
    ts: [Option<i64>; 6],
}

impl<'a> Fused<'a> {
    fn of(chain: &'a [Change], now: i64) -> Fused<'a> {
        let (first, rest) = chain.split_first().expect("a chain has a first change");
        let mut f = Fused {
            row: RowWrite::of(&first.transition),
            ts: timestamps(first.transition.to, now),
        };
        for c in rest {
            let t = &c.transition;
            f.row = f.row.then(t);
            for (slot, v) in f.ts.iter_mut().zip(timestamps(t.to, now)) {
                *slot = v.or(*slot);
            }
        }
        f
    }
}

/// Applies the changes in order, each a compare-and-set. A run of changes of one job that
/// continue each other ([`continues`]) — a compile result and the eval dispatch that follows it
/// in the same batch — is one UPDATE guarded by the first change's (state, attempt), with the
/// same outcome as applying them one by one: all apply if the first does. If the first does
/// not, the rest are tried again from the second, exactly as one by one.
pub(crate) fn apply(conn: &mut Connection, batch: &Batch, now: i64) -> Result<Vec<bool>> {
    batch.validate()?;
    let what = "applying a batch";
    let tx = begin(conn, what)?;
    let changes = &batch.changes;
    let mut applied = Vec::with_capacity(changes.len());
    {
        let mut cas = tx.prepare_cached(q::CAS_UPDATE).ctx(what)?;
        let mut result = tx.prepare_cached(q::INSERT_RESULT).ctx(what)?;
        let mut i = 0;
        while i < changes.len() {
            let mut end = i + 1;
            while end < changes.len()
                && continues(&changes[end - 1].transition, &changes[end].transition)
            {
                end += 1;
            }
            let chain = &changes[i..end];
            let f = Fused::of(chain, now);
            let first = &chain[0].transition;
            let [ts0, ts1, ts2, ts3, ts4, ts5] = f.ts;
            let row = f.row;
            let (kind, error) = row.failure.map(|(k, e)| (k.as_str(), e)).unzip();
            let rows = cas
                .execute(params![
                    row.to.as_str(),
                    row.attempt,
                    row.retries,
                    row.lease_deadline_ms,
                    row.worker,
                    row.artifact,
                    kind,
                    error,
                    now,
                    ts0,
                    ts1,
                    ts2,
                    ts3,
                    ts4,
                    ts5,
                    first.job.0,
                    first.from.as_str(),
                    first.attempt
                ])
                .ctx(what)?;
            if rows == 1 {
                for c in chain {
                    if let Some(r) = &c.result {
                        insert_result(&mut result, r)?;
                    }
                    applied.push(true);
                }
                i = end;
            } else {
                applied.push(false);
                i += 1;
            }
        }
        let mut build = tx.prepare_cached(q::UPSERT_BUILD).ctx(what)?;
        for b in &batch.builds {
            let (artifact, kind, detail) = build_columns(b);
            build
                .execute(params![b.session.0, b.build_key, artifact, kind, detail])
                .ctx("recording a build")?;
        }
        let effect = crate::outbox::outbox_effect(changes, &applied);
        let mut settle = tx.prepare_cached(q::OUTBOX_SETTLE).ctx(what)?;
        for job in &effect.settled {
            settle.execute(params![job.0]).ctx(what)?;
        }
        let mut owe = tx.prepare_cached(q::OUTBOX_OWE).ctx(what)?;
        for r in &effect.owed {
            owe.execute(params![r.job.0, r.attempt, now]).ctx(what)?;
        }
    }
    tx.commit().ctx(what)?;
    Ok(applied)
}

pub(crate) fn builds(
    conn: &Connection,
    session: SessionId,
    keys: &[String],
) -> Result<Vec<BuildRecord>> {
    let what = "reading builds";
    let mut st = conn.prepare_cached(q::BUILD).ctx(what)?;
    let mut out = Vec::new();
    for key in keys {
        let row = st
            .query_row(params![session.0, key], |r| {
                Ok((
                    r.get::<_, Option<String>>(0)?,
                    r.get::<_, Option<String>>(1)?,
                    r.get::<_, Option<String>>(2)?,
                ))
            })
            .optional()
            .ctx(what)?;
        let Some((artifact, kind, detail)) = row else {
            continue;
        };
        let result = decode_build(session, key, artifact, kind, detail)?;
        out.push(BuildRecord {
            session,
            build_key: key.clone(),
            result,
        });
    }
    Ok(out)
}

pub(crate) fn put_artifact(conn: &Connection, hash: &str, bytes: &[u8], now: i64) -> Result<bool> {
    let size = rows::to_i64("artifact size", bytes.len() as u64)?;
    let n = conn
        .prepare_cached(q::INSERT_ARTIFACT)
        .and_then(|mut st| st.execute(params![hash, bytes, size, now]))
        .ctx("storing an artifact")?;
    Ok(n == 1)
}

pub(crate) fn artifact(conn: &Connection, hash: &str) -> Result<Option<Vec<u8>>> {
    conn.prepare_cached(q::ARTIFACT)
        .and_then(|mut st| st.query_row([hash], |r| r.get(0)).optional())
        .ctx("reading an artifact")
}

pub(crate) fn results(conn: &Connection, job: JobId) -> Result<Vec<ResultRow>> {
    conn.prepare_cached(q::RESULTS)
        .and_then(|mut st| st.query_map([job.0], rows::result)?.collect())
        .ctx("reading results")
}

pub(crate) fn final_results(conn: &Connection, session: SessionId) -> Result<Vec<FinalResult>> {
    conn.prepare_cached(q::FINAL_RESULTS)
        .and_then(|mut st| st.query_map([session.0], rows::final_result)?.collect())
        .ctx("reading final results")
}

// ---- presence ------------------------------------------------------------------------------

pub(crate) fn put_worker(conn: &Connection, w: &shoal_model::WorkerPresence) -> Result<()> {
    let what = "writing a worker's presence";
    let e = crate::presence::encode(w)?;
    conn.prepare_cached(&crate::presence::UPSERT_SQLITE)
        .and_then(|mut st| {
            st.execute(params![
                w.id,
                w.host,
                w.pid,
                w.version,
                e.roles,
                e.devices,
                e.jobs,
                w.heartbeat_ms,
                w.started_ms,
                w.last_seen_ms,
                w.stopped_ms
            ])
        })
        .ctx(what)?;
    Ok(())
}

pub(crate) fn workers(conn: &Connection) -> Result<Vec<shoal_model::WorkerPresence>> {
    let raw: Vec<crate::presence::Raw> = conn
        .prepare_cached(crate::presence::SELECT_ALL)
        .and_then(|mut st| {
            st.query_map([], |r| {
                Ok(crate::presence::Raw {
                    id: r.get(0)?,
                    host: r.get(1)?,
                    pid: r.get(2)?,
                    version: r.get(3)?,
                    roles: r.get(4)?,
                    devices: r.get(5)?,
                    jobs: r.get(6)?,
                    heartbeat_ms: r.get(7)?,
                    started_ms: r.get(8)?,
                    last_seen_ms: r.get(9)?,
                    stopped_ms: r.get(10)?,
                })
            })?
            .collect()
        })
        .ctx("listing workers")?;
    raw.into_iter().map(crate::presence::decode).collect()
}
