//! MIOpen, as data: convolution configs as MIOpenDriver describes them, the key strings MIOpen
//! looks them up by, the solver table, fin's JSON protocol, and the formats of the find db, perf
//! db and kernel db that Shoal exports.
//!
//! **Architecture invariant:** no processes, no network, no store. Parsing and formatting are
//! pure functions checked against the test vectors of `docs/miopen-formats.md`; the
//! database writers are the only code here that touches files.

pub mod driver;
pub mod export;
pub mod fin;
pub mod keys;
pub mod naming;
pub mod problem;
pub mod solvers;

pub use problem::{ConfigError, ConvConfig, ConvMode, DataType, Direction, PadMode};
