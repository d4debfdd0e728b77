//! MySQL migrations applied to a database that already holds work: what a deployment upgraded
//! in place goes through (the SQLite store's are in `src/sqlite/tests.rs`).

use mysql_async::prelude::Queryable;
use shoal_store::conformance::{one_job, world};
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
        "DELETE FROM schema_version WHERE version = 9",
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
