//! A reader that closes evo's stdout early (`evo show ID --ptx | head -1`) ends evo
//! quietly with exit code 0, as `evo space --list | head` always did: no panic ("failed
//! printing to stdout: Broken pipe"), no message. No GPU needed.
//!
//! Each command here prints far more than a pipe holds (64 KiB on Linux) and the test
//! reads only a few bytes before closing, so evo's writes do meet the closed pipe.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use assert_cmd::cargo::CommandCargoExt;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `evo` with a private compile cache, run from the repository root.
fn evo() -> Command {
    static CACHE: OnceLock<tempfile::TempDir> = OnceLock::new();
    let cache = CACHE.get_or_init(|| tempfile::tempdir().unwrap());
    let mut c = Command::cargo_bin("evo").unwrap();
    c.env("EVO_CACHE_DIR", cache.path())
        .env_remove("EVO_TEMPLATES")
        .env_remove("EVO_DB")
        .env_remove("COLUMNS")
        .current_dir(root());
    c
}

/// Runs `evo args`, reads 10 bytes of its stdout and closes it; evo must then end by
/// itself, with exit code 0 and nothing about the pipe on stderr.
fn closed_early(args: &[&str]) {
    let mut child = evo()
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 10];
    if let Err(e) = stdout.read_exact(&mut first) {
        let out = child.wait_with_output().unwrap();
        panic!(
            "evo {args:?} printed under 10 bytes ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    drop(stdout);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(
        out.status.code(),
        Some(101),
        "evo {args:?} panicked: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "evo {args:?}: {stderr}");
    assert!(!stderr.contains("Broken pipe"), "evo {args:?}: {stderr}");
    assert_eq!(out.status.code(), Some(0), "evo {args:?}: {stderr}");
}

#[test]
fn render_stops_quietly() {
    // Four sdpa sources, about 56 KB each.
    closed_early(&["render", "-c", "configs/sdpa.toml", "--random", "4"]);
}

#[test]
fn space_list_stops_quietly() {
    // 1600 genomes, about 190 KB.
    closed_early(&["space", "-c", "configs/sdpa.toml", "--list"]);
}

/// A small database: one run of `configs/sdpa_replay.toml` replaying the recorded H200
/// landscape (no GPU), made once per test binary.
fn db() -> &'static str {
    static DB: OnceLock<(tempfile::TempDir, String)> = OnceLock::new();
    &DB.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("population.db");
        let out = evo()
            .args(["search", "-c", "configs/sdpa_replay.toml", "--evaluator"])
            .arg("replay:tests/data/landscape_sdpa_fwd_mma_h200.json")
            .arg("--db")
            .arg(&path)
            .args(["--run", "r1", "--budget", "3gen", "--no-progress"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "evo search: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = path.display().to_string();
        (dir, text)
    })
    .1
}

#[test]
fn database_commands_stop_quietly() {
    let db = db();
    // Every timed candidate with all its per-shape numbers, as JSON: well over 64 KiB.
    closed_early(&["--json", "elites", "--top", "1000", "--db", db]);
    // The best candidate's source in every specialization: over 100 KB.
    let out = evo()
        .args(["--json", "elites", "--top", "1", "--db", db])
        .output()
        .unwrap();
    assert!(out.status.success());
    let elites: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = elites["elites"][0]["id"].as_i64().unwrap().to_string();
    closed_early(&["show", &id, "--source", "--db", db]);
}
