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

use serde::{Deserialize, Serialize};

/// The gates of DESIGN.md, in the order a variant meets them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Gate {
    Render,
    Compile,
    Static,
    Correctness,
    Timing,
    /// compute-sanitizer (memcheck, racecheck, synccheck) on a small shape, before a
    /// variant is reported best or exported, and in `evo check`.
    Sanitizer,
    Profile,
}

/// The final status of a variant; the first failing gate decides it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    RenderFailed,
    CompileFailed,
    RejectedStatic,
    LaunchFailed,
    Crashed,
    TimedOut,
    Incorrect,
    Regressed,
    Evaluated,
}

impl Status {
    pub const ALL: [Status; 9] = [
        Status::RenderFailed,
        Status::CompileFailed,
        Status::RejectedStatic,
        Status::LaunchFailed,
        Status::Crashed,
        Status::TimedOut,
        Status::Incorrect,
        Status::Regressed,
        Status::Evaluated,
    ];

    /// The snake_case name used in files and databases.
    pub fn name(self) -> &'static str {
        match self {
            Status::RenderFailed => "render_failed",
            Status::CompileFailed => "compile_failed",
            Status::RejectedStatic => "rejected_static",
            Status::LaunchFailed => "launch_failed",
            Status::Crashed => "crashed",
            Status::TimedOut => "timed_out",
            Status::Incorrect => "incorrect",
            Status::Regressed => "regressed",
            Status::Evaluated => "evaluated",
        }
    }

    pub fn parse(name: &str) -> Option<Status> {
        Status::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The status a failure at `gate` gives, for the gates whose failure has one meaning.
    pub fn for_failed_gate(gate: Gate) -> Option<Status> {
        match gate {
            Gate::Render => Some(Status::RenderFailed),
            Gate::Compile => Some(Status::CompileFailed),
            Gate::Static => Some(Status::RejectedStatic),
            Gate::Correctness | Gate::Sanitizer => Some(Status::Incorrect),
            Gate::Timing | Gate::Profile => None,
        }
    }
}
