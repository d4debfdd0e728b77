//! Logs through `tracing`: level from `RUST_LOG` (default `info`), text for people or JSON lines
//! for machines (`--log-format json`), always on stderr so stdout stays for results. Colours only
//! when stderr is a terminal (and `NO_COLOR` is not set), so a log file or a journal holds no
//! escape codes.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

pub fn init(format: LogFormat) -> Result<(), String> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none());
    let result = match format {
        LogFormat::Text => builder.with_target(false).try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
    result.map_err(|e| format!("cannot start logging: {e}"))
}
