//! What the MySQL store reads of its own size: the tables of its database and their bytes,
//! which the start-up check weighs against InnoDB's buffer pool and `shoal-bench dispatch`
//! divides by its jobs.

use shoal_store::conformance::{new_job, world};
use shoal_store::mysql::{pool_warning, ScratchDb};
use shoal_store::Store;

#[tokio::test]
async fn table_sizes_list_the_stores_tables_and_grow_with_its_jobs() {
    let db = ScratchDb::new("shoal_t").await.unwrap();
    db.migrate().await.unwrap();
    let before = db.store().table_sizes().await.unwrap();
    let names: Vec<&str> = before.iter().map(|t| t.name.as_str()).collect();
    for table in ["job", "result", "outbox", "session"] {
        assert!(names.contains(&table), "{table} missing from {names:?}");
    }
    let job_bytes = |tables: &[shoal_store::mysql::TableSize]| {
        tables.iter().find(|t| t.name == "job").unwrap().bytes()
    };
    let empty = job_bytes(&before);
    assert!(empty > 0, "an InnoDB table takes pages even when empty");
    assert_eq!(
        pool_warning(128 << 20, &before),
        None,
        "a fresh store is no reason to warn"
    );

    let w = world(&db).await;
    let jobs: Vec<_> = (0..4000)
        .map(|i| new_job(&w, &i.to_string(), &format!("b{}", i % 50)))
        .collect();
    assert_eq!(db.insert_jobs(&jobs).await.unwrap(), 4000);
    db.store().analyze_tables().await.unwrap();
    let after = db.store().table_sizes().await.unwrap();
    assert!(
        job_bytes(&after) > empty,
        "4,000 jobs take more than the empty table ({} against {empty})",
        job_bytes(&after)
    );
    // The same table, judged against a pool far smaller than it: the advice names both.
    let m = pool_warning(job_bytes(&after) / 4, &after).expect("a warning");
    assert!(m.contains("innodb_buffer_pool_size"), "{m}");
}
