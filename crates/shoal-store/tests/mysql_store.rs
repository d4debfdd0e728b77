//! What only the MySQL store can show: it survives its connections being killed, refuses a
//! schema written by a newer build, migrates from nothing, keeps credentials out of its
//! messages, and applies batches larger than one statement's worth of ids in order.

use mysql_async::prelude::Queryable;
use shoal_model::{JobId, JobState, NewJob, Transition};
use shoal_store::conformance::{measured, new_job, sample_session, world};
use shoal_store::mysql::{queries, ScratchDb, SCHEMA_VERSION};
use shoal_store::{Batch, Change, MysqlOptions, MysqlStore, Store, StoreError};
use JobState::*;

async fn migrated() -> ScratchDb {
    let db = ScratchDb::new("shoal_t").await.unwrap();
    db.migrate().await.unwrap();
    db
}

/// Kills, from a connection of its own, every connection the store holds to its database.
async fn kill_store_connections(db: &ScratchDb) -> usize {
    let mut admin = mysql_async::Conn::new(
        mysql_async::Opts::from_url(&shoal_store::mysql::scratch::test_server()).unwrap(),
    )
    .await
    .unwrap();
    let ids: Vec<u64> = admin
        .exec(
            "SELECT id FROM information_schema.processlist WHERE db = ? AND id <> CONNECTION_ID()",
            (db.name(),),
        )
        .await
        .unwrap();
    for id in &ids {
        // KILL takes no bound parameter; the id is a number the server gave us.
        admin.query_drop(format!("KILL {id}")).await.unwrap();
    }
    admin.disconnect().await.unwrap();
    ids.len()
}

#[tokio::test]
async fn the_pool_survives_killed_connections() {
    let db = migrated().await;
    let w = world(&db).await;
    for round in 0..3 {
        let tile = round.to_string();
        let killed = kill_store_connections(&db).await;
        assert!(killed >= 1, "round {round}: the pool holds a connection");
        // A write transaction, a read, and a compare-and-set batch, each on a pool whose
        // connections were all killed just before.
        assert_eq!(
            db.insert_jobs(&[new_job(&w, &tile, "b")]).await.unwrap(),
            1,
            "round {round}"
        );
        kill_store_connections(&db).await;
        let jobs = db.jobs_in_state(w.session, New, 10).await.unwrap();
        let job = jobs
            .iter()
            .find(|j| j.compile_params.get("TILE") == Some(tile.as_str()))
            .expect("the job just inserted");
        kill_store_connections(&db).await;
        let t = Transition::new(job.id, New, 0, CompileQueued).unwrap();
        let applied = db
            .apply(&Batch {
                changes: vec![t.into()],
                builds: vec![],
            })
            .await
            .unwrap();
        assert_eq!(applied, vec![true], "round {round}: applied exactly once");
        let j = db.job(job.id).await.unwrap().unwrap();
        assert_eq!((j.state, j.attempt), (CompileQueued, 1), "round {round}");
    }
}

/// A connection killed in the middle of a batch (waiting on a row lock): the transaction never
/// committed, so the store runs the batch again on a fresh connection, and it applies once.
#[tokio::test]
async fn a_batch_killed_mid_statement_is_retried_on_a_fresh_connection() {
    let db = migrated().await;
    let w = world(&db).await;
    let id = shoal_store::conformance::one_job(&db, &w, "1").await;
    let server = mysql_async::Opts::from_url(&shoal_store::mysql::scratch::test_server()).unwrap();
    let mut holder = mysql_async::Conn::new(server.clone()).await.unwrap();
    holder
        .query_drop(format!("USE `{}`", db.name()))
        .await
        .unwrap();
    holder.query_drop("START TRANSACTION").await.unwrap();
    let _: Vec<u64> = holder
        .exec("SELECT id FROM job WHERE id = ? FOR UPDATE", (id.0,))
        .await
        .unwrap();

    let batch = Batch {
        changes: vec![Transition::new(id, New, 0, CompileQueued).unwrap().into()],
        builds: vec![],
    };
    let killer = async {
        let mut admin = mysql_async::Conn::new(server).await.unwrap();
        let waiting = loop {
            let ids: Vec<u64> = admin
                .exec(
                    "SELECT id FROM information_schema.processlist WHERE db = ?                      AND info LIKE 'SELECT id, state, attempt FROM job%'",
                    (db.name(),),
                )
                .await
                .unwrap();
            if let Some(id) = ids.first() {
                break *id;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        };
        admin.query_drop(format!("KILL {waiting}")).await.unwrap();
        // Let the store see the failure and come back for the lock on a new connection.
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        holder.query_drop("COMMIT").await.unwrap();
        admin.disconnect().await.unwrap();
        waiting
    };
    let (applied, killed) = tokio::join!(db.apply(&batch), killer);
    assert_eq!(
        applied.unwrap(),
        vec![true],
        "retried after kill of {killed}"
    );
    let j = db.job(id).await.unwrap().unwrap();
    assert_eq!((j.state, j.attempt), (CompileQueued, 1), "applied once");
}

#[tokio::test]
async fn migrate_from_nothing_records_every_version() {
    let db = ScratchDb::new("shoal_t").await.unwrap();
    assert_eq!(db.store().schema_version().await.unwrap(), 0);
    assert!(db.sessions().await.is_err(), "no tables before migrate");
    assert_eq!(db.migrate().await.unwrap(), SCHEMA_VERSION);
    assert_eq!(db.store().schema_version().await.unwrap(), SCHEMA_VERSION);
    let mut conn = db.store().connection().await.unwrap();
    let versions: Vec<u32> = conn
        .query("SELECT version FROM schema_version ORDER BY version")
        .await
        .unwrap();
    assert_eq!(versions, (1..=SCHEMA_VERSION).collect::<Vec<_>>());
    drop(conn);
    // Concurrent migrations serialise on the lock and agree.
    let (a, b) = tokio::join!(db.migrate(), db.migrate());
    assert_eq!((a.unwrap(), b.unwrap()), (SCHEMA_VERSION, SCHEMA_VERSION));
    assert!(db.sessions().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_half_done_migration_is_finished_by_the_next() {
    let db = migrated().await;
    let mut conn = db.store().connection().await.unwrap();
    // As if the process died after the tables of the last version but before recording it.
    conn.exec_drop(
        "DELETE FROM schema_version WHERE version = ?",
        (SCHEMA_VERSION,),
    )
    .await
    .unwrap();
    drop(conn);
    assert_eq!(
        db.store().schema_version().await.unwrap(),
        SCHEMA_VERSION - 1
    );
    assert_eq!(db.migrate().await.unwrap(), SCHEMA_VERSION);
    assert_eq!(db.store().schema_version().await.unwrap(), SCHEMA_VERSION);
}

#[tokio::test]
async fn schema_too_new_is_refused() {
    let db = migrated().await;
    let mut conn = db.store().connection().await.unwrap();
    conn.exec_drop(
        "INSERT INTO schema_version (version, applied_ms) VALUES (?, 0)",
        (SCHEMA_VERSION + 1,),
    )
    .await
    .unwrap();
    drop(conn);
    assert_eq!(
        db.store().schema_version().await.unwrap(),
        SCHEMA_VERSION + 1
    );
    match db.migrate().await {
        Err(StoreError::SchemaTooNew { found, known }) => {
            assert_eq!((found, known), (SCHEMA_VERSION + 1, SCHEMA_VERSION));
        }
        other => panic!("expected SchemaTooNew, got {other:?}"),
    }
    // The migration lock was released: another migrate answers at once, the same way.
    assert!(matches!(
        db.migrate().await,
        Err(StoreError::SchemaTooNew { .. })
    ));
}

#[tokio::test]
async fn credentials_stay_out_of_descriptions_and_errors() {
    let db = migrated().await;
    // `user@host:port/db`, whoever the test user is, and never a password.
    let described = db.describe();
    assert!(
        described.starts_with("mysql://") && described.contains(":3306/shoal_t_"),
        "{described}"
    );
    assert!(
        !described.contains(':') || described.matches(':').count() == 2,
        "{described}"
    );
    // A wrong password is refused with a message that does not repeat it.
    let url = "mysql://root:hunter2-secret@127.0.0.1:3306/test";
    if let Err(e) = MysqlStore::connect(url).await {
        let text = format!("{e} {e:?}");
        assert!(!text.contains("hunter2-secret"), "{text}");
        assert!(text.contains("mysql://root@127.0.0.1:3306/test"), "{text}");
    }
    let e = MysqlStore::connect("mysql://root:hunter2-secret@127.0.0.1:notaport/x")
        .await
        .unwrap_err();
    assert!(!format!("{e} {e:?}").contains("hunter2-secret"));
    let e = MysqlStore::connect("mysql://root:hunter2-secret@127.0.0.1:3306")
        .await
        .unwrap_err();
    assert!(e.to_string().contains("names no database"), "{e}");
    assert!(!format!("{e} {e:?}").contains("hunter2-secret"));
    let e = MysqlStore::connect_with(
        "mysql://root@127.0.0.1:3306/test",
        MysqlOptions {
            pool_min: 5,
            pool_max: 2,
            ..MysqlOptions::default()
        },
    )
    .await
    .unwrap_err();
    assert!(matches!(e, StoreError::Invalid(_)), "{e}");
}

/// More jobs than one lock statement holds (512), each moved twice in one batch, with stale
/// alternatives in between and a result per job: the replay and the bulk writes must agree.
#[tokio::test]
async fn large_batches_apply_in_order_across_statement_chunks() {
    let db = migrated().await;
    let w = world(&db).await;
    let n = 1300;
    let jobs: Vec<NewJob> = (0..n)
        .map(|i| new_job(&w, &i.to_string(), &format!("b{}", i % 7)))
        .collect();
    assert_eq!(db.insert_jobs(&jobs).await.unwrap(), n as u64);
    assert_eq!(
        db.insert_jobs(&jobs).await.unwrap(),
        0,
        "bulk counts duplicates as 0"
    );
    let ids: Vec<JobId> = db
        .jobs_in_state(w.session, New, n as u32)
        .await
        .unwrap()
        .into_iter()
        .map(|j| j.id)
        .collect();
    assert_eq!(ids.len(), n);
    let mut changes = Vec::new();
    for id in &ids {
        changes.push(
            Transition::new(*id, New, 0, CompileQueued)
                .unwrap()
                .with_lease(5)
                .into(),
        );
    }
    for id in ids.iter().rev() {
        // A stale alternative, then the one that matches; the last carries no result.
        changes.push(Transition::new(*id, Compiling, 1, Compiled).unwrap().into());
        changes.push(
            Transition::new(*id, CompileQueued, 1, Compiled)
                .unwrap()
                .with_artifact(format!("sha256:{id}"))
                .into(),
        );
    }
    let applied = db
        .apply(&Batch {
            changes,
            builds: vec![],
        })
        .await
        .unwrap();
    assert_eq!(applied.len(), 3 * n);
    assert!(applied[..n].iter().all(|a| *a));
    assert!(applied[n..].chunks(2).all(|p| p == [false, true]));
    let counts = db.state_counts(w.session).await.unwrap();
    assert_eq!(counts.get(&Compiled), Some(&(n as u64)));
    let j = db.job(ids[700]).await.unwrap().unwrap();
    assert_eq!(
        (j.state, j.attempt, j.artifact.as_deref()),
        (Compiled, 1, Some(format!("sha256:{}", ids[700]).as_str()))
    );
    assert_eq!(j.lease_deadline_ms, None);

    // Evaluate all of them with results, in one batch.
    let mut changes: Vec<Change> = Vec::new();
    for id in &ids {
        changes.push(
            Transition::new(*id, Compiled, 1, EvalQueued)
                .unwrap()
                .into(),
        );
        changes.push(Change {
            transition: Transition::new(*id, EvalQueued, 2, Evaluated).unwrap(),
            result: Some(measured(&w, *id, 2, id.0 as f64)),
        });
    }
    let applied = db
        .apply(&Batch {
            changes,
            builds: vec![],
        })
        .await
        .unwrap();
    assert!(applied.iter().all(|a| *a));
    let finals = db.final_results(w.session).await.unwrap();
    assert_eq!(finals.len(), n);
    assert!(finals
        .iter()
        .all(|f| f.state == Evaluated && f.outcome.is_some()));
    assert_eq!(
        db.results(ids[3]).await.unwrap(),
        vec![measured(&w, ids[3], 2, ids[3].0 as f64)]
    );
}

/// A duplicate result deep inside a large batch fails the whole batch: nothing of it stays.
#[tokio::test]
async fn a_duplicate_result_rolls_back_a_large_batch() {
    let db = migrated().await;
    let w = world(&db).await;
    let jobs: Vec<NewJob> = (0..600).map(|i| new_job(&w, &i.to_string(), "b")).collect();
    db.insert_jobs(&jobs).await.unwrap();
    let ids: Vec<JobId> = db
        .jobs_in_state(w.session, New, 600)
        .await
        .unwrap()
        .into_iter()
        .map(|j| j.id)
        .collect();
    // Job 0 reaches compile_queued attempt 1 with a result recorded for attempt 1.
    let first = Change {
        transition: Transition::new(ids[0], New, 0, CompileQueued).unwrap(),
        result: Some(measured(&w, ids[0], 1, 1.0)),
    };
    assert_eq!(
        db.apply(&Batch {
            changes: vec![first],
            builds: vec![]
        })
        .await
        .unwrap(),
        vec![true]
    );
    let mut changes: Vec<Change> = ids[1..]
        .iter()
        .map(|id| Transition::new(*id, New, 0, CompileQueued).unwrap().into())
        .collect();
    changes.push(Change {
        transition: Transition::new(ids[0], CompileQueued, 1, New).unwrap(),
        result: Some(measured(&w, ids[0], 1, 2.0)),
    });
    let builds = vec![shoal_store::conformance::built(w.session, "b", "sha256:x")];
    assert!(db.apply(&Batch { changes, builds }).await.is_err());
    let counts = db.state_counts(w.session).await.unwrap();
    assert_eq!(counts.get(&New), Some(&599), "rolled back whole");
    assert!(db
        .builds(w.session, &["b".into()])
        .await
        .unwrap()
        .is_empty());
}

/// The collation ignores trailing spaces; the store's answers do not.
#[tokio::test]
async fn trailing_spaces_keep_identities_apart() {
    let db = migrated().await;
    let a = sample_session("x");
    let b = shoal_model::NewSession {
        reason: "x ".into(),
        ..a.clone()
    };
    let ia = db.create_session(&a).await.unwrap();
    assert_eq!(db.find_session(&b).await.unwrap(), None);
    let ib = db.create_session(&b).await.unwrap();
    assert_eq!(db.find_session(&a).await.unwrap().map(|s| s.id), Some(ia));
    assert_eq!(db.find_session(&b).await.unwrap().map(|s| s.id), Some(ib));
    let w = world(&db).await;
    let mut j1 = new_job(&w, "1", "k");
    j1.compile_params = shoal_model::Params::from_key("T=1").unwrap();
    let mut j2 = j1.clone();
    j2.compile_params = shoal_model::Params::from_key("T=1 ").unwrap();
    assert_eq!(
        db.insert_jobs(&[j1, j2]).await.unwrap(),
        2,
        "candidates differ"
    );
    let batch = Batch {
        changes: vec![],
        builds: vec![shoal_store::conformance::built(w.session, "k", "sha256:a")],
    };
    db.apply(&batch).await.unwrap();
    assert!(db
        .builds(w.session, &["k ".into()])
        .await
        .unwrap()
        .is_empty());
    assert_eq!(db.builds(w.session, &["k".into()]).await.unwrap().len(), 1);
}

#[tokio::test]
async fn runs_on_a_current_thread_runtime_from_a_plain_thread() {
    // The product runs the store inside actix's System: a current-thread runtime on its own
    // thread. Build one by hand (no #[tokio::test]) and do a full round there.
    std::thread::spawn(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let db = migrated().await;
            let w = world(&db).await;
            assert_eq!(db.insert_jobs(&[new_job(&w, "1", "b")]).await.unwrap(), 1);
            assert_eq!(
                db.state_counts(w.session).await.unwrap().get(&New),
                Some(&1)
            );
            assert!(db.store().bulk_writes(), "MariaDB takes bulk writes");
        });
    })
    .join()
    .unwrap();
    // The IN lists of the store come in powers of two, so few statements are prepared.
    assert_eq!(queries::bucket(300), 512);
}

/// Groups of identical changes (written as one grouped update each) that depend on each other
/// across the batch: every job is dispatched, then completed from a build cache, then offered a
/// stale dispatch again, all in one batch.
#[tokio::test]
async fn grouped_updates_keep_batch_order() {
    let db = migrated().await;
    let w = world(&db).await;
    let jobs: Vec<NewJob> = (0..40).map(|i| new_job(&w, &i.to_string(), "b")).collect();
    db.insert_jobs(&jobs).await.unwrap();
    let ids: Vec<JobId> = db
        .jobs_in_state(w.session, New, 40)
        .await
        .unwrap()
        .into_iter()
        .map(|j| j.id)
        .collect();
    let dispatch = |id: &JobId| -> Change {
        Transition::new(*id, New, 0, CompileQueued)
            .unwrap()
            .with_lease(9)
            .into()
    };
    let mut changes: Vec<Change> = ids.iter().map(dispatch).collect();
    changes.extend(ids.iter().map(|id| -> Change {
        Transition::new(*id, CompileQueued, 1, Compiled)
            .unwrap()
            .with_artifact("sha256:cached")
            .into()
    }));
    changes.extend(ids.iter().map(dispatch));
    // One job also goes on to be queued for evaluation: a third wave of one.
    changes.push(
        Transition::new(ids[5], Compiled, 1, EvalQueued)
            .unwrap()
            .into(),
    );
    let applied = db
        .apply(&Batch {
            changes,
            builds: vec![],
        })
        .await
        .unwrap();
    assert!(applied[..80].iter().all(|a| *a));
    assert!(applied[80..120].iter().all(|a| !*a), "stale once compiled");
    assert!(applied[120]);
    let counts = db.state_counts(w.session).await.unwrap();
    assert_eq!(counts.get(&Compiled), Some(&39));
    assert_eq!(counts.get(&EvalQueued), Some(&1));
    let j = db.job(ids[7]).await.unwrap().unwrap();
    assert_eq!(
        (
            j.state,
            j.attempt,
            j.artifact.as_deref(),
            j.lease_deadline_ms
        ),
        (Compiled, 1, Some("sha256:cached"), None)
    );
    let j = db.job(ids[5]).await.unwrap().unwrap();
    assert_eq!((j.state, j.attempt), (EvalQueued, 2));
}

/// TLS asked of a server that has none fails at once with a reason, rather than falling back
/// to plaintext.
#[cfg(feature = "tls")]
#[tokio::test]
async fn tls_to_a_server_without_tls_is_refused() {
    let mut admin = mysql_async::Conn::new(
        mysql_async::Opts::from_url(&shoal_store::mysql::scratch::test_server()).unwrap(),
    )
    .await
    .unwrap();
    let have: Option<(String, String)> = admin
        .query_first("SHOW VARIABLES LIKE 'have_ssl'")
        .await
        .unwrap();
    admin.disconnect().await.unwrap();
    if have.is_some_and(|(_, v)| v == "YES") {
        return; // This server has TLS; `tls_end_to_end` covers it.
    }
    let e = MysqlStore::connect_with(
        &format!("{}/test", shoal_store::mysql::scratch::test_server()),
        MysqlOptions {
            tls: Some(shoal_store::MysqlTls::default()),
            ..MysqlOptions::default()
        },
    )
    .await
    .unwrap_err();
    assert!(e.to_string().to_lowercase().contains("ssl"), "{e}");
}

/// TLS end to end, against a server that has it: `SHOAL_TEST_MYSQL_TLS` (a URL with a database)
/// and `SHOAL_TEST_MYSQL_TLS_CA` (the PEM of the CA that signed the server's certificate).
#[cfg(feature = "tls")]
#[tokio::test]
#[ignore = "needs a TLS server: set SHOAL_TEST_MYSQL_TLS and SHOAL_TEST_MYSQL_TLS_CA"]
async fn tls_end_to_end() {
    let url = std::env::var("SHOAL_TEST_MYSQL_TLS").expect("SHOAL_TEST_MYSQL_TLS");
    let ca = std::env::var("SHOAL_TEST_MYSQL_TLS_CA").expect("SHOAL_TEST_MYSQL_TLS_CA");
    let tls = shoal_store::MysqlTls {
        root_cert: Some(ca.into()),
        ..Default::default()
    };
    let store = MysqlStore::connect_with(
        &url,
        MysqlOptions {
            tls: Some(tls),
            ..MysqlOptions::default()
        },
    )
    .await
    .unwrap();
    let mut conn = store.connection().await.unwrap();
    let cipher: Option<(String, String)> = conn
        .query_first("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
        .await
        .unwrap();
    let cipher = cipher.map(|(_, c)| c).unwrap_or_default();
    assert!(!cipher.is_empty(), "the session is encrypted");
    println!("TLS cipher: {cipher}");
    drop(conn);
    store.migrate().await.unwrap();
    let s = store.create_session(&sample_session("tls")).await.unwrap();
    assert!(store.session(s).await.unwrap().is_some());
    store.disconnect().await;
}
