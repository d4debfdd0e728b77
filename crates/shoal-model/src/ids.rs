//! Typed identifiers. A `JobId` can never be passed where a `ConfigId` is expected.

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub i64);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }
    };
}

id_type!(
    /// A tuning campaign: one architecture, one backend, one set of jobs.
    SessionId
);
id_type!(
    /// One problem (a convolution, a GEMM shape).
    ConfigId
);
id_type!(
    /// One way of solving a problem (a MIOpen solver, a kernel from a tuning spec).
    SolverId
);
id_type!(
    /// One unit of tuning work: (session, config, solver, steps, candidate).
    JobId
);

/// The dispatch generation of a job. It is incremented every time the Scheduler hands the job to
/// a queue; every state change is a compare-and-set on (state, attempt), so a message that carries
/// an older attempt than the store changes nothing.
pub type Attempt = u32;
