//! The command line's own layer, shared by its two programs: `shoal` (`main.rs`), the one users
//! get, and `shoal-bench` (crates/shoal-bench), the developers' bench, which is not shipped.
//! Only what both need is here: where the cluster is and opening it ([`connect`]), the local
//! store ([`store_open`]), this host's facts ([`host`]), Ctrl-C and SIGTERM ([`signals`]),
//! logging ([`logging`]) and how an error is said ([`report`]). Every command of `shoal` lives
//! in the binary.
//!
//! **Architecture invariant:** only the command line (this crate and `shoal-bench`) uses
//! `anyhow`, reads the process environment for settings, installs signal handlers and writes to
//! the terminal.

pub mod connect;
pub mod host;
pub mod logging;
pub mod signals;
pub mod store_open;
pub mod waiting;

/// The error and its causes, each said once. The crates' errors already put their source in
/// their own message, so anyhow's `{:#}` would print the same cause two or three times over.
pub fn report(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}
