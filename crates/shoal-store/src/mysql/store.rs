//! [`Store`] for [`MysqlStore`]: each method one operation of [`super::ops`] or
//! [`super::apply`] on a pooled connection, retried by [`MysqlStore::run`] when the connection
//! broke before a commit was sent.

use super::*;

#[async_trait]
impl Store for MysqlStore {
    fn describe(&self) -> String {
        self.location.clone()
    }

    async fn migrate(&self) -> Result<u32> {
        let database = self.database.as_str();
        // A connection of its own, closed afterwards: the migration lock is the connection's,
        // and must not go back into the pool with it should the migration be cut short.
        self.run_on(Source::Dedicated, "migrating the schema", |conn| {
            migrate::migrate(conn, database, now_ms())
        })
        .await
    }

    async fn create_session(&self, session: &NewSession) -> Result<SessionId> {
        let now = now_ms();
        self.run("creating a session", |c| {
            ops::create_session(c, session, now)
        })
        .await
    }

    async fn session(&self, id: SessionId) -> Result<Option<Session>> {
        self.run("reading a session", |c| ops::session(c, id)).await
    }

    async fn sessions(&self) -> Result<Vec<Session>> {
        self.run("listing sessions", ops::sessions).await
    }

    async fn find_session(&self, session: &NewSession) -> Result<Option<Session>> {
        self.run("finding a session", |c| ops::find_session(c, session))
            .await
    }

    async fn upsert_configs(&self, configs: &[NewConfig]) -> Result<Vec<(ConfigId, bool)>> {
        let ctx = self.ctx;
        self.run("upserting configs", |c| {
            ops::upsert_configs(c, ctx, configs)
        })
        .await
    }

    async fn config(&self, id: ConfigId) -> Result<Option<Config>> {
        self.run("reading a config", |c| ops::config(c, id)).await
    }

    async fn configs_with_tag(&self, tag: &str) -> Result<Vec<Config>> {
        self.run("listing configs by tag", |c| ops::configs_with_tag(c, tag))
            .await
    }

    async fn upsert_solvers(&self, solvers: &[NewSolver]) -> Result<Vec<Solver>> {
        let ctx = self.ctx;
        self.run("upserting solvers", |c| {
            ops::upsert_solvers(c, ctx, solvers)
        })
        .await
    }

    async fn solvers(&self) -> Result<Vec<Solver>> {
        self.run("listing solvers", ops::solvers).await
    }

    async fn set_applicability(
        &self,
        session: SessionId,
        rows: &[(ConfigId, SolverId, bool)],
    ) -> Result<()> {
        let (ctx, now) = (self.ctx, now_ms());
        self.run("recording applicability", |c| {
            ops::set_applicability(c, ctx, session, rows, now)
        })
        .await
    }

    async fn applicable_solvers(
        &self,
        session: SessionId,
        config: ConfigId,
    ) -> Result<Vec<SolverId>> {
        self.run("reading applicability", |c| {
            ops::applicable_solvers(c, session, config)
        })
        .await
    }

    async fn insert_jobs(&self, jobs: &[NewJob]) -> Result<u64> {
        let (ctx, now) = (self.ctx, now_ms());
        let known = &self.labels;
        self.run("inserting jobs", |c| {
            super::insert_jobs::insert_jobs(c, ctx, known, jobs, now)
        })
        .await
    }

    async fn job(&self, id: JobId) -> Result<Option<Job>> {
        self.run("reading a job", |c| ops::job(c, id)).await
    }

    async fn job_progress(&self, id: JobId) -> Result<Option<(JobState, u32)>> {
        self.run("reading a job's state", |c| ops::job_progress(c, id))
            .await
    }

    async fn jobs_in_state(
        &self,
        session: SessionId,
        state: JobState,
        limit: u32,
    ) -> Result<Vec<Job>> {
        self.run("listing jobs by state", |c| {
            ops::jobs_in_state(c, session, state, limit)
        })
        .await
    }

    async fn in_flight(&self, session: SessionId) -> Result<Vec<Job>> {
        self.run("listing in-flight jobs", |c| ops::in_flight(c, session))
            .await
    }

    async fn expired_leases(&self, now_ms: i64, limit: u32) -> Result<Vec<Job>> {
        self.run("listing expired leases", |c| {
            ops::expired_leases(c, now_ms, limit)
        })
        .await
    }

    async fn state_counts(&self, session: SessionId) -> Result<BTreeMap<JobState, u64>> {
        self.run("counting jobs by state", |c| ops::state_counts(c, session))
            .await
    }

    async fn apply(&self, batch: &Batch) -> Result<Vec<bool>> {
        batch.validate()?;
        if batch.changes.is_empty() && batch.builds.is_empty() {
            return Ok(Vec::new());
        }
        let (ctx, now) = (self.ctx, now_ms());
        let known = &self.labels;
        self.run("applying a batch", |c| {
            apply::apply(c, ctx, known, batch, now)
        })
        .await
    }

    async fn renew_leases(&self, renewals: &[crate::LeaseRenewal]) -> Result<u64> {
        if renewals.is_empty() {
            return Ok(0);
        }
        let ctx = self.ctx;
        self.run("renewing leases", |c| apply::renew_leases(c, ctx, renewals))
            .await
    }

    async fn extend_leases(&self, by_ms: i64, changed_before_ms: i64) -> Result<u64> {
        self.run("extending leases after an outage", |c| {
            ops::extend_leases(c, by_ms, changed_before_ms)
        })
        .await
    }

    async fn unsent(&self, before_ms: i64, limit: u32) -> Result<Vec<Job>> {
        self.run("reading the outbox", |c| apply::unsent(c, before_ms, limit))
            .await
    }

    async fn mark_sent(&self, sent: &[JobRef]) -> Result<()> {
        if sent.is_empty() {
            return Ok(());
        }
        let ctx = self.ctx;
        self.run("clearing sent requests from the outbox", |c| {
            apply::mark_sent(c, ctx, sent)
        })
        .await
    }

    async fn builds(&self, session: SessionId, keys: &[String]) -> Result<Vec<BuildRecord>> {
        self.run("reading builds", |c| ops::builds(c, session, keys))
            .await
    }

    async fn put_artifact(&self, hash: &str, bytes: &[u8]) -> Result<bool> {
        let now = now_ms();
        self.run("storing an artifact", |c| {
            ops::put_artifact(c, hash, bytes, now)
        })
        .await
    }

    async fn artifact(&self, hash: &str) -> Result<Option<Vec<u8>>> {
        self.run("reading an artifact", |c| ops::artifact(c, hash))
            .await
    }

    async fn results(&self, job: JobId) -> Result<Vec<ResultRow>> {
        self.run("reading results", |c| ops::results(c, job)).await
    }

    async fn final_results(&self, session: SessionId) -> Result<Vec<FinalResult>> {
        self.run("reading final results", |c| ops::final_results(c, session))
            .await
    }

    async fn finish_times(&self, session: SessionId, since_ms: i64) -> Result<Vec<i64>> {
        self.run("reading finish times", |c| {
            ops::finish_times(c, session, since_ms)
        })
        .await
    }

    async fn put_worker(&self, worker: &shoal_model::WorkerPresence) -> Result<()> {
        let encoded = crate::presence::encode(worker)?;
        self.run("writing a worker's presence", |c| {
            super::presence::put_worker(c, &encoded)
        })
        .await
    }

    async fn workers(&self) -> Result<Vec<shoal_model::WorkerPresence>> {
        self.run("listing workers", super::presence::workers).await
    }

    async fn command_reply(&self, id: &str) -> Result<Option<shoal_model::command::CommandReply>> {
        let json: Option<String> = self
            .run("reading a command's reply", |mut c| async move {
                use mysql_async::prelude::Queryable;
                let json: Option<String> =
                    c.exec_first(crate::commands::SELECT_REPLY, (id,)).await?;
                Ok(json)
            })
            .await?;
        json.map(|j| crate::commands::decode(id, &j)).transpose()
    }

    async fn cancel_session(&self, session: SessionId, cancelled_ms: i64) -> Result<bool> {
        self.run("cancelling a session", |mut c| async move {
            use mysql_async::prelude::Queryable;
            c.exec_drop(crate::commands::CANCEL_MYSQL, (session.0, cancelled_ms))
                .await?;
            Ok(c.affected_rows() > 0)
        })
        .await
    }

    async fn cancelled_sessions(&self) -> Result<Vec<SessionId>> {
        let ids: Vec<i64> = self
            .run("listing cancelled sessions", |mut c| async move {
                use mysql_async::prelude::Queryable;
                let ids: Vec<i64> = c.exec(crate::commands::CANCELLED, ()).await?;
                Ok(ids)
            })
            .await?;
        Ok(ids.into_iter().map(SessionId).collect())
    }

    async fn put_command_reply(
        &self,
        reply: &shoal_model::command::CommandReply,
        applied_ms: i64,
    ) -> Result<()> {
        let json = crate::commands::encode(reply)?;
        self.run("recording a command's reply", |mut c| {
            let (id, json) = (reply.id.clone(), json.clone());
            async move {
                use mysql_async::prelude::Queryable;
                c.exec_drop(crate::commands::INSERT_MYSQL, (id, json, applied_ms))
                    .await?;
                Ok(())
            }
        })
        .await
    }

    async fn put_file_part(&self, sha256: &str, size: u64, part: u32, bytes: &[u8]) -> Result<()> {
        self.run("storing a part of a shipped file", |mut c| {
            let (sha256, bytes) = (sha256.to_string(), bytes.to_vec());
            async move {
                use mysql_async::prelude::Queryable;
                c.exec_drop(crate::shipped::INSERT_MYSQL, (sha256, part, size, bytes))
                    .await?;
                Ok(())
            }
        })
        .await
    }

    async fn file_parts_stored(&self, sha256: &str) -> Result<u32> {
        self.run("counting a shipped file's parts", |mut c| async move {
            use mysql_async::prelude::Queryable;
            let n: Option<u32> = c.exec_first(crate::shipped::COUNT, (sha256,)).await?;
            Ok(n.unwrap_or(0))
        })
        .await
    }

    async fn shipped_file(&self, sha256: &str) -> Result<Option<Vec<u8>>> {
        let parts: Vec<(u32, u64, Vec<u8>)> = self
            .run("reading a shipped file", |mut c| async move {
                use mysql_async::prelude::Queryable;
                let parts: Vec<(u32, u64, Vec<u8>)> =
                    c.exec(crate::shipped::SELECT, (sha256,)).await?;
                Ok(parts)
            })
            .await?;
        Ok(crate::shipped::join(parts))
    }

    async fn forget_file(&self, sha256: &str) -> Result<()> {
        self.run("forgetting a shipped file", |mut c| async move {
            use mysql_async::prelude::Queryable;
            c.exec_drop(crate::shipped::DELETE, (sha256,)).await?;
            Ok(())
        })
        .await
    }

    async fn create_db_import(
        &self,
        import: &crate::NewDbImport,
        records: &[crate::DbRecord],
    ) -> Result<crate::DbImportId> {
        let ctx = self.ctx;
        self.run("storing a database import", |c| {
            super::db_import::create(c, ctx, import, records)
        })
        .await
    }

    async fn db_imports(&self) -> Result<Vec<crate::DbImport>> {
        self.run("listing database imports", super::db_import::imports)
            .await
    }

    async fn db_records(&self, import: crate::DbImportId) -> Result<Vec<crate::DbRecord>> {
        self.run("reading a database import's records", |c| {
            super::db_import::records(c, import)
        })
        .await
    }
}
