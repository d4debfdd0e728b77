//! Opening the local SQLite store, for every command that takes `--db`, and choosing the
//! session a command works on. Its own module so that the subcommand modules (`tune`, `miopen`)
//! and the dispatcher in `cli.rs` share it without depending on each other. The cluster's store
//! (a URL from the settings) is opened by `connect/`.
//!
//! Two rules live here, once: a command that only reads, or that works on a session, refuses a
//! store file that does not exist (opening it would create an empty one, and the user would see
//! "no session" for a typo in `--db`); and `--session` means the same everywhere: the session
//! named, which must exist, or else the newest one in the store.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use shoal_model::{Session, SessionId};
use shoal_store::{SqliteStore, Store};

/// Refuses a `--db` that is not a plain path by [`crate::connect::store_url`]'s rule (a URL,
/// or what looks like one: `mysql//u:pw@h/db`), without showing it, so that the path every
/// message about the store shows is never a mistyped URL with its password.
fn check_path(path: &Path) -> anyhow::Result<()> {
    let Some(value) = path.to_str() else {
        return Ok(());
    };
    match crate::connect::store_url("--db (SHOAL_DB_FILE)", value)? {
        crate::connect::StoreUrl::Sqlite(_) => Ok(()),
        crate::connect::StoreUrl::Mysql => anyhow::bail!(
            "--db (SHOAL_DB_FILE): a MySQL URL (not shown); --db is a SQLite file, and the \
             cluster's database is read with --cluster, from SHOAL_DB or the config file"
        ),
    }
}

/// Opens the SQLite store without changing it.
pub async fn open_store(path: &Path) -> anyhow::Result<Arc<dyn Store>> {
    check_path(path)?;
    let store =
        SqliteStore::open(path).with_context(|| format!("opening the store {}", path.display()))?;
    Ok(Arc::new(store))
}

/// Opens the store and applies pending migrations; creates the file when it is missing. For
/// the commands that start something: `tune`, `import-configs`, `session init`, `solvers update`.
pub async fn open_migrated(path: &Path) -> anyhow::Result<Arc<dyn Store>> {
    let store = open_store(path).await?;
    store.migrate().await?;
    Ok(store)
}

/// Opens a store that must already exist, and brings its schema up to date.
pub async fn open_existing(path: &Path) -> anyhow::Result<Arc<dyn Store>> {
    check_path(path)?;
    if !path.exists() {
        anyhow::bail!(
            "{}: no such store. `shoal tune`, `shoal import-configs` and `shoal session init` \
             create one; --db (or SHOAL_DB_FILE) names another",
            path.display()
        );
    }
    open_migrated(path).await
}

/// The session a command works on: `id` when given (an error naming the sessions there are when
/// it is not in the store), else the newest.
pub async fn session_or_newest(store: &dyn Store, id: Option<i64>) -> anyhow::Result<Session> {
    if let Some(id) = id {
        if let Some(s) = store.session(SessionId(id)).await? {
            return Ok(s);
        }
    }
    let sessions = store.sessions().await?;
    match id {
        Some(id) => anyhow::bail!(
            "session {id} is not in the store {}; {}",
            store.describe(),
            known(&sessions)
        ),
        None => sessions
            .into_iter()
            .max_by_key(|s| s.id)
            .with_context(|| format!("the store {} has no session yet", store.describe())),
    }
}

/// "it has sessions 1–4" or "it has no session", for errors.
fn known(sessions: &[Session]) -> String {
    let ids: Vec<i64> = sessions.iter().map(|s| s.id.0).collect();
    match (ids.iter().min(), ids.iter().max()) {
        (Some(lo), Some(hi)) if lo == hi => format!("it has session {lo} (`shoal sessions`)"),
        (Some(lo), Some(hi)) => format!(
            "it has {} sessions, {lo} to {hi} (`shoal sessions`)",
            ids.len()
        ),
        _ => "it has no session".into(),
    }
}
