//! MySQL migration 12 (the command backend named exec) on a store written before it: the rows
//! of the backend's old name read as exec, and its jobs keep their identity
//! ([`shoal_store::conformance::old_names_read_as_exec`]; the SQLite store's is in
//! `src/sqlite/tests.rs`).

use mysql_async::prelude::Queryable;
use shoal_model::record::candidate_key;
use shoal_model::Params;
use shoal_store::mysql::ScratchDb;
use shoal_store::Store;

/// As a build before migration 12 wrote them: the labels of the old step names, the jobs
/// naming them with the identity hash `INSERT_JOB` computed from them, the sessions' old
/// backend, and version 11.
async fn age(db: &ScratchDb) {
    let mut conn = db.store().connection().await.unwrap();
    conn.query_drop(
        "INSERT INTO label (text) VALUES ('command_build'), ('command_run') \
         ON DUPLICATE KEY UPDATE id = id",
    )
    .await
    .unwrap();
    let jobs: Vec<(i64, i64, i64, String, String)> = conn
        .query(
            "SELECT j.id, j.config_id, j.solver_id, j.compile_params, j.run_params FROM job j \
             JOIN label cs ON cs.id = j.compile_step WHERE cs.text = 'exec_build'",
        )
        .await
        .unwrap();
    assert!(!jobs.is_empty());
    for (id, config, solver, compile, run) in jobs {
        let compile: Params = serde_json::from_str(&compile).unwrap();
        let run: Params = serde_json::from_str(&run).unwrap();
        conn.exec_drop(
            "UPDATE job SET \
             compile_step = (SELECT id FROM label WHERE text = 'command_build'), \
             eval_step = (SELECT id FROM label WHERE text = 'command_run'), \
             identity_hash = UNHEX(LEFT(SHA2(CONCAT(?, CHAR(10), ?, CHAR(10), 'command_build', \
             CHAR(10), 'command_run', CHAR(10), ?), 256), 32)) WHERE id = ?",
            (config, solver, candidate_key(&compile, &run), id),
        )
        .await
        .unwrap();
    }
    for sql in [
        "UPDATE session SET backend = 'command' WHERE backend = 'exec'",
        "DELETE FROM schema_version WHERE version >= 12",
    ] {
        conn.query_drop(sql).await.unwrap();
    }
    drop(conn);
    assert_eq!(db.store().schema_version().await.unwrap(), 11);
}

#[tokio::test]
async fn migration_12_names_the_command_backend_exec() {
    let db = ScratchDb::new("shoal_t").await.unwrap();
    db.migrate().await.unwrap();
    shoal_store::conformance::old_names_read_as_exec(&db, || age(&db)).await;
}
