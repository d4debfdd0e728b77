//! Every SQL statement of [`super::SqliteStore`], as constants in one place.
//!
//! Why constants: values reach SQL only as bound parameters (`?N`), never by formatting, and a
//! fixed text lets `prepare_cached` reuse the compiled statement. Keeping them together also lets
//! a test run `EXPLAIN QUERY PLAN` over the hot ones ([`HOT`]) and fail when one of them stops
//! using an index, which is how "every hot query is indexed" stays true.
//!
//! The column lists that several queries share are macros (in `crate::encoding`, shared with
//! the other store), not constants, because `concat!` only accepts literals.

// `job_columns!` and `session_columns!` come from `crate::encoding`.

// ---- schema -------------------------------------------------------------------------------

pub(crate) const CREATE_SCHEMA_VERSION: &str = "CREATE TABLE IF NOT EXISTS schema_version (\
     version INTEGER PRIMARY KEY, applied_ms INTEGER NOT NULL)";
pub(crate) const HAS_SCHEMA_VERSION: &str =
    "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'";
pub(crate) const SCHEMA_VERSION: &str = "SELECT COALESCE(MAX(version), 0) FROM schema_version";
pub(crate) const INSERT_SCHEMA_VERSION: &str =
    "INSERT INTO schema_version (version, applied_ms) VALUES (?1, ?2)";

// ---- sessions -----------------------------------------------------------------------------

pub(crate) const INSERT_SESSION: &str = "INSERT INTO session (reason, arch, num_cu, backend, \
     spec, spec_path, library_version, driver_version, max_retries, created_ms) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)";
pub(crate) const SESSION: &str =
    concat!("SELECT ", session_columns!(), " FROM session WHERE id = ?1");
pub(crate) const SESSIONS: &str =
    concat!("SELECT ", session_columns!(), " FROM session ORDER BY id");
pub(crate) const FIND_SESSION: &str = concat!(
    "SELECT ",
    session_columns!(),
    " FROM session WHERE reason = ?1 AND arch = ?2 AND num_cu = ?3 AND backend = ?4 \
     AND spec = ?5 AND spec_path = ?6 AND library_version = ?7 AND driver_version = ?8 \
     AND max_retries = ?9 ORDER BY created_ms DESC, id DESC LIMIT 1"
);

// ---- configs and solvers ------------------------------------------------------------------

pub(crate) const INSERT_CONFIG: &str =
    "INSERT OR IGNORE INTO config (kind, key, params) VALUES (?1, ?2, ?3)";
pub(crate) const CONFIG_ID_BY_KEY: &str = "SELECT id FROM config WHERE key = ?1";
pub(crate) const INSERT_CONFIG_TAG: &str =
    "INSERT OR IGNORE INTO config_tag (config_id, tag) VALUES (?1, ?2)";
pub(crate) const CONFIG: &str = "SELECT id, kind, key, params FROM config WHERE id = ?1";
pub(crate) const CONFIGS_WITH_TAG: &str = "SELECT c.id, c.kind, c.key, c.params \
     FROM config_tag t JOIN config c ON c.id = t.config_id \
     WHERE t.tag = ?1 ORDER BY t.config_id";

pub(crate) const INSERT_SOLVER: &str =
    "INSERT OR IGNORE INTO solver (name, tunable) VALUES (?1, ?2)";
pub(crate) const SOLVER_BY_NAME: &str = "SELECT id, name, tunable FROM solver WHERE name = ?1";
pub(crate) const SOLVERS: &str = "SELECT id, name, tunable FROM solver ORDER BY id";

pub(crate) const UPSERT_APPLICABILITY: &str = "INSERT OR REPLACE INTO applicability \
     (session_id, config_id, solver_id, applicable, updated_ms) VALUES (?1, ?2, ?3, ?4, ?5)";
pub(crate) const APPLICABLE_SOLVERS: &str = "SELECT solver_id FROM applicability \
     WHERE session_id = ?1 AND config_id = ?2 AND applicable = 1 ORDER BY solver_id";

// ---- jobs ---------------------------------------------------------------------------------

pub(crate) const INSERT_JOB: &str = "INSERT OR IGNORE INTO job (session_id, config_id, \
     solver_id, compile_step, eval_step, compile_params, run_params, candidate_key, build_key, \
     state, created_ms, updated_ms) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?11)";
pub(crate) const JOB: &str = concat!("SELECT ", job_columns!(), " FROM job WHERE id = ?1");
pub(crate) const JOB_PROGRESS: &str = "SELECT state, attempt FROM job WHERE id = ?1";

/// Hot: the Scheduler's claim query, for every state, `new` included: oldest first.
/// `job_by_state` answers it without a sort step.
///
/// Why oldest first for new jobs too, and not grouped by build key: jobs that share a build
/// are usually far apart (a build serves every shape, and a spec loads shape by shape), so
/// claiming by build walked the whole table, one page per job, and a session of a million jobs
/// dispatched at half the rate of one of 100,000 (BENCHMARKS.md, "dispatch as the store
/// grows"). The jobs of one claim that share a build still go out in one compile request.
pub(crate) const JOBS_IN_STATE: &str = concat!(
    "SELECT ",
    job_columns!(),
    " FROM job WHERE session_id = ?1 AND state = ?2 ORDER BY id LIMIT ?3"
);

/// Hot: `?2..?5` are the four in-flight state names (bound, from `JobState::is_in_flight`).
pub(crate) const IN_FLIGHT: &str = concat!(
    "SELECT ",
    job_columns!(),
    " FROM job WHERE session_id = ?1 AND state IN (?2, ?3, ?4, ?5) ORDER BY id"
);

/// Hot: the lease sweep, across sessions. `?1..?4` are the in-flight state names.
pub(crate) const EXPIRED_LEASES: &str = concat!(
    "SELECT ",
    job_columns!(),
    " FROM job WHERE lease_deadline_ms IS NOT NULL AND lease_deadline_ms < ?5 \
     AND state IN (?1, ?2, ?3, ?4) ORDER BY lease_deadline_ms, id LIMIT ?6"
);

/// Hot: progress reports. Covered by `job_by_state`.
/// When each of a session's jobs finished, from a time on: `shoal status`'s rate.
pub(crate) const FINISH_TIMES: &str = "SELECT finished_ms FROM job \
     WHERE session_id = ?1 AND finished_ms >= ?2 ORDER BY finished_ms";

pub(crate) const STATE_COUNTS: &str =
    "SELECT state, COUNT(*) FROM job WHERE session_id = ?1 GROUP BY state";

/// Hot: the compare-and-set behind every state change. `?10..?15` are the per-state timestamps;
/// exactly the one of the state entered is non-NULL, the others keep their value.
pub(crate) const CAS_UPDATE: &str = "UPDATE job SET state = ?1, attempt = ?2, \
     retries = retries + ?3, lease_deadline_ms = ?4, worker = ?5, \
     artifact = COALESCE(?6, artifact), failure_kind = ?7, last_error = ?8, updated_ms = ?9, \
     compile_queued_ms = COALESCE(?10, compile_queued_ms), \
     compiling_ms = COALESCE(?11, compiling_ms), \
     compiled_ms = COALESCE(?12, compiled_ms), \
     eval_queued_ms = COALESCE(?13, eval_queued_ms), \
     evaluating_ms = COALESCE(?14, evaluating_ms), \
     finished_ms = COALESCE(?15, finished_ms) \
     WHERE id = ?16 AND state = ?17 AND attempt = ?18";

// ---- results, builds, artifacts -----------------------------------------------------------

/// A plain INSERT on purpose: the compare-and-set already guarantees one row per
/// (job, attempt), so a duplicate is a bug that must fail the batch, not vanish.
pub(crate) const INSERT_RESULT: &str = "INSERT INTO result (job_id, session_id, attempt, \
     status, time_us, samples, workspace, detail, worker, device, created_ms) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)";
pub(crate) const RESULTS: &str = "SELECT job_id, session_id, attempt, worker, device, \
     created_ms, status, time_us, samples, workspace, detail \
     FROM result WHERE job_id = ?1 ORDER BY attempt, id";

/// Hot: exports and reports. The result of a job is the row of its final attempt.
pub(crate) const FINAL_RESULTS: &str = "SELECT j.id, j.config_id, c.params, s.name, \
     j.compile_params, j.run_params, j.state, j.failure_kind, j.last_error, \
     r.status, r.time_us, r.samples, r.workspace, r.detail, r.worker, r.device, \
     j.eval_step \
     FROM job j \
     JOIN config c ON c.id = j.config_id \
     JOIN solver s ON s.id = j.solver_id \
     LEFT JOIN result r ON r.job_id = j.id AND r.attempt = j.attempt \
     WHERE j.session_id = ?1 ORDER BY j.id";

pub(crate) const UPSERT_BUILD: &str = "INSERT OR REPLACE INTO build (session_id, build_key, \
     artifact, failure_kind, detail) VALUES (?1, ?2, ?3, ?4, ?5)";
/// Hot: before compiling, the Scheduler asks which builds already exist.
pub(crate) const BUILD: &str = "SELECT artifact, failure_kind, detail FROM build \
     WHERE session_id = ?1 AND build_key = ?2";

pub(crate) const INSERT_ARTIFACT: &str = "INSERT OR IGNORE INTO artifact (hash, bytes, size, \
     created_ms) VALUES (?1, ?2, ?3, ?4)";
pub(crate) const ARTIFACT: &str = "SELECT bytes FROM artifact WHERE hash = ?1";

/// A heartbeat's lease renewal: (deadline, job, state, attempt). Only ever later.
/// Every in-flight lease set before a store outage ended, later by its length (see the MySQL
/// store's `EXTEND_LEASES`).
pub(crate) const EXTEND_LEASES: &str = "UPDATE job SET lease_deadline_ms = lease_deadline_ms + ?1 \
     WHERE state IN (?2, ?3, ?4, ?5) AND lease_deadline_ms IS NOT NULL AND updated_ms < ?6";
pub(crate) const RENEW_LEASE: &str = "UPDATE job SET lease_deadline_ms = ?1 \
     WHERE id = ?2 AND state = ?3 AND attempt = ?4 AND COALESCE(lease_deadline_ms, 0) < ?1";

// ---- outbox (see `crate::outbox`) ---------------------------------------------------------

/// A job left a queued state: its owed request is settled.
pub(crate) const OUTBOX_SETTLE: &str = "DELETE FROM outbox WHERE job_id = ?1";
/// A request owed: (job, attempt, now). `OR IGNORE`: owing the same request twice is one row.
pub(crate) const OUTBOX_OWE: &str =
    "INSERT OR IGNORE INTO outbox (job_id, job_attempt, owed_ms) VALUES (?1, ?2, ?3)";
/// One confirmed request: (job, attempt).
pub(crate) const OUTBOX_SENT: &str = "DELETE FROM outbox WHERE job_id = ?1 AND job_attempt = ?2";
/// Hot: the sender's sweep. The oldest owed requests written before a time, with their jobs as
/// they are now (`CROSS JOIN` keeps the outbox as the outer loop, read in `owed_ms` order).
pub(crate) const UNSENT: &str = concat!(
    "SELECT ",
    job_columns!(),
    " FROM outbox CROSS JOIN job ON job.id = outbox.job_id AND job.attempt = outbox.job_attempt \
     WHERE outbox.owed_ms < ?1 ORDER BY outbox.owed_ms, outbox.job_id LIMIT ?2"
);

// ---- imported MIOpen databases (see `crate::db_import`) ------------------------------------

pub(crate) const INSERT_DB_IMPORT: &str = "INSERT INTO db_import (label, arch, num_cu, files, \
     created_ms, find_records, perf_records, configs) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";
pub(crate) const INSERT_DB_RECORD: &str = "INSERT INTO db_record (import_id, seq, kind, \
     config_id, db_key, solver, time_ms, workspace, algorithm, params) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)";
pub(crate) const DB_IMPORTS: &str = "SELECT id, label, arch, num_cu, files, created_ms, \
     find_records, perf_records, configs FROM db_import ORDER BY id";
/// In the order they were given (`seq`), one range of the primary key.
pub(crate) const DB_RECORDS: &str = "SELECT kind, config_id, db_key, solver, time_ms, workspace, \
     algorithm, params FROM db_record WHERE import_id = ?1 ORDER BY seq";

/// The queries on hot paths, by name, for the query-plan test.
#[cfg(test)]
pub(crate) const HOT: &[(&str, &str)] = &[
    ("jobs_in_state", JOBS_IN_STATE),
    ("in_flight", IN_FLIGHT),
    ("expired_leases", EXPIRED_LEASES),
    ("state_counts", STATE_COUNTS),
    ("cas_update", CAS_UPDATE),
    ("final_results", FINAL_RESULTS),
    ("builds", BUILD),
    ("applicable_solvers", APPLICABLE_SOLVERS),
    ("job", JOB),
    ("results", RESULTS),
    ("configs_with_tag", CONFIGS_WITH_TAG),
    ("config_id_by_key", CONFIG_ID_BY_KEY),
    ("artifact", ARTIFACT),
    ("unsent", UNSENT),
    ("outbox_settle", OUTBOX_SETTLE),
    ("outbox_sent", OUTBOX_SENT),
    ("db_records", DB_RECORDS),
];
