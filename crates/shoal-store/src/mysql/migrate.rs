//! Migrations for MySQL/MariaDB: the files of `schemas/mysql/`, applied in order and recorded in
//! `schema_version`.
//!
//! MySQL commits each DDL statement by itself, so a migration cannot be undone as a whole the
//! way the SQLite store's can. Instead every statement of a migration is idempotent (`CREATE
//! TABLE IF NOT EXISTS`, indexes inside the table), the version row is written only after the
//! last statement, and a named lock (`GET_LOCK`) keeps two `migrate` calls on one database from
//! interleaving. A migration cut off half-way is finished by the next `migrate`.

use mysql_async::prelude::Queryable;
use mysql_async::Conn;

use super::carry::Rebuild;
use super::queries as q;
use super::OpError;
use super::{migrate_compact, migrate_exec, migrate_lean};
use crate::StoreError;

/// The migrations this build knows, in order: (version, SQL). Never edit a released one.
pub(crate) const MIGRATIONS: &[(u32, &str)] = &[
    (1, include_str!("../../../../schemas/mysql/0001_init.sql")),
    (
        2,
        include_str!("../../../../schemas/mysql/0002_applicability.sql"),
    ),
    (3, include_str!("../../../../schemas/mysql/0003_outbox.sql")),
    (
        4,
        include_str!("../../../../schemas/mysql/0004_search_states.sql"),
    ),
    (5, include_str!("../../../../schemas/mysql/0005_worker.sql")),
    (
        6,
        include_str!("../../../../schemas/mysql/0006_command.sql"),
    ),
    (
        7,
        include_str!("../../../../schemas/mysql/0007_session_cancel.sql"),
    ),
    (
        8,
        include_str!("../../../../schemas/mysql/0008_shipped_file.sql"),
    ),
    (
        9,
        include_str!("../../../../schemas/mysql/0009_db_import.sql"),
    ),
    (
        10,
        include_str!("../../../../schemas/mysql/0010_lean_job.sql"),
    ),
    (
        11,
        include_str!("../../../../schemas/mysql/0011_compact_job.sql"),
    ),
    (
        12,
        include_str!("../../../../schemas/mysql/0012_exec_backend.sql"),
    ),
];

/// The migrations whose file is followed by a rebuild of `job` and `result`.
const REBUILDS: [&Rebuild; 2] = [&migrate_lean::REBUILD, &migrate_compact::REBUILD];

/// How long `migrate` waits for another process's migration to finish, in seconds.
const LOCK_WAIT_S: i64 = 120;

/// Splits a migration file into statements: `;` ends a statement outside quotes, `-- ` starts a
/// comment to the end of the line (as in MySQL, the dashes must be followed by white space).
pub(crate) fn statements(sql: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut quote: Option<char> = None;
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        match quote {
            Some(qc) => {
                current.push(c);
                if c == qc {
                    quote = None;
                }
            }
            None => match c {
                '\'' | '"' | '`' => {
                    quote = Some(c);
                    current.push(c);
                }
                '-' if chars.peek() == Some(&'-') => {
                    let mut rest = chars.clone();
                    rest.next();
                    if rest.peek().is_none_or(|n| n.is_whitespace()) {
                        // A comment: skip to the end of the line.
                        for n in chars.by_ref() {
                            if n == '\n' {
                                current.push('\n');
                                break;
                            }
                        }
                    } else {
                        current.push(c);
                    }
                }
                ';' => {
                    let s = current.trim();
                    if !s.is_empty() {
                        out.push(s.to_string());
                    }
                    current.clear();
                }
                _ => current.push(c),
            },
        }
    }
    let s = current.trim();
    if !s.is_empty() {
        out.push(s.to_string());
    }
    out
}

/// The newest schema version this build knows.
pub const SCHEMA_VERSION: u32 = MIGRATIONS[MIGRATIONS.len() - 1].0;

/// The schema version recorded in the database (0 for a database never migrated).
pub(crate) async fn schema_version(conn: &mut Conn) -> Result<u32, OpError> {
    let has: Option<i64> = conn.exec_first(q::HAS_SCHEMA_VERSION, ()).await?;
    if has.unwrap_or(0) == 0 {
        return Ok(0);
    }
    let v: Option<u32> = conn.exec_first(q::SCHEMA_VERSION, ()).await?;
    Ok(v.unwrap_or(0))
}

/// Applies the pending migrations under the database's migration lock, on `conn` (a connection
/// of its own, which it closes).
pub(crate) async fn migrate(mut conn: Conn, database: &str, now: i64) -> Result<u32, OpError> {
    // Lock names are at most 64 characters.
    let lock: String = format!("shoal.migrate.{database}")
        .chars()
        .take(64)
        .collect();
    let got: Option<i64> = conn
        .exec_first(q::GET_MIGRATION_LOCK, (lock.as_str(), LOCK_WAIT_S))
        .await?;
    if got != Some(1) {
        return Err(StoreError::Invalid(format!(
            "migrating the schema: another migration of `{database}` held the lock for \
             {LOCK_WAIT_S} s"
        ))
        .into());
    }
    let result = migrate_locked(&mut conn, now).await;
    let released: Result<Option<i64>, _> = conn
        .exec_first(q::RELEASE_MIGRATION_LOCK, (lock.as_str(),))
        .await;
    if let Err(e) = released {
        // The lock goes with the connection, which a broken connection no longer has.
        tracing::warn!(error = %e, "releasing the migration lock");
    }
    if let Err(e) = conn.disconnect().await {
        tracing::debug!(error = %e, "closing the migration connection");
    }
    result
}

async fn apply_file(conn: &mut Conn, sql: &str) -> Result<(), OpError> {
    for statement in statements(sql) {
        conn.query_drop(statement).await?;
    }
    Ok(())
}

async fn migrate_locked(conn: &mut Conn, now: i64) -> Result<u32, OpError> {
    conn.query_drop(q::CREATE_SCHEMA_VERSION).await?;
    let found: Option<u32> = conn.exec_first(q::SCHEMA_VERSION, ()).await?;
    let found = found.unwrap_or(0);
    if found > SCHEMA_VERSION {
        return Err(StoreError::SchemaTooNew {
            found,
            known: SCHEMA_VERSION,
        }
        .into());
    }
    for &(version, sql) in MIGRATIONS {
        let rebuild = REBUILDS.into_iter().find(|r| r.version == version);
        if version <= found {
            // Recorded, but a rebuild may be missing all the same: `scripts/services-up` used to
            // apply the files by themselves and record every version, leaving `job` as version
            // 1 made it. Finish it now, as if cut off.
            match rebuild {
                Some(r) if r.job_is_old(conn).await? => {
                    tracing::warn!(
                        version,
                        "mysql migration recorded but its rebuild of `job` never ran: running it"
                    );
                    r.check_server(conn).await?;
                    apply_file(conn, sql).await?;
                    r.carry_forward(conn).await?;
                }
                _ => {}
            }
            continue;
        }
        let file_due = match rebuild {
            Some(r) => r.job_is_old(conn).await?,
            None => true,
        };
        if file_due {
            if let Some(r) = rebuild {
                r.check_server(conn).await?;
            }
            apply_file(conn, sql).await?;
        }
        if let Some(r) = rebuild {
            r.carry_forward(conn).await?;
        }
        if version == migrate_exec::VERSION {
            migrate_exec::rename_jobs(conn).await?;
        }
        conn.exec_drop(q::INSERT_SCHEMA_VERSION, (version, now))
            .await?;
        tracing::debug!(version, "applied mysql migration");
    }
    Ok(SCHEMA_VERSION)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_on_semicolons_outside_quotes_and_drops_comments() {
        let sql = "-- a comment; with a semicolon\nCREATE TABLE a (x INT CHECK (x IN (';')));\n\
                   -- another\n  \nCREATE TABLE b (y TEXT) -- trailing; comment\n;\nSELECT 1--2";
        assert_eq!(
            statements(sql),
            vec![
                "CREATE TABLE a (x INT CHECK (x IN (';')))".to_string(),
                "CREATE TABLE b (y TEXT)".to_string(),
                "SELECT 1--2".to_string(),
            ]
        );
    }

    /// Whether `s` is `UPDATE <table> SET <column> = <new> WHERE <column> = <old>`, two values
    /// that differ: run again, it finds no row with the old value.
    fn renames_a_value(s: &str) -> bool {
        let Some((_, rest)) = s
            .strip_prefix("UPDATE ")
            .and_then(|r| r.split_once(" SET "))
        else {
            return false;
        };
        let Some((set, condition)) = rest.split_once(" WHERE ") else {
            return false;
        };
        match (set.split_once(" = "), condition.split_once(" = ")) {
            (Some((column, new)), Some((same, old))) => {
                column == same && new != old && !format!("{new}{old}").contains(' ')
            }
            _ => false,
        }
    }

    #[test]
    fn a_rename_is_told_from_other_updates() {
        assert!(renames_a_value(
            "UPDATE session SET backend = 'exec' WHERE backend = 'command'"
        ));
        for not in [
            "UPDATE session SET backend = 'exec' WHERE reason = 'command'",
            "UPDATE session SET backend = 'exec' WHERE backend = 'exec'",
            "UPDATE job SET attempt = attempt + 1 WHERE attempt = 1",
            "UPDATE session SET backend = 'exec'",
        ] {
            assert!(!renames_a_value(not), "{not}");
        }
    }

    #[test]
    fn every_migration_is_idempotent_ddl() {
        for (version, sql) in MIGRATIONS {
            let stmts = statements(sql);
            assert!(!stmts.is_empty(), "migration {version} is empty");
            for s in stmts {
                // DDL commits on its own, so a migration cut short runs again from the start:
                // every statement must be harmless the second time. Redefining a column to the
                // same definition is, and so are making labels (an existing one is left as it
                // is) and renaming a value (the second time, no row has the old one).
                assert!(
                    s.starts_with("CREATE TABLE IF NOT EXISTS ")
                        || s.starts_with("ALTER TABLE job MODIFY state ")
                        || (s.starts_with("INSERT INTO label ")
                            && s.ends_with(" ON DUPLICATE KEY UPDATE id = id"))
                        || renames_a_value(&s),
                    "migration {version}: not idempotent: {s}"
                );
            }
        }
    }
}
