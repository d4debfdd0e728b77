//! A throw-away cluster for one benchmark run: its own database and namespace on the servers
//! `scripts/services-up` started, its own signing key, and `shoal worker` processes of the
//! `shoal` built beside this program ([`crate::shoal_program`]); all of it removed at the end,
//! queues included, so that runs do not pile up on a shared broker.

use std::sync::Arc;
use std::time::Duration;

use shoal_model::queue::Namespace;
use shoal_store::Store;

use crate::netns::HostNamespace;

/// One worker process of a bench cluster: a name (its work directory) and its arguments after
/// `shoal worker`; optionally run in a network namespace of its own.
pub struct WorkerSpec {
    pub name: String,
    pub args: Vec<String>,
    pub host: Option<Arc<HostNamespace>>,
}

pub fn worker(name: &str, args: &[&str]) -> WorkerSpec {
    WorkerSpec {
        name: name.to_string(),
        args: args.iter().map(|a| a.to_string()).collect(),
        host: None,
    }
}

/// Runs a bench's `work` until it ends or Ctrl-C / SIGTERM comes (which a terminal also sends
/// the workers, in the same process group); either way the caller then removes the cluster
/// ([`BenchCluster::stop`]), so that an interrupted run leaves no database, queue or namespace.
pub async fn until_interrupted<T>(
    work: impl std::future::Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    let mut stop = shoal_cli::signals::install()?;
    tokio::select! {
        r = work => r,
        _ = stop.triggered() => Err(anyhow::anyhow!("interrupted: the bench's cluster is removed")),
    }
}

pub struct BenchCluster {
    pub store: Arc<dyn Store>,
    server: String,
    database: String,
    amqp: String,
    pub namespace: String,
    /// The workers, by name, in the order started.
    pub children: Vec<(String, std::process::Child)>,
    /// Device kinds (architecture, units) whose queues the workers declare: removed at the end.
    pub kinds: Vec<(String, u32)>,
    /// The namespaces of the workers that have one: removed after the workers stop.
    hosts: Vec<Arc<HostNamespace>>,
    work: tempfile::TempDir,
}

/// A fresh random signing key, hex, mode 600: the benchmark's cluster is its own deployment.
fn write_key_file(path: &std::path::Path) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut key = [0u8; 32];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut key)?;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?
        .write_all(hex::encode(key).as_bytes())?;
    Ok(())
}

impl BenchCluster {
    /// Creates the database and starts `workers`; `tag` names the run (database and namespace
    /// get this process's id added).
    pub async fn start(tag: &str, workers: Vec<WorkerSpec>) -> anyhow::Result<BenchCluster> {
        let mut cluster = BenchCluster::create(tag).await?;
        if let Err(e) = cluster.spawn_all(workers) {
            cluster.stop().await;
            return Err(e);
        }
        Ok(cluster)
    }

    /// Creates the database, migrated, and the signing key, and starts no worker yet (a bench
    /// that fills the store first starts them afterwards, [`BenchCluster::spawn_all`]).
    pub async fn create(tag: &str) -> anyhow::Result<BenchCluster> {
        let var = |k: &str| {
            std::env::var(k).map_err(|_| {
                anyhow::anyhow!("{k} is not set: run scripts/services-up and source its credentials file (scripts/bench-dispatch does)")
            })
        };
        let server = var("SHOAL_TEST_MYSQL")?;
        let amqp = var("SHOAL_TEST_AMQP")?;
        let tag = format!("{tag}{}", std::process::id());
        let database = format!("shoal_{tag}");
        shoal_store::mysql::MysqlStore::create_database(&server, &database).await?;
        let db_url = format!("{}/{database}", server.trim_end_matches('/'));
        let store =
            shoal_cli::connect::open_store_url("SHOAL_TEST_MYSQL", &db_url, Duration::ZERO).await?;
        store.migrate().await?;
        let work = tempfile::tempdir()?;
        write_key_file(&work.path().join("hmac.key"))?;
        let cpu = shoal_gpu::cpu_device(&shoal_gpu::SystemRoot::default());
        Ok(BenchCluster {
            store,
            server,
            database,
            amqp,
            namespace: tag.clone(),
            children: Vec::new(),
            kinds: vec![(cpu.arch, cpu.num_cu)],
            hosts: Vec::new(),
            work,
        })
    }

    /// Starts `workers` with the cluster's database, broker, namespace and key; on an error the
    /// ones started stay in [`BenchCluster::children`] for [`BenchCluster::stop`].
    pub fn spawn_all(&mut self, workers: Vec<WorkerSpec>) -> anyhow::Result<()> {
        let exe = crate::shoal_program()?;
        let db_url = format!("{}/{}", self.server.trim_end_matches('/'), self.database);
        let amqp = self.amqp.clone();
        let key_file = self.work.path().join("hmac.key");
        for w in workers {
            self.spawn(&exe, w, (&db_url, &amqp, &key_file))?;
        }
        Ok(())
    }

    /// The bytes of data and indexes of every table of the cluster's database, from InnoDB's
    /// statistics refreshed first (`ANALYZE TABLE`), so that the last writes count.
    pub async fn database_bytes(&self) -> anyhow::Result<u64> {
        let options = shoal_store::MysqlOptions {
            database: Some(self.database.clone()),
            pool_max: 1,
            ..Default::default()
        };
        let store = shoal_store::mysql::MysqlStore::connect_with(&self.server, options).await?;
        let sizes = async {
            store.analyze_tables().await?;
            store.table_sizes().await
        }
        .await;
        store.disconnect().await;
        let sizes = sizes?;
        // Where the bytes are, largest first: the figure to read when a schema change is
        // meant to make rows leaner.
        let mut by_size: Vec<_> = sizes.iter().filter(|t| t.bytes() > 0).collect();
        by_size.sort_by_key(|t| std::cmp::Reverse(t.bytes()));
        for t in by_size {
            eprintln!(
                "database: table {} data {} B, indexes {} B",
                t.name, t.data_bytes, t.index_bytes
            );
        }
        Ok(sizes.iter().map(|t| t.bytes()).sum())
    }

    /// Starts one worker with the cluster's database, broker, namespace and signing key,
    /// in its network namespace if it has one.
    fn spawn(
        &mut self,
        exe: &std::path::Path,
        w: WorkerSpec,
        (db_url, amqp, key_file): (&str, &str, &std::path::Path),
    ) -> anyhow::Result<()> {
        let (mut command, db, broker) = match &w.host {
            None => (
                std::process::Command::new(exe),
                db_url.to_string(),
                amqp.to_string(),
            ),
            Some(host) => {
                self.hosts.push(host.clone());
                let wrap = host.wrap();
                let mut c = std::process::Command::new(&wrap[0]);
                c.args(&wrap[1..]).arg(exe);
                let db = crate::netns::relayed(db_url, host.gateway)?.1;
                let broker = crate::netns::relayed(amqp, host.gateway)?.1;
                (c, db, broker)
            }
        };
        let child = command
            .arg("worker")
            .args(&w.args)
            .arg("--work-dir")
            .arg(self.work.path().join(&w.name))
            .env("SHOAL_DB", &db)
            .env("SHOAL_BROKER", &broker)
            .env("SHOAL_NAMESPACE", &self.namespace)
            .env("SHOAL_HMAC_KEY_FILE", key_file)
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .spawn()
            .map_err(|e| anyhow::anyhow!("cannot start worker {}: {e}", w.name))?;
        self.children.push((w.name, child));
        Ok(())
    }

    /// A bus on the cluster's namespace, for asking the broker (queue depths, consumers).
    pub async fn bus(&self) -> anyhow::Result<Arc<shoal_bus::amqp::RabbitBus>> {
        let ns = Namespace::new(&self.namespace).map_err(anyhow::Error::msg)?;
        Ok(shoal_bus::amqp::RabbitBus::connect(&self.amqp, ns).await?)
    }

    /// The pid of the worker called `name`.
    pub fn pid(&self, name: &str) -> Option<u32> {
        self.children
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, c)| c.id())
    }

    /// SIGTERM to every worker, then waits for them; drops the database and the namespace.
    pub async fn stop(&mut self) {
        for (_, c) in &self.children {
            unsafe {
                libc::kill(c.id() as i32, libc::SIGTERM);
            }
        }
        for (_, c) in &mut self.children {
            let _ = c.wait();
        }
        let _ =
            shoal_store::mysql::MysqlStore::drop_database_at(&self.server, &self.database).await;
        if let Ok(bus) = self.bus().await {
            let _ = bus.delete_namespace_of(&self.kinds).await;
            let _ = shoal_bus::Bus::close(&*bus).await;
        }
        self.hosts.clear();
    }
}
