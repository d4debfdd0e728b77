//! Where the cluster's broker and database are, and opening them.
//!
//! Settings come from, in order: the environment (`SHOAL_BROKER`, `SHOAL_DB`, `SHOAL_NAMESPACE`),
//! then a config file (`--config`, else `$SHOAL_CONFIG`, else `/etc/shoal/shoal.toml` when it
//! exists). URLs carry credentials, so they never come from argv, and they are shown only with the
//! password removed ([`redact`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context};
use serde::Deserialize;
use shoal_bus::Bus;
use shoal_model::queue::Namespace;
use shoal_store::{SqliteStore, Store};

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
        Ok(Settings {
            broker: env("SHOAL_BROKER").or(file.broker),
            db: env("SHOAL_DB").or(file.db),
            namespace: env("SHOAL_NAMESPACE")
                .or(file.namespace)
                .unwrap_or_else(|| "shoal".into()),
            fin: env("SHOAL_FIN").map(PathBuf::from).or(file.fin),
        })
    }

    pub fn namespace(&self) -> anyhow::Result<Namespace> {
        Namespace::new(&self.namespace).map_err(|e| anyhow::anyhow!("SHOAL_NAMESPACE: {e}"))
    }
}

/// A URL given on the command line: it must not hold a password (argv is visible to every user
/// of the host); the password comes from `password_env` when set.
pub fn url_from_flag(flag: &str, url: &str, password_env: &str) -> anyhow::Result<String> {
    let Some((scheme, rest)) = url.split_once("://") else {
        bail!("{flag}: `{}` is not a URL", redact(url));
    };
    let authority = rest.split('/').next().unwrap_or("");
    if let Some((userinfo, _)) = authority.rsplit_once('@') {
        if userinfo.contains(':') {
            bail!(
                "{flag}: a password on the command line is visible to every user of this host; \
                 give the URL without it and the password in {password_env} (or use the config file)"
            );
        }
        if let Ok(password) = std::env::var(password_env) {
            let (user, host) = rest.split_once('@').expect("userinfo checked above");
            return Ok(format!("{scheme}://{user}:{password}@{host}"));
        }
    }
    Ok(url.to_string())
}

/// A URL with its password removed, for logs and errors: `scheme://user@host:port/path`.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let path = path.split('?').next().unwrap_or("");
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{scheme}://{user}@{host}{path}")
        }
        None => format!("{scheme}://{authority}{path}"),
    }
}

/// Opens the store named by a URL: `mysql://…` (the cluster) or `sqlite:PATH` / a file path.
pub async fn open_store_url(url: &str) -> anyhow::Result<Arc<dyn Store>> {
    let store: Arc<dyn Store> = if url.starts_with("mysql://") {
        Arc::new(
            shoal_store::mysql::MysqlStore::connect(url)
                .await
                .with_context(|| format!("connecting to {}", redact(url)))?,
        )
    } else {
        let path = url.strip_prefix("sqlite:").unwrap_or(url);
        Arc::new(SqliteStore::open(Path::new(path)).with_context(|| format!("opening {path}"))?)
    };
    Ok(store)
}

/// The cluster store from the settings, migrated.
pub async fn store_from_env() -> anyhow::Result<Arc<dyn Store>> {
    let settings = Settings::load(None)?;
    let Some(url) = settings.db else {
        bail!("no database: set SHOAL_DB (e.g. mysql://shoal:…@db-host:3306/shoal) or `db` in the config file");
    };
    let store = open_store_url(&url).await?;
    store.migrate().await?;
    Ok(store)
}

/// The bus named by a URL: `amqp://` or `amqps://` (RabbitMQ).
pub async fn open_bus_url(url: &str, ns: Namespace) -> anyhow::Result<Arc<dyn Bus>> {
    if !(url.starts_with("amqp://") || url.starts_with("amqps://")) {
        bail!(
            "the broker URL must start with amqp:// or amqps:// (got {})",
            redact(url)
        );
    }
    let bus = shoal_bus::amqp::RabbitBus::connect(url, ns)
        .await
        .with_context(|| format!("connecting to {}", redact(url)))?;
    Ok(bus)
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
}
