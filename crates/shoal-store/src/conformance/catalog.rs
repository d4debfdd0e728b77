//! Conformance cases for the catalogue: migrations, sessions, configs, solvers, job loading and
//! listing, builds and artifacts. Each takes a fresh, migrated, empty store and panics on a
//! violation; every assertion checks something an implementation could plausibly get wrong.

use std::collections::BTreeMap;

use super::*;
use JobState::*;

pub async fn migrate_is_idempotent(store: &dyn Store) {
    let first = store.migrate().await.unwrap();
    assert!(first >= 1, "a migrated store has a schema version");
    let session = store.create_session(&sample_session("m")).await.unwrap();
    let second = store.migrate().await.unwrap();
    assert_eq!(first, second, "migrate twice, same version");
    assert!(
        store.session(session).await.unwrap().is_some(),
        "migrating again keeps the data"
    );
}

pub async fn sessions_round_trip_and_find(store: &dyn Store) {
    let x = sample_session("x");
    let a = store.create_session(&x).await.unwrap();
    let got = store.session(a).await.unwrap().expect("created session");
    assert_eq!(got.id, a);
    assert_eq!(got.info, x);
    assert!(got.created_ms > 1_600_000_000_000, "created_ms is epoch ms");
    assert!(store
        .session(SessionId(a.0 + 1000))
        .await
        .unwrap()
        .is_none());

    assert_eq!(store.find_session(&x).await.unwrap().map(|s| s.id), Some(a));
    let b = store.create_session(&x).await.unwrap();
    assert_ne!(a, b);
    assert_eq!(
        store.find_session(&x).await.unwrap().map(|s| s.id),
        Some(b),
        "the newest session with the identity"
    );

    // Every field is part of the identity.
    let variants: Vec<NewSession> = vec![
        NewSession {
            reason: "y".into(),
            ..x.clone()
        },
        NewSession {
            arch: "gfx90a".into(),
            ..x.clone()
        },
        NewSession {
            num_cu: 104,
            ..x.clone()
        },
        NewSession {
            backend: shoal_model::Backend::Miopen,
            ..x.clone()
        },
        NewSession {
            spec: "other".into(),
            ..x.clone()
        },
        NewSession {
            spec_path: "other.toml".into(),
            ..x.clone()
        },
        NewSession {
            library_version: "9".into(),
            ..x.clone()
        },
        NewSession {
            driver_version: "9".into(),
            ..x.clone()
        },
        NewSession {
            max_retries: 7,
            ..x.clone()
        },
    ];
    for v in &variants {
        assert!(store.find_session(v).await.unwrap().is_none(), "{v:?}");
    }
    let c = store.create_session(&variants[2]).await.unwrap();
    let all: Vec<SessionId> = store
        .sessions()
        .await
        .unwrap()
        .iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(all, vec![a, b, c]);
    assert_eq!(
        store
            .find_session(&variants[2])
            .await
            .unwrap()
            .map(|s| s.id),
        Some(c)
    );
}

fn cfg(key: &str, tags: &[&str]) -> NewConfig {
    NewConfig {
        kind: "shape".to_string(),
        key: key.to_string(),
        params: params(&[("n", key), ("dtype", "f16"), ("a", "1")]),
        tags: tags.iter().map(|t| t.to_string()).collect(),
    }
}

pub async fn configs_dedup_and_tags(store: &dyn Store) {
    let first = store
        .upsert_configs(&[cfg("c1", &["small", "square"]), cfg("c2", &["small"])])
        .await
        .unwrap();
    assert_eq!(first.len(), 2);
    assert!(first[0].1 && first[1].1, "both new");
    assert_ne!(first[0].0, first[1].0);

    let second = store
        .upsert_configs(&[cfg("c1", &["big"]), cfg("c3", &[]), cfg("c3", &[])])
        .await
        .unwrap();
    assert_eq!(second[0], (first[0].0, false), "existing key keeps its id");
    assert!(second[1].1, "new key created");
    assert_eq!(second[2], (second[1].0, false), "duplicate within one call");

    let c1 = store.config(first[0].0).await.unwrap().unwrap();
    assert_eq!(c1.key, "c1");
    assert_eq!(c1.kind, "shape");
    assert_eq!(c1.params, cfg("c1", &[]).params, "params keep their order");
    assert!(store
        .config(ConfigId(first[0].0 .0 + 1000))
        .await
        .unwrap()
        .is_none());

    let ids = |v: Vec<shoal_model::Config>| v.into_iter().map(|c| c.id).collect::<Vec<_>>();
    assert_eq!(
        ids(store.configs_with_tag("small").await.unwrap()),
        vec![first[0].0, first[1].0]
    );
    assert_eq!(
        ids(store.configs_with_tag("big").await.unwrap()),
        vec![first[0].0],
        "tags are added to existing configs"
    );
    assert_eq!(
        ids(store.configs_with_tag("square").await.unwrap()),
        vec![first[0].0]
    );
    assert!(store.configs_with_tag("none").await.unwrap().is_empty());
}

pub async fn solvers_upsert_is_idempotent(store: &dyn Store) {
    let s = |name: &str, tunable| NewSolver {
        name: name.to_string(),
        tunable,
    };
    let first = store
        .upsert_solvers(&[s("a", true), s("b", false)])
        .await
        .unwrap();
    assert_eq!((first[0].name.as_str(), first[0].tunable), ("a", true));
    assert_eq!((first[1].name.as_str(), first[1].tunable), ("b", false));
    let second = store
        .upsert_solvers(&[s("b", true), s("a", true), s("c", false)])
        .await
        .unwrap();
    assert_eq!(second[0], first[1], "existing solver returned as stored");
    assert_eq!(second[1], first[0]);
    assert_eq!(second[2].name, "c");
    let all = store.solvers().await.unwrap();
    assert_eq!(
        all,
        vec![first[0].clone(), first[1].clone(), second[2].clone()]
    );
}

pub async fn applicability_round_trip_and_replace(store: &dyn Store) {
    let w = world(store).await;
    let more = store
        .upsert_solvers(&[
            NewSolver {
                name: "winograd".to_string(),
                tunable: false,
            },
            NewSolver {
                name: "direct".to_string(),
                tunable: true,
            },
        ])
        .await
        .unwrap();
    let (wino, direct) = (more[0].id, more[1].id);
    assert!(store
        .applicable_solvers(w.session, w.config)
        .await
        .unwrap()
        .is_empty());
    store
        .set_applicability(
            w.session,
            &[
                (w.config, w.solver, true),
                (w.config, wino, false),
                (w.config, direct, true),
            ],
        )
        .await
        .unwrap();
    let mut expected = vec![w.solver, direct];
    expected.sort();
    assert_eq!(
        store.applicable_solvers(w.session, w.config).await.unwrap(),
        expected
    );
    // A new answer replaces the old one.
    store
        .set_applicability(
            w.session,
            &[(w.config, direct, false), (w.config, wino, true)],
        )
        .await
        .unwrap();
    let mut expected = vec![w.solver, wino];
    expected.sort();
    assert_eq!(
        store.applicable_solvers(w.session, w.config).await.unwrap(),
        expected
    );
    // Another session sees nothing of it.
    let other = store
        .create_session(&sample_session("other"))
        .await
        .unwrap();
    assert!(store
        .applicable_solvers(other, w.config)
        .await
        .unwrap()
        .is_empty());
}

pub async fn insert_jobs_is_idempotent(store: &dyn Store) {
    let w = world(store).await;
    let jobs = vec![new_job(&w, "16", "b16"), new_job(&w, "32", "b32"), {
        // Same compile parameters, different run parameters: a different candidate.
        let mut j = new_job(&w, "16", "b16");
        j.run_params = params(&[("SPLIT", "2")]);
        j
    }];
    assert_eq!(store.insert_jobs(&jobs).await.unwrap(), 3);
    assert_eq!(store.insert_jobs(&jobs).await.unwrap(), 0, "second load");
    let more = vec![jobs[0].clone(), new_job(&w, "64", "b64")];
    assert_eq!(store.insert_jobs(&more).await.unwrap(), 1);

    let all = store.jobs_in_state(w.session, New, 100).await.unwrap();
    assert_eq!(all.len(), 4);
    let j = &all.iter().find(|j| j.build_key == "b32").unwrap();
    assert_eq!(j.session, w.session);
    assert_eq!(j.config, w.config);
    assert_eq!(j.solver, w.solver);
    assert_eq!(j.compile_step, shoal_model::Step::ExecBuild);
    assert_eq!(j.eval_step, shoal_model::Step::ExecRun);
    assert_eq!(j.compile_params, params(&[("TILE", "32")]));
    assert_eq!(j.run_params, params(&[("SPLIT", "1")]));
    assert_eq!((j.state, j.attempt, j.retries), (New, 0, 0));
    assert_eq!(j.lease_deadline_ms, None);
    assert_eq!((j.worker.clone(), j.artifact.clone()), (None, None));
    assert_eq!((j.failure, j.last_error.clone()), (None, None));
    assert_eq!(store.job(j.id).await.unwrap().as_ref(), Some(*j));
    assert!(store.job(JobId(j.id.0 + 1000)).await.unwrap().is_none());
}

pub async fn new_jobs_come_oldest_first_and_limit(store: &dyn Store) {
    let w = world(store).await;
    let jobs = [("1", "b2"), ("2", "b1"), ("3", "b2"), ("4", "b1")]
        .map(|(tile, build)| new_job(&w, tile, build));
    assert_eq!(store.insert_jobs(&jobs).await.unwrap(), 4);
    let other = store
        .create_session(&sample_session("other"))
        .await
        .unwrap();
    let mut foreign = new_job(&w, "1", "a0");
    foreign.session = other;
    assert_eq!(store.insert_jobs(&[foreign]).await.unwrap(), 1);

    // New jobs come oldest first, whatever their builds: claiming by build walked the table
    // one page per job (the Scheduler groups a claim's jobs by build itself).
    let got = store.jobs_in_state(w.session, New, 10).await.unwrap();
    let tiles: Vec<_> = got
        .iter()
        .map(|j| j.compile_params.get("TILE").unwrap())
        .collect();
    assert_eq!(tiles, ["1", "2", "3", "4"], "by id; one session only");
    assert!(got.windows(2).all(|p| p[0].id < p[1].id));

    let limited = store.jobs_in_state(w.session, New, 3).await.unwrap();
    assert_eq!(limited, got[..3].to_vec());

    assert!(step(store, tr(got[0].id, New, 0, CompileQueued)).await);
    let new_now = store.jobs_in_state(w.session, New, 10).await.unwrap();
    assert_eq!(new_now, got[1..].to_vec(), "state filter");
    let queued = store
        .jobs_in_state(w.session, CompileQueued, 10)
        .await
        .unwrap();
    assert_eq!(
        queued.iter().map(|j| j.id).collect::<Vec<_>>(),
        vec![got[0].id]
    );
}

/// Jobs in every other state come oldest first (by id) too, whatever their build keys and
/// whatever order they entered the state in, and `limit` keeps the oldest. Both stores answer
/// alike, so a Scheduler claims the same jobs whichever it runs on.
pub async fn jobs_in_every_other_state_come_oldest_first(store: &dyn Store) {
    let w = world(store).await;
    let jobs = [("1", "b2"), ("2", "b1"), ("3", "b2"), ("4", "b1")]
        .map(|(tile, build)| new_job(&w, tile, build));
    assert_eq!(store.insert_jobs(&jobs).await.unwrap(), 4);
    let mut ids: Vec<_> = store
        .jobs_in_state(w.session, New, 10)
        .await
        .unwrap()
        .iter()
        .map(|j| j.id)
        .collect();
    ids.sort();
    let path = [
        (New, 0),
        (CompileQueued, 1),
        (Compiling, 1),
        (Compiled, 1),
        (EvalQueued, 2),
        (Evaluating, 2),
        (Evaluated, 2),
    ];
    for pair in path.windows(2) {
        let ((from, attempt), (to, _)) = (pair[0], pair[1]);
        // Newest first, so that the order of entering the state is not the answer.
        for id in ids.iter().rev() {
            assert!(
                step(store, tr(*id, from, attempt, to)).await,
                "{id} {from} → {to}"
            );
        }
        let got: Vec<_> = store
            .jobs_in_state(w.session, to, 10)
            .await
            .unwrap()
            .iter()
            .map(|j| j.id)
            .collect();
        assert_eq!(got, ids, "{to}: by id");
        let limited = store.jobs_in_state(w.session, to, 3).await.unwrap();
        assert_eq!(
            limited.iter().map(|j| j.id).collect::<Vec<_>>(),
            ids[..3],
            "{to}: the oldest three"
        );
    }
}

pub async fn state_counts_per_state(store: &dyn Store) {
    let w = world(store).await;
    let mut ids = Vec::new();
    for tile in ["a", "b", "c", "d", "e", "f"] {
        ids.push(one_job(store, &w, tile).await);
    }
    assert!(step(store, tr(ids[0], New, 0, CompileQueued)).await);
    assert!(step(store, tr(ids[1], New, 0, CompileQueued)).await);
    assert!(step(store, tr(ids[2], New, 0, Errored)).await);
    let counts = store.state_counts(w.session).await.unwrap();
    let want: BTreeMap<JobState, u64> = [(New, 3), (CompileQueued, 2), (Errored, 1)]
        .into_iter()
        .collect();
    assert_eq!(counts, want);
    let other = store
        .create_session(&sample_session("other"))
        .await
        .unwrap();
    assert!(store.state_counts(other).await.unwrap().is_empty());
}

pub async fn builds_round_trip_and_replace(store: &dyn Store) {
    let w = world(store).await;
    let other = store
        .create_session(&sample_session("other"))
        .await
        .unwrap();
    let failed_build = BuildRecord {
        session: w.session,
        build_key: "k2".to_string(),
        result: Err((FailureKind::BuildFailed, "error: expected `;`".to_string())),
    };
    let batch = Batch {
        changes: vec![],
        builds: vec![built(w.session, "k1", "sha256:11"), failed_build.clone()],
    };
    assert_eq!(store.apply(&batch).await.unwrap(), Vec::<bool>::new());
    let keys: Vec<String> = ["k1", "k2", "k3"].map(String::from).to_vec();
    assert_eq!(
        store.builds(w.session, &keys).await.unwrap(),
        vec![built(w.session, "k1", "sha256:11"), failed_build.clone()]
    );
    assert!(
        store.builds(other, &keys).await.unwrap().is_empty(),
        "per session"
    );

    let timeout = BuildRecord {
        result: Err((FailureKind::BuildTimeout, "killed after 60 s".to_string())),
        ..built(w.session, "k1", "")
    };
    let batch = Batch {
        changes: vec![],
        builds: vec![timeout.clone(), built(w.session, "k2", "sha256:22")],
    };
    store.apply(&batch).await.unwrap();
    assert_eq!(
        store.builds(w.session, &keys[..2]).await.unwrap(),
        vec![timeout, built(w.session, "k2", "sha256:22")],
        "replaced"
    );
}

pub async fn artifacts_are_content_addressed(store: &dyn Store) {
    let bytes: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    assert!(store.put_artifact("sha256:big", &bytes).await.unwrap());
    assert!(
        !store.put_artifact("sha256:big", &bytes).await.unwrap(),
        "already there"
    );
    assert_eq!(store.artifact("sha256:big").await.unwrap(), Some(bytes));
    assert!(store
        .put_artifact("sha256:tiny", &[0, 255, 0])
        .await
        .unwrap());
    assert_eq!(
        store.artifact("sha256:tiny").await.unwrap(),
        Some(vec![0, 255, 0])
    );
    assert_eq!(store.artifact("sha256:missing").await.unwrap(), None);
}

/// `finish_times`: a job that ends is stamped when it ends; jobs still going, or of another
/// session, are not listed, nor those that ended before the time asked.
pub async fn finish_times_list_ended_jobs_oldest_first(store: &dyn Store) {
    let w = world(store).await;
    let before = crate::encoding::now_ms();
    let mut ids = Vec::new();
    for tile in ["a", "b", "c"] {
        ids.push(one_job(store, &w, tile).await);
    }
    assert!(store.finish_times(w.session, 0).await.unwrap().is_empty());
    assert!(step(store, tr(ids[0], New, 0, Errored)).await);
    assert!(step(store, tr(ids[1], New, 0, CompileQueued)).await);
    let times = store.finish_times(w.session, 0).await.unwrap();
    assert_eq!(times.len(), 1, "{times:?}");
    assert!(times[0] >= before, "{times:?} before {before}");
    assert!(step(store, tr(ids[2], New, 0, Errored)).await);
    let times = store.finish_times(w.session, 0).await.unwrap();
    assert_eq!(times.len(), 2);
    assert!(times[0] <= times[1]);
    assert!(store
        .finish_times(w.session, times[1] + 1)
        .await
        .unwrap()
        .is_empty());
    let other = store
        .create_session(&sample_session("other"))
        .await
        .unwrap();
    assert!(store.finish_times(other, 0).await.unwrap().is_empty());
}
