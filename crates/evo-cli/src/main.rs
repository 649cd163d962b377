//! `evo`: the command-line front end of the evo kernel-search engine.
//!
//! Human output goes to stdout, errors to stderr, logs (tracing, `RUST_LOG`) to stderr.
//! Exit codes: 0 success; 1 an error (bad input, a failed compile, ...); 2 a usage
//! error; 3 a required CUDA component is missing (NVRTC, headers, driver or GPU).

mod cli;
mod commands;
mod output;
mod setup;

use std::process::ExitCode;

use clap::Parser;

/// A required CUDA component is missing; the message says what to install.
#[derive(Debug)]
pub struct MissingComponent(pub String);

impl std::fmt::Display for MissingComponent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for MissingComponent {}

pub const EXIT_MISSING: u8 = 3;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    let default_level = if args.verbose { "info" } else { "warn" };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
    match commands::run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            let missing = e.chain().any(|c| {
                c.is::<MissingComponent>()
                    || c.is::<evo_gpu::LocateError>()
                    || matches!(
                        c.downcast_ref(),
                        Some(evo_gpu::nvrtc::NvrtcError::Locate(_))
                    )
            });
            ExitCode::from(if missing { EXIT_MISSING } else { 1 })
        }
    }
}
