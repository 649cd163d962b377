//! The verdict vocabulary: the gates a variant meets, in order, and the status it ends
//! with. One set of names from the evaluator through the database to every report
//! (stored as the snake_case names below).

use std::fmt;
use std::str::FromStr;

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

impl Gate {
    pub const ALL: [Gate; 7] = [
        Gate::Render,
        Gate::Compile,
        Gate::Static,
        Gate::Correctness,
        Gate::Timing,
        Gate::Sanitizer,
        Gate::Profile,
    ];

    /// The snake_case name used in files and databases.
    pub fn name(self) -> &'static str {
        match self {
            Gate::Render => "render",
            Gate::Compile => "compile",
            Gate::Static => "static",
            Gate::Correctness => "correctness",
            Gate::Timing => "timing",
            Gate::Sanitizer => "sanitizer",
            Gate::Profile => "profile",
        }
    }

    pub fn parse(name: &str) -> Option<Gate> {
        Gate::ALL.into_iter().find(|g| g.name() == name)
    }
}

/// The final status of a variant; the first failing gate decides it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The replay evaluator has no record of the genome (it was never measured on the
    /// GPU the landscape was recorded on): no verdict, no fitness.
    NotRecorded,
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
    /// Every status, in the order of the gates that give them.
    pub const ALL: [Status; 10] = [
        Status::NotRecorded,
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
            Status::NotRecorded => "not_recorded",
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

    /// Whether a variant with this status was timed and so carries a fitness
    /// (`evaluated`, and `regressed`: correct but slower than the baseline).
    pub fn has_fitness(self) -> bool {
        matches!(self, Status::Evaluated | Status::Regressed)
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

macro_rules! named {
    ($($t:ident => $what:literal),*) => {$(
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }

        impl FromStr for $t {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                $t::parse(s).ok_or_else(|| {
                    let known: Vec<&str> = $t::ALL.iter().map(|v| v.name()).collect();
                    format!(concat!("unknown ", $what, " `{}` (known: {})"), s, known.join(", "))
                })
            }
        }
    )*};
}
named!(Gate => "gate", Status => "status");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_match_serde() {
        for s in Status::ALL {
            assert_eq!(s.name().parse::<Status>(), Ok(s));
            assert_eq!(serde_json::to_value(s).unwrap(), s.name());
        }
        for g in Gate::ALL {
            assert_eq!(g.name().parse::<Gate>(), Ok(g));
            assert_eq!(serde_json::to_value(g).unwrap(), g.name());
        }
        assert!("exploded"
            .parse::<Status>()
            .unwrap_err()
            .contains("known: not_recorded, render_failed"));
        assert!("vibes".parse::<Gate>().is_err());
        let timed: Vec<Status> = Status::ALL
            .into_iter()
            .filter(|s| s.has_fitness())
            .collect();
        assert_eq!(timed, [Status::Regressed, Status::Evaluated]);
    }
}
