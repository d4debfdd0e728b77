//! The patient store: an outage is waited out and recorded, an answer is not, and a commit lost
//! with the connection is resolved by reading back what it did.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use shoal_model::JobState::*;
use shoal_store::conformance::{one_job, step, tr, world};
use shoal_store::patient::{outages, PatientStore};
use shoal_store::{Batch, SqliteStore, Store, StoreError};

/// A SQLite store whose `apply` has faults on order: it fails as an unreachable server the next
/// `down` times, answers with a refusal the next `refuse` times, and loses its commit (reports
/// it uncertain) before applying, `lose_before` times, or after, `lose_after` times.
struct Faulty {
    inner: Arc<dyn Store>,
    down: AtomicU32,
    refuse: AtomicU32,
    lose_after: AtomicU32,
    lose_before: AtomicU32,
    calls: AtomicU32,
}

fn unreachable(uncertain: bool) -> StoreError {
    StoreError::Unreachable {
        context: "test".into(),
        source: Box::new(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "Connection refused",
        )),
        uncertain,
    }
}

fn take(n: &AtomicU32) -> bool {
    n.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

shoal_store::delegating_store! {
    impl Store for Faulty {
        delegate to inner;
        fn describe(&self) -> String {
            "mysql://test@db:3306/t".into()
        }
        async fn apply(&self, batch: &Batch) -> shoal_store::Result<Vec<bool>> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            if take(&self.down) {
                return Err(unreachable(false));
            }
            if take(&self.refuse) {
                return Err(StoreError::Invalid("refused".into()));
            }
            if take(&self.lose_before) {
                return Err(unreachable(true));
            }
            let applied = self.inner.apply(batch).await?;
            if take(&self.lose_after) {
                return Err(unreachable(true));
            }
            Ok(applied)
        }
    }
}

/// A batch that changes nothing: what the outage tests apply.
fn nothing() -> Batch {
    Batch::default()
}

async fn faulty() -> (Arc<Faulty>, Arc<dyn Store>) {
    let s = SqliteStore::open_in_memory().unwrap();
    s.migrate().await.unwrap();
    let inner: Arc<dyn Store> = Arc::new(s);
    let f = Arc::new(Faulty {
        inner: inner.clone(),
        down: AtomicU32::new(0),
        refuse: AtomicU32::new(0),
        lose_after: AtomicU32::new(0),
        lose_before: AtomicU32::new(0),
        calls: AtomicU32::new(0),
    });
    (f, inner)
}

fn patient(f: &Arc<Faulty>, patience: Duration) -> PatientStore {
    PatientStore::new(f.clone(), patience)
}

/// The tests share the process's outage record: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test]
async fn an_outage_is_waited_out_and_recorded() {
    let _one = SERIAL.lock().await;
    let (f, _) = faulty().await;
    let before = outages();
    f.down.store(3, Ordering::SeqCst);
    let store = patient(&f, Duration::from_secs(30));
    assert!(store.apply(&nothing()).await.unwrap().is_empty());
    assert_eq!(
        f.calls.load(Ordering::SeqCst),
        4,
        "three failures, then the answer"
    );
    let after = outages();
    assert_eq!(
        after.count,
        before.count + 1,
        "one outage, however many calls failed"
    );
    assert!(
        after.ended_total > before.ended_total,
        "its length is recorded"
    );
    assert_eq!(after.current, None, "and it is over");
    assert_eq!(after.location, "mysql://test@db:3306/t");

    // Past its patience, the call fails with the outage's error, and the outage goes on.
    f.down.store(1_000, Ordering::SeqCst);
    let impatient = patient(&f, Duration::from_millis(250));
    let e = impatient.apply(&nothing()).await.unwrap_err();
    assert!(e.is_unreachable(), "{e}");
    let during = outages();
    assert!(during.current.is_some());
    let told = during.waiting_message().unwrap();
    assert!(
        told.contains("mysql://test@db:3306/t") && told.contains("nothing is lost"),
        "{told}"
    );
    f.down.store(0, Ordering::SeqCst);
    store.apply(&nothing()).await.unwrap();
    assert_eq!(outages().current, None);
}

#[tokio::test]
async fn an_answer_is_returned_at_once() {
    let _one = SERIAL.lock().await;
    let (f, _) = faulty().await;
    f.refuse.store(1, Ordering::SeqCst);
    let t0 = std::time::Instant::now();
    let e = patient(&f, Duration::from_secs(30))
        .apply(&nothing())
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::Invalid(_)), "{e}");
    assert_eq!(f.calls.load(Ordering::SeqCst), 1, "not tried again");
    assert!(t0.elapsed() < Duration::from_secs(1));
}

/// The commit went through but its acknowledgement was lost with the connection: the change
/// is reported applied (read back), a stale change of the same batch is not, and nothing is
/// applied twice. A commit lost before it applied is applied by the second try.
#[tokio::test]
async fn a_lost_commit_is_read_back() {
    let _one = SERIAL.lock().await;
    let (f, inner) = faulty().await;
    let w = world(&*inner).await;
    let first = one_job(&*inner, &w, "1").await;
    let stale = one_job(&*inner, &w, "2").await;
    assert!(step(&*inner, tr(stale, New, 0, CompileQueued)).await);
    let store = patient(&f, Duration::from_secs(30));
    f.lose_after.store(1, Ordering::SeqCst);
    let batch = Batch {
        changes: vec![
            tr(first, New, 0, CompileQueued).into(),
            // Stale: the job is at attempt 1, not 0.
            tr(stale, CompileQueued, 0, Compiling).into(),
        ],
        builds: vec![],
    };
    assert_eq!(store.apply(&batch).await.unwrap(), vec![true, false]);
    let j = inner.job(first).await.unwrap().unwrap();
    assert_eq!((j.state, j.attempt), (CompileQueued, 1), "applied once");

    let second = one_job(&*inner, &w, "3").await;
    f.lose_before.store(1, Ordering::SeqCst);
    let batch = Batch {
        changes: vec![tr(second, New, 0, CompileQueued).into()],
        builds: vec![],
    };
    assert_eq!(store.apply(&batch).await.unwrap(), vec![true]);
    let j = inner.job(second).await.unwrap().unwrap();
    assert_eq!((j.state, j.attempt), (CompileQueued, 1));
}
