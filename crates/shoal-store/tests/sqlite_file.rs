//! What only a file-backed `SqliteStore` can show: data outlives the process's connection, and
//! the schema version guards against a file written by a newer build.

use std::path::Path;

use shoal_model::{JobState, NewConfig, NewJob, NewSession, NewSolver, Params, Transition};
use shoal_store::sqlite::SCHEMA_VERSION;
use shoal_store::{Batch, SqliteStore, Store, StoreError};

fn session() -> NewSession {
    shoal_store::conformance::sample_session("file")
}

/// Writes a session, a config, a solver, a dispatched job and an artifact; returns the store
/// still open, so the caller chooses between a clean close and a crash.
async fn populate(path: &Path) -> (SqliteStore, shoal_model::JobId) {
    let store = SqliteStore::open(path).unwrap();
    assert_eq!(store.migrate().await.unwrap(), SCHEMA_VERSION);
    let s = store.create_session(&session()).await.unwrap();
    let c = store
        .upsert_configs(&[NewConfig {
            kind: "shape".into(),
            key: "m=1".into(),
            params: Params::from_key("m=1").unwrap(),
            tags: vec!["t".into()],
        }])
        .await
        .unwrap()[0]
        .0;
    let v = store
        .upsert_solvers(&[NewSolver {
            name: "s".into(),
            tunable: true,
        }])
        .await
        .unwrap()[0]
        .id;
    let job = NewJob {
        session: s,
        config: c,
        solver: v,
        compile_step: shoal_model::Step::ExecBuild,
        eval_step: shoal_model::Step::ExecRun,
        compile_params: Params::from_key("T=1").unwrap(),
        run_params: Params::new(),
        build_key: "b".into(),
        held: false,
    };
    assert_eq!(store.insert_jobs(&[job]).await.unwrap(), 1);
    let id = store.jobs_in_state(s, JobState::New, 1).await.unwrap()[0].id;
    let t = Transition::new(id, JobState::New, 0, JobState::CompileQueued).unwrap();
    let batch = Batch {
        changes: vec![t.with_lease(123).into()],
        builds: vec![],
    };
    assert_eq!(store.apply(&batch).await.unwrap(), vec![true]);
    assert!(store.put_artifact("sha256:x", b"kernel").await.unwrap());
    (store, id)
}

async fn check(path: &Path, id: shoal_model::JobId) {
    let store = SqliteStore::open(path).unwrap();
    assert_eq!(store.schema_version().await.unwrap(), SCHEMA_VERSION);
    assert_eq!(
        store.migrate().await.unwrap(),
        SCHEMA_VERSION,
        "nothing to apply"
    );
    let found = store
        .find_session(&session())
        .await
        .unwrap()
        .expect("session kept");
    let job = store.job(id).await.unwrap().expect("job kept");
    assert_eq!(job.session, found.id);
    assert_eq!(
        (job.state, job.attempt, job.lease_deadline_ms),
        (JobState::CompileQueued, 1, Some(123))
    );
    assert_eq!(store.configs_with_tag("t").await.unwrap().len(), 1);
    assert_eq!(
        store.artifact("sha256:x").await.unwrap().as_deref(),
        Some(&b"kernel"[..])
    );
}

#[tokio::test]
async fn data_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shoal.db");
    let (store, id) = populate(&path).await;
    drop(store);
    check(&path, id).await;
}

/// Set in the child process of `committed_data_survives_a_crash`: the database path.
const CRASH_CHILD: &str = "SHOAL_STORE_TEST_CRASH_CHILD";

#[tokio::test]
async fn committed_data_survives_a_sigkill() {
    if let Ok(path) = std::env::var(CRASH_CHILD) {
        // The child: commit, say so, and wait with the connection open to be SIGKILLed.
        let path = Path::new(&path);
        let (_store, id) = populate(path).await;
        let tmp = path.with_extension("id.tmp");
        std::fs::write(&tmp, id.0.to_string()).unwrap();
        std::fs::rename(&tmp, path.with_extension("id")).unwrap();
        loop {
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shoal.db");
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "committed_data_survives_a_sigkill",
            "--nocapture",
        ])
        .env(CRASH_CHILD, &path)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let id_file = path.with_extension("id");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !id_file.exists() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the child exited before committing: {status}");
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the child never committed"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL: no destructor, no checkpoint, no close.
    child.wait().unwrap();
    let id: i64 = std::fs::read_to_string(&id_file).unwrap().parse().unwrap();
    assert!(
        dir.path().join("shoal.db-wal").exists(),
        "WAL left behind, not checkpointed"
    );
    check(&path, shoal_model::JobId(id)).await;
}

#[tokio::test]
async fn open_does_not_migrate() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fresh.db");
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(store.schema_version().await.unwrap(), 0);
    assert!(store.sessions().await.is_err(), "no tables before migrate");
    assert_eq!(store.migrate().await.unwrap(), SCHEMA_VERSION);
    assert!(store.sessions().await.unwrap().is_empty());
    assert!(store.describe().contains("fresh.db"));
}

#[tokio::test]
async fn schema_too_new_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("newer.db");
    {
        let store = SqliteStore::open(&path).unwrap();
        store.migrate().await.unwrap();
    }
    // A newer build migrated this file further.
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute(
        "INSERT INTO schema_version (version, applied_ms) VALUES (?1, 0)",
        [SCHEMA_VERSION + 1],
    )
    .unwrap();
    drop(conn);

    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(store.schema_version().await.unwrap(), SCHEMA_VERSION + 1);
    match store.migrate().await {
        Err(StoreError::SchemaTooNew { found, known }) => {
            assert_eq!((found, known), (SCHEMA_VERSION + 1, SCHEMA_VERSION));
        }
        other => panic!("expected SchemaTooNew, got {other:?}"),
    }
}

#[tokio::test]
async fn database_bytes_count_the_pages_written() {
    let dir = tempfile::tempdir().unwrap();
    let (store, id) = populate(&dir.path().join("size.db")).await;
    let small = store.database_bytes().await.unwrap();
    assert!(small > 0 && small % 512 == 0, "{small} is whole pages");
    let first = store.job(id).await.unwrap().unwrap();
    let jobs: Vec<NewJob> = (0..5000)
        .map(|i| NewJob {
            session: first.session,
            config: first.config,
            solver: first.solver,
            compile_step: shoal_model::Step::ExecBuild,
            eval_step: shoal_model::Step::ExecRun,
            compile_params: Params::from_key(&format!("T=x{i}")).unwrap(),
            run_params: Params::new(),
            build_key: format!("b{i}"),
            held: false,
        })
        .collect();
    assert_eq!(store.insert_jobs(&jobs).await.unwrap(), 5000);
    let big = store.database_bytes().await.unwrap();
    // Each job row and its index entries take well over 50 bytes.
    assert!(big > small + 5000 * 50, "{big} against {small}");
}
