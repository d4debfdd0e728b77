//! A MariaDB server of the test's own: a fresh data directory under the test's directory, a free
//! port on loopback, started, stopped and killed by its pid only. For tests that take the
//! database away; never the machine's shared server.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a start may take before the test gives up.
const READY_WITHIN: Duration = Duration::from_secs(60);

pub struct OwnMariadb {
    dir: PathBuf,
    mariadbd: PathBuf,
    pub port: u16,
    password: String,
    child: Option<Child>,
}

/// `name` on the PATH or in the sbin directories, where Debian puts the server.
fn find(name: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    let found = path
        .split(':')
        .chain(["/usr/sbin", "/usr/local/sbin", "/sbin"])
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file());
    found
}

/// A port free on loopback now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The OS user running the test: the server runs as it, and its superuser is it (socket
/// authentication).
fn user() -> String {
    let out = Command::new("id").arg("-un").output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

impl OwnMariadb {
    /// A fresh server under `dir`, started, with a user `shoal` (from 127.0.0.1) that may do
    /// anything; `None` (after saying why) when MariaDB is not installed.
    pub fn start(dir: &Path) -> Option<OwnMariadb> {
        let (Some(install), Some(mariadbd)) = (find("mariadb-install-db"), find("mariadbd")) else {
            eprintln!("skipped: MariaDB is not installed (scripts/setup-debian installs it)");
            return None;
        };
        std::fs::create_dir_all(dir).unwrap();
        let out = Command::new(install)
            .args([
                "--no-defaults",
                "--auth-root-authentication-method=socket",
                "--skip-test-db",
            ])
            .arg(format!("--user={}", user()))
            .arg(format!("--datadir={}", dir.join("data").display()))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "mariadb-install-db: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut db = OwnMariadb {
            dir: dir.to_path_buf(),
            mariadbd,
            port: free_port(),
            password: format!("pw{}", std::process::id()),
            child: None,
        };
        db.restart();
        let sql = format!(
            "CREATE USER 'shoal'@'127.0.0.1' IDENTIFIED BY '{}';
             GRANT ALL PRIVILEGES ON *.* TO 'shoal'@'127.0.0.1' WITH GRANT OPTION;",
            db.password
        );
        assert!(db.root_sql(&sql), "creating the test's user");
        Some(db)
    }

    /// `mysql://shoal:…@127.0.0.1:<port>`: the server, without a database.
    pub fn server_url(&self) -> String {
        format!("mysql://shoal:{}@127.0.0.1:{}", self.password, self.port)
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("mysqld.sock")
    }

    /// Runs SQL as the server's superuser over its socket; whether it succeeded.
    fn root_sql(&self, sql: &str) -> bool {
        use std::io::Write;
        let mut child = Command::new("mariadb")
            .arg("--no-defaults")
            .arg(format!("--socket={}", self.socket().display()))
            .arg(format!("-u{}", user()))
            .args(["--connect-timeout=5", "-N", "-B"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(sql.as_bytes())
            .unwrap();
        child.wait().unwrap().success()
    }

    /// Starts the server (again) on its data directory and port; returns once it answers.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "the server is running");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("stderr.log"))
            .unwrap();
        let child = Command::new(&self.mariadbd)
            .arg("--no-defaults")
            .arg(format!("--user={}", user()))
            .arg(format!("--datadir={}", self.dir.join("data").display()))
            .arg(format!("--socket={}", self.socket().display()))
            .arg(format!("--port={}", self.port))
            .arg(format!(
                "--pid-file={}",
                self.dir.join("mysqld.pid").display()
            ))
            .args(["--bind-address=127.0.0.1", "--skip-name-resolve"])
            .args(["--max-connections=300", "--innodb-buffer-pool-size=64M"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
        let t0 = Instant::now();
        while !self.root_sql("SELECT 1") {
            let exited = self.child.as_mut().unwrap().try_wait().unwrap();
            assert!(
                exited.is_none(),
                "the test's MariaDB exited during start-up; see {}",
                self.dir.join("stderr.log").display()
            );
            assert!(
                t0.elapsed() < READY_WITHIN,
                "the test's MariaDB did not start"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// SIGKILL, as a crash or a pulled plug: gone at once, nothing flushed.
    pub fn kill(&mut self) {
        self.signal(libc::SIGKILL);
    }

    /// SIGTERM, as `systemctl stop` does: a clean shutdown, waited for.
    pub fn stop(&mut self) {
        self.signal(libc::SIGTERM);
    }

    fn signal(&mut self, signal: i32) {
        if let Some(mut child) = self.child.take() {
            unsafe {
                libc::kill(child.id() as i32, signal);
            }
            let t0 = Instant::now();
            while child.try_wait().unwrap().is_none() {
                if t0.elapsed() > READY_WITHIN {
                    let _ = child.kill();
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

impl Drop for OwnMariadb {
    fn drop(&mut self) {
        self.kill();
    }
}
