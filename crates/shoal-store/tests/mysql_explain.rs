//! Every hot query of the MySQL store is backed by an index: `EXPLAIN` on a database of some
//! thousands of rows must show no full table scan (`type = ALL`) and no full index scan
//! (`type = index`) in any step.
//!
//! Why on a populated database: on a handful of rows the optimizer may scan because scanning is
//! cheapest, which proves nothing either way; with thousands of rows in several sessions a scan
//! means a missing or unusable index. The SQL is exactly what the store runs
//! (`shoal_store::mysql::queries::hot`), executed as prepared statements with realistic values.

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Params, Row, Value};
use shoal_model::{
    FailureKind, JobState, Measurement, NewConfig, NewJob, NewSession, NewSolver, Outcome,
    Params as P, ResultRow, SessionId, Transition,
};
use shoal_store::mysql::{queries, ScratchDb};
use shoal_store::{Batch, BuildRecord, Change, Store};

const SESSIONS: usize = 4;
const CONFIGS: usize = 2000;
const SOLVERS: usize = 200;
/// Configs with applicability rows, per session.
const CHECKED: usize = 50;
const JOBS_PER_SESSION: usize = 1500;

fn session(i: usize) -> NewSession {
    NewSession {
        reason: format!("explain {i}"),
        ..shoal_store::conformance::sample_session("explain")
    }
}

/// Sessions of jobs spread over every state, with results, builds, applicability and tags.
async fn populate(db: &ScratchDb) -> Vec<SessionId> {
    use JobState::*;
    let configs: Vec<NewConfig> = (0..CONFIGS)
        .map(|i| NewConfig {
            kind: "shape".into(),
            key: format!("m={i},n=64"),
            params: P::from_key(&format!("m={i},n=64")).unwrap(),
            tags: vec![format!("tag{}", i % 5)],
        })
        .collect();
    let configs = db.upsert_configs(&configs).await.unwrap();
    let solvers: Vec<NewSolver> = (0..SOLVERS)
        .map(|i| NewSolver {
            name: format!("solver{i}"),
            tunable: i % 2 == 0,
        })
        .collect();
    let solvers = db.upsert_solvers(&solvers).await.unwrap();
    let mut sessions = Vec::new();
    for s in 0..SESSIONS {
        let sid = db.create_session(&session(s)).await.unwrap();
        sessions.push(sid);
        let applicability: Vec<_> = configs[..CHECKED]
            .iter()
            .flat_map(|(c, _)| solvers.iter().map(move |v| (*c, v.id, v.id.0 % 2 == 0)))
            .collect();
        db.set_applicability(sid, &applicability).await.unwrap();
        let jobs: Vec<NewJob> = (0..JOBS_PER_SESSION)
            .map(|j| NewJob {
                session: sid,
                config: configs[j % CONFIGS].0,
                solver: solvers[j % SOLVERS].id,
                compile_step: shoal_model::Step::ExecBuild,
                eval_step: shoal_model::Step::ExecRun,
                compile_params: P::from_key(&format!("TILE={j}")).unwrap(),
                run_params: P::from_key("SPLIT=1").unwrap(),
                build_key: format!("build-{}", j / 3),
                held: false,
            })
            .collect();
        assert_eq!(
            db.insert_jobs(&jobs).await.unwrap(),
            JOBS_PER_SESSION as u64
        );
        let ids: Vec<_> = db
            .jobs_in_state(sid, New, JOBS_PER_SESSION as u32)
            .await
            .unwrap()
            .into_iter()
            .map(|j| j.id)
            .collect();
        // Walk job i through (i % 8) steps of the happy path; every fourth finished job failed.
        let path = [
            (New, 0, CompileQueued),
            (CompileQueued, 1, Compiling),
            (Compiling, 1, Compiled),
            (Compiled, 1, EvalQueued),
            (EvalQueued, 2, Evaluating),
            (Evaluating, 2, Evaluated),
        ];
        let mut changes = Vec::new();
        let mut builds = Vec::new();
        for (i, id) in ids.iter().enumerate() {
            for (k, &(from, attempt, to)) in path.iter().enumerate().take(i % 8) {
                let mut t = Transition::new(*id, from, attempt, to).unwrap();
                if to.is_in_flight() {
                    t = t.with_lease(1_000_000 + i as i64);
                }
                let mut result = None;
                if to == Compiled {
                    t = t.with_artifact(format!("sha256:{i}"));
                    builds.push(BuildRecord {
                        session: sid,
                        build_key: format!("build-{}", i / 3),
                        result: Ok(format!("sha256:{i}")),
                    });
                }
                if k == path.len() - 1 {
                    let outcome = if i % 4 == 0 {
                        Outcome::failed(FailureKind::WrongAnswer, "mismatch")
                    } else {
                        Outcome::Measured(Measurement {
                            time_us: i as f64,
                            samples_us: vec![i as f64],
                            workspace: 0,
                            details: P::new(),
                        })
                    };
                    result = Some(ResultRow {
                        job: *id,
                        session: sid,
                        attempt: 2,
                        outcome,
                        worker: "w".into(),
                        device: "d".into(),
                        created_ms: 1,
                    });
                }
                changes.push(Change {
                    transition: t,
                    result,
                });
            }
        }
        let applied = db.apply(&Batch { changes, builds }).await.unwrap();
        assert!(applied.iter().all(|a| *a), "the walk applies whole");
    }
    for (i, _) in (0..50).enumerate() {
        db.put_artifact(&format!("sha256:{i}"), &[i as u8; 64])
            .await
            .unwrap();
    }
    sessions
}

/// The EXPLAIN rows of `sql` with `params`, as `table type key` lines, and whether any step
/// scans a whole table.
async fn explain(conn: &mut Conn, sql: &str, params: Vec<Value>) -> (Vec<String>, bool) {
    let rows: Vec<Row> = conn
        .exec(format!("EXPLAIN {sql}"), Params::Positional(params))
        .await
        .unwrap_or_else(|e| panic!("EXPLAIN {sql}: {e}"));
    let mut lines = Vec::new();
    let mut scan = false;
    for row in rows {
        let col = |name: &str| -> String {
            row.get_opt::<Option<String>, &str>(name)
                .and_then(|r| r.ok())
                .flatten()
                .unwrap_or_else(|| "NULL".into())
        };
        let ty = col("type");
        // ALL reads the whole table; `index` reads the whole of an index, which for InnoDB's
        // clustered primary key is the whole table again.
        scan |= ty == "ALL" || ty == "index";
        lines.push(format!(
            "table={} type={ty} key={} rows={} extra={}",
            col("table"),
            col("key"),
            col("rows"),
            col("Extra")
        ));
    }
    assert!(!lines.is_empty(), "EXPLAIN {sql}: no plan");
    (lines, scan)
}

fn int(v: i64) -> Value {
    Value::Int(v)
}
fn text(v: &str) -> Value {
    Value::Bytes(v.as_bytes().to_vec())
}

/// `values` padded with its last one up to the placeholder count of an IN list.
fn padded(mut values: Vec<Value>) -> Vec<Value> {
    let k = queries::bucket(values.len());
    let last = values.last().cloned().unwrap();
    values.resize(k, last);
    values
}

const IN_VALUES: usize = 50;

fn states(states: impl IntoIterator<Item = JobState>) -> Vec<Value> {
    states.into_iter().map(|s| text(s.as_str())).collect()
}

fn in_flight() -> Vec<Value> {
    ["compile_queued", "compiling", "eval_queued", "evaluating"]
        .map(text)
        .to_vec()
}

#[tokio::test]
async fn hot_queries_use_indexes() {
    let db = ScratchDb::new("shoal_explain").await.unwrap();
    db.migrate().await.unwrap();
    let sessions = populate(&db).await;
    let s = sessions[1].0;
    let some_jobs: Vec<_> = db
        .jobs_in_state(sessions[1], JobState::Compiled, IN_VALUES as u32)
        .await
        .unwrap();
    assert_eq!(some_jobs.len(), IN_VALUES);
    let job = &some_jobs[0];
    let mut conn = db.store().connection().await.unwrap();
    for table in [
        "session",
        "config",
        "config_tag",
        "solver",
        "job",
        "label",
        "result",
        "build",
        "artifact",
        "applicability",
        "outbox",
    ] {
        conn.query_drop(format!("ANALYZE TABLE {table}"))
            .await
            .unwrap();
    }

    let mut failures = Vec::new();
    let mut report = Vec::new();
    for (name, sql) in queries::hot(IN_VALUES) {
        let params: Vec<Value> = match name {
            "jobs_in_state" => vec![int(s), text("compiled"), int(100)],
            "in_flight" => [vec![int(s)], in_flight()].concat(),
            "expired_leases" => [in_flight(), vec![int(1_000_500), int(100)]].concat(),
            "state_counts" | "final_results" => {
                [vec![int(s)], padded(states(JobState::ALL))].concat()
            }
            "finish_times" => [
                vec![int(s), int(0)],
                padded(states(queries::finished_states())),
            ]
            .concat(),
            "labels" => padded(
                (0..IN_VALUES)
                    .map(|i| text(&format!("build-{i}")))
                    .collect(),
            ),
            "cas_lock" => padded(some_jobs.iter().map(|j| int(j.id.0)).collect()),
            "cas_update" => vec![
                text("eval_queued"),
                int(2),
                int(0),
                int(5),
                int(0),
                Value::NULL,
                int(0),
                Value::NULL,
                int(7),
                Value::NULL,
                Value::NULL,
                Value::NULL,
                int(7),
                Value::NULL,
                Value::NULL,
                int(job.id.0),
                text("compiled"),
                int(1),
            ],
            "cas_update_group" => [
                vec![
                    text("eval_queued"),
                    int(2),
                    int(0),
                    int(5),
                    Value::NULL,
                    Value::NULL,
                    Value::NULL,
                    Value::NULL,
                    int(7),
                    Value::NULL,
                    Value::NULL,
                    Value::NULL,
                    int(7),
                    Value::NULL,
                    Value::NULL,
                    text("compiled"),
                    int(1),
                ],
                padded(some_jobs.iter().map(|j| int(j.id.0)).collect()),
            ]
            .concat(),
            "builds" => [
                vec![int(s)],
                padded(
                    (0..IN_VALUES)
                        .map(|i| text(&format!("build-{i}")))
                        .collect(),
                ),
            ]
            .concat(),
            "applicable_solvers" => vec![int(s), int(job.config.0)],
            "job" | "results" => vec![int(job.id.0)],
            "configs_with_tag" => vec![text("tag3")],
            "config_ids_by_key" => padded(
                (0..IN_VALUES)
                    .map(|i| text(&format!("m={i},n=64")))
                    .collect(),
            ),
            "artifact" => vec![text("sha256:7")],
            "unsent" => vec![int(1_000_500), int(100)],
            "outbox_settle" => padded(some_jobs.iter().map(|j| int(j.id.0)).collect()),
            other => panic!("hot query `{other}` has no parameters in this test: add them"),
        };
        let (lines, scan) = explain(&mut conn, &sql, params).await;
        let entry = format!("{name}:\n    {}", lines.join("\n    "));
        if scan {
            failures.push(entry.clone());
        }
        report.push(entry);
    }
    println!("{}", report.join("\n"));
    assert!(
        failures.is_empty(),
        "hot queries scan a table:\n{}",
        failures.join("\n")
    );
}

#[tokio::test]
async fn scan_detector_catches_an_unindexed_query() {
    let db = ScratchDb::new("shoal_explain").await.unwrap();
    db.migrate().await.unwrap();
    populate(&db).await;
    let mut conn = db.store().connection().await.unwrap();
    conn.query_drop("ANALYZE TABLE job").await.unwrap();
    // `worker` has no index: this must be reported, or the test above proves nothing.
    let (lines, scan) = explain(
        &mut conn,
        "SELECT id FROM job WHERE worker = ?",
        vec![text("w")],
    )
    .await;
    assert!(scan, "{lines:?}");
}
