//! The settings' URLs: which are accepted, how they are shown (password removed), and the
//! one rule that a value looking like a URL but not one is an error that never shows it.

use std::path::PathBuf;

use anyhow::bail;

/// A URL given on the command line: it must not hold a password (argv is visible to every user
/// of the host); the password comes from `password_env` when set.
pub fn url_from_flag(flag: &str, url: &str, password_env: &str) -> anyhow::Result<String> {
    let Some((scheme, rest)) = url.split_once("://") else {
        bail!("{flag}: not a URL (the value is not shown); give `scheme://user@host/…`");
    };
    scheme_of(flag, url)?;
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

/// What [`redact`] shows of a value it cannot take apart.
pub const NOT_SHOWN: &str = "(a value not shown)";

/// A URL with its password removed, for logs and errors: `scheme://user@host:port/path`. A
/// value that is not a URL is shown as it is only if it is a plain path or `sqlite:PATH` by
/// [`store_url`]'s rule; anything else that looks like a URL is [`NOT_SHOWN`].
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return match refuse_url_lookalike("", url, "") {
            Ok(()) => url.to_string(),
            Err(_) => NOT_SHOWN.to_string(),
        };
    };
    if scheme_of("", url).is_err() {
        return NOT_SHOWN.to_string();
    }
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

/// The store a setting names.
#[derive(Debug, PartialEq, Eq)]
pub enum StoreUrl {
    /// `mysql://…`: MySQL or MariaDB, the cluster's store.
    Mysql,
    /// A SQLite file: `sqlite:PATH`, `sqlite://PATH` or a bare path (embedded commands only).
    Sqlite(PathBuf),
}

/// The scheme names Shoal knows, each with the separator that must follow it. A value that
/// starts with one of these names followed by `:` or `//` but not by its separator (`mysql:`,
/// `mysql//`, `amqp:x`) is a mistyped URL, never a file name (`mysql/x.db` is one).
const KNOWN_SCHEMES: [(&str, &str); 5] = [
    ("mysql", "://"),
    ("mariadb", "://"),
    ("amqps", "://"),
    ("amqp", "://"),
    ("sqlite", ":"),
];

/// What a store setting must look like, for errors.
const STORE_FORMS: &str = "the store is `mysql://user@host:3306/database` (MySQL/MariaDB) or, \
     for embedded commands, a SQLite file: a plain path or `sqlite:PATH`, with no `@` in it";

/// What a broker setting must look like, for errors.
const BROKER_FORMS: &str = "the broker is `amqp://user@host:5672/%2f` or `amqps://…` (RabbitMQ), \
     a cluster's nodes listed between `@` and `/`: `amqp://user@h1:5672,h2:5672,h3:5672/%2f`";

/// The scheme of `value` when it has the form `scheme://…`. What precedes `://` is shown only
/// if it is a scheme by RFC 3986's grammar, so that no other part of the value (a password
/// before a stray `://`) ever reaches a message.
fn scheme_of<'a>(what: &str, value: &'a str) -> anyhow::Result<Option<&'a str>> {
    let Some((scheme, _)) = value.split_once("://") else {
        return Ok(None);
    };
    let mut chars = scheme.chars();
    let valid = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    if !valid {
        bail!(
            "{what}: the value has `://` but no valid scheme before it (not shown: it may hold a \
             password)"
        );
    }
    Ok(Some(scheme))
}

/// Refuses a value without `://` that looks like a URL: one that starts with a known scheme
/// name followed by `:` or `//` but not by that scheme's separator (`mysql:u:pw@h/db`,
/// `mysql//u:pw@h/db`, `amqp:x`), or that holds `@` (`u:pw@host/db`: credentials, not a file
/// name). The error names the setting and the form expected, never the value.
fn refuse_url_lookalike(what: &str, value: &str, forms: &str) -> anyhow::Result<()> {
    let lower = value.to_ascii_lowercase();
    for (name, separator) in KNOWN_SCHEMES {
        let Some(after) = lower.strip_prefix(name) else {
            continue;
        };
        if after.starts_with(separator) {
            // `sqlite:` (its separator) is checked by the caller; a `mysql://…` never gets here.
            continue;
        }
        if after.starts_with(':') || after.starts_with("//") {
            bail!(
                "{what}: starts like a `{name}{separator}` URL but is not one (the value is not \
                 shown: it may hold a password); {forms}"
            );
        }
    }
    if value.contains('@') {
        bail!(
            "{what}: holds `@` but is not a URL of a known scheme, so it looks like credentials \
             (the value is not shown: it may hold a password); {forms}"
        );
    }
    Ok(())
}

/// What the store setting `what` (`SHOAL_DB`, `--db-url`, a config key) names: `mysql://…`,
/// `sqlite:PATH`/`sqlite://PATH`, or a plain path. Anything else that looks like a URL is an
/// error naming the setting and the form expected, never the value, so that the path a
/// [`StoreUrl::Sqlite`] holds can be shown (`shoal sessions`, `workers`, `status`).
pub fn store_url(what: &str, value: &str) -> anyhow::Result<StoreUrl> {
    let path = match scheme_of(what, value)? {
        Some("mysql") => return Ok(StoreUrl::Mysql),
        Some("sqlite") => &value["sqlite://".len()..],
        Some(other) => bail!("{what}: unknown scheme `{other}://`; {STORE_FORMS}"),
        None => {
            refuse_url_lookalike(what, value, STORE_FORMS)?;
            match value.get(..7) {
                Some(p) if p.eq_ignore_ascii_case("sqlite:") => &value[7..],
                _ => value,
            }
        }
    };
    // What follows `sqlite:` is a path, held to the same rule as a bare one.
    if path.contains('@') {
        bail!(
            "{what}: a SQLite path with `@` in it looks like credentials (the value is not \
             shown: it may hold a password); {STORE_FORMS}"
        );
    }
    if path.is_empty() {
        bail!("{what}: names no SQLite file; {STORE_FORMS}");
    }
    Ok(StoreUrl::Sqlite(PathBuf::from(path)))
}

/// Refuses a store that a cluster cannot share: anything but MySQL/MariaDB.
pub fn require_cluster_store(what: &str, value: &str) -> anyhow::Result<()> {
    match store_url(what, value)? {
        StoreUrl::Mysql => Ok(()),
        StoreUrl::Sqlite(_) => bail!(
            "{what}: names a SQLite file, but the cluster needs MySQL/MariaDB \
             (`mysql://user@host:3306/database`): workers on several hosts share one store, and \
             SQLite is a file on one host with one writer. Use `shoal tune` without --cluster \
             for a SQLite store"
        ),
    }
}

/// Checks that the broker setting `what` is an `amqp://` or `amqps://` URL naming one node or
/// a list of nodes (`amqp://user@h1:5672,h2:5672/%2f`: [`shoal_bus::amqp::broker_endpoints`]'s
/// rules), naming the scheme, the setting and what is wrong (never the value) when it is not.
pub fn check_broker_url(what: &str, value: &str) -> anyhow::Result<()> {
    match scheme_of(what, value)? {
        Some("amqp" | "amqps") => match shoal_bus::amqp::broker_endpoints(value) {
            Ok(_) => Ok(()),
            Err(e) => bail!("{what}: {e}"),
        },
        Some(other) => bail!("{what}: unknown scheme `{other}://`; {BROKER_FORMS}"),
        None => {
            refuse_url_lookalike(what, value, BROKER_FORMS)?;
            bail!("{what}: not a URL (the value is not shown); {BROKER_FORMS}")
        }
    }
}
