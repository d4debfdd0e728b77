//! The inbox's answers on an in-memory store: once per id, and each kind of command applied or
//! refused with why. (The loop that reads them from the bus is tested in `shoal-actors`.)

use std::sync::Arc;

use shoal_model::command::CommandRequest;
use shoal_store::SqliteStore;

use super::*;

/// 3 candidates × 2 shapes.
const SPEC: &str = r#"
name = "cmd"
[[shapes]]
N = 1
[[shapes]]
N = 2
[build]
command = "cc -DA={A} -o {out} {spec_dir}/k.c"
[run]
command = "{artifact} {N}"
[output]
time = 'time_us=([0-9.]+)'
[params.compile]
A = [1, 2, 3]
"#;

struct World {
    store: Arc<dyn Store>,
    dir: tempfile::TempDir,
    tools: HostTools,
}

async fn world() -> World {
    let store = SqliteStore::open_in_memory().unwrap();
    store.migrate().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let tools = HostTools {
        fin: "/nonexistent/fin".into(),
        scratch: dir.path().join("fin"),
        trees: Default::default(),
    };
    World {
        store: Arc::new(store),
        dir,
        tools,
    }
}

fn request(id: &str, command: Command) -> CommandRequest {
    CommandRequest {
        id: id.into(),
        reply_to: "shoal.reply.t1".into(),
        command,
    }
}

impl World {
    fn load_spec(&self, id: &str, text: &str) -> CommandRequest {
        request(
            id,
            Command::LoadSpec {
                spec_text: text.into(),
                spec_path: self.dir.path().join("spec.toml").display().to_string(),
                arch: "x86_64".into(),
                num_cu: 2,
                reason: "test".into(),
                max_retries: 0,
            },
        )
    }

    /// The answers to `requests`, in order.
    async fn answer(&self, requests: &[CommandRequest]) -> Vec<CommandReply> {
        let mut out = Vec::new();
        for req in requests {
            out.push(answer(&*self.store, &self.tools, req).await.unwrap());
        }
        out
    }
}

#[tokio::test]
async fn a_command_answered_twice_is_applied_once_and_answered_alike() {
    let w = world().await;
    std::fs::write(w.dir.path().join("k.c"), "int main(void){return 0;}").unwrap();
    let req = w.load_spec("c0ffee", SPEC);
    let replies = w.answer(&[req.clone(), req]).await;
    let expected = CommandOutcome::SpecLoaded {
        session: shoal_model::SessionId(1),
        resumed: false,
        jobs_total: 6,
        jobs_created: 6,
        // A build serves both shapes.
        builds: 3,
    };
    assert_eq!(replies[0].result, Ok(expected.clone()));
    assert_eq!(
        replies[1], replies[0],
        "the recorded reply, not a second application"
    );
    assert_eq!(w.store.sessions().await.unwrap().len(), 1);
    // Another command for the same spec is applied: it finds the session.
    let again = w.answer(&[w.load_spec("beef", SPEC)]).await;
    assert!(
        matches!(
            again[0].result,
            Ok(CommandOutcome::SpecLoaded {
                resumed: true,
                jobs_created: 0,
                ..
            })
        ),
        "{again:?}"
    );
    assert_eq!(
        w.store.command_reply("c0ffee").await.unwrap(),
        Some(replies[0].clone())
    );
}

#[tokio::test]
async fn a_spec_that_does_not_parse_is_answered_with_why() {
    let w = world().await;
    let replies = w
        .answer(&[w.load_spec("bad", "name = \"x\"\nshapez = 3\n")])
        .await;
    let err = replies[0].result.clone().unwrap_err();
    assert!(err.reason.contains("shapez"), "{err}");
    assert!(w.store.sessions().await.unwrap().is_empty());
}

/// The MIOpen workflow's loading steps, as commands: configs (twice: the second time they are
/// present), solvers, a session (twice: the second finds it), jobs, and a refusal that names why.
#[tokio::test]
async fn the_miopen_loading_steps_are_applied_as_commands() {
    let w = world().await;
    let configs: Vec<shoal_model::NewConfig> = [
        "./bin/MIOpenDriver conv -n 32 -c 64 -H 56 -W 56 -k 64 -y 3 -x 3 -p 1 -q 1 -u 1 -v 1 -l 1 -j 1 -m conv -g 1 -F 1 -t 1",
        "./bin/MIOpenDriver conv -n 32 -c 64 -H 56 -W 56 -k 256 -y 1 -x 1 -p 0 -q 0 -u 1 -v 1 -l 1 -j 1 -m conv -g 1 -F 1 -t 1",
    ]
    .iter()
    .map(|line| match shoal_miopen::driver::parse_line(line).unwrap() {
        shoal_miopen::driver::LineKind::Conv { configs, .. } => shoal_model::NewConfig {
            kind: "conv".into(),
            key: shoal_miopen::driver::driver_line(&configs[0]),
            params: configs[0].to_params(),
            tags: vec!["net".into()],
        },
        other => panic!("{other:?}"),
    })
    .collect();
    let builtin: Vec<shoal_model::NewSolver> = shoal_miopen::solvers::all()
        .iter()
        .map(|s| shoal_model::NewSolver {
            name: s.name.to_string(),
            tunable: s.tunable,
        })
        .collect();
    let tunable = builtin.iter().filter(|s| s.tunable).count() as u64;
    let identity = shoal_model::NewSession {
        reason: "e2e".into(),
        arch: "gfx90a".into(),
        num_cu: 110,
        backend: shoal_model::Backend::Miopen,
        spec: String::new(),
        spec_path: String::new(),
        library_version: "3.2.0".into(),
        driver_version: "6.2.0".into(),
        max_retries: 3,
    };
    let load_jobs = |tag: &str| Command::LoadJobs {
        session: None,
        tag: tag.into(),
        fin_steps: vec!["miopen_perf_compile".into(), "miopen_perf_eval".into()],
        solvers: Vec::new(),
        only_applicable: false,
        reason: "e2e".into(),
    };
    let commands = [
        Command::ImportConfigs {
            configs: configs.clone(),
        },
        Command::ImportConfigs {
            configs: configs[..1].to_vec(),
        },
        Command::UpdateSolvers { solvers: builtin },
        Command::CreateSession {
            identity: identity.clone(),
        },
        Command::CreateSession { identity },
        load_jobs("net"),
        load_jobs("no-such-tag"),
    ];
    let requests: Vec<_> = (commands.into_iter().enumerate())
        .map(|(i, command)| request(&format!("m{i}"), command))
        .collect();
    let replies: Vec<_> = (w.answer(&requests).await.into_iter())
        .map(|r| r.result)
        .collect();
    let session = shoal_model::SessionId(1);
    assert_eq!(
        replies[..6],
        [
            Ok(CommandOutcome::ConfigsImported {
                created: 2,
                present: 0
            }),
            Ok(CommandOutcome::ConfigsImported {
                created: 0,
                present: 1
            }),
            Ok(CommandOutcome::SolversUpdated {
                solvers: shoal_miopen::solvers::all().len() as u64,
                tunable,
                created: shoal_miopen::solvers::all().len() as u64,
            }),
            Ok(CommandOutcome::SessionReady {
                session,
                existed: false
            }),
            Ok(CommandOutcome::SessionReady {
                session,
                existed: true
            }),
            Ok(CommandOutcome::JobsLoaded {
                session,
                configs: 2,
                candidates: 2 * tunable,
                created: 2 * tunable,
                not_applicable_skipped: 0,
            }),
        ]
    );
    let refused = replies[6].clone().unwrap_err();
    assert!(refused.reason.contains("no-such-tag"), "{refused}");
    let counts = w.store.state_counts(session).await.unwrap();
    assert_eq!(counts.values().sum::<u64>(), 2 * tunable, "{counts:?}");
}

#[tokio::test]
async fn a_spec_shipped_with_its_files_is_loaded_from_them_and_read_back_anywhere() {
    use shoal_model::shipped::{sha256_hex, Tree, TreeFile};
    let w = world().await;
    let spec_text = format!("sources = [\"../src/k.c\"]\n{SPEC}");
    let source = b"int main(void){return 0;}\n".to_vec();
    let entry = |path: &str, bytes: &[u8]| TreeFile {
        path: path.into(),
        sha256: sha256_hex(bytes),
        size: bytes.len() as u64,
        executable: false,
    };
    let tree = Tree::new(vec![
        entry("specs/spec.toml", spec_text.as_bytes()),
        entry("src/k.c", &source),
    ])
    .unwrap();
    let listing = tree.encode();
    let asked: Vec<(String, u64)> = tree
        .files()
        .iter()
        .map(|f| (f.sha256.clone(), f.size))
        .chain([(tree.address(), listing.len() as u64)])
        .collect();
    let load = |id: &str, address: String| {
        request(
            id,
            Command::LoadShippedSpec {
                tree: address,
                spec: "specs/spec.toml".into(),
                arch: "x86_64".into(),
                num_cu: 2,
                reason: "test".into(),
                max_retries: 0,
            },
        )
    };
    // Before any file: all missing, and a load names what is not stored.
    let missing = |id: &str| {
        let files = asked.clone();
        request(id, Command::MissingFiles { files })
    };
    let replies = w.answer(&[missing("m1"), load("l0", tree.address())]).await;
    assert_eq!(
        replies[0].result,
        Ok(CommandOutcome::FilesMissing {
            sha256: asked.iter().map(|(s, _)| s.clone()).collect()
        })
    );
    let err = replies[1].result.clone().unwrap_err();
    assert!(err.reason.contains("not stored whole"), "{err}");
    let mut requests: Vec<_> = [spec_text.as_bytes(), &source, &listing]
        .iter()
        .enumerate()
        .map(|(i, bytes)| {
            let part = Command::PutFilePart {
                sha256: sha256_hex(bytes),
                size: bytes.len() as u64,
                part: 0,
                bytes: bytes.to_vec(),
            };
            request(&format!("p{i}"), part)
        })
        .collect();
    requests.extend([missing("m2"), load("l1", tree.address())]);
    let replies = w.answer(&requests).await;
    for stored in &replies[..3] {
        assert_eq!(
            stored.result,
            Ok(CommandOutcome::FilePartStored { complete: true })
        );
    }
    assert_eq!(
        replies[3].result,
        Ok(CommandOutcome::FilesMissing { sha256: vec![] })
    );
    let Ok(CommandOutcome::SpecLoaded {
        session,
        jobs_total,
        ..
    }) = replies[4].result
    else {
        panic!("{:?}", replies[4]);
    };
    assert_eq!(jobs_total, 6);
    let info = w.store.session(session).await.unwrap().unwrap().info;
    assert_eq!(
        info.spec_path,
        format!("shipped:{}/specs/spec.toml", tree.address())
    );
    // Another process (a worker) reads the spec from the tree it writes from the store: the
    // source it hashes is the shipped one. (The tree's directory lives as long as `trees`.)
    let trees = ShippedTrees::default();
    let dir = trees.dir(&*w.store, &tree.address()).await.unwrap();
    let spec = shoal_backend::spec::load(&dir.join("specs/spec.toml")).unwrap();
    assert_eq!(
        spec.source_hashes,
        vec![("../src/k.c".into(), sha256_hex(&source))]
    );
    assert!(spec.dir.join("../src/k.c").exists());
}
