//! MySQL migrations applied to a database that already holds work: what a deployment upgraded
//! in place goes through (the SQLite store's are in `src/sqlite/tests.rs`).

use mysql_async::prelude::Queryable;
use shoal_store::conformance::{new_job, one_job, world};
use shoal_store::mysql::{ScratchDb, SCHEMA_VERSION};
use shoal_store::{DbRecord, DbValue, NewDbImport, Store};

/// Migration 9 (database imports) on a store at version 8 with a session's job: the job stays,
/// and an import's records join to it by config id.
#[tokio::test]
async fn migration_9_adds_imports_beside_a_sessions_work() {
    let db = ScratchDb::new("shoal_t").await.unwrap();
    db.migrate().await.unwrap();
    let w = world(&db).await;
    let job = one_job(&db, &w, "8").await;
    // Back to version 8: the tables of 9 gone and not recorded, the work still there.
    let mut conn = db.store().connection().await.unwrap();
    for sql in [
        "DROP TABLE db_record",
        "DROP TABLE db_import",
        "DELETE FROM schema_version WHERE version >= 9",
    ] {
        conn.query_drop(sql).await.unwrap();
    }
    assert_eq!(db.store().schema_version().await.unwrap(), 8);
    assert_eq!(db.migrate().await.unwrap(), SCHEMA_VERSION);
    assert_eq!(db.job(job).await.unwrap().unwrap().config, w.config);
    let import = NewDbImport {
        label: "shipped".into(),
        arch: "gfx942".into(),
        num_cu: 304,
        files: vec!["gfx942130.db.txt".into()],
        created_ms: 5,
    };
    let record = DbRecord {
        config: Some(w.config),
        key: "2x1024x14x14x1x3x3x1x1024x16x1x1x0x1x1x0x1x1x0x0x32xNCHWxFP16xF".into(),
        solver: "gemm".into(),
        value: DbValue::Perf {
            params: "16,16,4".into(),
        },
    };
    let id = db.create_db_import(&import, &[record]).await.unwrap();
    let joined: Option<(i64, String)> = conn
        .exec_first(
            "SELECT j.id, r.params FROM db_record r JOIN job j ON j.config_id = r.config_id \
             JOIN solver s ON s.id = j.solver_id AND s.name = r.solver WHERE r.import_id = ?",
            (id.0,),
        )
        .await
        .unwrap();
    assert_eq!(joined, Some((job.0, "16,16,4".to_string())));
    drop(conn);
}

/// After a rebuild of `job` and `result`: the outbox row owed for `(job, attempt)` came through,
/// the outbox's foreign key guards the new table, and the rebuild's other tables are gone.
async fn assert_rebuilt(conn: &mut mysql_async::Conn, owed: (i64, u32), gone: [&str; 4]) {
    let found: Option<i64> = conn
        .exec_first("SELECT job_id FROM outbox WHERE job_attempt = ?", (owed.1,))
        .await
        .unwrap();
    assert_eq!(found, Some(owed.0));
    let orphan = conn
        .query_drop("INSERT INTO outbox (job_id, job_attempt, owed_ms) VALUES (123456, 0, 9)")
        .await;
    assert!(
        orphan.is_err(),
        "the outbox's foreign key refers to the new job table"
    );
    let left: Option<i64> = conn
        .exec_first(
            "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() \
             AND table_name IN (?, ?, ?, ?)",
            (gone[0], gone[1], gone[2], gone[3]),
        )
        .await
        .unwrap();
    assert_eq!(left, Some(0), "tables {gone:?} are gone");
}

/// The migrations a store of version 9 was made with, applied as files: a deployment's
/// database before migration 10.
const UP_TO_9: [&str; 9] = [
    include_str!("../../../schemas/mysql/0001_init.sql"),
    include_str!("../../../schemas/mysql/0002_applicability.sql"),
    include_str!("../../../schemas/mysql/0003_outbox.sql"),
    include_str!("../../../schemas/mysql/0004_search_states.sql"),
    include_str!("../../../schemas/mysql/0005_worker.sql"),
    include_str!("../../../schemas/mysql/0006_command.sql"),
    include_str!("../../../schemas/mysql/0007_session_cancel.sql"),
    include_str!("../../../schemas/mysql/0008_shipped_file.sql"),
    include_str!("../../../schemas/mysql/0009_db_import.sql"),
];

/// Migration 10 (lean job and result rows) on a version-9 store holding an evaluated job with
/// its result, a new job with a request owed for it, and a lean copy cut off half-way: every
/// row comes through unchanged, the identity of the old rows is the identity of the new ones
/// (inserting the same jobs again adds nothing), and the outbox still refers to the jobs.
#[tokio::test]
async fn migration_10_carries_jobs_results_and_the_outbox_into_the_lean_tables() {
    use shoal_model::JobState;
    let db = ScratchDb::new("shoal_t").await.unwrap();
    let mut conn = db.store().connection().await.unwrap();
    for file in UP_TO_9 {
        conn.query_drop(file).await.unwrap();
    }
    conn.query_drop(
        "CREATE TABLE schema_version (version INT UNSIGNED NOT NULL PRIMARY KEY, \
         applied_ms BIGINT NOT NULL)",
    )
    .await
    .unwrap();
    conn.query_drop(
        "INSERT INTO schema_version VALUES (1, 0), (2, 0), (3, 0), (4, 0), (5, 0), (6, 0), \
         (7, 0), (8, 0), (9, 0)",
    )
    .await
    .unwrap();
    assert_eq!(db.store().schema_version().await.unwrap(), 9);
    let w = world(&db).await;

    // Two jobs written as version 9 wrote them (candidate_key beside its hash).
    let job_v9 = |tile: &str, state: &str, attempt: u32| {
        let job = new_job(&w, tile, &format!("build-{tile}"));
        (
            w.session.0,
            w.config.0,
            w.solver.0,
            job.compile_step.as_str(),
            job.eval_step.as_str(),
            serde_json::to_string(&job.compile_params).unwrap(),
            serde_json::to_string(&job.run_params).unwrap(),
            job.candidate_key(),
            job.build_key.clone(),
            state.to_string(),
            attempt,
        )
    };
    let insert_v9 = "INSERT INTO job (session_id, config_id, solver_id, compile_step, eval_step, \
         compile_params, run_params, candidate_key, build_key, state, attempt, created_ms, \
         updated_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 5, 6)";
    conn.exec_drop(insert_v9, job_v9("1", "evaluated", 2))
        .await
        .unwrap();
    let evaluated: i64 = conn
        .exec_first("SELECT LAST_INSERT_ID()", ())
        .await
        .unwrap()
        .unwrap();
    conn.exec_drop(
        "UPDATE job SET worker = 'host-a/gpu0', artifact = 'sha256:aa', finished_ms = 7 \
         WHERE id = ?",
        (evaluated,),
    )
    .await
    .unwrap();
    conn.exec_drop(insert_v9, job_v9("2", "new", 0))
        .await
        .unwrap();
    let new: i64 = conn
        .exec_first("SELECT LAST_INSERT_ID()", ())
        .await
        .unwrap()
        .unwrap();
    conn.exec_drop(
        "INSERT INTO result (job_id, session_id, attempt, status, time_us, samples, workspace, \
         detail, worker, device, created_ms) \
         VALUES (?, ?, 2, 'ok', 12.5, '[12.5,13.0]', 4096, NULL, 'host-a/gpu0', 'H100', 7)",
        (evaluated, w.session.0),
    )
    .await
    .unwrap();
    conn.exec_drop(
        "INSERT INTO outbox (job_id, job_attempt, owed_ms) VALUES (?, 0, 8)",
        (new,),
    )
    .await
    .unwrap();

    // A migration cut off after its file and part of a copy: the lean table already holds a
    // row that the finished migration must not keep.
    conn.query_drop(include_str!("../../../schemas/mysql/0010_lean_job.sql"))
        .await
        .unwrap();
    conn.exec_drop(
        "INSERT INTO job_lean (id, session_id, config_id, solver_id, compile_step, eval_step, \
         identity_hash, compile_params, run_params, build_key, state, created_ms, updated_ms) \
         VALUES (999, ?, ?, ?, 'x', 'y', 'stale-hash-16byt', '', '', '', 'new', 0, 0)",
        (w.session.0, w.config.0, w.solver.0),
    )
    .await
    .unwrap();

    assert_eq!(db.migrate().await.unwrap(), SCHEMA_VERSION);
    assert_eq!(
        db.migrate().await.unwrap(),
        SCHEMA_VERSION,
        "a second run changes nothing"
    );

    let j = db
        .job(shoal_model::JobId(evaluated))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((j.state, j.attempt), (JobState::Evaluated, 2));
    assert_eq!(j.compile_params.get("TILE"), Some("1"));
    assert_eq!(j.build_key, "build-1");
    assert_eq!(j.worker.as_deref(), Some("host-a/gpu0"));
    assert_eq!(j.artifact.as_deref(), Some("sha256:aa"));
    let results = db.results(j.id).await.unwrap();
    assert_eq!(results.len(), 1);
    assert_eq!(
        (results[0].attempt, results[0].device.as_str()),
        (2, "H100")
    );
    assert!(
        db.job(shoal_model::JobId(999)).await.unwrap().is_none(),
        "stale copy dropped"
    );

    // The old rows' identity is the new rows' identity: the same jobs again add nothing.
    let same = [new_job(&w, "1", "build-1"), new_job(&w, "2", "build-2")];
    assert_eq!(db.insert_jobs(&same).await.unwrap(), 0);
    assert_eq!(
        db.insert_jobs(&[new_job(&w, "3", "build-3")])
            .await
            .unwrap(),
        1
    );
    let fresh = db
        .jobs_in_state(w.session, JobState::New, 10)
        .await
        .unwrap();
    let mut tiles: Vec<_> = fresh
        .iter()
        .map(|j| j.compile_params.get("TILE").unwrap().to_string())
        .collect();
    tiles.sort();
    assert_eq!(tiles, ["2", "3"]);

    assert_rebuilt(
        &mut conn,
        (new, 0),
        ["job_v9", "result_v9", "job_lean", "result_lean"],
    )
    .await;
    drop(conn);
}

/// A store at version 10, as a deployment has it: the files of 1 to 10 and migration 10's swap
/// (on empty tables, so its copy has nothing to carry).
async fn store_at_version_10(db: &ScratchDb) {
    let mut conn = db.store().connection().await.unwrap();
    for file in UP_TO_9 {
        conn.query_drop(file).await.unwrap();
    }
    conn.query_drop(include_str!("../../../schemas/mysql/0010_lean_job.sql"))
        .await
        .unwrap();
    for sql in [
        "ALTER TABLE outbox DROP FOREIGN KEY outbox_job",
        "RENAME TABLE job TO job_v9, job_lean TO job, result TO result_v9, result_lean TO result",
        "DROP TABLE result_v9, job_v9",
        "ALTER TABLE outbox ADD CONSTRAINT outbox_job_ref FOREIGN KEY (job_id) REFERENCES job (id)",
        "CREATE TABLE schema_version (version INT UNSIGNED NOT NULL PRIMARY KEY, \
         applied_ms BIGINT NOT NULL)",
        "INSERT INTO schema_version VALUES (1, 0), (2, 0), (3, 0), (4, 0), (5, 0), (6, 0), \
         (7, 0), (8, 0), (9, 0), (10, 0)",
    ] {
        conn.query_drop(sql).await.unwrap();
    }
    assert_eq!(db.store().schema_version().await.unwrap(), 10);
}

/// Migration 11 (labels, compact rows) on a version-10 store holding an evaluated job with
/// its result, an errored one with its failure, a queued one with a lease and a request owed,
/// and a compact copy cut off half-way: every value comes back through the store as it was
/// written, the identity still holds, and the outbox still refers to the jobs.
#[tokio::test]
async fn migration_11_carries_jobs_into_compact_rows_with_labels() {
    use shoal_model::{FailureKind, JobId, JobState, Outcome};
    let db = ScratchDb::new("shoal_t").await.unwrap();
    store_at_version_10(&db).await;
    let w = world(&db).await;
    let mut conn = db.store().connection().await.unwrap();

    // Jobs written as version 10 wrote them: text in every column, NULL for none.
    let insert_v10 = "INSERT INTO job (session_id, config_id, solver_id, compile_step, eval_step, \
         identity_hash, compile_params, run_params, build_key, state, attempt, \
         lease_deadline_ms, worker, artifact, failure_kind, last_error, created_ms, updated_ms, \
         compile_queued_ms, finished_ms) VALUES (?, ?, ?, ?, ?, \
         UNHEX(LEFT(SHA2(CONCAT(?, CHAR(10), ?, CHAR(10), ?, CHAR(10), ?, CHAR(10), ?), 256), 32)), \
         ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 5, 6, 5, ?)";
    let mut ids = Vec::new();
    #[allow(clippy::type_complexity)]
    let rows: [(
        &str,
        &str,
        u32,
        Option<i64>,
        Option<&str>,
        Option<&str>,
        Option<(&str, &str)>,
        Option<i64>,
    ); 3] = [
        (
            "1",
            "evaluated",
            2,
            None,
            Some("host-a/gpu0"),
            Some("sha256:aa"),
            None,
            Some(7),
        ),
        (
            "2",
            "errored",
            2,
            None,
            Some("host-b/gpu1"),
            Some("sha256:bb"),
            Some((FailureKind::WrongAnswer.as_str(), "mismatch at 3")),
            Some(8),
        ),
        (
            "3",
            "compile_queued",
            1,
            Some(12_345),
            None,
            None,
            None,
            None,
        ),
    ];
    for (tile, state, attempt, lease, worker, artifact, failure, finished) in rows {
        let job = new_job(&w, tile, &format!("build-{tile}"));
        let params: Vec<mysql_async::Value> = vec![
            w.session.0.into(),
            w.config.0.into(),
            w.solver.0.into(),
            job.compile_step.as_str().into(),
            job.eval_step.as_str().into(),
            w.config.0.into(),
            w.solver.0.into(),
            job.compile_step.as_str().into(),
            job.eval_step.as_str().into(),
            job.candidate_key().into(),
            serde_json::to_string(&job.compile_params).unwrap().into(),
            serde_json::to_string(&job.run_params).unwrap().into(),
            job.build_key.clone().into(),
            state.into(),
            attempt.into(),
            lease.into(),
            worker.into(),
            artifact.into(),
            failure.map(|f| f.0).into(),
            failure.map(|f| f.1).into(),
            finished.into(),
        ];
        conn.exec_drop(insert_v10, params).await.unwrap();
        let id: i64 = conn
            .exec_first("SELECT LAST_INSERT_ID()", ())
            .await
            .unwrap()
            .unwrap();
        ids.push(id);
    }
    let (evaluated, errored, queued) = (ids[0], ids[1], ids[2]);
    let insert_result = "INSERT INTO result (job_id, attempt, session_id, status, time_us, \
         samples, workspace, detail, worker, device, created_ms) \
         VALUES (?, 2, ?, ?, ?, ?, ?, ?, ?, 'H100', ?)";
    conn.exec_drop(
        insert_result,
        (
            evaluated,
            w.session.0,
            "ok",
            Some(12.5),
            Some("[12.5,13.0]"),
            Some(4096),
            None::<String>,
            "host-a/gpu0",
            7,
        ),
    )
    .await
    .unwrap();
    conn.exec_drop(
        insert_result,
        (
            errored,
            w.session.0,
            FailureKind::WrongAnswer.as_str(),
            None::<f64>,
            None::<String>,
            None::<i64>,
            Some("mismatch at 3"),
            "host-b/gpu1",
            8,
        ),
    )
    .await
    .unwrap();
    conn.exec_drop(
        "INSERT INTO outbox (job_id, job_attempt, owed_ms) VALUES (?, 1, 8)",
        (queued,),
    )
    .await
    .unwrap();

    // A migration cut off after its file and part of a copy: a stale compact row and a label.
    conn.query_drop(include_str!("../../../schemas/mysql/0011_compact_job.sql"))
        .await
        .unwrap();
    conn.exec_drop("INSERT INTO label (text) VALUES ('stale')", ())
        .await
        .unwrap();
    conn.exec_drop(
        "INSERT INTO job_compact (id, session_id, config_id, solver_id, compile_step, eval_step, \
         identity_hash, compile_params, run_params, build_key, state, created_ms, updated_ms) \
         VALUES (999, ?, ?, ?, 1, 1, 'stale-hash-16byt', '', '', 1, 'new', 0, 0)",
        (w.session.0, w.config.0, w.solver.0),
    )
    .await
    .unwrap();

    assert_eq!(db.migrate().await.unwrap(), SCHEMA_VERSION);
    assert_eq!(
        db.migrate().await.unwrap(),
        SCHEMA_VERSION,
        "a second run changes nothing"
    );

    let j = db.job(JobId(evaluated)).await.unwrap().unwrap();
    assert_eq!((j.state, j.attempt), (JobState::Evaluated, 2));
    assert_eq!(j.compile_params.get("TILE"), Some("1"));
    assert_eq!(j.build_key, "build-1");
    assert_eq!(j.compile_step, shoal_model::Step::ExecBuild);
    assert_eq!(j.worker.as_deref(), Some("host-a/gpu0"));
    assert_eq!(j.artifact.as_deref(), Some("sha256:aa"));
    assert_eq!((j.lease_deadline_ms, j.failure), (None, None));
    let results = db.results(j.id).await.unwrap();
    assert_eq!(results.len(), 1);
    assert_eq!(
        (
            results[0].session,
            results[0].attempt,
            results[0].device.as_str(),
            results[0].worker.as_str()
        ),
        (w.session, 2, "H100", "host-a/gpu0")
    );
    let e = db.job(JobId(errored)).await.unwrap().unwrap();
    assert_eq!(e.failure, Some(FailureKind::WrongAnswer));
    assert_eq!(e.last_error.as_deref(), Some("mismatch at 3"));
    let q = db.job(JobId(queued)).await.unwrap().unwrap();
    assert_eq!(
        (q.state, q.lease_deadline_ms, q.worker.clone()),
        (JobState::CompileQueued, Some(12_345), None)
    );
    assert!(
        db.job(JobId(999)).await.unwrap().is_none(),
        "stale copy dropped"
    );

    // Reads across the session: final results in job order, the failure's outcome, the
    // finish times, the in-flight job and its lease.
    let finals = db.final_results(w.session).await.unwrap();
    assert_eq!(finals.iter().map(|f| f.job.0).collect::<Vec<_>>(), ids);
    assert!(
        matches!(&finals[1].outcome, Some(Outcome::Failed { kind: FailureKind::WrongAnswer, detail }) if detail == "mismatch at 3")
    );
    assert_eq!(finals[0].device.as_deref(), Some("H100"));
    assert_eq!(db.finish_times(w.session, 0).await.unwrap(), [7, 8]);
    let in_flight: Vec<i64> = db
        .in_flight(w.session)
        .await
        .unwrap()
        .iter()
        .map(|j| j.id.0)
        .collect();
    assert_eq!(in_flight, [queued]);
    let expired: Vec<i64> = db
        .expired_leases(20_000, 10)
        .await
        .unwrap()
        .iter()
        .map(|j| j.id.0)
        .collect();
    assert_eq!(expired, [queued]);

    // The old rows' identity is the new rows' identity: the same jobs again add nothing.
    let same = ["1", "2", "3"].map(|t| new_job(&w, t, &format!("build-{t}")));
    assert_eq!(db.insert_jobs(&same).await.unwrap(), 0);

    assert_rebuilt(
        &mut conn,
        (queued, 1),
        ["job_v10", "result_v10", "job_compact", "result_compact"],
    )
    .await;
    // Each distinct string once: 2 steps, 3 build keys, 2 workers, 2 artifacts, a failure
    // kind, `ok`, a device (and the stale label of the cut-off run).
    let labels: Option<i64> = conn
        .exec_first("SELECT COUNT(*) FROM label", ())
        .await
        .unwrap();
    assert_eq!(labels, Some(13));
    drop(conn);
}

/// Every state the model knows fits the `state` column (an ENUM since migration 11): a state
/// added to the model without a migration would fail every write of it.
#[tokio::test]
async fn every_job_state_is_a_value_of_the_state_column() {
    let db = ScratchDb::new("shoal_t").await.unwrap();
    db.migrate().await.unwrap();
    let mut conn = db.store().connection().await.unwrap();
    let column: Option<String> = conn
        .exec_first(
            "SELECT column_type FROM information_schema.columns WHERE table_schema = DATABASE() \
             AND table_name = 'job' AND column_name = 'state'",
            (),
        )
        .await
        .unwrap();
    let column = column.unwrap();
    for state in shoal_model::JobState::ALL {
        assert!(
            column.contains(&format!("'{}'", state.as_str())),
            "{state:?} is not in {column}"
        );
    }
    drop(conn);
}

/// A store made the way `scripts/services-up` made one before it ran `shoal db migrate`: every
/// file applied by itself and every version recorded, so that `job` is still version 1's with
/// the lean and compact tables beside it. `migrate` finishes the rebuilds the record claims.
#[tokio::test]
async fn migrate_finishes_rebuilds_recorded_but_never_run() {
    let db = ScratchDb::new("shoal_t").await.unwrap();
    let mut conn = db.store().connection().await.unwrap();
    for file in UP_TO_9.into_iter().chain([
        include_str!("../../../schemas/mysql/0010_lean_job.sql"),
        include_str!("../../../schemas/mysql/0011_compact_job.sql"),
    ]) {
        conn.query_drop(file).await.unwrap();
    }
    conn.query_drop(
        "CREATE TABLE schema_version (version INT UNSIGNED NOT NULL PRIMARY KEY, \
         applied_ms BIGINT NOT NULL)",
    )
    .await
    .unwrap();
    conn.query_drop(
        "INSERT INTO schema_version VALUES (1, 0), (2, 0), (3, 0), (4, 0), (5, 0), (6, 0), \
         (7, 0), (8, 0), (9, 0), (10, 0), (11, 0)",
    )
    .await
    .unwrap();
    // services-up stopped applying files by itself before version 12.
    assert_eq!(db.store().schema_version().await.unwrap(), 11);

    assert_eq!(db.migrate().await.unwrap(), SCHEMA_VERSION);
    let step_type: Option<String> = conn
        .exec_first(
            "SELECT data_type FROM information_schema.columns WHERE table_schema = DATABASE() \
             AND table_name = 'job' AND column_name = 'compile_step'",
            (),
        )
        .await
        .unwrap();
    assert_eq!(
        step_type.as_deref(),
        Some("int"),
        "job is the compact table"
    );
    let w = world(&db).await;
    let job = one_job(&db, &w, "8").await;
    assert_eq!(db.job(job).await.unwrap().unwrap().config, w.config);
    drop(conn);
}
