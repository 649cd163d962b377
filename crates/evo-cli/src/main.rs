//! `evo`: the command-line front end of the evo kernel-search engine. It parses flags,
//! calls the libraries (the search and the read queries are evo-run's, the database
//! evo-store's, the artifact evo-artifact's) and prints; it holds no search policy.
//!
//! Human output goes to stdout, errors to stderr, logs (tracing, `RUST_LOG`) to stderr.
//! Exit codes: 0 success; 1 an error (bad input, a failed compile, ...); 2 a usage
//! error (clap's, a [`UsageError`] a command finds: an option missing, options that
//! conflict, a value an option does not take whatever the config, the database and the
//! machine; or a `--db` evo cannot open); 3 a required CUDA component is missing
//! (NVRTC, headers, driver or GPU).
//! A reader that closes stdout early (`evo elites | head`) ends the command quietly with
//! 0, or with its verdict where that was decided before printing (see [`output`]).

// Stdout is written through output's `out!`/`outln!` only: `print!` panics on a closed pipe.
#![deny(clippy::print_stdout)]

mod cli;
mod commands;
mod output;
mod setup;

use std::process::ExitCode;

use clap::Parser;

/// A required CUDA component is missing; the message says what to install (exit code 3).
pub use evo_run::MissingComponent;

pub const EXIT_MISSING: u8 = 3;

/// The command line is wrong (exit code 2, as clap's own usage errors).
pub use evo_run::UsageError;

pub const EXIT_USAGE: u8 = 2;

/// A usage error a command finds after parsing (exit code 2).
pub(crate) use evo_run::usage;

/// The log file of the current run, once a search knows its run (see [`set_run_log`]).
static RUN_LOG: std::sync::Mutex<Option<std::fs::File>> = std::sync::Mutex::new(None);

/// From now on, log lines also go to `path` (appended; the folder is created).
pub fn set_run_log(path: &std::path::Path) {
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    match std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        Ok(f) => *RUN_LOG.lock().expect("run log lock") = Some(f),
        Err(e) => eprintln!("warning: cannot open the run log {}: {e}", path.display()),
    }
}

/// A `tracing` writer into [`RUN_LOG`] (nothing until a run sets it).
struct RunLog;

impl std::io::Write for RunLog {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match RUN_LOG.lock().expect("run log lock").as_mut() {
            Some(f) => f.write(buf),
            None => Ok(buf.len()),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match RUN_LOG.lock().expect("run log lock").as_mut() {
            Some(f) => f.flush(),
            None => Ok(()),
        }
    }
}

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    let default_level = if args.verbose { "info" } else { "warn" };
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                // Colour codes only for a terminal: piped into a file they are noise.
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                .with_target(false)
                .with_filter(filter),
        )
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(|| RunLog)
                .with_ansi(false)
                .with_target(false)
                .with_filter(tracing_subscriber::filter::LevelFilter::INFO),
        )
        .init();
    match commands::run(args) {
        Ok(code) => code,
        // Stdout closed by its reader: stop quietly, as `rg ... | head` does.
        Err(e) if output::stdout_closed(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", in_words(&e));
            let missing = e.chain().any(|c| {
                c.is::<MissingComponent>()
                    || c.is::<evo_gpu::LocateError>()
                    || c.downcast_ref::<evo_run::RunError>()
                        .is_some_and(evo_run::RunError::is_missing_component)
                    || matches!(
                        c.downcast_ref(),
                        Some(evo_gpu::nvrtc::NvrtcError::Locate(_))
                    )
            });
            let usage = e.chain().any(|c| {
                c.is::<UsageError>()
                    || c.downcast_ref::<evo_run::RunError>()
                        .is_some_and(evo_run::RunError::is_usage)
                    || c.downcast_ref::<evo_store::StoreError>()
                        .is_some_and(evo_store::StoreError::is_usage)
            });
            ExitCode::from(if missing {
                EXIT_MISSING
            } else if usage {
                EXIT_USAGE
            } else {
                1
            })
        }
    }
}

/// The error in words with each cause said once: many errors print their source inside
/// their own message, so anyhow's `{:#}` repeated a cause two to four times ("No such file
/// or directory (os error 2): No such file or directory (os error 2)").
fn in_words(e: &anyhow::Error) -> String {
    let mut words = String::new();
    for part in e.chain().map(|c| c.to_string()) {
        let part = part.trim();
        if part.is_empty() || words.contains(part) {
            continue;
        }
        if !words.is_empty() {
            words.push_str(": ");
        }
        words.push_str(part);
    }
    words
}
