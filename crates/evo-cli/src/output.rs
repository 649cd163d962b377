//! Small helpers for human output.

use comfy_table::presets::UTF8_BORDERS_ONLY;
use comfy_table::{ContentArrangement, Table};

/// A table that fits the terminal.
pub fn table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_BORDERS_ONLY)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header(header.to_vec());
    t
}

pub fn print_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
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
