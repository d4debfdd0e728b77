//! MIOpen, as data: convolution configs as MIOpenDriver describes them, the key strings MIOpen
//! looks them up by, the solver table, fin's JSON protocol, and the formats of the find db, perf
//! db and kernel db that Shoal exports; and the one home of what Shoal does with them against
//! the store: a session's jobs loaded ([`load`]) and its results exported, merged into existing
//! databases and read back ([`export`]).
//!
//! **Architecture invariants:**
//! - No processes, no network. fin is run by the MIOpen backend (`shoal-backend`, which depends
//!   on this crate): what needs it, or the format of the artifacts it packs, is handed it as a
//!   value ([`load::update_applicability`]'s `ask_fin`, [`export::ReadKernels`]).
//! - Parsing and formatting are pure functions checked against the test vectors of
//!   `docs/miopen-formats.md`; the database readers and writers of [`export`] are the only code
//!   here that touches files.
//! - The store is reached only through `dyn shoal_store::Store`, by [`load`] and
//!   [`export::entries`].

pub mod driver;
pub mod export;
pub mod fin;
pub mod keys;
pub mod load;
pub mod naming;
pub mod problem;
pub mod solvers;

pub use problem::{ConfigError, ConvConfig, ConvMode, DataType, Direction, PadMode};
