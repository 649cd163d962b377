//! evo-eval: the gates every variant passes in order (render, compile, static,
//! correctness, timing, profile) and the worker process, one per GPU, that runs
//! kernels where a fault cannot take the search down with it.
//!
//! * [`protocol`]: the JSON-lines messages between orchestrator and worker.
//! * [`static_gate`]: resources and launchability from the compiled kernels.
//! * [`compare`]: poison, guards, tolerances, run-to-run identity (host side).
//! * [`timing`]: percentiles, settling, L2 rotation, device peaks.
//! * [`worker`]: the GPU process that runs correctness and timing.
//! * [`pool`]: the async orchestrator side with its watchdog.
//! * [`pipeline`]: the gates in order for one candidate.
//! * [`landscape`]: recorded measurements for the replay evaluator.

pub mod compare;
pub mod landscape;
pub mod pipeline;
pub mod pool;
pub mod profile;
pub mod protocol;
pub mod static_gate;
pub mod timing;
pub mod worker;

/// The verdict vocabulary lives in evo-core so the database and reports share it.
pub use evo_core::{Gate, Status};
