//! The store's operations on one connection, each a straight sequence of statements.
//!
//! [`super::MysqlStore`] hands each a connection from its pool and retries the whole operation
//! when the connection broke (or InnoDB chose it as a deadlock victim) before a commit was
//! sent; so every write here runs inside an explicit transaction, and a retried operation starts
//! from nothing.
//!
//! Many-row writes run one statement text over many parameter rows ([`Ctx::bulk`]): on MariaDB
//! that is `COM_STMT_BULK_EXECUTE`, one round trip for the lot, executed row by row in order;
//! on MySQL (which lacks it) one round trip per row. Compare-and-sets that share their new
//! values are grouped into one `UPDATE … WHERE id IN (…)` (`apply::write_updates`), which the
//! server runs in about half the time of the same rows executed one by one.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Params, Row, Transaction, TxOpts, Value};
use shoal_model::{
    Config, ConfigId, FinalResult, Job, JobId, JobState, NewConfig, NewSession, NewSolver,
    ResultRow, Session, SessionId, Solver, SolverId,
};

use super::queries as q;
use super::rows::{self, get, int, text, to_json};
use super::OpError;
use crate::encoding::{decode_build, decode_state_counts};
use crate::{BuildRecord, StoreError};

pub(super) type OpResult<T> = std::result::Result<T, OpError>;

/// How a connection's many-row writes are sent.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ctx {
    /// The server executes `COM_STMT_BULK_EXECUTE` (MariaDB ≥ 10.2), which `exec_batch` uses.
    pub bulk: bool,
}

/// Bytes of parameters per bulk request: far under any `max_allowed_packet`, so mysql_async
/// never splits one call into several requests (the affected-row count is of the last one).
const BULK_BYTES: usize = 1 << 20;

fn value_len(v: &Value) -> usize {
    match v {
        Value::Bytes(b) => b.len() + 9,
        _ => 9,
    }
}

impl Ctx {
    /// Executes `sql` once per parameter row, in order; returns the affected rows in total.
    pub(super) async fn bulk(
        self,
        tx: &mut Transaction<'_>,
        sql: &str,
        rows: Vec<Vec<Value>>,
    ) -> OpResult<u64> {
        let mut affected = 0;
        if !self.bulk {
            for row in rows {
                tx.exec_drop(sql, Params::Positional(row)).await?;
                affected += tx.affected_rows();
            }
            return Ok(affected);
        }
        let mut rows = rows.into_iter().peekable();
        while rows.peek().is_some() {
            let mut chunk = Vec::new();
            let mut bytes = 0;
            while let Some(row) = rows.next_if(|r| {
                chunk.is_empty() || bytes + r.iter().map(value_len).sum::<usize>() <= BULK_BYTES
            }) {
                bytes += row.iter().map(value_len).sum::<usize>();
                chunk.push(Params::Positional(row));
            }
            tx.exec_batch(sql, chunk).await?;
            affected += tx.affected_rows();
        }
        Ok(affected)
    }
}

/// `values` padded to the placeholder count of an `IN (…)` list of their length.
pub(super) fn padded(mut values: Vec<Value>) -> Vec<Value> {
    let k = q::bucket(values.len());
    if let Some(last) = values.last().cloned() {
        values.resize(k, last);
    }
    values
}

pub(super) async fn begin(conn: &mut Conn) -> OpResult<Transaction<'_>> {
    Ok(conn.start_transaction(TxOpts::default()).await?)
}

/// Commits on success, rolls back on failure (so locks go at once, not when the pool cleans up).
pub(super) async fn finish<T>(tx: Transaction<'_>, result: OpResult<T>) -> OpResult<T> {
    match result {
        Ok(v) => {
            tx.commit().await.map_err(OpError::Commit)?;
            Ok(v)
        }
        Err(e) => {
            if let Err(rollback) = tx.rollback().await {
                tracing::debug!(error = %rollback, "rollback after a failed operation");
            }
            Err(e)
        }
    }
}

/// Every state name, bound into `IN (…)`: `job_by_state` leads with the state, so a query over
/// all of one session's jobs names them all.
fn all_states() -> Vec<Value> {
    JobState::ALL
        .into_iter()
        .map(|s| text(s.as_str()))
        .collect()
}

/// The in-flight state names, bound into `IN (…)`; derived from the model so the store never
/// disagrees with the state machine about what "in flight" means.
fn in_flight_states() -> Vec<Value> {
    JobState::ALL
        .into_iter()
        .filter(|s| s.is_in_flight())
        .map(|s| text(s.as_str()))
        .collect()
}

// ---- sessions -----------------------------------------------------------------------------

fn session_identity(s: &NewSession) -> Vec<Value> {
    vec![
        text(&s.reason),
        text(&s.arch),
        int(s.num_cu),
        text(s.backend.as_str()),
        text(&s.spec),
        text(&s.spec_path),
        text(&s.library_version),
        text(&s.driver_version),
        int(s.max_retries),
    ]
}

pub(crate) async fn create_session(
    mut conn: Conn,
    s: &NewSession,
    now: i64,
) -> OpResult<SessionId> {
    let mut tx = begin(&mut conn).await?;
    let mut params = session_identity(s);
    params.push(int(now));
    let r: OpResult<SessionId> = async {
        tx.exec_drop(q::INSERT_SESSION, params).await?;
        let id = tx.last_insert_id().ok_or_else(|| {
            StoreError::Invalid("the server returned no id for the new session".into())
        })?;
        Ok(SessionId(rows::to_i64("session id", id)?))
    }
    .await;
    finish(tx, r).await
}

pub(crate) async fn session(mut conn: Conn, id: SessionId) -> OpResult<Option<Session>> {
    let row: Option<Row> = conn.exec_first(q::SESSION, (id.0,)).await?;
    Ok(row.map(rows::session).transpose()?)
}

pub(crate) async fn sessions(mut conn: Conn) -> OpResult<Vec<Session>> {
    let rows: Vec<Row> = conn.exec(q::SESSIONS, ()).await?;
    Ok(rows
        .into_iter()
        .map(rows::session)
        .collect::<crate::Result<_>>()?)
}

pub(crate) async fn find_session(mut conn: Conn, s: &NewSession) -> OpResult<Option<Session>> {
    let rows: Vec<Row> = conn.exec(q::FIND_SESSION, session_identity(s)).await?;
    for row in rows {
        let found = rows::session(row)?;
        // The collation ignores trailing spaces; the identity does not.
        if found.info == *s {
            return Ok(Some(found));
        }
    }
    Ok(None)
}

// ---- configs and solvers ------------------------------------------------------------------

/// The ids of the configs with these keys (exact matches only).
async fn config_ids(
    tx: &mut Transaction<'_>,
    keys: &[&str],
    into: &mut HashMap<String, ConfigId>,
) -> OpResult<()> {
    for chunk in keys.chunks(q::MAX_IN) {
        let params = padded(chunk.iter().map(|k| text(k)).collect());
        let rows: Vec<(i64, String)> = tx.exec(q::config_ids_by_key(chunk.len()), params).await?;
        for (id, key) in rows {
            into.insert(key, ConfigId(id));
        }
    }
    Ok(())
}

pub(crate) async fn upsert_configs(
    mut conn: Conn,
    ctx: Ctx,
    configs: &[NewConfig],
) -> OpResult<Vec<(ConfigId, bool)>> {
    let mut tx = begin(&mut conn).await?;
    let r = upsert_configs_tx(&mut tx, ctx, configs).await;
    finish(tx, r).await
}

async fn upsert_configs_tx(
    tx: &mut Transaction<'_>,
    ctx: Ctx,
    configs: &[NewConfig],
) -> OpResult<Vec<(ConfigId, bool)>> {
    let mut distinct: Vec<&str> = Vec::new();
    let mut seen = BTreeSet::new();
    for c in configs {
        if seen.insert(c.key.as_str()) {
            distinct.push(&c.key);
        }
    }
    let mut ids = HashMap::new();
    config_ids(tx, &distinct, &mut ids).await?;
    // The first config of each new key creates it, in input order.
    let mut created = BTreeSet::new();
    let mut inserts = Vec::new();
    for c in configs {
        if !ids.contains_key(&c.key) && created.insert(c.key.as_str()) {
            let params = to_json("config params", &c.params)?;
            inserts.push(vec![text(&c.kind), text(&c.key), text(&params)]);
        }
    }
    if !inserts.is_empty() {
        ctx.bulk(tx, q::INSERT_CONFIG, inserts).await?;
        let new: Vec<&str> = created.iter().copied().collect();
        config_ids(tx, &new, &mut ids).await?;
    }
    let mut out = Vec::with_capacity(configs.len());
    let mut tags = Vec::new();
    let mut reported = BTreeSet::new();
    for c in configs {
        let id = *ids
            .get(&c.key)
            .ok_or_else(|| StoreError::Invalid(format!("config `{}` was not stored", c.key)))?;
        for t in &c.tags {
            tags.push(vec![int(id.0), text(t)]);
        }
        let is_new = created.contains(c.key.as_str()) && reported.insert(c.key.as_str());
        out.push((id, is_new));
    }
    if !tags.is_empty() {
        ctx.bulk(tx, q::INSERT_CONFIG_TAG, tags).await?;
    }
    Ok(out)
}

pub(crate) async fn config(mut conn: Conn, id: ConfigId) -> OpResult<Option<Config>> {
    let row: Option<Row> = conn.exec_first(q::CONFIG, (id.0,)).await?;
    Ok(row.map(|mut r| rows::config(&mut r)).transpose()?)
}

pub(crate) async fn configs_with_tag(mut conn: Conn, tag: &str) -> OpResult<Vec<Config>> {
    let rows: Vec<Row> = conn.exec(q::CONFIGS_WITH_TAG, (tag,)).await?;
    let mut out = Vec::with_capacity(rows.len());
    for mut row in rows {
        let found: String = get(&mut row, 4)?;
        if found == tag {
            out.push(rows::config(&mut row)?);
        }
    }
    Ok(out)
}

pub(crate) async fn upsert_solvers(
    mut conn: Conn,
    ctx: Ctx,
    solvers: &[NewSolver],
) -> OpResult<Vec<Solver>> {
    let mut tx = begin(&mut conn).await?;
    let r: OpResult<Vec<Solver>> = async {
        let rows = solvers
            .iter()
            .map(|s| vec![text(&s.name), int(i64::from(s.tunable))])
            .collect();
        ctx.bulk(&mut tx, q::INSERT_SOLVER, rows).await?;
        let names: Vec<&str> = solvers.iter().map(|s| s.name.as_str()).collect();
        let mut by_name = HashMap::new();
        for chunk in names.chunks(q::MAX_IN) {
            let sql = q::in_list(q::SOLVERS_BY_NAME, chunk.len(), "");
            let params = padded(chunk.iter().map(|n| text(n)).collect());
            let rows: Vec<Row> = tx.exec(sql, params).await?;
            for row in rows {
                let s = rows::solver(row)?;
                by_name.insert(s.name.clone(), s);
            }
        }
        solvers
            .iter()
            .map(|s| {
                by_name.get(&s.name).cloned().ok_or_else(|| {
                    // Only a name differing from a stored one by trailing spaces gets here.
                    OpError::Store(StoreError::Invalid(format!(
                        "solver `{}` clashes with a stored name that differs only in trailing \
                         spaces",
                        s.name
                    )))
                })
            })
            .collect()
    }
    .await;
    finish(tx, r).await
}

pub(crate) async fn solvers(mut conn: Conn) -> OpResult<Vec<Solver>> {
    let rows: Vec<Row> = conn.exec(q::SOLVERS, ()).await?;
    Ok(rows
        .into_iter()
        .map(rows::solver)
        .collect::<crate::Result<_>>()?)
}

pub(crate) async fn set_applicability(
    mut conn: Conn,
    ctx: Ctx,
    session: SessionId,
    rows: &[(ConfigId, SolverId, bool)],
    now: i64,
) -> OpResult<()> {
    let mut tx = begin(&mut conn).await?;
    let params = rows
        .iter()
        .map(|(config, solver, applicable)| {
            vec![
                int(session.0),
                int(config.0),
                int(solver.0),
                int(i64::from(*applicable)),
                int(now),
            ]
        })
        .collect();
    let r = ctx
        .bulk(&mut tx, q::UPSERT_APPLICABILITY, params)
        .await
        .map(drop);
    finish(tx, r).await
}

pub(crate) async fn applicable_solvers(
    mut conn: Conn,
    session: SessionId,
    config: ConfigId,
) -> OpResult<Vec<SolverId>> {
    let ids: Vec<i64> = conn
        .exec(q::APPLICABLE_SOLVERS, (session.0, config.0))
        .await?;
    Ok(ids.into_iter().map(SolverId).collect())
}

// ---- jobs ---------------------------------------------------------------------------------

pub(crate) async fn job(mut conn: Conn, id: JobId) -> OpResult<Option<Job>> {
    let row: Option<Row> = conn.exec_first(q::JOB, (id.0,)).await?;
    Ok(row.map(rows::job).transpose()?)
}

pub(crate) async fn job_progress(mut conn: Conn, id: JobId) -> OpResult<Option<(JobState, u32)>> {
    let row: Option<Row> = conn.exec_first(q::JOB_PROGRESS, (id.0,)).await?;
    Ok(row
        .map(|mut r| -> crate::Result<(JobState, u32)> {
            Ok((rows::parsed(&mut r, 0)?, rows::get(&mut r, 1)?))
        })
        .transpose()?)
}

pub(super) fn jobs(rows: Vec<Row>) -> OpResult<Vec<Job>> {
    Ok(rows
        .into_iter()
        .map(rows::job)
        .collect::<crate::Result<_>>()?)
}

pub(crate) async fn jobs_in_state(
    mut conn: Conn,
    session: SessionId,
    state: JobState,
    limit: u32,
) -> OpResult<Vec<Job>> {
    let params = vec![int(session.0), text(state.as_str()), int(limit)];
    jobs(conn.exec(q::JOBS_IN_STATE, params).await?)
}

pub(crate) async fn in_flight(mut conn: Conn, session: SessionId) -> OpResult<Vec<Job>> {
    let mut params = vec![int(session.0)];
    params.extend(in_flight_states());
    jobs(conn.exec(q::IN_FLIGHT, params).await?)
}

pub(crate) async fn expired_leases(mut conn: Conn, now_ms: i64, limit: u32) -> OpResult<Vec<Job>> {
    let mut params = in_flight_states();
    params.extend([int(now_ms), int(limit)]);
    jobs(conn.exec(q::EXPIRED_LEASES, params).await?)
}

/// Moves in-flight leases later by an outage's length (see [`crate::Store::extend_leases`]).
pub(crate) async fn extend_leases(
    mut conn: Conn,
    by_ms: i64,
    changed_before_ms: i64,
) -> OpResult<u64> {
    let mut params = vec![int(by_ms)];
    params.extend(in_flight_states());
    params.push(int(changed_before_ms));
    conn.exec_drop(q::EXTEND_LEASES, params).await?;
    Ok(conn.affected_rows())
}

pub(crate) async fn state_counts(
    mut conn: Conn,
    session: SessionId,
) -> OpResult<BTreeMap<JobState, u64>> {
    let mut params = vec![int(session.0)];
    params.extend(padded(all_states()));
    let pairs: Vec<(String, i64)> = conn
        .exec(q::state_counts(JobState::ALL.len()), params)
        .await?;
    Ok(decode_state_counts(pairs)?)
}

pub(crate) async fn finish_times(
    mut conn: Conn,
    session: SessionId,
    since_ms: i64,
) -> OpResult<Vec<i64>> {
    let finished = q::finished_states();
    let mut params = vec![int(session.0), int(since_ms)];
    params.extend(padded(finished.iter().map(|s| text(s.as_str())).collect()));
    Ok(conn.exec(q::finish_times(finished.len()), params).await?)
}

pub(crate) async fn builds(
    mut conn: Conn,
    session: SessionId,
    keys: &[String],
) -> OpResult<Vec<BuildRecord>> {
    // build key → (artifact, failure kind, detail)
    type Columns = (Option<String>, Option<String>, Option<String>);
    let mut known: HashMap<String, Columns> = HashMap::new();
    let distinct: Vec<&String> = keys.iter().collect::<BTreeSet<_>>().into_iter().collect();
    for chunk in distinct.chunks(q::MAX_IN) {
        let mut params = vec![int(session.0)];
        params.extend(padded(chunk.iter().map(|k| text(k)).collect()));
        let rows: Vec<Row> = conn.exec(q::builds(chunk.len()), params).await?;
        for mut row in rows {
            let key: String = get(&mut row, 0)?;
            known.insert(
                key,
                (get(&mut row, 1)?, get(&mut row, 2)?, get(&mut row, 3)?),
            );
        }
    }
    let mut out = Vec::new();
    for key in keys {
        // Exact keys only: the collation ignores trailing spaces.
        let Some((artifact, kind, detail)) = known.get(key) else {
            continue;
        };
        let result = decode_build(session, key, artifact.clone(), kind.clone(), detail.clone())?;
        out.push(BuildRecord {
            session,
            build_key: key.clone(),
            result,
        });
    }
    Ok(out)
}

// ---- artifacts and results ----------------------------------------------------------------

pub(crate) async fn put_artifact(
    mut conn: Conn,
    hash: &str,
    bytes: &[u8],
    now: i64,
) -> OpResult<bool> {
    let size = rows::to_i64("artifact size", bytes.len() as u64)?;
    let params = vec![
        text(hash),
        Value::Bytes(bytes.to_vec()),
        int(size),
        int(now),
    ];
    let mut tx = begin(&mut conn).await?;
    let r: OpResult<bool> = async {
        tx.exec_drop(q::INSERT_ARTIFACT, params).await?;
        Ok(tx.affected_rows() == 1)
    }
    .await;
    finish(tx, r).await
}

pub(crate) async fn artifact(mut conn: Conn, hash: &str) -> OpResult<Option<Vec<u8>>> {
    Ok(conn.exec_first(q::ARTIFACT, (hash,)).await?)
}

pub(crate) async fn results(mut conn: Conn, job: JobId) -> OpResult<Vec<ResultRow>> {
    let rows: Vec<Row> = conn.exec(q::RESULTS, (job.0,)).await?;
    Ok(rows
        .into_iter()
        .map(rows::result)
        .collect::<crate::Result<_>>()?)
}

pub(crate) async fn final_results(
    mut conn: Conn,
    session: SessionId,
) -> OpResult<Vec<FinalResult>> {
    let mut params = vec![int(session.0)];
    params.extend(padded(all_states()));
    let rows: Vec<Row> = conn
        .exec(q::final_results(JobState::ALL.len()), params)
        .await?;
    let mut results = rows
        .into_iter()
        .map(rows::final_result)
        .collect::<crate::Result<Vec<_>>>()?;
    // The index gives them state by state.
    results.sort_by_key(|r| r.job);
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padding_repeats_the_last_value() {
        assert_eq!(padded(vec![int(1), int(2), int(3)]).len(), 4);
        assert_eq!(padded(vec![int(1), int(2), int(3)])[3], int(3));
        assert!(padded(vec![]).is_empty());
    }
}
