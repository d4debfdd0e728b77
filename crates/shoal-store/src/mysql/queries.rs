//! Every SQL statement of [`super::MysqlStore`], as constants in one place.
//!
//! Why constants: values reach SQL only as bound parameters (`?`), never by formatting, and a
//! fixed text lets mysql_async's per-connection statement cache reuse the prepared statement.
//! Keeping them together also lets `tests/mysql_explain.rs` run `EXPLAIN` over exactly the hot
//! ones ([`hot`]) and fail when one of them stops using an index.
//!
//! Two kinds of text are built at run time, both from the constants here and never from a value:
//! - `IN (…)` lists of ids or keys: [`in_list`] appends `?` placeholders, rounded up to a power
//!   of two ([`bucket`]) and padded by repeating the last value, so a handful of texts (and
//!   prepared statements) serve every list length. At most [`MAX_IN`] per statement, well under
//!   MariaDB's `in_predicate_conversion_threshold` (1000), above which the plan changes.
//! - Nothing else: many-row writes run one statement text for many parameter rows through
//!   `exec_batch`, which MariaDB executes as one `COM_STMT_BULK_EXECUTE` round trip.
//!
//! The column lists that several queries share are macros (in `crate::encoding`, shared with
//! the other store), not constants, because `concat!` only accepts literals.

use shoal_model::JobState;

// `session_columns!` comes from `crate::encoding`, shared by both stores. The job columns are
// this store's own ([`job_row_columns!`]): its rows hold label ids where the SQLite store holds text.

/// The columns `rows::job` reads, in its order, from `job j` and the labels [`job_labels!`]
/// joins: each label's text under its column's name, and 0 (none) read as NULL.
macro_rules! job_row_columns {
    () => {
        "j.id, j.session_id, j.config_id, j.solver_id, cs.text AS compile_step, \
         es.text AS eval_step, j.compile_params, j.run_params, bk.text AS build_key, j.state, \
         j.attempt, j.retries, NULLIF(j.lease_deadline_ms, 0) AS lease_deadline_ms, \
         wk.text AS worker, af.text AS artifact, fk.text AS failure_kind, j.last_error, \
         j.updated_ms"
    };
}

/// The joins from `job j` to the labels [`job_row_columns!`] reads: one primary-key lookup each in
/// the small `label` table. LEFT joins, so that a label found missing reads as NULL and fails
/// the row's decoding by name, instead of dropping the row.
macro_rules! job_labels {
    () => {
        " LEFT JOIN label cs ON cs.id = j.compile_step LEFT JOIN label es ON es.id = j.eval_step \
         LEFT JOIN label bk ON bk.id = j.build_key LEFT JOIN label wk ON wk.id = j.worker \
         LEFT JOIN label af ON af.id = j.artifact LEFT JOIN label fk ON fk.id = j.failure_kind "
    };
}

/// A job's identity hash from five bound values: config id, solver id, compile step, eval step
/// and candidate key (`shoal_model::record::candidate_key`), joined by newlines, the first 16
/// bytes of their SHA-256 (schemas/mysql/0010_lean_job.sql says why). Migration 10 computes it
/// with the same expression from the old columns, migration 12 (`super::migrate_exec`) from the
/// renamed steps.
macro_rules! identity_hash {
    () => {
        "UNHEX(LEFT(SHA2(CONCAT(?, CHAR(10), ?, CHAR(10), ?, CHAR(10), ?, CHAR(10), ?), 256), 32))"
    };
}
pub(crate) use identity_hash;

/// The most placeholders in one `IN (…)` list.
pub const MAX_IN: usize = 512;

/// The placeholder count used for a list of `n` values: the next power of two, at most
/// [`MAX_IN`] (callers chunk longer lists first).
pub fn bucket(n: usize) -> usize {
    n.max(1).next_power_of_two().min(MAX_IN)
}

/// `prefix` + `(?, ?, …)` with [`bucket`]`(n)` placeholders + `suffix`.
pub fn in_list(prefix: &str, n: usize, suffix: &str) -> String {
    let k = bucket(n);
    let mut sql = String::with_capacity(prefix.len() + suffix.len() + 3 * k + 2);
    sql.push_str(prefix);
    sql.push('(');
    for i in 0..k {
        sql.push_str(if i == 0 { "?" } else { ", ?" });
    }
    sql.push(')');
    sql.push_str(suffix);
    sql
}

// ---- schema -------------------------------------------------------------------------------

pub const CREATE_SCHEMA_VERSION: &str = "CREATE TABLE IF NOT EXISTS schema_version (\
     version INT UNSIGNED NOT NULL PRIMARY KEY, applied_ms BIGINT NOT NULL) \
     ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin";
pub const HAS_SCHEMA_VERSION: &str = "SELECT COUNT(*) FROM information_schema.tables \
     WHERE table_schema = DATABASE() AND table_name = 'schema_version'";
pub const SCHEMA_VERSION: &str = "SELECT COALESCE(MAX(version), 0) FROM schema_version";
pub const INSERT_SCHEMA_VERSION: &str =
    "INSERT INTO schema_version (version, applied_ms) VALUES (?, ?)";
/// Serialises concurrent `migrate` calls on one database (MySQL DDL is not transactional).
pub const GET_MIGRATION_LOCK: &str = "SELECT GET_LOCK(?, ?)";
pub const RELEASE_MIGRATION_LOCK: &str = "SELECT RELEASE_LOCK(?)";

// ---- sessions -----------------------------------------------------------------------------

pub const INSERT_SESSION: &str = "INSERT INTO session (reason, arch, num_cu, backend, spec, \
     spec_path, library_version, driver_version, max_retries, created_ms) \
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
pub const SESSION: &str = concat!("SELECT ", session_columns!(), " FROM session WHERE id = ?");
pub const SESSIONS: &str = concat!("SELECT ", session_columns!(), " FROM session ORDER BY id");
/// Newest first; the caller keeps the first row that matches exactly (the collation pads spaces).
pub const FIND_SESSION: &str = concat!(
    "SELECT ",
    session_columns!(),
    " FROM session WHERE reason = ? AND arch = ? AND num_cu = ? AND backend = ? \
     AND spec = ? AND spec_path = ? AND library_version = ? AND driver_version = ? \
     AND max_retries = ? ORDER BY created_ms DESC, id DESC"
);

// ---- configs and solvers ------------------------------------------------------------------

/// Configs by key, through the unique hash of the key, for [`bucket`]`(n)` keys (padded like
/// [`in_list`]). The caller keeps exact key matches.
pub fn config_ids_by_key(n: usize) -> String {
    let k = bucket(n);
    let mut sql = String::from("SELECT id, `key` FROM config WHERE key_hash IN (");
    for i in 0..k {
        sql.push_str(if i == 0 {
            "UNHEX(SHA2(?, 256))"
        } else {
            ", UNHEX(SHA2(?, 256))"
        });
    }
    sql.push(')');
    sql
}
/// A new config; a duplicate key (a concurrent insert) changes nothing.
pub const INSERT_CONFIG: &str = "INSERT INTO config (kind, `key`, params) VALUES (?, ?, ?) \
     ON DUPLICATE KEY UPDATE id = id";
pub const INSERT_CONFIG_TAG: &str = "INSERT INTO config_tag (config_id, tag) VALUES (?, ?) \
     ON DUPLICATE KEY UPDATE config_id = config_id";
pub const CONFIG: &str = "SELECT id, kind, `key`, params FROM config WHERE id = ?";
/// Also returns the tag, so the caller keeps exact matches only (the collation pads spaces).
pub const CONFIGS_WITH_TAG: &str = "SELECT c.id, c.kind, c.`key`, c.params, t.tag \
     FROM config_tag t JOIN config c ON c.id = t.config_id \
     WHERE t.tag = ? ORDER BY t.config_id";

pub const INSERT_SOLVER: &str = "INSERT INTO solver (name, tunable) VALUES (?, ?) \
     ON DUPLICATE KEY UPDATE id = id";
/// Prefix of an `IN (…)` list of names (see [`in_list`]).
pub const SOLVERS_BY_NAME: &str = "SELECT id, name, tunable FROM solver WHERE name IN ";
pub const SOLVERS: &str = "SELECT id, name, tunable FROM solver ORDER BY id";

pub const UPSERT_APPLICABILITY: &str = "INSERT INTO applicability \
     (session_id, config_id, solver_id, applicable, updated_ms) VALUES (?, ?, ?, ?, ?) \
     ON DUPLICATE KEY UPDATE applicable = VALUES(applicable), updated_ms = VALUES(updated_ms)";
/// Hot: the Scheduler asks which solvers apply before making jobs.
pub const APPLICABLE_SOLVERS: &str = "SELECT solver_id FROM applicability \
     WHERE session_id = ? AND config_id = ? AND applicable = 1 ORDER BY solver_id";

// ---- jobs ---------------------------------------------------------------------------------

/// A new job; an existing one (same identity) is left exactly as it is and counts 0 affected
/// rows. Not `INSERT IGNORE`: that would also turn a too-long value or a broken reference into a
/// warning and a silently truncated or skipped row.
///
/// The server computes the identity hash (schemas/mysql/0010_lean_job.sql says why and how)
/// from (config, solver, compile step, eval step, candidate key), the 6th to 10th parameters,
/// with the expression migration 10 uses on the old rows. So the parameters are: session,
/// config, solver, the two steps (labels), the five identity values, compile params, run
/// params, build key (a label), state, created, updated. The labels' ids come from
/// `labels::write`, in the same transaction.
pub const INSERT_JOB: &str = concat!(
    "INSERT INTO job (session_id, config_id, solver_id, compile_step, eval_step, identity_hash, \
     compile_params, run_params, build_key, state, created_ms, updated_ms) VALUES (?, ?, ?, ?, ?, ",
    identity_hash!(),
    ", ?, ?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE id = id"
);
pub const JOB: &str = concat!(
    "SELECT ",
    job_row_columns!(),
    " FROM job j",
    job_labels!(),
    "WHERE j.id = ?"
);
/// What a compile worker may read of a job (a column grant: id, state, attempt).
pub const JOB_PROGRESS: &str = "SELECT state, attempt FROM job WHERE id = ?";

/// Hot: the Scheduler's claims, jobs in one state (`new` for compiling, `compiled` for
/// evaluating), oldest first, as the SQLite store orders them (whose query says why new jobs are
/// not grouped by build). `job_by_state` (state, session, id) answers it without a sort step;
/// the index is forced for the reason given at [`IN_FLIGHT`] (with `ORDER BY id` the optimizer
/// may walk the whole primary key instead).
pub const JOBS_IN_STATE: &str = concat!(
    "SELECT ",
    job_row_columns!(),
    " FROM job j FORCE INDEX (job_by_state)",
    job_labels!(),
    "WHERE j.session_id = ? AND j.state = ? ORDER BY j.id LIMIT ?"
);

/// Hot: the last four parameters are the in-flight state names (from `JobState::is_in_flight`).
///
/// The index is forced: with `ORDER BY id` MariaDB's optimizer sometimes prefers walking the
/// whole primary key to sorting a few rows, depending on the table's statistics at the time
/// (seen on CI with 5,767 rows). Sorting the in-flight rows of one session is always cheaper.
pub const IN_FLIGHT: &str = concat!(
    "SELECT ",
    job_row_columns!(),
    " FROM job j FORCE INDEX (job_by_state)",
    job_labels!(),
    "WHERE j.session_id = ? AND j.state IN (?, ?, ?, ?) ORDER BY j.id"
);

/// Hot: the lease sweep, across sessions. The first four parameters are the in-flight states:
/// `job_by_state` leads with the state, so this reads the in-flight entries of every session
/// (a range as large as the in-flight window, whatever the table holds) and sorts the expired
/// ones. The index is forced for the reason given at [`IN_FLIGHT`]. 0 is no lease.
pub const EXPIRED_LEASES: &str = concat!(
    "SELECT ",
    job_row_columns!(),
    " FROM job j FORCE INDEX (job_by_state)",
    job_labels!(),
    "WHERE j.state IN (?, ?, ?, ?) AND j.lease_deadline_ms <> 0 AND j.lease_deadline_ms < ? \
     ORDER BY j.lease_deadline_ms, j.id LIMIT ?"
);

/// After a store outage: every in-flight lease set before it ended moves later by the outage's
/// length ((by, states ×4, changed before)). The rows are found through `job_by_state`.
pub const EXTEND_LEASES: &str = "UPDATE job FORCE INDEX (job_by_state) \
     SET lease_deadline_ms = lease_deadline_ms + ? \
     WHERE state IN (?, ?, ?, ?) AND lease_deadline_ms <> 0 AND updated_ms < ?";

/// When each of a session's finished jobs finished, from a time on: `shoal status`'s rate.
/// (session, since, then an `IN (…)` list of the states that stamp `finished_ms`), so that
/// `job_by_state` finds the session's finished jobs without reading its others.
pub fn finish_times(states: usize) -> String {
    in_list(
        "SELECT finished_ms FROM job FORCE INDEX (job_by_state) \
         WHERE session_id = ? AND finished_ms >= ? AND state IN ",
        states,
        " ORDER BY finished_ms",
    )
}

/// Hot: progress reports. (session, then an `IN (…)` list of every state): `job_by_state`
/// leads with the state, so naming them all makes one range per state, read from the index
/// alone.
pub fn state_counts(states: usize) -> String {
    in_list(
        "SELECT state, COUNT(*) FROM job FORCE INDEX (job_by_state) \
         WHERE session_id = ? AND state IN ",
        states,
        " GROUP BY state",
    )
}

/// Hot: the first half of every [`crate::Store::apply`]: lock the batch's jobs and read the
/// compare-and-set pair of each. Prefix of an `IN (…)` list of ids (see [`in_list`]).
pub const CAS_LOCK: &str = "SELECT id, state, attempt FROM job WHERE id IN ";
/// The suffix of [`CAS_LOCK`].
pub const CAS_LOCK_SUFFIX: &str = " FOR UPDATE";
/// [`CAS_LOCK`] for `n` ids.
pub fn cas_lock(n: usize) -> String {
    in_list(CAS_LOCK, n, CAS_LOCK_SUFFIX)
}

/// The SET clause of both compare-and-set updates: the new values of a changed job. The
/// per-state timestamps (`COALESCE`, 10th to 15th parameters) are NULL except the one of the
/// state entered.
///
/// Worker, artifact and failure kind are label ids (0 for none; NULL for the artifact keeps
/// the row's). No lease is 0.
macro_rules! cas_set {
    () => {
        "UPDATE job SET state = ?, attempt = ?, \
         retries = retries + ?, lease_deadline_ms = COALESCE(?, 0), worker = ?, \
         artifact = COALESCE(?, artifact), failure_kind = ?, last_error = ?, updated_ms = ?, \
         compile_queued_ms = COALESCE(?, compile_queued_ms), \
         compiling_ms = COALESCE(?, compiling_ms), \
         compiled_ms = COALESCE(?, compiled_ms), \
         eval_queued_ms = COALESCE(?, eval_queued_ms), \
         evaluating_ms = COALESCE(?, evaluating_ms), \
         finished_ms = COALESCE(?, finished_ms) "
    };
}

/// How many parameters the SET clause of [`CAS_UPDATE`] and [`cas_update_group`] takes.
pub const CAS_SET_PARAMS: usize = 15;

/// Hot: the compare-and-set behind a state change, one parameter row per change, executed in
/// batch order (for changes that share their new values with too few others to be grouped).
/// The WHERE clause repeats the compare-and-set although the rows are locked: the affected-row
/// count then proves that what was predicted to apply did.
pub const CAS_UPDATE: &str = concat!(cas_set!(), "WHERE id = ? AND state = ? AND attempt = ?");

/// Prefix of the grouped compare-and-set: many jobs that leave the same (state, attempt) with
/// the same new values, in one statement. Followed by an `IN (…)` list of ids.
pub const CAS_UPDATE_GROUP: &str =
    concat!(cas_set!(), "WHERE state = ? AND attempt = ? AND id IN ");
/// [`CAS_UPDATE_GROUP`] for `n` ids.
pub fn cas_update_group(n: usize) -> String {
    in_list(CAS_UPDATE_GROUP, n, "")
}

/// A heartbeat's lease renewal: (deadline, job, state, attempt, deadline). Only ever later.
pub const RENEW_LEASE: &str = "UPDATE job SET lease_deadline_ms = ? \
     WHERE id = ? AND state = ? AND attempt = ? AND lease_deadline_ms < ?";

// ---- outbox (see `crate::outbox`) ---------------------------------------------------------

/// Every job that left a queued state in a batch: its owed request is settled. Prefix of an
/// `IN (…)` list of job ids.
pub const OUTBOX_SETTLE: &str = "DELETE FROM outbox WHERE job_id IN ";
/// [`OUTBOX_SETTLE`] for `n` ids.
pub fn outbox_settle(n: usize) -> String {
    in_list(OUTBOX_SETTLE, n, "")
}
/// A request owed, one parameter row per job: (job, attempt, now). `IGNORE` because a batch
/// retried after a lost commit acknowledgement may owe the same request again.
pub const OUTBOX_OWE: &str =
    "INSERT IGNORE INTO outbox (job_id, job_attempt, owed_ms) VALUES (?, ?, ?)";
/// One confirmed request: (job, attempt).
pub const OUTBOX_SENT: &str = "DELETE FROM outbox WHERE job_id = ? AND job_attempt = ?";
/// Hot: the sender's sweep. The oldest owed requests written before a time, with their jobs as
/// they are now (the attempt must still match: a row is for one attempt).
pub const UNSENT: &str = concat!(
    "SELECT STRAIGHT_JOIN ",
    job_row_columns!(),
    " FROM outbox JOIN job j ON j.id = outbox.job_id AND j.attempt = outbox.job_attempt",
    job_labels!(),
    "WHERE outbox.owed_ms < ? ORDER BY outbox.owed_ms, outbox.job_id LIMIT ?"
);

// ---- results, builds, artifacts -----------------------------------------------------------

/// A plain INSERT on purpose: the compare-and-set already guarantees one row per
/// (job, attempt), so a duplicate is a bug that must fail the batch, not vanish.
/// Status, worker and device are label ids (`labels::write`, in the same transaction).
pub const INSERT_RESULT: &str = "INSERT INTO result (job_id, attempt, status, time_us, samples, \
     workspace, detail, worker, device, created_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
/// A result's session is its job's.
pub const RESULTS: &str = "SELECT STRAIGHT_JOIN r.job_id, j.session_id, r.attempt, \
     wk.text AS worker, dv.text AS device, r.created_ms, st.text AS status, r.time_us, \
     r.samples, r.workspace, r.detail \
     FROM result r JOIN job j ON j.id = r.job_id \
     LEFT JOIN label wk ON wk.id = r.worker LEFT JOIN label dv ON dv.id = r.device \
     LEFT JOIN label st ON st.id = r.status \
     WHERE r.job_id = ? ORDER BY r.attempt";

/// Hot: exports and reports. The result of a job is the row of its final attempt.
/// (session, then an `IN (…)` list of every state.) The plan is pinned, because the
/// optimizer's own choice depends on how the rows are spread: `STRAIGHT_JOIN` keeps the join
/// order as written (left to itself the optimizer may start from a small `config` table with a
/// full scan), and `FORCE INDEX (job_by_state)` reads the session's jobs state by state (when
/// one session is a large part of the table, the optimizer walks the whole primary key
/// instead). Then one primary-key lookup each in config, solver, result and the labels. Rows
/// come state by state; `ops::final_results` puts them in job order. A database collects
/// sessions over time; an export must not read all of them.
pub fn final_results(states: usize) -> String {
    in_list(
        "SELECT STRAIGHT_JOIN j.id, j.config_id, c.params, s.name, \
         j.compile_params, j.run_params, j.state, fk.text AS failure_kind, j.last_error, \
         st.text AS status, r.time_us, r.samples, r.workspace, r.detail, \
         wk.text AS worker, dv.text AS device, es.text AS eval_step \
         FROM job j FORCE INDEX (job_by_state) \
         JOIN config c ON c.id = j.config_id \
         JOIN solver s ON s.id = j.solver_id \
         LEFT JOIN result r ON r.job_id = j.id AND r.attempt = j.attempt \
         LEFT JOIN label fk ON fk.id = j.failure_kind LEFT JOIN label st ON st.id = r.status \
         LEFT JOIN label wk ON wk.id = r.worker LEFT JOIN label dv ON dv.id = r.device \
         LEFT JOIN label es ON es.id = j.eval_step \
         WHERE j.session_id = ? AND j.state IN ",
        states,
        "",
    )
}

// ---- labels (see `super::labels`) ---------------------------------------------------------

/// Which of some texts are labels already. Prefix of an `IN (…)` list of texts.
pub const LABELS: &str = "SELECT id, text FROM label WHERE text IN ";
/// [`LABELS`] for `n` texts.
pub fn labels(n: usize) -> String {
    in_list(LABELS, n, "")
}
/// A new label; one written meanwhile by another transaction is left as it is.
pub const INSERT_LABEL: &str =
    "INSERT INTO label (text) VALUES (?) ON DUPLICATE KEY UPDATE id = id";

/// Later rows of one batch replace earlier ones, as SQLite's `INSERT OR REPLACE` does.
pub const UPSERT_BUILD: &str = "INSERT INTO build (session_id, build_key, artifact, \
     failure_kind, detail) VALUES (?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE \
     artifact = VALUES(artifact), failure_kind = VALUES(failure_kind), detail = VALUES(detail)";
/// Hot: before compiling, the Scheduler asks which builds already exist. Prefix of an `IN (…)`
/// list of build keys after the session (see [`in_list`]).
pub const BUILDS: &str =
    "SELECT build_key, artifact, failure_kind, detail FROM build WHERE session_id = ? AND \
     build_key IN ";
/// [`BUILDS`] for `n` keys.
pub fn builds(n: usize) -> String {
    in_list(BUILDS, n, "")
}

/// A second put of the same hash changes nothing and counts 0 affected rows.
pub const INSERT_ARTIFACT: &str = "INSERT INTO artifact (hash, bytes, size, created_ms) \
     VALUES (?, ?, ?, ?) ON DUPLICATE KEY UPDATE hash = hash";
pub const ARTIFACT: &str = "SELECT bytes FROM artifact WHERE hash = ?";

// ---- imported MIOpen databases (see `crate::db_import`) ------------------------------------

pub const INSERT_DB_IMPORT: &str = "INSERT INTO db_import (label, arch, num_cu, files, \
     created_ms, find_records, perf_records, configs) VALUES (?, ?, ?, ?, ?, ?, ?, ?)";
pub const INSERT_DB_RECORD: &str = "INSERT INTO db_record (import_id, seq, kind, config_id, \
     db_key, solver, time_ms, workspace, algorithm, params) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
pub const DB_IMPORTS: &str = "SELECT id, label, arch, num_cu, files, created_ms, find_records, \
     perf_records, configs FROM db_import ORDER BY id";
/// In the order they were given (`seq`), one range of the primary key.
pub const DB_RECORDS: &str = "SELECT kind, config_id, db_key, solver, time_ms, workspace, \
     algorithm, params FROM db_record WHERE import_id = ? ORDER BY seq";

/// The states that stamp `finished_ms` (as `evaluated` does): a finished job is in one of them.
pub fn finished_states() -> Vec<JobState> {
    JobState::ALL
        .into_iter()
        .filter(|&s| {
            let slot = crate::encoding::timestamp_slot;
            slot(s) == slot(JobState::Evaluated)
        })
        .collect()
}

/// The queries on hot paths, by name, with the number of `IN (…)` values to build them for
/// (0 for fixed texts), for the EXPLAIN test.
pub fn hot(in_values: usize) -> Vec<(&'static str, String)> {
    vec![
        ("jobs_in_state", JOBS_IN_STATE.to_string()),
        ("in_flight", IN_FLIGHT.to_string()),
        ("expired_leases", EXPIRED_LEASES.to_string()),
        ("state_counts", state_counts(JobState::ALL.len())),
        ("cas_lock", cas_lock(in_values)),
        ("cas_update", CAS_UPDATE.to_string()),
        ("cas_update_group", cas_update_group(in_values)),
        ("final_results", final_results(JobState::ALL.len())),
        ("finish_times", finish_times(finished_states().len())),
        ("labels", labels(in_values)),
        ("builds", builds(in_values)),
        ("applicable_solvers", APPLICABLE_SOLVERS.to_string()),
        ("job", JOB.to_string()),
        ("results", RESULTS.to_string()),
        ("configs_with_tag", CONFIGS_WITH_TAG.to_string()),
        ("config_ids_by_key", config_ids_by_key(in_values)),
        ("artifact", ARTIFACT.to_string()),
        ("unsent", UNSENT.to_string()),
        ("outbox_settle", outbox_settle(in_values)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_lists_come_in_few_sizes() {
        assert_eq!(bucket(0), 1);
        assert_eq!(bucket(1), 1);
        assert_eq!(bucket(3), 4);
        assert_eq!(bucket(500), 512);
        assert_eq!(bucket(5000), MAX_IN);
        assert_eq!(in_list("x IN ", 3, " y"), "x IN (?, ?, ?, ?) y");
        assert_eq!(
            cas_lock(1),
            "SELECT id, state, attempt FROM job WHERE id IN (?) FOR UPDATE"
        );
        assert_eq!(config_ids_by_key(2).matches('?').count(), 2);
    }
}
