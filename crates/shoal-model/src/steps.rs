//! Names of the steps ("fin steps" in MIOpen's vocabulary) that jobs go through. Queue names are
//! built from them, so they are spelled once, here.

/// The command backend's compile step: run the spec's build command.
pub const COMMAND_BUILD: &str = "command_build";
/// The command backend's eval step: run the spec's run command.
pub const COMMAND_RUN: &str = "command_run";
