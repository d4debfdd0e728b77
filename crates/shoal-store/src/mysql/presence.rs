//! Worker presence on MySQL: one upsert per heartbeat (autocommit: a single statement, and
//! writing the same row twice after a retried connection is harmless) and the listing.

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Row};
use shoal_model::WorkerPresence;

use super::ops::OpResult;
use super::rows::{get, int, opt_int, text};
use crate::presence::{decode, Encoded, Raw, SELECT_ALL, UPSERT_MYSQL};

pub(super) async fn put_worker(mut conn: Conn, e: &Encoded<'_>) -> OpResult<()> {
    let w = e.w;
    let params = vec![
        text(&w.id),
        text(&w.host),
        int(w.pid),
        text(&w.version),
        text(&e.roles),
        text(&e.devices),
        text(&e.jobs),
        int(w.heartbeat_ms),
        int(w.started_ms),
        int(w.last_seen_ms),
        opt_int(w.stopped_ms),
    ];
    conn.exec_drop(UPSERT_MYSQL.as_str(), params).await?;
    Ok(())
}

pub(super) async fn workers(mut conn: Conn) -> OpResult<Vec<WorkerPresence>> {
    let rows: Vec<Row> = conn.exec(SELECT_ALL, ()).await?;
    let mut out = Vec::with_capacity(rows.len());
    for mut r in rows {
        let raw = Raw {
            id: get(&mut r, 0)?,
            host: get(&mut r, 1)?,
            pid: get(&mut r, 2)?,
            version: get(&mut r, 3)?,
            roles: get(&mut r, 4)?,
            devices: get(&mut r, 5)?,
            jobs: get(&mut r, 6)?,
            heartbeat_ms: get(&mut r, 7)?,
            started_ms: get(&mut r, 8)?,
            last_seen_ms: get(&mut r, 9)?,
            stopped_ms: get(&mut r, 10)?,
        };
        out.push(decode(raw)?);
    }
    Ok(out)
}
