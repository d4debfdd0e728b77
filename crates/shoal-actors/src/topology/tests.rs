//! The two modes' plans, as data: which actors, on which queues, with which devices.

use std::path::PathBuf;
use std::time::Duration;

use shoal_gpu::{Device, DeviceKind};
use shoal_model::queue::Namespace;
use shoal_model::{NewSession, Session, SessionId, Step};

use super::{timing_core, ExporterPlan, Topology};
use crate::cluster::{Roles, WorkerOptions};
use crate::embedded::EmbeddedOptions;
use crate::scheduler::SchedulerConfig;

fn device(id: &str, kind: DeviceKind, arch: &str, num_cu: u32, index: Option<u32>) -> Device {
    Device {
        id: id.into(),
        kind,
        name: id.into(),
        arch: arch.into(),
        num_cu,
        memory_bytes: 0,
        visible_index: index,
        drm_render_minor: None,
    }
}

/// A host with a CPU and two GPUs of one model and one of another.
fn host() -> Vec<Device> {
    vec![
        device("cpu", DeviceKind::Cpu, "x86_64", 16, None),
        device("nvidia0", DeviceKind::NvidiaGpu, "sm_90", 132, Some(0)),
        device("nvidia1", DeviceKind::NvidiaGpu, "sm_90", 132, Some(1)),
        device("nvidia2", DeviceKind::NvidiaGpu, "sm_80", 108, Some(2)),
    ]
}

fn session(arch: &str, num_cu: u32) -> Session {
    Session {
        id: SessionId(7),
        created_ms: 0,
        info: NewSession {
            reason: "plan".into(),
            arch: arch.into(),
            num_cu,
            backend: shoal_model::Backend::Exec,
            spec: String::new(),
            spec_path: String::new(),
            library_version: String::new(),
            driver_version: String::new(),
            max_retries: 3,
        },
    }
}

fn embedded(arch: &str, num_cu: u32) -> Result<Topology, crate::ActorError> {
    let ns = Namespace::new("t").unwrap();
    let opts = EmbeddedOptions {
        session: SessionId(7),
        host: "h".into(),
        work_dir: PathBuf::from("/w"),
        compile_slots: Some(3),
        monitor_interval: Duration::from_secs(5),
        scheduler: SchedulerConfig::default(),
        devices: host(),
        runner_program: vec![],
        activity: Default::default(),
    };
    crate::embedded::plan(
        &session(arch, num_cu),
        &[(Step::ExecBuild, Step::ExecRun)],
        &ns,
        &opts,
    )
}

fn worker(roles: Roles, eval_on_cpu: bool) -> WorkerOptions {
    WorkerOptions {
        roles,
        host: "h:1".into(),
        work_dir: PathBuf::from("/w"),
        compile_slots: Some(2),
        compile_steps: vec![Step::ExecBuild],
        compile_archs: vec!["sm_90".into(), "x86_64".into()],
        eval_steps: vec![Step::ExecRun, Step::MiopenPerfEval],
        eval_on_cpu,
        monitor_interval: Duration::from_secs(5),
        scheduler: SchedulerConfig::default(),
        export_dir: PathBuf::from("/w/exports"),
        devices: host(),
        runner_program: vec![],
        activity: Default::default(),
    }
}

#[test]
fn embedded_evaluates_on_every_device_of_the_sessions_model_and_nothing_else() {
    let t = embedded("sm_90", 132).unwrap();
    let devices: Vec<&str> = t.evaluators.iter().map(|e| e.device.id.as_str()).collect();
    assert_eq!(devices, ["nvidia0", "nvidia1"]);
    assert!(t.evaluators.iter().all(|e| e.pin_cpu.is_none()));
    assert_eq!(t.evaluators[0].queue, "t.eval.exec_run.sm_90_132");
    let scheduler = t.scheduler.as_ref().unwrap();
    assert_eq!(scheduler.sessions, vec![SessionId(7)]);
    assert!(
        scheduler.max_compile_in_flight >= 12,
        "four builds per slot at least"
    );
    let compiler = t.compiler.as_ref().unwrap();
    assert_eq!(compiler.queues, vec!["t.compile.exec_build.sm_90"]);
    assert_eq!(compiler.slots, 3);
    assert_eq!(
        t.monitor.as_ref().unwrap().devices.len(),
        4,
        "the monitor watches the host"
    );
    assert_eq!(t.exporter, Some(ExporterPlan::InProcess));
    assert!(!t.control);
}

#[test]
fn embedded_on_the_cpu_pins_timings_to_the_last_core() {
    let t = embedded("x86_64", 16).unwrap();
    assert_eq!(t.evaluators.len(), 1);
    assert_eq!(t.evaluators[0].device.kind, DeviceKind::Cpu);
    assert_eq!(t.evaluators[0].pin_cpu, Some(timing_core()));
}

#[test]
fn embedded_without_a_matching_device_says_what_is_missing() {
    let e = embedded("gfx90a", 110).unwrap_err().to_string();
    assert!(e.contains("gfx90a") && e.contains("110"), "{e}");
}

#[test]
fn a_cluster_worker_plans_its_roles_only() {
    let ns = Namespace::new("t").unwrap();
    let all = Roles {
        scheduler: true,
        compile: true,
        eval: true,
        monitor: true,
        exporter: true,
    };
    let t = crate::cluster::plan(&ns, &worker(all, false)).unwrap();
    assert!(
        t.scheduler.as_ref().unwrap().sessions.is_empty(),
        "every session"
    );
    assert_eq!(
        t.compiler.as_ref().unwrap().queues,
        vec!["t.compile.exec_build.sm_90", "t.compile.exec_build.x86_64"]
    );
    // Every GPU, for every eval step; the CPU only when asked (there are GPUs).
    let evals: Vec<(&str, &str)> = t
        .evaluators
        .iter()
        .map(|e| (e.device.id.as_str(), e.queue.as_str()))
        .collect();
    assert_eq!(
        evals,
        [
            ("nvidia0", "t.eval.exec_run.sm_90_132"),
            ("nvidia0", "t.eval.miopen_perf_eval.sm_90_132"),
            ("nvidia1", "t.eval.exec_run.sm_90_132"),
            ("nvidia1", "t.eval.miopen_perf_eval.sm_90_132"),
            ("nvidia2", "t.eval.exec_run.sm_80_108"),
            ("nvidia2", "t.eval.miopen_perf_eval.sm_80_108"),
        ]
    );
    assert!(t.control);
    assert_eq!(
        t.exporter,
        Some(ExporterPlan::OnControlTopic {
            export_dir: PathBuf::from("/w/exports")
        })
    );
    let with_cpu = crate::cluster::plan(&ns, &worker(all, true)).unwrap();
    let cpu: Vec<_> = with_cpu
        .evaluators
        .iter()
        .filter(|e| e.device.kind == DeviceKind::Cpu)
        .collect();
    assert_eq!(cpu.len(), 2);
    assert!(cpu.iter().all(|e| e.pin_cpu == Some(timing_core())));

    let compile_only = Roles {
        compile: true,
        ..Roles::default()
    };
    let t = crate::cluster::plan(&ns, &worker(compile_only, false)).unwrap();
    assert!(t.scheduler.is_none() && t.monitor.is_none() && t.exporter.is_none());
    assert!(t.evaluators.is_empty());
    let mut no_arch = worker(compile_only, false);
    no_arch.compile_archs.clear();
    let e = crate::cluster::plan(&ns, &no_arch).unwrap_err().to_string();
    assert!(e.contains("--arch"), "{e}");
}
