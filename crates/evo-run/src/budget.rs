//! When a run stops: `--budget` (time, evaluations, generations) and `--lease`.

use std::time::Duration;

/// When `evo search` stops: time and evaluations count from this invocation (a resumed
/// run starts afresh), generations count the run's total, so a run killed and resumed
/// with the same `--budget 20gen` ends where an uninterrupted one would.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Budget {
    Time(Duration),
    Evaluations(u64),
    Generations(u32),
}

impl Budget {
    /// The run's generation budget, when this is one.
    pub fn generations(self) -> Option<u32> {
        match self {
            Budget::Generations(n) => Some(n),
            _ => None,
        }
    }
}

/// A duration written like a time budget: `90s`, `30m`, `8h` (for `--lease`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    match s.parse::<Budget>() {
        Ok(Budget::Time(d)) => Ok(d),
        _ => Err(format!("`{s}` is not a duration: write 90s, 30m or 8h")),
    }
}

impl std::str::FromStr for Budget {
    type Err = String;

    /// `8h`, `30m`, `90s` (time); `500evals` or `500e` (evaluations); `20gen` or `20g`
    /// (generations).
    fn from_str(s: &str) -> Result<Budget, String> {
        let s = s.trim();
        let split = s
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(s.len());
        let (num, unit) = s.split_at(split);
        let bad = || {
            format!("budget `{s}`: write 8h, 30m, 90s (time), 500evals (evaluations) or 20gen (generations)")
        };
        let value: f64 = num.parse().map_err(|_| bad())?;
        if value.is_nan() || value <= 0.0 {
            return Err(bad());
        }
        let secs = |m: f64| Ok(Budget::Time(Duration::from_secs_f64(value * m)));
        match unit {
            "h" => secs(3600.0),
            "m" | "min" => secs(60.0),
            "s" => secs(1.0),
            "e" | "evals" | "evaluations" if value.fract() == 0.0 => {
                Ok(Budget::Evaluations(value as u64))
            }
            "g" | "gen" | "generations" if value.fract() == 0.0 => {
                Ok(Budget::Generations(value as u32))
            }
            _ => Err(bad()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_three_kinds() {
        assert_eq!(
            "8h".parse(),
            Ok(Budget::Time(Duration::from_secs(8 * 3600)))
        );
        assert_eq!("1.5m".parse(), Ok(Budget::Time(Duration::from_secs(90))));
        assert_eq!("45s".parse(), Ok(Budget::Time(Duration::from_secs(45))));
        assert_eq!("500evals".parse(), Ok(Budget::Evaluations(500)));
        assert_eq!("20gen".parse(), Ok(Budget::Generations(20)));
        assert_eq!("3g".parse(), Ok(Budget::Generations(3)));
        for bad in ["", "8", "h", "0h", "2.5gen", "10x", "-3m"] {
            assert!(bad.parse::<Budget>().is_err(), "{bad}");
        }
    }
}
