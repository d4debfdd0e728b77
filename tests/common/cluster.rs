//! A cluster for tests: a fresh namespace on the real RabbitMQ and a fresh database on the real
//! MariaDB (URLs from SHOAL_TEST_AMQP / SHOAL_TEST_MYSQL, which `scripts/test` sets after
//! `scripts/services-up`), and `shoal worker` processes started and stopped like a user would.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Reads `KEY=value` lines of the credentials file `scripts/services-up` writes, for runs
/// outside `scripts/test`.
fn from_credentials(key: &str) -> Option<String> {
    let home = std::env::var("HOME").ok()?;
    let base = std::env::var("XDG_CONFIG_HOME").unwrap_or(format!("{home}/.config"));
    let text = std::fs::read_to_string(format!("{base}/shoal/credentials.env")).ok()?;
    text.lines().find_map(|l| {
        let (k, v) = l.split_once('=')?;
        (k.trim() == key).then(|| v.trim().trim_matches('"').to_string())
    })
}

pub fn test_url(key: &str, default: &str) -> String {
    std::env::var(key)
        .ok()
        .or_else(|| from_credentials(key))
        .unwrap_or_else(|| default.to_string())
}

/// One test's cluster: namespace, database, worker processes.
pub struct Cluster {
    pub namespace: String,
    pub database: String,
    pub amqp: String,
    pub mysql_server: String,
    pub dir: PathBuf,
    pub workers: Vec<(String, Child)>,
    /// The deployment's message-signing key (mode 600), as `scripts/services-up` writes one.
    pub key_file: PathBuf,
}

/// Writes a fresh random signing key as hex into `path`, readable by its owner only.
pub fn write_key_file(path: &Path) {
    let mut key = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut key))
        .unwrap();
    let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
    write_private(path, &hex);
}

/// Writes `text` into a new file at `path`, readable by its owner only (mode 600).
pub fn write_private(path: &Path, text: &str) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .unwrap();
}

impl Cluster {
    pub fn new(name: &str, dir: &Path) -> Cluster {
        let mysql_server = test_url("SHOAL_TEST_MYSQL", "mysql://root@127.0.0.1:3306");
        Cluster::on_mysql(name, dir, mysql_server)
    }

    /// A cluster whose database is on `mysql_server` (a server of the test's own, which it may
    /// stop) instead of the shared one.
    pub fn on_mysql(name: &str, dir: &Path, mysql_server: String) -> Cluster {
        let tag = format!("{name}{}", std::process::id());
        let amqp = test_url("SHOAL_TEST_AMQP", "amqp://guest:guest@127.0.0.1:5672/%2f");
        let database = format!("shoal_{tag}");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(shoal_store::mysql::MysqlStore::create_database(
            &mysql_server,
            &database,
        ))
        .expect("creating the test database (is MariaDB up? run scripts/services-up)");
        let key_file = dir.join("hmac.key");
        write_key_file(&key_file);
        Cluster {
            key_file,
            namespace: tag.replace('_', "-"),
            database,
            amqp,
            mysql_server,
            dir: dir.to_path_buf(),
            workers: Vec::new(),
        }
    }

    pub fn db_url(&self) -> String {
        format!(
            "{}/{}",
            self.mysql_server.trim_end_matches('/'),
            self.database
        )
    }

    /// Sets the cluster's settings on a command, the way a deployment does: environment only.
    pub fn env<'c>(&self, cmd: &'c mut Command) -> &'c mut Command {
        cmd.env("SHOAL_BROKER", &self.amqp)
            .env("SHOAL_DB", self.db_url())
            .env("SHOAL_NAMESPACE", &self.namespace)
            .env("SHOAL_HMAC_KEY_FILE", &self.key_file)
    }

    /// `shoal worker --role <role> …` as a child process with its own work dir and log file.
    pub fn start_worker(&mut self, name: &str, wrap: &[&str], args: &[&str]) {
        let log = self.dir.join(format!("{name}.log"));
        let work = self.dir.join(format!("{name}-work"));
        let mut cmd = Command::new(wrap.first().copied().unwrap_or(env!("CARGO_BIN_EXE_shoal")));
        if !wrap.is_empty() {
            cmd.args(&wrap[1..]).arg(env!("CARGO_BIN_EXE_shoal"));
        }
        cmd.arg("worker")
            .args(args)
            .arg("--work-dir")
            .arg(&work)
            .current_dir(&self.dir)
            .env("RUST_LOG", "info,shoal_actors=debug")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        self.env(&mut cmd);
        self.workers.push((name.to_string(), cmd.spawn().unwrap()));
    }

    pub fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(format!("{name}.log"))).unwrap_or_default()
    }

    /// Waits for every worker to exit on its own (after a drain order); each must exit 0.
    pub fn wait_workers(&mut self, bound: Duration) {
        let t0 = Instant::now();
        for (name, child) in &mut self.workers {
            loop {
                if let Some(status) = child.try_wait().unwrap() {
                    assert!(status.success(), "worker {name} exited with {status}");
                    break;
                }
                assert!(
                    t0.elapsed() < bound,
                    "worker {name} did not drain within {bound:?}"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        self.workers.clear();
    }

    /// SIGTERM to every worker; each must exit 0 within the bound (a drain, not a kill).
    pub fn stop_workers(&mut self, bound: Duration) {
        for (_, child) in &self.workers {
            unsafe {
                libc::kill(child.id() as i32, libc::SIGTERM);
            }
        }
        let t0 = Instant::now();
        for (name, child) in &mut self.workers {
            loop {
                if let Some(status) = child.try_wait().unwrap() {
                    assert!(status.success(), "worker {name} exited with {status}");
                    break;
                }
                if t0.elapsed() > bound {
                    let _ = child.kill();
                    panic!("worker {name} did not stop within {bound:?} of SIGTERM");
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        self.workers.clear();
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for (_, child) in &mut self.workers {
            let _ = child.kill();
            let _ = child.wait();
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _ = rt.block_on(shoal_store::mysql::MysqlStore::drop_database_at(
            &self.mysql_server,
            &self.database,
        ));
        let ns = self.namespace.clone();
        let amqp = self.amqp.clone();
        // The workers declared the queues of the device kinds of these tests, the CPU's and the
        // fake gfx90a of the MIOpen test: remove them with the namespace, or every run leaves
        // its queues on the shared broker.
        let cpu = shoal_gpu::cpu_device(&shoal_gpu::SystemRoot::default());
        let kinds = [(cpu.arch, cpu.num_cu), ("gfx90a".to_string(), 110)];
        let _ = rt.block_on(async move {
            let ns = shoal_model::queue::Namespace::new(&ns).unwrap();
            let bus = shoal_bus::amqp::RabbitBus::connect(&amqp, ns).await?;
            bus.delete_namespace_of(&kinds).await
        });
    }
}

/// The cluster's store as a test reads it: a connection with a runtime of its own.
pub struct StoreReader {
    rt: tokio::runtime::Runtime,
    store: shoal_store::mysql::MysqlStore,
}

impl StoreReader {
    pub fn sessions(&self) -> Vec<shoal_model::Session> {
        use shoal_store::Store;
        self.rt.block_on(self.store.sessions()).unwrap()
    }

    pub fn final_results(&self, session: shoal_model::SessionId) -> Vec<shoal_model::FinalResult> {
        use shoal_store::Store;
        self.rt.block_on(self.store.final_results(session)).unwrap()
    }

    pub fn results(&self, job: shoal_model::JobId) -> Vec<shoal_model::ResultRow> {
        use shoal_store::Store;
        self.rt.block_on(self.store.results(job)).unwrap()
    }

    pub fn state_counts(
        &self,
        session: shoal_model::SessionId,
    ) -> std::collections::BTreeMap<shoal_model::JobState, u64> {
        use shoal_store::Store;
        self.rt.block_on(self.store.state_counts(session)).unwrap()
    }
}

impl Cluster {
    /// A reader of the cluster's store, whose schema it brings up to date first (as every
    /// process of the cluster does on start), so it can read before the workers are up.
    pub fn store(&self) -> StoreReader {
        use shoal_store::Store;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let store = rt
            .block_on(shoal_store::mysql::MysqlStore::connect(&self.db_url()))
            .unwrap();
        rt.block_on(store.migrate()).unwrap();
        StoreReader { rt, store }
    }
}
