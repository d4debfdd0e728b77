//! The wire format, pinned: one sample of every message variant, encoded and signed with a fixed
//! key, must give exactly the bytes recorded in `tests/golden/wire-v<WIRE_VERSION>.txt`.
//!
//! Workers of two releases share a broker during a rolling upgrade. A change to a message type
//! (a field added, reordered or retyped; a variant inserted) changes its bytes, and an old
//! consumer would misread a new message instead of refusing it. So any such change must come
//! with a [`WIRE_VERSION`] bump, which makes old consumers dead-letter the new messages by
//! version. This test fails on a changed byte under the same version; after a bump, record the
//! new version's file with `SHOAL_BLESS=1 cargo test -p shoal-model --test wire_golden` and
//! commit it beside the old one.

use std::collections::BTreeMap;
use std::path::PathBuf;

use shoal_model::command::{Command, CommandOutcome, CommandReply, CommandRequest};
use shoal_model::envelope::{Codec, WIRE_VERSION};
use shoal_model::message::*;
use shoal_model::{
    Backend, ConfigId, FailureKind, JobId, Measurement, Message, NewConfig, NewSession, NewSolver,
    Outcome, Params, SessionId,
};

fn params(pairs: &[(&str, &str)]) -> Params {
    let mut p = Params::new();
    for (k, v) in pairs {
        p.push(*k, *v);
    }
    p
}

fn job(id: i64, attempt: u32) -> JobRef {
    JobRef {
        job: JobId(id),
        attempt,
    }
}

/// The variant's name. An exhaustive match, so a new variant does not compile until it has a
/// name here, and then [`samples`] fails until it has a sample.
fn name(m: &Message) -> &'static str {
    match m {
        Message::Compile(_) => "compile",
        Message::Eval(_) => "eval",
        Message::Reply(r) => match r {
            ReplyBody::Started { .. } => "reply.started",
            ReplyBody::Compiled(c) if c.result.is_ok() => "reply.compiled.ok",
            ReplyBody::Compiled(_) => "reply.compiled.failed",
            ReplyBody::Evaluated(_) => "reply.evaluated",
            ReplyBody::Heartbeat { .. } => "reply.heartbeat",
            ReplyBody::HandedBack { .. } => "reply.handed_back",
        },
        Message::Event(e) => match e {
            Event::Health(_) => "event.health",
            Event::Progress { .. } => "event.progress",
        },
        Message::Control(c) => match c {
            Control::Pause { .. } => "control.pause",
            Control::Resume { .. } => "control.resume",
            Control::Drain => "control.drain",
            Control::Restart { .. } => "control.restart",
            Control::Export { .. } => "control.export",
            Control::ExportMiopen { .. } => "control.export_miopen",
        },
        Message::Command(c) => match c.command {
            Command::LoadSpec { .. } => "command.load_spec",
            Command::CreateSession { .. } => "command.create_session",
            Command::ImportConfigs { .. } => "command.import_configs",
            Command::UpdateSolvers { .. } => "command.update_solvers",
            Command::LoadJobs { .. } => "command.load_jobs",
            Command::UpdateApplicability { .. } => "command.update_applicability",
            Command::CancelSession { .. } => "command.cancel_session",
            Command::PutFilePart { .. } => "command.put_file_part",
            Command::MissingFiles { .. } => "command.missing_files",
            Command::LoadShippedSpec { .. } => "command.load_shipped_spec",
        },
        Message::CommandReply(r) => match r.result {
            Ok(CommandOutcome::SpecLoaded { .. }) => "command_reply.spec_loaded",
            Ok(CommandOutcome::SessionReady { .. }) => "command_reply.session_ready",
            Ok(CommandOutcome::ConfigsImported { .. }) => "command_reply.configs_imported",
            Ok(CommandOutcome::SolversUpdated { .. }) => "command_reply.solvers_updated",
            Ok(CommandOutcome::JobsLoaded { .. }) => "command_reply.jobs_loaded",
            Ok(CommandOutcome::SessionCancelled { .. }) => "command_reply.session_cancelled",
            Ok(CommandOutcome::FilePartStored { .. }) => "command_reply.file_part_stored",
            Ok(CommandOutcome::FilesMissing { .. }) => "command_reply.files_missing",
            Ok(CommandOutcome::ApplicabilityUpdated { .. }) => {
                "command_reply.applicability_updated"
            }
            Err(_) => "command_reply.error",
        },
    }
}

fn samples() -> Vec<Message> {
    let session = SessionId(7);
    let compile = params(&[("BM", "64"), ("BN", "32")]);
    vec![
        Message::Compile(CompileRequest {
            session,
            step: shoal_model::Step::ExecBuild,
            build_key: "BM=64,BN=32".into(),
            config_params: params(&[("M", "512")]),
            compile_params: compile.clone(),
            jobs: vec![job(1, 0), job(2, 3)],
        }),
        Message::Eval(EvalRequest {
            session,
            step: shoal_model::Step::ExecRun,
            items: vec![EvalItem {
                job: job(1, 1),
                config: ConfigId(4),
                config_params: params(&[("M", "512")]),
                compile_params: compile,
                run_params: params(&[("UNROLL", "4")]),
                artifact: "ab".repeat(32),
            }],
        }),
        Message::Reply(ReplyBody::Started {
            session,
            phase: Phase::Compile,
            jobs: vec![job(1, 0)],
            worker: "host-a:12".into(),
        }),
        Message::Reply(ReplyBody::Compiled(CompileReply {
            session,
            jobs: vec![job(1, 0), job(2, 3)],
            build_key: "BM=64,BN=32".into(),
            result: Ok("cd".repeat(32)),
            worker: "host-a:12".into(),
            duration_ms: 1500,
        })),
        Message::Reply(ReplyBody::Compiled(CompileReply {
            session,
            jobs: vec![job(3, 0)],
            build_key: "BM=128,BN=32".into(),
            result: Err((FailureKind::BuildFailed, "exited with code 1".into())),
            worker: "host-a:12".into(),
            duration_ms: 20,
        })),
        Message::Reply(ReplyBody::Evaluated(EvalReply {
            session,
            step: shoal_model::Step::ExecRun,
            outcomes: vec![
                (
                    job(1, 1),
                    Outcome::Measured(Measurement {
                        time_us: 12.5,
                        samples_us: vec![12.0, 12.5, 13.0],
                        workspace: 0,
                        details: params(&[("params", "16,16")]),
                    }),
                ),
                (
                    job(2, 4),
                    Outcome::failed(FailureKind::Crashed, "killed by SIGSEGV"),
                ),
            ],
            worker: "host-b:3".into(),
            device: "nvidia0".into(),
            busy_us: 1500,
        })),
        Message::Reply(ReplyBody::Heartbeat {
            session,
            phase: Phase::Eval,
            jobs: vec![job(1, 1)],
            worker: "host-b:3".into(),
        }),
        Message::Reply(ReplyBody::HandedBack {
            session,
            phase: Phase::Eval,
            jobs: vec![job(2, 4)],
            reason: "draining".into(),
            count_retry: false,
            worker: "host-b:3".into(),
        }),
        Message::Event(Event::Health(DeviceHealth {
            host: "host-b".into(),
            device: "nvidia0".into(),
            healthy: true,
            detail: "ok".into(),
        })),
        Message::Event(Event::Progress {
            session,
            done: 10,
            total: 100,
        }),
        Message::Control(Control::Pause {
            device: "nvidia0".into(),
        }),
        Message::Control(Control::Resume {
            device: "nvidia0".into(),
        }),
        Message::Control(Control::Drain),
        Message::Control(Control::Restart {
            actor: Actor::Evaluator,
        }),
        Message::Control(Control::Export {
            session,
            out_dir: "nightly".into(),
        }),
        Message::Command(CommandRequest {
            id: "0f1e2d3c4b5a69788796a5b4c3d2e1f0".into(),
            reply_to: "shoal.reply.0a1b2c3d".into(),
            command: Command::LoadSpec {
                spec_text: "name = \"gemm\"\n".into(),
                spec_path: "/specs/gemm.toml".into(),
                arch: "sm_90".into(),
                num_cu: 132,
                reason: "nightly".into(),
                max_retries: 2,
            },
        }),
        Message::CommandReply(CommandReply {
            id: "0f1e2d3c4b5a69788796a5b4c3d2e1f0".into(),
            result: Ok(CommandOutcome::SpecLoaded {
                session,
                resumed: false,
                jobs_total: 270,
                jobs_created: 270,
                builds: 135,
            }),
        }),
        Message::CommandReply(CommandReply {
            id: "0f1e2d3c4b5a69788796a5b4c3d2e1f0".into(),
            result: Err("gemm.toml: line 3: unknown key `shapez`".into()),
        }),
        command(Command::CreateSession {
            identity: NewSession {
                reason: "nightly".into(),
                arch: "gfx90a".into(),
                num_cu: 110,
                backend: Backend::Miopen,
                spec: String::new(),
                spec_path: String::new(),
                library_version: "3.2.0".into(),
                driver_version: "6.2.0".into(),
                max_retries: 3,
            },
        }),
        command(Command::ImportConfigs {
            configs: vec![NewConfig {
                kind: "conv".into(),
                key: "conv -n 1 -c 3".into(),
                params: params(&[("n", "1"), ("c", "3")]),
                tags: vec!["resnet50".into()],
            }],
        }),
        command(Command::UpdateSolvers {
            solvers: vec![NewSolver {
                name: "ConvAsm1x1U".into(),
                tunable: true,
            }],
        }),
        command(Command::LoadJobs {
            session: Some(session),
            tag: "resnet50".into(),
            fin_steps: vec!["miopen_perf_compile".into(), "miopen_perf_eval".into()],
            solvers: vec![],
            only_applicable: true,
            reason: "nightly".into(),
        }),
        command(Command::CancelSession { session }),
        reply(CommandOutcome::SessionCancelled {
            session,
            already: false,
        }),
        command(Command::UpdateApplicability {
            session: Some(session),
            tag: "resnet50".into(),
        }),
        reply(CommandOutcome::ApplicabilityUpdated {
            session,
            configs: 10,
            pairs: 760,
            applicable: 120,
        }),
        reply(CommandOutcome::SessionReady {
            session,
            existed: true,
        }),
        reply(CommandOutcome::ConfigsImported {
            created: 499,
            present: 1,
        }),
        reply(CommandOutcome::SolversUpdated {
            solvers: 76,
            tunable: 40,
            created: 76,
        }),
        reply(CommandOutcome::JobsLoaded {
            session,
            configs: 10,
            candidates: 120,
            created: 120,
            not_applicable_skipped: 8,
        }),
        command(Command::PutFilePart {
            sha256: "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae".into(),
            size: 3,
            part: 0,
            bytes: b"foo".to_vec(),
        }),
        reply(CommandOutcome::FilePartStored { complete: true }),
        command(Command::MissingFiles {
            files: vec![(
                "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae".into(),
                3,
            )],
        }),
        reply(CommandOutcome::FilesMissing {
            sha256: vec!["2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae".into()],
        }),
        command(Command::LoadShippedSpec {
            tree: "fcde2b2edba56bf408601fb721fe9b5c338d10ee429ea04fae5511b68fbf8fb9".into(),
            spec: "examples/cpu-gemm/spec.toml".into(),
            arch: "x86_64".into(),
            num_cu: 2,
            reason: "nightly".into(),
            max_retries: 2,
        }),
        Message::Control(Control::ExportMiopen {
            session,
            out_dir: "nightly/gfx90a".into(),
            options: shoal_model::message::MiopenExportOptions {
                find_db: true,
                perf_db: false,
                kern_db: true,
                user_db: Some("3.2.0-abc".into()),
                base_dir: Some("shipped/gfx90a".into()),
                newer: true,
                tag: Some("resnet50".into()),
            },
        }),
    ]
}

fn command(command: Command) -> Message {
    Message::Command(CommandRequest {
        id: "0f1e2d3c4b5a69788796a5b4c3d2e1f0".into(),
        reply_to: "shoal.reply.0a1b2c3d".into(),
        command,
    })
}

fn reply(outcome: CommandOutcome) -> Message {
    Message::CommandReply(CommandReply {
        id: "0f1e2d3c4b5a69788796a5b4c3d2e1f0".into(),
        result: Ok(outcome),
    })
}

fn golden_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(format!("wire-v{WIRE_VERSION}.txt"))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex"))
        .collect()
}

#[test]
fn every_message_variant_has_the_recorded_bytes_of_its_wire_version() {
    let codec = Codec::new(&[0x5a; 32]).unwrap();
    let encoded: BTreeMap<&str, (Message, Vec<u8>)> = samples()
        .into_iter()
        .map(|m| (name(&m), (m.clone(), codec.encode(&m))))
        .collect();
    assert_eq!(encoded.len(), samples().len(), "two samples share a name");

    let path = golden_path();
    if std::env::var_os("SHOAL_BLESS").is_some() {
        let mut text = format!(
            "# wire version {WIRE_VERSION}: name, then the signed bytes (key 0x5a × 32) in hex\n"
        );
        for (name, (_, bytes)) in &encoded {
            text.push_str(&format!("{name}\t{}\n", hex(bytes)));
        }
        std::fs::write(&path, text).unwrap();
    }
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}. A new WIRE_VERSION needs its golden file: run with SHOAL_BLESS=1 and commit it",
            path.display()
        )
    });
    let recorded: BTreeMap<&str, &str> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split_once('\t').expect("name<TAB>hex"))
        .collect();
    let names: Vec<&&str> = encoded.keys().collect();
    assert_eq!(
        recorded.keys().collect::<Vec<_>>(),
        names,
        "{}: the recorded variants differ from the message types' variants",
        path.display()
    );
    for (name, (message, bytes)) in &encoded {
        assert_eq!(
            hex(bytes),
            recorded[name],
            "the bytes of `{name}` changed under wire version {WIRE_VERSION}: a change to the \
             message types needs a WIRE_VERSION bump (old consumers would misread it otherwise)"
        );
        // And the recorded bytes still decode to the same message.
        assert_eq!(&codec.decode(&unhex(recorded[name])).unwrap(), message);
    }
}
