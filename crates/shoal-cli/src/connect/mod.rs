//! Where the cluster's broker and database are, and opening them.
//!
//! Settings come from, in order: the environment (`SHOAL_BROKER`, `SHOAL_DB`, `SHOAL_NAMESPACE`),
//! then a config file (`--config`, else `$SHOAL_CONFIG`, else `/etc/shoal/shoal.toml` when it
//! exists). URLs carry credentials, so they never come from argv, and they are shown only with the
//! password removed ([`redact`]). A setting is a URL of a known scheme (`mysql://`, `sqlite:`,
//! `amqp://`, `amqps://`) or, for the store, a plain path; a value that looks like a URL but is
//! not one (holds `@`, or starts `mysql:`, `mysql//`, `amqp:x`) is an error that names the
//! setting and the form expected and never shows the value ([`store_url`], [`check_broker_url`]),
//! so that the SQLite path a listing prints is never a mistyped URL with its password.
//! The message signing key is read from the file `SHOAL_HMAC_KEY_FILE` names, never from argv
//! or the environment itself ([`signing_key_from_env`]).

use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use serde::Deserialize;
use shoal_bus::Bus;
use shoal_model::queue::Namespace;
use shoal_store::patient::PatientStore;
use shoal_store::{SqliteStore, Store};

mod url;
pub use url::{
    check_broker_url, redact, require_cluster_store, store_url, url_from_flag, StoreUrl,
};

/// The config file: every key optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    pub broker: Option<String>,
    pub db: Option<String>,
    pub namespace: Option<String>,
    pub fin: Option<PathBuf>,
}

/// Resolved settings.
#[derive(Debug)]
pub struct Settings {
    pub broker: Option<String>,
    pub db: Option<String>,
    pub namespace: String,
    pub fin: Option<PathBuf>,
    /// Where `db` came from (`SHOAL_DB`, the config file's `db`, `--db-url`), for messages
    /// that must name the setting without showing its value.
    pub db_from: String,
    /// Where `broker` came from, likewise.
    pub broker_from: String,
}

impl Settings {
    pub fn load(config: Option<&Path>) -> anyhow::Result<Settings> {
        let path = config
            .map(Path::to_path_buf)
            .or_else(|| std::env::var_os("SHOAL_CONFIG").map(PathBuf::from))
            .or_else(|| {
                let p = PathBuf::from("/etc/shoal/shoal.toml");
                p.exists().then_some(p)
            });
        let file = match &path {
            Some(p) => {
                let text = std::fs::read_to_string(p)
                    .with_context(|| format!("reading the config file {}", p.display()))?;
                toml::from_str::<ConfigFile>(&text)
                    .with_context(|| format!("in the config file {}", p.display()))?
            }
            None => ConfigFile::default(),
        };
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let in_file = |key: &str| match &path {
            Some(p) => format!("`{key}` in {}", p.display()),
            None => format!("`{key}`"),
        };
        let from = |var: &str, key: &str| match env(var) {
            Some(_) => var.to_string(),
            None => in_file(key),
        };
        let settings = Settings {
            broker: env("SHOAL_BROKER").or(file.broker),
            db: env("SHOAL_DB").or(file.db),
            namespace: env("SHOAL_NAMESPACE")
                .or(file.namespace)
                .unwrap_or_else(|| "shoal".into()),
            fin: env("SHOAL_FIN").map(PathBuf::from).or(file.fin),
            db_from: from("SHOAL_DB", "db"),
            broker_from: from("SHOAL_BROKER", "broker"),
        };
        // A mistyped scheme is refused here, before anything takes the value for a file name.
        if let Some(db) = &settings.db {
            store_url(&settings.db_from, db)?;
        }
        if let Some(broker) = &settings.broker {
            check_broker_url(&settings.broker_from, broker)?;
        }
        Ok(settings)
    }

    pub fn namespace(&self) -> anyhow::Result<Namespace> {
        Namespace::new(&self.namespace).map_err(|e| anyhow::anyhow!("SHOAL_NAMESPACE: {e}"))
    }
}

/// Opens the store that the setting `what` names: `mysql://…` (the cluster) or a SQLite file,
/// waiting up to `wait` for a server that cannot be reached yet.
pub async fn open_store_url(
    what: &str,
    url: &str,
    wait: Duration,
) -> anyhow::Result<Arc<dyn Store>> {
    let store: Arc<dyn Store> = match store_url(what, url)? {
        // A server's outage, once connected, is waited out call by call (see
        // `shoal_store::patient`): the cluster's processes pause instead of failing.
        StoreUrl::Mysql => Arc::new(PatientStore::new(
            Arc::new(
                shoal_store::mysql::MysqlStore::connect_with(
                    url,
                    shoal_store::mysql::MysqlOptions {
                        connect_wait: wait,
                        ..Default::default()
                    },
                )
                .await
                .with_context(|| format!("connecting to {}", redact(url)))?,
            ),
            shoal_store::patient::DEFAULT_PATIENCE,
        )),
        StoreUrl::Sqlite(path) => Arc::new(
            SqliteStore::open(&path).with_context(|| format!("opening {}", path.display()))?,
        ),
    };
    Ok(store)
}

/// The cluster store from the settings (MySQL/MariaDB only), migrated.
pub async fn store_from_env() -> anyhow::Result<Arc<dyn Store>> {
    let settings = Settings::load(None)?;
    let Some(url) = settings.db else {
        bail!("no database: set SHOAL_DB (e.g. mysql://shoal:…@db-host:3306/shoal) or `db` in the config file");
    };
    require_cluster_store(&settings.db_from, &url)?;
    // A database that does not answer yet is waited for, saying so (see `waiting`).
    crate::waiting::on_stderr(async {
        let store = open_store_url(
            &settings.db_from,
            &url,
            shoal_store::patient::DEFAULT_PATIENCE,
        )
        .await?;
        store.migrate().await?;
        Ok(store)
    })
    .await
}

/// The cluster bus from the settings, for commands that talk to a running cluster (`export
/// --cluster`, `control`): no waiting for a broker that is down, the user is told at once.
pub async fn bus_from_env() -> anyhow::Result<Arc<dyn Bus>> {
    let settings = Settings::load(None)?;
    let url = settings
        .broker
        .clone()
        .context("no broker: set SHOAL_BROKER or `broker` in the config file")?;
    open_bus_url(
        &settings.broker_from,
        &url,
        settings.namespace()?,
        Duration::ZERO,
    )
    .await
}

/// The deployment's message codec, from the key file named by `SHOAL_HMAC_KEY_FILE`. Every
/// process of a cluster needs the same key: messages it cannot verify are dead-lettered.
pub fn cluster_codec() -> anyhow::Result<shoal_model::envelope::Codec> {
    let key = signing_key_from_env()?.with_context(|| {
        format!(
            "{HMAC_KEY_FILE_VAR} is not set: cluster messages are signed with the deployment's \
             key (scripts/services-up writes one; see deploy/README.md)"
        )
    })?;
    let codec = shoal_model::envelope::Codec::new(&key).context(HMAC_KEY_FILE_VAR)?;
    Ok(codec.with_origin(shoal_bus::random_origin()))
}

/// The bus named by the broker setting `what`: `amqp://` or `amqps://` (RabbitMQ), signing with
/// the deployment's key ([`cluster_codec`]), waiting up to `wait` for a broker that cannot be
/// reached yet.
pub async fn open_bus_url(
    what: &str,
    url: &str,
    ns: Namespace,
    wait: Duration,
) -> anyhow::Result<Arc<dyn Bus>> {
    check_broker_url(what, url)?;
    let options = shoal_bus::RabbitOptions {
        codec: cluster_codec()?,
        connect_wait: wait,
        ..Default::default()
    };
    let bus = shoal_bus::amqp::RabbitBus::connect_with(url, ns, options)
        .await
        .with_context(|| format!("connecting to {}", redact(url)))?;
    Ok(bus)
}

/// The variable that names the message signing key's file.
pub const HMAC_KEY_FILE_VAR: &str = "SHOAL_HMAC_KEY_FILE";

/// The shortest signing key accepted, in bytes (HMAC-SHA256's block of security).
pub const MIN_KEY_BYTES: usize = 32;

/// The largest key file read: a key is a few dozen bytes, so anything big is a wrong file.
const MAX_KEY_FILE_BYTES: u64 = 64 * 1024;

/// The message signing key, from the file `SHOAL_HMAC_KEY_FILE` names; `None` when the variable
/// is unset or empty. The key itself never comes from argv or the environment, where other
/// users and child processes could read it. See [`read_signing_key`] for what the file must be.
pub fn signing_key_from_env() -> anyhow::Result<Option<Vec<u8>>> {
    match std::env::var_os(HMAC_KEY_FILE_VAR) {
        Some(path) if !path.is_empty() => read_signing_key(Path::new(&path))
            .with_context(|| format!("{HMAC_KEY_FILE_VAR}: the signing key"))
            .map(Some),
        _ => Ok(None),
    }
}

/// Reads a signing key file: a regular file owned by this user with no group or other
/// permission bits (mode 600 or 400), holding at least [`MIN_KEY_BYTES`] bytes. Hex text
/// (nothing but hex digits once surrounding whitespace is trimmed, as `openssl rand -hex 32`
/// writes; so at least 64 of them) is decoded; any other content is the key as is.
pub fn read_signing_key(path: &Path) -> anyhow::Result<Vec<u8>> {
    let shown = path.display();
    // Non-blocking, so that a FIFO cannot hold the open; the checks are on the file opened.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .with_context(|| format!("cannot open {shown}"))?;
    let meta = file
        .metadata()
        .with_context(|| format!("cannot read {shown}"))?;
    if !meta.is_file() {
        bail!("{shown} is not a regular file");
    }
    let mode = meta.mode() & 0o7777;
    // SAFETY: geteuid(2) cannot fail and touches no memory.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        bail!(
            "{shown} (mode {mode:o}) is owned by uid {}, not by this user (uid {me})",
            meta.uid()
        );
    }
    if mode & 0o077 != 0 {
        bail!(
            "{shown} has mode {mode:o}: a key file must be readable by its owner only \
             (chmod 600 {shown})"
        );
    }
    if meta.len() > MAX_KEY_FILE_BYTES {
        bail!(
            "{shown} is {} bytes; a key file is at most {MAX_KEY_FILE_BYTES}",
            meta.len()
        );
    }
    let mut bytes = Vec::new();
    file.take(MAX_KEY_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("cannot read {shown}"))?;
    if bytes.len() as u64 > MAX_KEY_FILE_BYTES {
        bail!("{shown} grew past {MAX_KEY_FILE_BYTES} bytes while being read");
    }
    let trimmed = bytes.trim_ascii();
    // Text of hex digits only is hex at any length, so that a short hex key is measured by
    // the bytes it decodes to (62 digits are 31 bytes, refused), not by its characters.
    let key = if !trimmed.is_empty() && trimmed.iter().all(u8::is_ascii_hexdigit) {
        hex::decode(trimmed)
            .map_err(|e| anyhow::anyhow!("{shown} looks like hex text but is not: {e}"))?
    } else {
        bytes
    };
    if key.len() < MIN_KEY_BYTES {
        bail!(
            "{shown} holds a {}-byte key; at least {MIN_KEY_BYTES} bytes are needed \
             (e.g. `openssl rand -hex 32 > {shown}; chmod 600 {shown}`)",
            key.len()
        );
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn flags_refuse_passwords_and_take_them_from_the_environment() {
        let err = super::url_from_flag("--broker", "amqp://u:pw@h:5672/%2f", "X_TEST_PW_1")
            .unwrap_err()
            .to_string();
        assert!(err.contains("X_TEST_PW_1") && !err.contains("pw@"), "{err}");
        assert_eq!(
            super::url_from_flag("--broker", "amqp://u@h:5672/%2f", "X_TEST_PW_UNSET").unwrap(),
            "amqp://u@h:5672/%2f"
        );
        std::env::set_var("X_TEST_PW_2", "s3cret");
        assert_eq!(
            super::url_from_flag("--db-url", "mysql://u@h:3306/shoal", "X_TEST_PW_2").unwrap(),
            "mysql://u:s3cret@h:3306/shoal"
        );
    }

    #[test]
    fn passwords_never_survive_redaction() {
        assert_eq!(
            redact("amqp://shoal:s3cret@10.0.0.1:5672/%2f"),
            "amqp://shoal@10.0.0.1:5672/%2f"
        );
        assert_eq!(
            redact("mysql://root:pw@db:3306/shoal?require_ssl=true"),
            "mysql://root@db:3306/shoal"
        );
        assert_eq!(redact("mysql://root@db:3306"), "mysql://root@db:3306");
        assert_eq!(redact("sqlite:x.db"), "sqlite:x.db");
        assert!(!redact("amqps://u:p%40ss@h/v").contains("p%40ss"));
    }

    #[test]
    fn an_unknown_scheme_names_the_scheme_and_the_setting_never_the_value() {
        let e = super::store_url("SHOAL_DB", "mysq://shoal:hunter2@db-host/shoal")
            .unwrap_err()
            .to_string();
        assert!(e.contains("SHOAL_DB") && e.contains("`mysq://`"), "{e}");
        assert!(!e.contains("hunter2") && !e.contains("db-host"), "{e}");
        let e = super::check_broker_url("SHOAL_BROKER", "amqq://u:hunter2@mq/%2f")
            .unwrap_err()
            .to_string();
        assert!(e.contains("SHOAL_BROKER") && e.contains("`amqq://`"), "{e}");
        assert!(!e.contains("hunter2") && !e.contains("mq/"), "{e}");
        // Not a scheme before `://`: nothing of the value is shown.
        let e = super::store_url("SHOAL_DB", "u:hunter2@h://x")
            .unwrap_err()
            .to_string();
        assert!(e.contains("SHOAL_DB") && !e.contains("hunter2"), "{e}");
        let e = super::check_broker_url("SHOAL_BROKER", "hunter2")
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a URL") && !e.contains("hunter2"), "{e}");
        super::check_broker_url("SHOAL_BROKER", "amqps://u:p@h/v").unwrap();
    }

    #[test]
    fn a_broker_cluster_is_one_url_listing_its_nodes() {
        let list = "amqp://shoal:hunter2@mq1:5672,mq2:5672,10.0.0.3:5673/%2f";
        super::check_broker_url("SHOAL_BROKER", list).unwrap();
        assert_eq!(
            redact(list),
            "amqp://shoal@mq1:5672,mq2:5672,10.0.0.3:5673/%2f"
        );
        // The password of --broker comes from the environment, once for every node.
        std::env::set_var("X_TEST_PW_3", "hunter2");
        assert_eq!(
            super::url_from_flag("--broker", "amqp://shoal@mq1,mq2:5673/%2f", "X_TEST_PW_3")
                .unwrap(),
            "amqp://shoal:hunter2@mq1,mq2:5673/%2f"
        );
        for (value, says) in [
            ("amqp://shoal:hunter2@mq1,,mq3/%2f", "host 2 of 3 is empty"),
            ("amqp://shoal:hunter2@mq1, mq2/%2f", "no spaces"),
            ("amqp://shoal:hunter2@mq1:5672,mq1/%2f", "repeats"),
            ("amqp://shoal:hunter2@mq1:70000/%2f", "port"),
            (
                "amqp://shoal:hunter2@mq1/%2f,amqp://shoal:hunter2@mq2/%2f",
                "several URLs",
            ),
        ] {
            let e = format!(
                "{:#}",
                super::check_broker_url("SHOAL_BROKER", value).unwrap_err()
            );
            assert!(
                e.contains("SHOAL_BROKER") && e.contains(says),
                "{value}: {e}"
            );
            assert!(e.contains("h1:5672,h2:5672"), "the form expected: {e}");
            assert!(!e.contains("hunter2") && !e.contains("mq1"), "{value}: {e}");
        }
    }

    /// Values that look like URLs but are not, each holding the password `hunter2`.
    const LOOKALIKES: [&str; 11] = [
        "mysql//user:hunter2@h/db",
        "mysql:user:hunter2@h/db",
        "MySQL:user:hunter2@h/db",
        "mysql:/hunter2",
        "user:hunter2@host/db",
        "mariadb:user:hunter2@h/db",
        "sqlite:user:hunter2@h/db",
        "sqlite//hunter2.db",
        "amqp:hunter2",
        "amqp//u:hunter2@mq/%2f",
        "amqps:u:hunter2@mq",
    ];

    #[test]
    fn a_store_setting_that_looks_like_a_url_is_an_error_that_never_shows_it() {
        for value in LOOKALIKES {
            let e = format!("{:#}", super::store_url("SHOAL_DB", value).unwrap_err());
            assert!(e.contains("SHOAL_DB"), "{value}: {e}");
            assert!(
                e.contains("mysql://user@host"),
                "{value}: the form expected: {e}"
            );
            assert!(!e.contains("hunter2") && !e.contains(value), "{value}: {e}");
            // What a log or a listing would show of it.
            assert!(!super::redact(value).contains("hunter2"), "{value}");
            assert!(super::require_cluster_store("SHOAL_DB", value).is_err());
        }
        let e = super::store_url("SHOAL_DB", "mysql//u:hunter2@h/db")
            .unwrap_err()
            .to_string();
        assert!(e.contains("`mysql://`"), "{e}");
        let e = super::store_url("SHOAL_DB", "u:hunter2@h/db")
            .unwrap_err()
            .to_string();
        assert!(e.contains("`@`"), "{e}");
        assert!(super::store_url("SHOAL_DB", "sqlite:").is_err());
    }

    #[test]
    fn a_broker_setting_that_looks_like_a_url_is_an_error_that_never_shows_it() {
        for value in LOOKALIKES {
            let e = format!(
                "{:#}",
                super::check_broker_url("SHOAL_BROKER", value).unwrap_err()
            );
            assert!(e.contains("SHOAL_BROKER"), "{value}: {e}");
            assert!(
                e.contains("amqp://user@host"),
                "{value}: the form expected: {e}"
            );
            assert!(!e.contains("hunter2") && !e.contains(value), "{value}: {e}");
        }
        let e = super::check_broker_url("SHOAL_BROKER", "amqp:hunter2")
            .unwrap_err()
            .to_string();
        assert!(e.contains("`amqp://`"), "{e}");
    }

    #[test]
    fn a_flag_that_is_not_a_url_is_never_shown() {
        for value in LOOKALIKES.into_iter().chain(["u:hunter2@h://x"]) {
            let e = super::url_from_flag("--db-url", value, "X_TEST_PW_UNSET")
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("--db-url") && !e.contains("hunter2"),
                "{value}: {e}"
            );
        }
    }

    #[test]
    fn plain_paths_stay_paths() {
        use super::StoreUrl;
        use std::path::PathBuf;
        for path in [
            "shoal.db",
            "/var/lib/shoal/shoal.db",
            "mysql/shoal.db",
            "mysql.db",
            "amqp-test.db",
            "./mysql:x.db",
        ] {
            assert_eq!(
                super::store_url("SHOAL_DB", path).unwrap(),
                StoreUrl::Sqlite(PathBuf::from(path)),
                "{path}"
            );
            assert_eq!(super::redact(path), path);
        }
        assert_eq!(super::redact("u:hunter2@h://x"), super::url::NOT_SHOWN);
    }

    #[test]
    fn store_urls() {
        use super::StoreUrl;
        use std::path::PathBuf;
        let url = |v| super::store_url("SHOAL_DB", v).unwrap();
        assert_eq!(url("mysql://u:p@h:3306/shoal"), StoreUrl::Mysql);
        assert_eq!(url("shoal.db"), StoreUrl::Sqlite(PathBuf::from("shoal.db")));
        assert_eq!(
            url("sqlite:x/y.db"),
            StoreUrl::Sqlite(PathBuf::from("x/y.db"))
        );
        assert_eq!(
            url("sqlite:///a.db"),
            StoreUrl::Sqlite(PathBuf::from("/a.db"))
        );
    }

    #[test]
    fn the_cluster_refuses_a_sqlite_store() {
        for value in ["shoal.db", "sqlite:shoal.db", "sqlite:///var/lib/shoal.db"] {
            let e = super::require_cluster_store("SHOAL_DB", value)
                .unwrap_err()
                .to_string();
            assert!(e.contains("SHOAL_DB") && e.contains("MySQL/MariaDB"), "{e}");
            assert!(e.contains("mysql://"), "{e}");
        }
        super::require_cluster_store("SHOAL_DB", "mysql://u:p@h/db").unwrap();
        assert!(super::require_cluster_store("SHOAL_DB", "mysq://u:p@h/db").is_err());
    }

    fn key_file(content: &[u8], mode: u32) -> (tempfile::TempDir, std::path::PathBuf) {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hmac.key");
        std::fs::write(&path, content).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        (dir, path)
    }

    #[test]
    fn a_hex_key_file_is_decoded_and_raw_bytes_are_taken_as_they_are() {
        let hex_key = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
        let (_d, path) = key_file(format!("  {hex_key}\n").as_bytes(), 0o600);
        let key = super::read_signing_key(&path).unwrap();
        assert_eq!(key, hex::decode(hex_key).unwrap());
        assert_eq!(key.len(), 32);
        let raw: Vec<u8> = (0..40u8).map(|i| i.wrapping_mul(37) ^ 0xa5).collect();
        let (_d, path) = key_file(&raw, 0o400);
        assert_eq!(super::read_signing_key(&path).unwrap(), raw);
    }

    #[test]
    fn a_short_key_is_refused() {
        // 62 hex digits are 31 bytes, not 62.
        let (_d, path) = key_file(&[b'a'; 62], 0o600);
        let e = super::read_signing_key(&path).unwrap_err().to_string();
        assert!(
            e.contains("31-byte key") && e.contains("at least 32 bytes"),
            "{e}"
        );
        // An odd number of hex digits is not a key.
        let (_d, path) = key_file(&[b'a'; 65], 0o600);
        let e = super::read_signing_key(&path).unwrap_err().to_string();
        assert!(e.contains("looks like hex text"), "{e}");
        let (_d, path) = key_file(b"short", 0o600);
        let e = super::read_signing_key(&path).unwrap_err().to_string();
        assert!(e.contains("5-byte key"), "{e}");
    }

    #[test]
    fn a_key_file_others_can_read_is_refused() {
        let (_d, path) = key_file(&[7u8; 32], 0o644);
        let e = super::read_signing_key(&path).unwrap_err().to_string();
        assert!(e.contains("mode 644"), "{e}");
        assert!(e.contains(&path.display().to_string()), "{e}");
        let (_d, path) = key_file(&[7u8; 32], 0o640);
        assert!(super::read_signing_key(&path).is_err());
    }

    #[test]
    fn a_key_path_that_is_not_a_regular_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let e = super::read_signing_key(dir.path()).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        let e = super::read_signing_key(std::path::Path::new("/dev/zero"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a regular file"), "{e}");
        assert!(super::read_signing_key(&dir.path().join("missing")).is_err());
    }

    #[test]
    fn the_key_comes_from_the_file_the_variable_names() {
        // Only this test touches the variable.
        std::env::remove_var(super::HMAC_KEY_FILE_VAR);
        assert_eq!(super::signing_key_from_env().unwrap(), None);
        let (_d, path) = key_file(&[9u8; 48], 0o600);
        std::env::set_var(super::HMAC_KEY_FILE_VAR, &path);
        let key = super::signing_key_from_env();
        let (_d, bad) = key_file(&[9u8; 48], 0o604);
        std::env::set_var(super::HMAC_KEY_FILE_VAR, &bad);
        let refused = super::signing_key_from_env();
        std::env::remove_var(super::HMAC_KEY_FILE_VAR);
        assert_eq!(key.unwrap(), Some(vec![9u8; 48]));
        let e = format!("{:#}", refused.unwrap_err());
        assert!(
            e.contains("SHOAL_HMAC_KEY_FILE") && e.contains("mode 604"),
            "{e}"
        );
    }
}
