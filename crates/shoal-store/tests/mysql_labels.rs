//! Labels (schema version 11): the strings job and result rows share, written by every process
//! that loads or applies work.

use mysql_async::prelude::Queryable;
use shoal_model::JobState::New;
use shoal_store::conformance::{new_job, world};
use shoal_store::mysql::ScratchDb;
use shoal_store::Store;

/// Another process inserts a label this store needs and commits only while this store's
/// transaction waits to insert the same text: the store's insert leaves the other's label as it
/// is and reads its id (the store's transactions read committed rows, `mysql::SESSION_SETUP`),
/// so the load succeeds with one label for the text.
#[tokio::test]
async fn a_label_committed_by_another_process_meanwhile_is_found() {
    let db = ScratchDb::new("shoal_t").await.unwrap();
    db.migrate().await.unwrap();
    let w = world(&db).await;
    let url = format!(
        "{}/{}",
        shoal_store::mysql::scratch::test_server(),
        db.name()
    );
    let mut other = mysql_async::Conn::new(mysql_async::Opts::from_url(&url).unwrap())
        .await
        .unwrap();
    other.query_drop("START TRANSACTION").await.unwrap();
    other
        .exec_drop("INSERT INTO label (text) VALUES (?)", ("key-held",))
        .await
        .unwrap();
    let job = new_job(&w, "1", "key-held");
    let commit_later = async {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        other.query_drop("COMMIT").await.unwrap();
    };
    let (inserted, ()) = tokio::join!(db.insert_jobs(std::slice::from_ref(&job)), commit_later);
    assert_eq!(inserted.unwrap(), 1);
    let jobs = db.jobs_in_state(w.session, New, 10).await.unwrap();
    assert_eq!(jobs[0].build_key, "key-held");
    let labels: Option<i64> = other
        .exec_first("SELECT COUNT(*) FROM label WHERE text = 'key-held'", ())
        .await
        .unwrap();
    assert_eq!(labels, Some(1));
    other.disconnect().await.unwrap();
}
