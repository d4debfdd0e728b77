//! Tests that need the SQLite internals: the query plans of the hot queries.
//!
//! Why a plan test: "every query on a hot path is backed by an index" is easy to break by
//! editing a WHERE clause or a migration, and the breakage is invisible on a test-sized database.
//! `EXPLAIN QUERY PLAN` shows it at once as a `SCAN` of the table.

use super::{migrate, queries, SqliteStore};

/// The plan lines of `sql` on a migrated, empty database.
fn plan(conn: &rusqlite::Connection, sql: &str) -> Vec<String> {
    let mut st = conn
        .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
        .unwrap_or_else(|e| panic!("preparing `{sql}`: {e}"));
    // Parameters stay unbound (NULL): the plan does not depend on their values.
    let mut rows = st.raw_query();
    let mut lines = Vec::new();
    while let Some(row) = rows.next().unwrap() {
        lines.push(row.get::<_, String>(3).unwrap());
    }
    lines
}

/// A line that reads a whole table: `SCAN job`, `SCAN j`. Even a `SCAN … USING COVERING INDEX`
/// walks every row of the index, which no hot query should need, so only SEARCH passes.
fn is_full_scan(line: &str) -> bool {
    line.starts_with("SCAN ") && !line.starts_with("SCAN CONSTANT ROW")
}

#[test]
fn hot_queries_use_indexes() {
    let store = SqliteStore::open_in_memory().unwrap();
    let mut conn = store.conn.lock().unwrap();
    migrate(&mut conn).unwrap();
    let mut failures = Vec::new();
    for (name, sql) in queries::HOT {
        let lines = plan(&conn, sql);
        assert!(!lines.is_empty(), "{name}: empty plan");
        if lines.iter().any(|l| is_full_scan(l)) {
            failures.push(format!("{name}:\n    {}", lines.join("\n    ")));
        }
    }
    assert!(
        failures.is_empty(),
        "hot queries scan a table:\n{}",
        failures.join("\n")
    );
}

#[test]
fn scan_detector_catches_an_unindexed_query() {
    let store = SqliteStore::open_in_memory().unwrap();
    let mut conn = store.conn.lock().unwrap();
    migrate(&mut conn).unwrap();
    // `worker` has no index: this must be reported, or the test above proves nothing.
    let lines = plan(&conn, "SELECT id FROM job WHERE worker = ?1");
    assert!(lines.iter().any(|l| is_full_scan(l)), "{lines:?}");
}

#[test]
fn pragmas_are_in_force() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("s.db")).unwrap();
    let conn = store.conn.lock().unwrap();
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    let sync: i64 = conn
        .query_row("PRAGMA synchronous", [], |r| r.get(0))
        .unwrap();
    assert_eq!(sync, 1, "NORMAL");
    let fk: i64 = conn
        .query_row("PRAGMA foreign_keys", [], |r| r.get(0))
        .unwrap();
    assert_eq!(fk, 1);
    let busy: i64 = conn
        .query_row("PRAGMA busy_timeout", [], |r| r.get(0))
        .unwrap();
    assert_eq!(busy, 5000);
}

/// A run of changes of one job that continue each other is written as one UPDATE; these check
/// that the outcome is the one of applying them one by one.
mod chains {
    use shoal_model::JobState::*;

    use super::{migrate, SqliteStore};
    use crate::conformance::{measured, one_job, step, to_compiled, tr, world};
    use crate::{Batch, Change, Store};

    async fn store() -> SqliteStore {
        let store = SqliteStore::open_in_memory().unwrap();
        migrate(&mut store.conn.lock().unwrap()).unwrap();
        store
    }

    /// (compile_queued_ms, compiled_ms, eval_queued_ms, finished_ms) are set.
    fn stamped(store: &SqliteStore, id: shoal_model::JobId) -> [bool; 4] {
        let conn = store.conn.lock().unwrap();
        conn.query_row(
            "SELECT compile_queued_ms IS NOT NULL, compiled_ms IS NOT NULL, \
             eval_queued_ms IS NOT NULL, finished_ms IS NOT NULL FROM job WHERE id = ?1",
            [id.0],
            |r| Ok([r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?]),
        )
        .unwrap()
    }

    #[tokio::test]
    async fn a_compile_result_and_its_eval_dispatch_apply_together() {
        let store = store().await;
        let w = world(&store).await;
        let id = one_job(&store, &w, "8").await;
        assert!(step(&store, tr(id, New, 0, CompileQueued).with_lease(5)).await);
        let batch = Batch {
            changes: vec![
                tr(id, CompileQueued, 1, Compiled)
                    .with_artifact("sha256:aa")
                    .with_worker("cc")
                    .into(),
                tr(id, Compiled, 1, EvalQueued).with_lease(77).into(),
            ],
            builds: vec![],
        };
        assert_eq!(store.apply(&batch).await.unwrap(), vec![true, true]);
        let j = store.job(id).await.unwrap().unwrap();
        assert_eq!((j.state, j.attempt, j.retries), (EvalQueued, 2, 0));
        assert_eq!(
            j.artifact.as_deref(),
            Some("sha256:aa"),
            "the first's artifact"
        );
        assert_eq!(j.lease_deadline_ms, Some(77), "the last's lease");
        assert_eq!(j.worker, None, "the last's worker");
        assert_eq!(stamped(&store, id), [true, true, true, false]);
        // Replayed (a duplicate reply): the first no longer matches and the second, tried alone,
        // does not either.
        assert_eq!(store.apply(&batch).await.unwrap(), vec![false, false]);
    }

    #[tokio::test]
    async fn when_the_first_does_not_apply_the_rest_are_tried_alone() {
        let store = store().await;
        let w = world(&store).await;
        let id = one_job(&store, &w, "8").await;
        to_compiled(&store, id).await;
        let j = store.job(id).await.unwrap().unwrap();
        let a = j.attempt;
        // The job is compiled already: the compile result is stale, the dispatch still applies,
        // and the result row of the later change is written.
        let row = measured(&w, id, a + 1, 2.0);
        let batch = Batch {
            changes: vec![
                tr(id, CompileQueued, a, Compiled)
                    .with_artifact("sha256:bb")
                    .into(),
                tr(id, Compiled, a, EvalQueued).with_lease(9).into(),
                Change {
                    transition: tr(id, EvalQueued, a + 1, Evaluated),
                    result: Some(row.clone()),
                },
            ],
            builds: vec![],
        };
        assert_eq!(store.apply(&batch).await.unwrap(), vec![false, true, true]);
        let j = store.job(id).await.unwrap().unwrap();
        assert_eq!((j.state, j.attempt), (Evaluated, a + 1));
        assert_eq!(j.lease_deadline_ms, None);
        assert_ne!(
            j.artifact.as_deref(),
            Some("sha256:bb"),
            "stale artifact not written"
        );
        assert_eq!(store.results(id).await.unwrap(), vec![row]);
    }

    #[tokio::test]
    async fn retries_and_failures_of_a_chain_are_those_of_one_by_one() {
        let store = store().await;
        let w = world(&store).await;
        let id = one_job(&store, &w, "8").await;
        to_compiled(&store, id).await;
        let a = store.job(id).await.unwrap().unwrap().attempt;
        assert!(step(&store, tr(id, Compiled, a, EvalQueued)).await);
        // Handed back (a retry, with its reason) and dispatched again in one batch.
        let batch = Batch {
            changes: vec![
                tr(id, EvalQueued, a + 1, Compiled)
                    .counting_retry()
                    .with_failure(
                        shoal_model::FailureKind::Infrastructure,
                        "device lost".to_string(),
                    )
                    .into(),
                tr(id, Compiled, a + 1, EvalQueued).with_lease(3).into(),
            ],
            builds: vec![],
        };
        assert_eq!(store.apply(&batch).await.unwrap(), vec![true, true]);
        let j = store.job(id).await.unwrap().unwrap();
        assert_eq!((j.state, j.attempt, j.retries), (EvalQueued, a + 2, 1));
        assert_eq!(
            j.last_error, None,
            "the dispatch clears the reason, as one by one"
        );
        assert_eq!(j.failure, None);
    }
}

/// Migration 3 rebuilds the job table: a store at version 2 with jobs and results keeps every
/// row and id, and foreign keys hold afterwards.
#[test]
fn migration_3_keeps_jobs_and_results() {
    use super::migrate::MIGRATIONS;
    let store = SqliteStore::open_in_memory().unwrap();
    let mut conn = store.conn.lock().unwrap();
    conn.execute_batch(queries::CREATE_SCHEMA_VERSION).unwrap();
    for (version, sql) in MIGRATIONS.iter().filter(|(v, _)| *v <= 2) {
        conn.execute_batch(sql).unwrap();
        conn.execute(queries::INSERT_SCHEMA_VERSION, (version, 0))
            .unwrap();
    }
    conn.execute_batch(
        "INSERT INTO session VALUES (1, 'r', 'a', 1, 'b', 's', 'p', 'l', 'd', 3, 0);
         INSERT INTO config VALUES (1, 'k', 'key', '[]');
         INSERT INTO solver VALUES (1, 's', 1);
         INSERT INTO job (id, session_id, config_id, solver_id, compile_step, eval_step,
             compile_params, run_params, candidate_key, build_key, state, attempt, artifact,
             created_ms, updated_ms, finished_ms)
         VALUES (7, 1, 1, 1, 'c', 'e', '[]', '[]', 'k1', 'b', 'evaluated', 2, 'sha256:a', 1, 2, 3),
                (9, 1, 1, 1, 'c', 'e', '[]', '[]', 'k2', 'b', 'new', 0, NULL, 1, 1, NULL);
         INSERT INTO result (job_id, session_id, attempt, status, worker, device, created_ms)
         VALUES (7, 1, 2, 'ok', 'w', 'd', 3);",
    )
    .unwrap();
    assert_eq!(migrate(&mut conn).unwrap(), super::SCHEMA_VERSION);
    type Row = (i64, String, i64, Option<String>, Option<i64>);
    let rows: Vec<Row> = conn
        .prepare("SELECT id, state, attempt, artifact, finished_ms FROM job ORDER BY id")
        .unwrap()
        .query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    assert_eq!(
        rows,
        vec![
            (7, "evaluated".into(), 2, Some("sha256:a".into()), Some(3)),
            (9, "new".into(), 0, None, None),
        ]
    );
    // Still enforced: the state rule, and that a result's job exists.
    assert!(conn
        .execute("UPDATE job SET state = 'lost' WHERE id = 9", [])
        .is_err());
    assert!(conn.execute("DELETE FROM job WHERE id = 7", []).is_err());
    let copies: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM sqlite_master WHERE name LIKE 'job_0003%'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(copies, 0, "the copy is gone");
}

/// Migration 10 adds the database imports to a store that already holds a session's work: every
/// row stays, and an import's records join to the configs that were there before.
#[test]
fn migration_10_adds_imports_beside_existing_rows() {
    use super::migrate::MIGRATIONS;
    let store = SqliteStore::open_in_memory().unwrap();
    let mut conn = store.conn.lock().unwrap();
    conn.execute_batch(queries::CREATE_SCHEMA_VERSION).unwrap();
    for (version, sql) in MIGRATIONS.iter().filter(|(v, _)| *v <= 9) {
        conn.execute_batch(sql).unwrap();
        conn.execute(queries::INSERT_SCHEMA_VERSION, (version, 0))
            .unwrap();
    }
    conn.execute_batch(
        "INSERT INTO session VALUES (1, 'r', 'gfx942', 304, 'miopen', 's', 'p', 'l', 'd', 3, 0);
         INSERT INTO config VALUES (4, 'conv', 'conv -n 16 -c 512', '[]');
         INSERT INTO solver VALUES (1, 'ConvBinWinogradRxSf3x2', 1);
         INSERT INTO job (id, session_id, config_id, solver_id, compile_step, eval_step,
             compile_params, run_params, candidate_key, build_key, state, attempt, artifact,
             created_ms, updated_ms, finished_ms)
         VALUES (7, 1, 4, 1, 'c', 'e', '[]', '[]', 'k1', 'b', 'evaluated', 2, 'sha256:a', 1, 2, 3);",
    )
    .unwrap();
    assert_eq!(migrate(&mut conn).unwrap(), super::SCHEMA_VERSION);
    let jobs: i64 = conn
        .query_row("SELECT COUNT(*) FROM job WHERE config_id = 4", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(jobs, 1, "the job is still there");
    let import = crate::NewDbImport {
        label: "shipped".into(),
        arch: "gfx942".into(),
        num_cu: 304,
        files: vec!["gfx942130.HIP.fdb.txt".into()],
        created_ms: 5,
    };
    let record = crate::DbRecord {
        config: Some(shoal_model::ConfigId(4)),
        key: "512-13-13-1x1-1000-13-13-16-0x0-1x1-1x1-0-NCHW-FP32-F".into(),
        solver: "ConvBinWinogradRxSf3x2".into(),
        value: crate::DbValue::Find {
            time_ms: 0.139621,
            workspace: 0,
            algorithm: "miopenConvolutionFwdAlgoWinograd".into(),
        },
    };
    let id = super::db_import::create(&mut conn, &import, &[record]).unwrap();
    // The join a comparison makes: the import's time beside the session's job, by config.
    let joined: (i64, String, f64) = conn
        .query_row(
            "SELECT j.id, r.solver, r.time_ms FROM db_record r \
             JOIN job j ON j.config_id = r.config_id WHERE r.import_id = ?1",
            [id.0],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!(
        joined,
        (7, "ConvBinWinogradRxSf3x2".into(), f64::from(0.139621f32))
    );
    // The kind decides which value columns a row has.
    assert!(conn
        .execute(
            "INSERT INTO db_record (import_id, seq, kind, db_key, solver, params) \
             VALUES (?1, 1, 'find', 'k', 's', 'p')",
            [id.0],
        )
        .is_err());
}

/// Migration 12 on a store written before it, where the exec backend was named `command`: its
/// rows read as exec ([`crate::conformance::old_names_read_as_exec`]).
#[tokio::test]
async fn migration_12_names_the_command_backend_exec() {
    let store = SqliteStore::open_in_memory().unwrap();
    let conn = store.conn.clone();
    crate::conformance::old_names_read_as_exec(&store, || async move {
        conn.lock()
            .unwrap()
            .execute_batch(
                "UPDATE session SET backend = 'command' WHERE backend = 'exec';
                 UPDATE job SET compile_step = 'command_build' WHERE compile_step = 'exec_build';
                 UPDATE job SET eval_step = 'command_run' WHERE eval_step = 'exec_run';
                 DELETE FROM schema_version WHERE version >= 12;",
            )
            .unwrap();
    })
    .await;
}
