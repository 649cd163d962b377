//! evo-eval: the gates every variant passes in order (render, compile, static,
//! correctness, timing, profile) and the worker process, one per GPU, that runs
//! kernels where a fault cannot take the search down with it.
//!
//! Status: the gate vocabulary ([`Gate`], [`Status`]) exists; the worker, the
//! correctness and timing gates arrive with the evaluator issue.

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
    Profile,
}

/// The final status of a variant; the first failing gate decides it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
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
    /// The status a failure at `gate` gives, for the gates whose failure has one meaning.
    pub fn for_failed_gate(gate: Gate) -> Option<Status> {
        match gate {
            Gate::Render => Some(Status::RenderFailed),
            Gate::Compile => Some(Status::CompileFailed),
            Gate::Static => Some(Status::RejectedStatic),
            Gate::Correctness => Some(Status::Incorrect),
            Gate::Timing | Gate::Profile => None,
        }
    }
}
