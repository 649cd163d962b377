//! How the work of a run talks to whoever drives it: notes and progress go through
//! [`Progress`] (the CLI draws a spinner and prints lines), and [`Stop`] is how the driver
//! asks the work to stop (the CLI sets it on Ctrl-C; nothing here installs a signal
//! handler).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Receives what a run reports while it works.
pub trait Progress: Send + Sync {
    /// A line for the user: waiting, a warning, what was released or refused.
    fn note(&self, line: &str);
    /// A result was recorded by this host.
    fn evaluated(&self, update: &Evaluated<'_>);
    /// This host completed generation `generation`: `evaluated` genomes of the run have a
    /// fitness, the best of them `best_fitness`.
    fn generation(&self, generation: u32, evaluated: u64, best_fitness: Option<f64>);
}

/// This host's counters after one more result.
#[derive(Debug)]
pub struct Evaluated<'a> {
    /// The generation of the candidate just recorded.
    pub generation: u32,
    /// Results this host recorded in this invocation.
    pub evaluated: u64,
    /// Those results per status name.
    pub by_status: &'a BTreeMap<&'static str, u64>,
    /// Results per hour of this invocation.
    pub per_hour: f64,
    /// The best fitness in the run so far (baseline time / time; regressed included).
    pub best_fitness: Option<f64>,
    /// The share of this invocation's budget spent, 0 to 1 (`None`: no budget).
    pub budget_share: Option<f64>,
    /// Time left until the budget is spent, at this invocation's pace so far.
    pub eta: Option<std::time::Duration>,
}

/// A [`Progress`] that reports nothing (tests, scripts).
pub struct Quiet;

impl Progress for Quiet {
    fn note(&self, _: &str) {}
    fn evaluated(&self, _: &Evaluated<'_>) {}
    fn generation(&self, _: u32, _: u64, _: Option<f64>) {}
}

/// Asks the work of a run to stop: evaluations on a GPU finish and are saved, those that
/// have not reached one give their genome back (it stays pending for any host).
#[derive(Clone, Debug, Default)]
pub struct Stop {
    /// Stop claiming work (a user's request).
    stop: Arc<AtomicBool>,
    /// Give back what has not reached a GPU (the request, or a spent time budget).
    halt: Arc<AtomicBool>,
}

impl Stop {
    /// The user's stop (Ctrl-C).
    pub fn request(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.halt.store(true, Ordering::SeqCst);
    }

    /// Whether [`Stop::request`] was called.
    pub fn is_requested(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// The time budget is spent: give back what has not reached a GPU (compiles run far
    /// ahead, so without it a spent budget waited for every compiled genome: 40 s became
    /// 2.4 min on an H200).
    pub(crate) fn halt(&self) {
        self.halt.store(true, Ordering::SeqCst);
    }

    /// Set once evaluations should give back genomes that have not reached a GPU.
    pub(crate) fn halted(&self) -> Arc<AtomicBool> {
        self.halt.clone()
    }
}
