//! The inspect commands (`runs`, `elites`, `show`, `lineage`, `diff`, `stats`) and
//! `evo report` through the real CLI, on a database made by `evo search` replaying the
//! recorded H200 landscape (no GPU). Two runs of the same seed share genomes, so hash
//! prefixes are ambiguous across runs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::OnceLock;

use assert_cmd::Command;
use predicates::prelude::*;
use predicates::str::contains;
use serde_json::Value as Json;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `evo` with a private compile cache.
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

fn json(out: &[u8]) -> Json {
    serde_json::from_slice(out).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(out)))
}

/// The test database: runs `r1` and `r2` of `configs/sdpa_replay.toml`, 5 generations
/// each, made once per test binary.
fn db() -> &'static str {
    static DB: OnceLock<(tempfile::TempDir, String)> = OnceLock::new();
    &DB.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("population.db");
        for run in ["r1", "r2"] {
            evo()
                .args(["search", "-c", "configs/sdpa_replay.toml", "--evaluator"])
                .arg("replay:tests/data/landscape_sdpa_fwd_mma_h200.json")
                .arg("--db")
                .arg(&path)
                .args(["--run", run, "--budget", "5gen", "--no-progress"])
                .assert()
                .success();
        }
        let text = path.display().to_string();
        (dir, text)
    })
    .1
}

fn run_json(args: &[&str]) -> Json {
    let out = evo()
        .arg("--json")
        .args(args)
        .args(["--db", db()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "evo {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    json(&out.stdout)
}

fn run_text(args: &[&str]) -> String {
    let out = evo().args(args).args(["--db", db()]).output().unwrap();
    assert!(
        out.status.success(),
        "evo {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn knobs_of(genome: &str) -> BTreeMap<String, String> {
    genome
        .split(',')
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap();
            (k.to_string(), v.to_string())
        })
        .collect()
}

/// Every candidate of run r1 with a fitness, fittest first.
fn all_elites() -> Vec<Json> {
    run_json(&["elites", "r1", "--top", "100000"])["elites"]
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn runs_lists_both_runs() {
    let runs = run_json(&["runs"]);
    let runs = runs.as_array().unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0]["name"], "r1");
    assert_eq!(runs[1]["name"], "r2");
    assert_eq!(runs[0]["candidates"], runs[1]["candidates"]);
    let text = run_text(&["runs"]);
    for col in ["id", "name", "family", "status", "candidates", "statuses"] {
        assert!(text.contains(col), "{col} missing:\n{text}");
    }
    // Every timed candidate of the replay regressed against PyTorch: the best is shown
    // (as `evo search` and the report show it), marked regressed, not "-".
    let best = all_elites()[0].clone();
    assert_eq!(best["status"], "regressed");
    let shown = format!("{:.4}x", best["fitness"].as_f64().unwrap());
    assert!(
        text.contains(&shown) && text.contains("(regressed)"),
        "{shown}:\n{text}"
    );
}

#[test]
fn elites_are_ranked_by_fitness_with_every_column() {
    let out = run_json(&["elites", "r1", "--top", "8"]);
    let elites = out["elites"].as_array().unwrap();
    assert_eq!(elites.len(), 8);
    let mut last = f64::INFINITY;
    for (i, e) in elites.iter().enumerate() {
        assert_eq!(e["rank"], i + 1);
        let f = e["fitness"].as_f64().unwrap();
        assert!(f <= last, "rank {} has fitness {f} above {last}", i + 1);
        last = f;
        assert_eq!(e["knobs"].as_object().unwrap().len(), 9, "{e}");
        let timed = e["shapes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["median_us"].is_f64() && s["tflops"].is_f64())
            .count();
        assert_eq!(timed, 5, "five configured shapes timed: {e}");
        for key in ["registers", "smem_bytes", "spill_bytes", "tensor_ops"] {
            assert!(e["resources"].get(key).is_some(), "{key} in {e}");
        }
    }
    // The best of all is rank 1 of any --top.
    let all = all_elites();
    let best = all
        .iter()
        .map(|e| e["fitness"].as_f64().unwrap())
        .fold(f64::MIN, f64::max);
    assert_eq!(elites[0]["fitness"].as_f64().unwrap(), best);

    // The default view fits 100 columns: the candidates, then the shapes as rows (in the
    // config's order) with the baseline and each of the first ranks.
    let text = run_text(&["elites", "r1", "--top", "8"]);
    for col in [
        "rank", "id", "hash", "fitness", "status", "knobs", "baseline", "#1", "#5", "--wide",
    ] {
        assert!(text.contains(col), "{col} missing:\n{text}");
    }
    assert!(!text.contains("#6"), "{text}");
    assert!(text.contains(&elites[0]["hash"].as_str().unwrap()[..8]));
    let widest = text.lines().map(|l| l.chars().count()).max().unwrap();
    assert!(widest <= 100, "{widest} columns:\n{text}");
    let first = text
        .lines()
        .find(|l| l.trim_start().starts_with("s1 = "))
        .unwrap();
    assert!(
        first.ends_with("SEQ_KV=512,SEQ_Q=512") && first.contains("BATCH=1,"),
        "{first}"
    );
    let second = text
        .lines()
        .find(|l| l.trim_start().starts_with("s2 = "))
        .unwrap();
    assert!(
        second.contains("BATCH=2,") && second.contains("SEQ_Q=512"),
        "{second}"
    );
    // `--wide`: one table with every shape's time and TFLOP/s as columns.
    let wide = run_text(&["elites", "r1", "--top", "3", "--wide"]);
    for col in ["gen", "s1 µs", "s5 µs", "TFLOP/s"] {
        assert!(wide.contains(col), "{col} missing:\n{wide}");
    }
}

#[test]
fn show_finds_by_id_and_hash_prefix_and_explains_ambiguity() {
    let best = &all_elites()[0];
    let id = best["id"].as_i64().unwrap().to_string();
    let hash = best["hash"].as_str().unwrap();
    let by_id = run_json(&["show", &id]);
    assert_eq!(by_id["candidate"]["hash"], hash);
    assert_eq!(by_id["run"], "r1");
    // The same genome is in r1 and r2: a hash prefix is ambiguous without --run.
    evo()
        .args(["show", &hash[..10], "--db", db()])
        .assert()
        .code(1)
        .stderr(contains("ambiguous").and(contains("--run")));
    let in_r2 = run_json(&["show", &hash[..10], "--run", "r2"]);
    assert_eq!(in_r2["run"], "r2");
    assert_eq!(in_r2["candidate"]["genome"], best["genome"]);
    let text = run_text(&["show", &format!("id:{id}")]);
    assert!(text.contains(best["genome"].as_str().unwrap()), "{text}");
    assert!(
        text.contains("median µs") && text.contains("speedup"),
        "{text}"
    );
    evo()
        .args(["show", "ffffffffff", "--db", db()])
        .assert()
        .code(1)
        .stderr(contains(
            "no candidate with id or genome hash prefix `ffffffffff`",
        ));
}

#[test]
fn read_commands_never_create_a_database() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nothing.db");
    for args in [
        vec!["runs"],
        vec!["elites"],
        vec!["stats", "r1"],
        vec!["show", "1"],
        vec!["lineage", "1"],
        vec!["diff", "1", "2"],
        vec!["report", "r1", "--out"],
    ] {
        let mut c = evo();
        c.args(&args);
        if args[0] == "report" {
            c.arg(dir.path().join("r.html"));
        }
        c.arg("--db")
            .arg(&missing)
            .assert()
            .code(1)
            .stderr(contains("no population database at").and(contains("evo search")));
        assert!(!missing.exists(), "{args:?} created {}", missing.display());
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    // An empty file is not made a database by a read command.
    let empty = dir.path().join("empty.db");
    std::fs::write(&empty, b"").unwrap();
    evo()
        .args(["runs", "--db"])
        .arg(&empty)
        .assert()
        .code(1)
        .stderr(contains("is an empty file, not a population database yet"));
    assert_eq!(std::fs::metadata(&empty).unwrap().len(), 0);
    std::fs::remove_file(&empty).unwrap();
    evo()
        .args(["stats", "no-such-run", "--db", db()])
        .assert()
        .code(1)
        .stderr(contains("no run `no-such-run`"));
}

/// A database in a folder nobody may write to, itself read-only, is read by every read
/// command: nothing is written or created beside it, no lock wait, no error lines. The
/// commands run as an unprivileged user (root ignores file permissions: as root they run
/// through `setpriv` as `nobody`; where that is impossible the test says so and stops).
#[test]
fn a_read_only_database_is_read_without_writing() {
    use std::os::unix::fs::PermissionsExt;
    let is_root = std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    let setpriv = ["/usr/bin/setpriv", "/bin/setpriv"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists());
    if is_root && setpriv.is_none() {
        eprintln!("skipping: running as root without setpriv, so permissions cannot be tested");
        return;
    }
    let outer = tempfile::tempdir().unwrap();
    let dir = outer.path().join("ro");
    std::fs::create_dir(&dir).unwrap();
    let path = dir.join("population.db");
    std::fs::copy(db(), &path).unwrap();
    let before = std::fs::read(&path).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o555)).unwrap();
    std::fs::set_permissions(outer.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // evo as a user without write permission here (root ignores file permissions).
    let unprivileged_evo = || match (is_root, setpriv) {
        (true, Some(sp)) => {
            let mut c = std::process::Command::new(sp);
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .arg(assert_cmd::cargo::cargo_bin("evo"));
            c
        }
        _ => std::process::Command::new(assert_cmd::cargo::cargo_bin("evo")),
    };
    let cache = outer.path().join("cache");
    std::fs::create_dir(&cache).unwrap();
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).unwrap();
    for args in [
        vec!["runs"],
        vec!["elites", "r1"],
        vec!["stats", "r1"],
        vec!["show", "1"],
        vec!["lineage", "5"],
        vec!["diff", "1", "2"],
    ] {
        let mut c = unprivileged_evo();
        let started = std::time::Instant::now();
        let out = c
            .env("EVO_CACHE_DIR", &cache)
            .env_remove("EVO_DB")
            .current_dir(root())
            .args(&args)
            .arg("--db")
            .arg(&path)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {stderr}");
        assert!(!out.stdout.is_empty(), "{args:?} printed nothing");
        assert!(!stderr.contains("ERROR"), "{args:?}: {stderr}");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "{args:?} waited {:?}",
            started.elapsed()
        );
    }
    // A command that writes is refused at once, saying why and what works.
    let mut c = unprivileged_evo();
    let started = std::time::Instant::now();
    let out = c
        .env("EVO_CACHE_DIR", &cache)
        .current_dir(root())
        .args(["search", "--resume", "r1", "--budget", "1evals", "--db"])
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("is read-only") && stderr.contains("copy it to a writable folder"),
        "{stderr}"
    );
    assert!(!stderr.contains("ERROR"), "{stderr}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["population.db"]);
    assert!(
        std::fs::read(&path).unwrap() == before,
        "the database changed"
    );
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// `evo stats` reports the last invocation's rate and GPU share from the host's own
/// counters, also when it stopped before completing a generation.
#[test]
fn stats_of_an_invocation_that_completed_no_generation() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("population.db");
    evo()
        .args(["search", "-c", "configs/sdpa_replay.toml", "--evaluator"])
        .arg("replay:tests/data/landscape_sdpa_fwd_mma_h200.json")
        .arg("--db")
        .arg(&db)
        .args(["--run", "short", "--budget", "3evals", "--no-progress"])
        .assert()
        .success();
    let out = evo()
        .args(["--json", "stats", "short", "--db"])
        .arg(&db)
        .output()
        .unwrap();
    let s = json(&out.stdout);
    assert_eq!(
        s["generations"].as_u64(),
        Some(0),
        "no generation completed: {s}"
    );
    let rate = s["last_invocation_evaluations_per_hour"].as_f64();
    assert!(rate.is_some_and(|r| r > 0.0), "{s}");
    assert_eq!(s["gpu_busy_fraction"].as_f64(), Some(0.0), "replay: no GPU");
}

#[test]
fn source_is_rendered_deterministically() {
    let best = &all_elites()[0];
    let id = best["id"].as_i64().unwrap().to_string();
    let a = run_text(&["show", &id, "--source"]);
    let b = run_text(&["show", &id, "--source"]);
    assert_eq!(a, b);
    assert!(a.contains(best["genome"].as_str().unwrap()));
    assert_eq!(
        a.matches("// ===== specialization").count(),
        2,
        "two head dims"
    );
    let one = run_text(&["show", &id, "--source", "--spec", "HEAD_DIM=128"]);
    assert!(!one.contains("// ===== specialization"));
    assert!(
        a.contains(&one),
        "the HEAD_DIM=128 source is one of the two"
    );
}

#[test]
fn ptx_and_log_compile_without_a_gpu() {
    let best = &all_elites()[0];
    let id = best["id"].as_i64().unwrap().to_string();
    let ptx = run_json(&["show", &id, "--ptx", "--spec", "HEAD_DIM=64"]);
    let ptx = ptx.as_array().unwrap();
    assert_eq!(ptx.len(), 1);
    let text = ptx[0]["text"].as_str().unwrap();
    assert!(text.contains(".entry") && text.contains("sdpa_fwd"), "PTX");
    assert!(
        text.contains("mma.sync"),
        "tensor-core instructions in the PTX"
    );
    let log = run_text(&["show", &id, "--log", "--spec", "HEAD_DIM=64"]);
    assert!(log.contains("registers"), "ptxas report: {log}");
    // scripts/install-cuda.sh installs cuobjdump next to NVRTC.
    let sass = run_text(&["show", &id, "--sass", "--spec", "HEAD_DIM=64"]);
    assert!(
        sass.contains("HMMA"),
        "tensor-core instructions in the SASS"
    );
}

#[test]
fn lineage_follows_parents_with_their_knob_changes() {
    // The fittest candidate with parents.
    let all = all_elites();
    let child = all
        .iter()
        .find(|e| !e["parents"].as_array().unwrap().is_empty())
        .expect("a bred elite");
    let id = child["id"].as_i64().unwrap().to_string();
    let out = run_json(&["lineage", &id]);
    let steps = out["lineage"].as_array().unwrap();
    assert!(steps.len() >= 2);
    let by_id: BTreeMap<i64, &Json> = steps
        .iter()
        .map(|s| (s["id"].as_i64().unwrap(), s))
        .collect();
    assert!(by_id.contains_key(&child["id"].as_i64().unwrap()));
    let mut generations = Vec::new();
    for s in steps {
        generations.push(s["generation"].as_u64().unwrap());
        let parents = s["parent_ids"].as_array().unwrap();
        for (i, p) in parents.iter().enumerate() {
            let p = by_id[&p.as_i64().expect("parent in the run")];
            assert!(p["generation"].as_u64() < s["generation"].as_u64());
            // The recorded changes are exactly the knobs that differ.
            let from = knobs_of(p["genome"].as_str().unwrap());
            let to = knobs_of(s["genome"].as_str().unwrap());
            let expected: BTreeSet<&String> = from.keys().filter(|k| from[*k] != to[*k]).collect();
            let field = if i == 0 {
                "changes"
            } else {
                "changes_from_second"
            };
            let changes = s
                .get(field)
                .and_then(|c| c.as_array())
                .cloned()
                .unwrap_or_default();
            let got: BTreeSet<String> = changes
                .iter()
                .map(|c| {
                    let k = c["knob"].as_str().unwrap().to_string();
                    assert_eq!(c["from"].as_str().unwrap(), from[&k]);
                    assert_eq!(c["to"].as_str().unwrap(), to[&k]);
                    k
                })
                .collect();
            assert_eq!(got.iter().collect::<BTreeSet<_>>(), expected, "{s}");
        }
    }
    assert!(generations.windows(2).all(|w| w[0] <= w[1]), "oldest first");
    let text = run_text(&["lineage", &id]);
    assert!(
        text.contains("knob changes") && text.contains('→'),
        "{text}"
    );
}

#[test]
fn diff_shows_changed_knobs_and_source() {
    let all = all_elites();
    let (a, b) = (&all[0], &all[1]);
    let ka = knobs_of(a["genome"].as_str().unwrap());
    let kb = knobs_of(b["genome"].as_str().unwrap());
    let expected: BTreeSet<&String> = ka.keys().filter(|k| ka[*k] != kb[*k]).collect();
    assert!(!expected.is_empty());
    let (ia, ib) = (a["id"].to_string(), b["id"].to_string());
    let out = run_json(&["diff", &ia, &ib]);
    let got: BTreeSet<String> = out["knobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["knob"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(got.iter().collect::<BTreeSet<_>>(), expected);
    let diff = out["source_diff"].as_str().unwrap();
    assert!(diff.starts_with(&format!("--- candidate {ia}")), "{diff}");
    assert!(diff.contains(&format!("+++ candidate {ib}")));
    assert!(diff
        .lines()
        .any(|l| l.starts_with('-') && !l.starts_with("---")));
    assert!(diff
        .lines()
        .any(|l| l.starts_with('+') && !l.starts_with("+++")));
    assert_eq!(out["shapes"].as_array().unwrap().len(), 5);
    let text = run_text(&["diff", &ia, &ib]);
    for k in &expected {
        assert!(text.contains(k.as_str()), "{k} in\n{text}");
    }
    assert!(text.contains("source diff for specialization"));
    // A candidate against itself: nothing differs.
    let same = run_json(&["diff", &ia, &ia]);
    assert!(same["knobs"].as_array().unwrap().is_empty());
    assert_eq!(same["source_diff"], "");
}

#[test]
fn stats_counts_add_up() {
    let s = run_json(&["stats", "r1"]);
    let runs = run_json(&["runs"]);
    let candidates = runs[0]["candidates"].as_u64().unwrap();
    assert_eq!(s["candidates"].as_u64().unwrap(), candidates);
    let by_status = s["by_status"].as_array().unwrap();
    let sum: u64 = by_status.iter().map(|g| g["count"].as_u64().unwrap()).sum();
    assert_eq!(sum + s["pending"].as_u64().unwrap(), candidates);
    for g in by_status {
        let reasons: u64 = g["reasons"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r[1].as_u64().unwrap())
            .sum();
        assert_eq!(reasons, g["count"].as_u64().unwrap(), "{g}");
        // The store's own counts agree.
        let status = g["status"].as_str().unwrap();
        assert!(runs[0]["counts"][status].as_u64().unwrap() >= g["count"].as_u64().unwrap());
    }
    let funnel: Vec<u64> = s["funnel"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["reached"].as_u64().unwrap())
        .collect();
    assert_eq!(funnel[0], sum);
    assert!(funnel.windows(2).all(|w| w[0] >= w[1]));
    let timed = all_elites().len() as u64;
    assert_eq!(
        funnel[4], timed,
        "correct and timed = candidates with a fitness"
    );
    assert!(s["evaluations_per_hour"].as_f64().unwrap() > 0.0);
    assert_eq!(s["gpu_busy_fraction"].as_f64(), Some(0.0), "replay: no GPU");
    let text = run_text(&["stats", "r1"]);
    assert!(text.contains("gate funnel") && text.contains("evaluations per hour"));
    assert!(text.contains("GPU busy fraction"));
}

/// The `<figure id="...">` element of a chart.
fn figure<'a>(html: &'a str, id: &str) -> &'a str {
    let start = html
        .find(&format!("<figure id=\"{id}\""))
        .unwrap_or_else(|| panic!("no figure {id}"));
    let end = start + html[start..].find("</figure>").unwrap();
    &html[start..end]
}

#[test]
fn report_holds_every_chart_with_its_data() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("report.html");
    evo()
        .args(["report", "r1", "--top", "7", "--db", db(), "--out"])
        .arg(&out)
        .assert()
        .success()
        .stdout(contains("written to"));
    let html = std::fs::read_to_string(&out).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"));
    // Self-contained: nothing to fetch.
    for bad in ["<script", "<link", "src=", "@import", "url("] {
        assert!(!html.contains(bad), "{bad} in the report");
    }
    let external = html
        .match_indices("http")
        .filter(|(i, _)| !html[*i..].starts_with("http://www.w3.org/"))
        .count();
    assert_eq!(external, 0, "only the SVG namespace may name a URL");

    let elites = all_elites();
    let timed = elites.len();
    for id in ["chart-fitness-evaluations", "chart-fitness-time"] {
        let f = figure(&html, id);
        assert!(f.contains("<svg"), "{id} has an SVG");
        assert_eq!(
            f.matches("<circle").count(),
            timed,
            "{id}: one point per timed candidate"
        );
        assert!(f.contains("<polyline"), "{id}: the best-so-far line");
    }
    let stats = run_json(&["stats", "r1"]);
    let funnel = figure(&html, "chart-funnel");
    assert_eq!(
        funnel.matches("fill=\"#2CA02C\"").count(),
        stats["funnel"].as_array().unwrap().len(),
        "one bar per funnel stage"
    );
    let knobs = knobs_of(elites[0]["genome"].as_str().unwrap());
    for k in knobs.keys() {
        let f = figure(&html, &format!("chart-knob-{k}"));
        assert_eq!(
            f.matches("<circle").count(),
            timed,
            "{k}: one point per timed candidate"
        );
        assert!(f.contains(&format!("\n{k}\n</text>")), "{k}: caption");
    }
    let shapes = figure(&html, "chart-shapes");
    for colour in ["#1F77B4", "#FF7F0E", "#9467BD"] {
        let bars = shapes
            .split("<rect")
            .skip(1)
            .filter(|r| {
                r.split('>')
                    .next()
                    .unwrap()
                    .contains(&format!("fill=\"{colour}\""))
            })
            .count();
        assert_eq!(bars, 5, "{colour}: one bar per shape");
    }
    // Insights: one table per knob; elites: --top rows.
    assert_eq!(
        html.matches("<table class=\"insight\">").count(),
        knobs.len()
    );
    let table_start = html.find("<table id=\"elites\"").unwrap();
    let table = &html[table_start..table_start + html[table_start..].find("</table>").unwrap()];
    assert_eq!(table.matches("<tr>").count(), 1 + 7);
    assert!(table.contains(&elites[0]["hash"].as_str().unwrap()[..8]));
}

#[test]
fn report_of_a_run_without_timed_candidates_still_renders() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("p.db");
    // An empty landscape: every genome comes back not_recorded.
    let land = dir.path().join("empty.json");
    std::fs::write(
        &land,
        r#"{"format": "evo-landscape-1", "problem": "sdpa_fwd", "family": "sdpa_fwd_mma",
            "device": "none", "source": "test", "points": {}}"#,
    )
    .unwrap();
    evo()
        .args(["search", "-c", "configs/sdpa_replay.toml", "--evaluator"])
        .arg(format!("replay:{}", land.display()))
        .arg("--db")
        .arg(&db)
        .args(["--run", "e", "--budget", "1gen", "--no-progress"])
        .assert()
        .success();
    let out = dir.path().join("r.html");
    evo()
        .args(["report", "e", "--db"])
        .arg(&db)
        .arg("--out")
        .arg(&out)
        .assert()
        .success();
    let html = std::fs::read_to_string(&out).unwrap();
    assert!(figure(&html, "chart-fitness-evaluations").contains("no candidate was timed"));
    assert!(figure(&html, "chart-shapes").contains("no elite with times"));
    let funnel = figure(&html, "chart-funnel");
    assert_eq!(funnel.matches("fill=\"#2CA02C\"").count(), 6);
    evo()
        .args(["elites", "e", "--db"])
        .arg(&db)
        .assert()
        .success()
        .stdout(contains("no timed candidate"));
}

/// An `--out` naming the population database (any SQLite file) or a folder is refused before
/// anything is written: the database is left byte for byte as it was.
#[test]
fn outputs_never_overwrite_a_database() {
    let before = std::fs::read(db()).unwrap();
    for args in [
        vec!["report", "r1", "--out", db()],
        vec!["export-landscape", "r1", "--out", db()],
    ] {
        evo()
            .args(&args)
            .args(["--db", db()])
            .assert()
            .code(2)
            .stderr(contains("is a SQLite database").and(contains("does not overwrite it")));
    }
    assert!(
        std::fs::read(db()).unwrap() == before,
        "the database changed"
    );
    let dir = tempfile::tempdir().unwrap();
    evo()
        .args(["report", "r1", "--db", db(), "--out"])
        .arg(dir.path())
        .assert()
        .code(2)
        .stderr(contains("is a folder"));
    run_text(&["runs"]);
}

/// A new database in a folder that does not exist: said in words, and nothing is created.
#[test]
fn a_database_in_a_missing_folder_is_explained() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("no/such/folder/p.db");
    evo()
        .args(["search", "-c", "configs/sdpa_replay.toml", "--evaluator"])
        .arg("replay:tests/data/landscape_sdpa_fwd_mma_h200.json")
        .arg("--db")
        .arg(&db)
        .args(["--budget", "2evals", "--no-progress"])
        .assert()
        .code(1)
        .stderr(contains("its folder").and(contains("does not exist")));
    assert!(!dir.path().join("no").exists());
}
