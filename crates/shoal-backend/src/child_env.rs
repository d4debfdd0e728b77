//! What a child process may not inherit: the connection strings and keys of this worker.
//!
//! Every child Shoal starts (a build, a candidate, `fin`, the library runner) runs code from a
//! spec or a kernel, which is to say code the worker does not trust. A cluster worker holds the
//! store's and the broker's URLs (with their passwords) and the message signing key file in its
//! environment; a child that inherited them could rewrite any job's result or forge messages.
//! So every spawn removes them: [`is_secret`] is the rule, [`scrub`] applies it to a command.
//! Variables a child does need (`SHOAL_FIN`, `SHOAL_RUNNER`, `SHOAL_TEST_FAKE_GPU`,
//! `SHOAL_FIN_STANDIN_*`, the `SHOAL_OUT`/`SHOAL_ARTIFACT` Shoal sets itself) are kept.

use std::ffi::OsStr;

/// Words that make a `SHOAL_*` variable a secret: it names or holds a connection or a key.
const SECRET_WORDS: [&str; 9] = [
    "DB", "BROKER", "AMQP", "MYSQL", "KEY", "PASSWORD", "SECRET", "TOKEN", "URL",
];

/// Secrets outside the `SHOAL_` namespace that Shoal's own settings may use.
const SECRET_NAMES: [&str; 1] = ["MYSQL_PWD"];

/// Whether the environment variable `name` must not reach a child: `MYSQL_PWD`, and every
/// `SHOAL_*` variable whose name contains one of `DB`, `BROKER`, `AMQP`, `MYSQL`, `KEY`,
/// `PASSWORD`, `SECRET`, `TOKEN` or `URL` (`SHOAL_DB`, `SHOAL_BROKER`, `SHOAL_HMAC_KEY_FILE`,
/// `SHOAL_TEST_AMQP`, `SHOAL_TEST_MYSQL`, `SHOAL_DB_PASSWORD` …). Case does not matter.
pub fn is_secret(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    if SECRET_NAMES.contains(&upper.as_str()) {
        return true;
    }
    upper
        .strip_prefix("SHOAL_")
        .is_some_and(|rest| SECRET_WORDS.iter().any(|w| rest.contains(w)))
}

/// Removes from `cmd`'s environment every secret of this process's environment, and any secret
/// the command was given explicitly. Call it after the command's own `env`/`envs`.
pub(crate) fn scrub(cmd: &mut tokio::process::Command) {
    let explicit: Vec<_> = cmd
        .as_std()
        .get_envs()
        .map(|(k, _)| k.to_os_string())
        .collect();
    let inherited = std::env::vars_os().map(|(k, _)| k);
    for name in inherited.chain(explicit) {
        if is_secret_os(&name) {
            cmd.env_remove(&name);
        }
    }
}

fn is_secret_os(name: &OsStr) -> bool {
    // A name that is not UTF-8 is judged by its UTF-8 part; the words are ASCII.
    is_secret(&name.to_string_lossy())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::{run, ChildSpec};
    use std::time::Duration;

    #[test]
    fn the_rule() {
        let cases = [
            ("SHOAL_DB", true),
            ("SHOAL_BROKER", true),
            ("SHOAL_HMAC_KEY_FILE", true),
            ("SHOAL_TEST_AMQP", true),
            ("SHOAL_TEST_MYSQL", true),
            ("SHOAL_TEST_MYSQL_TLS_CA", true),
            ("SHOAL_DB_PASSWORD", true),
            ("SHOAL_BROKER_PASSWORD", true),
            ("SHOAL_DB_FILE", true),
            ("SHOAL_API_TOKEN", true),
            ("SHOAL_SECRET", true),
            ("SHOAL_METRICS_URL", true),
            ("shoal_db", true),
            ("MYSQL_PWD", true),
            // What children read, and what Shoal sets for them.
            ("SHOAL_TEST_FAKE_GPU", false),
            ("SHOAL_RUNNER", false),
            ("SHOAL_FIN", false),
            ("SHOAL_FIN_STANDIN_HANG_SOLVER", false),
            ("SHOAL_FIN_STANDIN_DELAY_MS", false),
            ("SHOAL_OUT", false),
            ("SHOAL_ARTIFACT", false),
            ("SHOAL_NAMESPACE", false),
            // Not Shoal's: left alone.
            ("PATH", false),
            ("HOME", false),
            ("DB", false),
            ("MIOPEN_USER_DB_PATH", false),
            ("HIP_VISIBLE_DEVICES", false),
            ("SHOAL", false),
        ];
        for (name, secret) in cases {
            assert_eq!(is_secret(name), secret, "{name}");
        }
    }

    /// A real child, with secrets in this process's environment and among the variables the
    /// spawn was given: none reaches it, the others do.
    #[tokio::test]
    async fn a_child_never_sees_a_secret() {
        // Only this test sets these names, and std serialises environment access.
        std::env::set_var("SHOAL_DB", "mysql://shoal:hunter2@db/shoal");
        std::env::set_var("MYSQL_PWD", "hunter2");
        std::env::set_var("SHOAL_TEST_FAKE_GPU", "gfx90a:110");
        let mut spec = ChildSpec::new(
            vec!["sh".into(), "-c".into(), "env".into()],
            std::env::temp_dir(),
            Duration::from_secs(10),
        );
        spec.env = vec![
            ("SHOAL_BROKER".into(), "amqp://u:hunter2@mq".into()),
            ("SHOAL_OUT".into(), "/tmp/out".into()),
        ];
        let out = run(&spec).await.unwrap();
        std::env::remove_var("SHOAL_DB");
        std::env::remove_var("MYSQL_PWD");
        std::env::remove_var("SHOAL_TEST_FAKE_GPU");
        assert!(out.success(), "{out:?}");
        assert!(!out.stdout.contains("hunter2"), "{}", out.stdout);
        assert!(!out.stdout.contains("SHOAL_DB="), "{}", out.stdout);
        assert!(!out.stdout.contains("SHOAL_BROKER="), "{}", out.stdout);
        assert!(out.stdout.contains("SHOAL_TEST_FAKE_GPU=gfx90a:110"));
        assert!(out.stdout.contains("SHOAL_OUT=/tmp/out"));
        assert!(out.stdout.contains("PATH="));
    }
}
