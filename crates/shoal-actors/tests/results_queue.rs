//! A worker that starts before the Scheduler (`shoal_actors::results_queue::declare`), on the
//! real RabbitMQ with a broker user holding exactly the eval role's permissions (the ones
//! scripts/services-up grants, from `shoal_role_broker_perms` in scripts/lib/services.sh): its
//! declare of a results queue that does not exist yet is refused, and it waits; once the
//! Scheduler's user has created the queue, its declare succeeds. A queue that never comes is the
//! refusal after the wait, and a stop ends the wait.
//!
//! The broker is `SHOAL_TEST_AMQP` (default `amqp://guest:guest@127.0.0.1:5672/%2f`); the user
//! is made and deleted with `rabbitmqctl`, so the test needs the broker's CLI and the right to
//! run it (root on the test machines), as tests/insider.rs does.

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use shoal_actors::results_queue::{declare, WAIT};
use shoal_bus::{Bus, BusError, QueueOptions, RabbitBus};
use shoal_model::queue::Namespace;
use tokio::time::Instant;

fn broker_url() -> String {
    std::env::var("SHOAL_TEST_AMQP")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_string())
}

fn rabbitmqctl(args: &[&str], stdin: Option<&str>) {
    use std::io::Write;
    let mut child = Command::new("rabbitmqctl")
        .arg("-q")
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("rabbitmqctl (the test needs root and the broker's CLI)");
    let mut input = child.stdin.take().unwrap();
    if let Some(s) = stdin {
        writeln!(input, "{s}").unwrap();
    }
    drop(input);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "rabbitmqctl {}: {}",
        args[0],
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The eval role's broker permissions on namespace `ns`: configure, write, read.
fn eval_permissions(ns: &str) -> [String; 3] {
    let lib = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/lib/services.sh");
    let out = Command::new("bash")
        .args([
            "-c",
            ". \"$0\" && shoal_role_broker_perms eval \"$1\"",
            lib,
            ns,
        ])
        .output()
        .expect("bash");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let parts: Vec<String> = text.trim_end().split('\t').map(str::to_string).collect();
    parts.try_into().expect("three permissions")
}

/// A broker user made for this test, deleted with it.
struct User(String);

impl Drop for User {
    fn drop(&mut self) {
        let _ = Command::new("rabbitmqctl")
            .args(["-q", "delete_user", &self.0])
            .output();
    }
}

#[tokio::test]
async fn a_worker_first_waits_for_the_scheduler_to_create_the_results_queue() {
    let ns = Namespace::new(&format!("ts-results-wait-{}", std::process::id())).unwrap();
    // The Scheduler's side: every permission; it creates the namespace's topology.
    let scheduler = RabbitBus::connect(&broker_url(), ns.clone())
        .await
        .unwrap_or_else(|e| panic!("RabbitMQ for the tests (set SHOAL_TEST_AMQP): {e}"));
    let user = User(format!("shoal-test-eval-{}", std::process::id()));
    let pw = format!("{:016x}", shoal_bus::random_origin());
    rabbitmqctl(&["add_user", &user.0], Some(&pw));
    let [conf, write, read] = eval_permissions(ns.as_str());
    rabbitmqctl(
        &["set_permissions", "-p", "/", &user.0, &conf, &write, &read],
        None,
    );
    let rest = broker_url()
        .split_once('@')
        .expect("user@host")
        .1
        .to_string();
    let worker: Arc<RabbitBus> =
        RabbitBus::connect(&format!("amqp://{}:{pw}@{rest}", user.0), ns.clone())
            .await
            .unwrap();
    let results = ns.results_queue();
    let options = QueueOptions::limited(5);

    // The premise: the worker may not create the queue, and a passive look says it is missing.
    assert!(worker.declare_queue(&results, &options).await.is_err());
    assert!(matches!(
        worker.queue_depth(&results).await,
        Err(BusError::NoSuchQueue(_))
    ));

    // A queue that never comes: the refusal, after the wait.
    let (trigger, mut stop) = shoal_actors::shutdown::channel();
    let started = Instant::now();
    let declared = declare(
        &*worker,
        &results,
        &options,
        Duration::from_secs(1),
        &mut stop,
    )
    .await;
    assert!(declared.is_err(), "{declared:?}");
    assert!(started.elapsed() >= Duration::from_secs(1));

    // The Scheduler creates it 2 s into the wait: the worker's declare then succeeds.
    let creates = {
        let (scheduler, results, options) = (scheduler.clone(), results.clone(), options.clone());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            scheduler.declare_queue(&results, &options).await
        })
    };
    let started = Instant::now();
    let declared = declare(&*worker, &results, &options, WAIT, &mut stop).await;
    assert!(matches!(declared, Ok(true)), "{declared:?}");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(2) && waited < WAIT,
        "waited {waited:?}"
    );
    creates.await.unwrap().unwrap();

    // A stop ends a wait (another queue that does not exist).
    trigger.trigger();
    let missing = format!("{results}-never");
    let declared = declare(&*worker, &missing, &options, WAIT, &mut stop).await;
    assert!(matches!(declared, Ok(false)), "{declared:?}");

    worker.close().await.unwrap();
    scheduler.delete_queues(&[results]).await.unwrap();
    scheduler.delete_namespace().await.unwrap();
    scheduler.close().await.unwrap();
    drop(user);
}
