//! Small helpers for human output, and the one way the CLI writes to stdout: [`out!`] and
//! [`outln!`] (not `print!`/`println!`, which panic when stdout is a closed pipe; clippy's
//! `print_stdout` lint, denied in main.rs, keeps it so).
//!
//! A reader that closes stdout early (`evo show ID --ptx | head -1`) makes the next write
//! fail with [`StdoutClosed`]; the command returns it with `?` like any error, and main
//! ends quietly with exit code 0, as `evo space --list | head` always did (and as rg does).
//! Only stdout's own broken pipe is that: an EPIPE from a worker's pipe stays an error.

use std::io::Write;
use std::process::ExitCode;

use comfy_table::presets::UTF8_BORDERS_ONLY;
use comfy_table::{ContentArrangement, Table};

/// Stdout was closed by its reader: not a failure; main exits 0 without a message.
#[derive(Debug)]
pub struct StdoutClosed;

impl std::fmt::Display for StdoutClosed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stdout was closed by its reader")
    }
}

impl std::error::Error for StdoutClosed {}

/// Whether `e` is (or was caused by) [`StdoutClosed`].
pub fn stdout_closed(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.is::<StdoutClosed>())
}

/// What [`out!`] and [`outln!`] do: `args` (and a newline) to stdout. A closed pipe is
/// [`StdoutClosed`]; any other failure (a full disk) is an error that says stdout.
pub fn write_stdout(args: std::fmt::Arguments, newline: bool) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    let written = out.write_fmt(args).and_then(|()| {
        if newline {
            out.write_all(b"\n")
        } else {
            Ok(())
        }
    });
    match written {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(StdoutClosed.into()),
        Err(e) => Err(anyhow::Error::new(e).context("writing to stdout")),
    }
}

/// `print!` that returns `anyhow::Result<()>` (see the module's words): `out!("{x}")?;`.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::write_stdout(format_args!($($arg)*), false)
    };
}

/// `println!` that returns `anyhow::Result<()>` (see the module's words): `outln!("{x}")?;`.
macro_rules! outln {
    () => {
        $crate::output::write_stdout(format_args!(""), true)
    };
    ($($arg:tt)*) => {
        $crate::output::write_stdout(format_args!($($arg)*), true)
    };
}

pub(crate) use {out, outln};

/// `printed` with a closed stdout no error: for a command whose outcome (an exit code, an
/// error) was decided before it printed it; a closed pipe cut the printing, not that.
pub fn closed_ok(printed: anyhow::Result<()>) -> anyhow::Result<()> {
    match printed {
        Err(e) if !stdout_closed(&e) => Err(e),
        _ => Ok(()),
    }
}

/// The exit code `code` (a verdict decided before printing it) once `printed` is done:
/// see [`closed_ok`].
pub fn exit_code(printed: anyhow::Result<()>, code: ExitCode) -> anyhow::Result<ExitCode> {
    closed_ok(printed).map(|()| code)
}

/// A table that fits the terminal.
pub fn table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_BORDERS_ONLY)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header(header.to_vec());
    t
}

pub fn print_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    outln!("{}", serde_json::to_string_pretty(value)?)
}

pub fn bytes(n: u64) -> String {
    if n >= 1 << 20 {
        format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64)
    } else if n >= 1 << 10 {
        format!("{:.1} KiB", n as f64 / 1024.0)
    } else {
        format!("{n} B")
    }
}

/// Like [`table`], and when stdout is not a terminal but `COLUMNS` is set, wrapped to
/// that width (piped output is otherwise left unwrapped, for grep and less -S).
pub fn fitted_table(header: &[&str]) -> Table {
    let mut t = table(header);
    if t.width().is_none() {
        if let Some(width) = std::env::var("COLUMNS")
            .ok()
            .and_then(|c| c.parse::<u16>().ok())
            .filter(|w| *w >= 40)
        {
            t.set_width(width);
        }
    }
    t
}

/// Refuses an `--out` file that writing would destroy: a folder, or a SQLite database (a
/// population database named as `--out` by mistake would be overwritten and lost). Any other
/// existing file is replaced, as output files are.
pub fn check_out_file(out: &std::path::Path) -> anyhow::Result<()> {
    use std::io::Read;
    if out.is_dir() {
        return Err(crate::UsageError(format!(
            "--out {} is a folder; give a file path",
            out.display()
        ))
        .into());
    }
    let mut head = [0u8; 16];
    let is_sqlite = std::fs::File::open(out)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok()
        && &head == b"SQLite format 3\0";
    if is_sqlite {
        return Err(crate::UsageError(format!(
            "--out {} is a SQLite database (a population database?); evo does not overwrite it: give another file",
            out.display()
        ))
        .into());
    }
    Ok(())
}
