//! `evo search` end to end through the real CLI on the replay evaluator (no GPU): a
//! synthetic landscape of every valid gemm genome, then runs that must be deterministic,
//! respect constraints and the regression rule, and survive SIGKILL.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command as StdCommand, Stdio};
use std::time::{Duration, Instant};

use assert_cmd::Command;
use evo_core::config::SearchConfig;
use evo_core::ShapeMeasurement;
use evo_core::{Genome, Target, Value};
use evo_eval::landscape::{Landscape, Point, FORMAT};
use evo_kernels::{Family, Specializations};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Synthetic but structured times: each knob value scales the time, so there is a real
/// optimum to find; one genome in 13 is incorrect, one in 17 fails to compile.
fn landscape(path: &Path) -> (BTreeSet<String>, Vec<String>) {
    let config = SearchConfig::load(&root().join("configs/gemm.toml")).unwrap();
    let family = Family::load(&root().join("templates"), "gemm", "gemm_mma").unwrap();
    let specs = Specializations::new(
        family.problem,
        Target::from_arch("sm_90a").unwrap(),
        &config.shapes,
    )
    .unwrap();
    let space = family.space(specs.contexts()).unwrap();
    let shapes: Vec<String> = specs
        .shapes
        .iter()
        .map(|(_, v)| evo_store::shape_key(v))
        .collect();
    let mut points = BTreeMap::new();
    let mut valid = BTreeSet::new();
    for g in space.iter_valid() {
        valid.insert(g.canonical());
        let factor = |k: &str| match g.get(k) {
            Some(Value::Int(v)) => 1.0 + ((*v as f64).log2() - 5.5).abs() * 0.1,
            Some(Value::Str(s)) => 1.0 + s.len() as f64 * 0.03,
            _ => 1.0,
        };
        let scale: f64 = [
            "BLOCK_M", "BLOCK_N", "BLOCK_K", "WARPS_M", "WARPS_N", "STAGES", "SWIZZLE",
        ]
        .iter()
        .map(|k| factor(k))
        .product();
        let h = u64::from_str_radix(&g.hash().0[..8], 16).unwrap();
        let status = if h % 13 == 0 {
            "incorrect"
        } else if h % 17 == 0 {
            "compile_failed"
        } else {
            "evaluated"
        };
        // Four stages are three times slower everywhere: regressed against the baseline
        // (the first valid genome, which has one stage).
        let slow = if g.get("STAGES") == Some(&Value::Int(4)) {
            3.0
        } else {
            1.0
        };
        let shape_points = if status == "evaluated" {
            shapes
                .iter()
                .enumerate()
                .map(|(i, s)| ShapeMeasurement {
                    shape: Genome::parse(s).unwrap().as_vars().clone(),
                    // Shape 1 prefers different genomes than shapes 0 and 2.
                    median_us: Some(
                        slow * 100.0 * (i + 1) as f64 * if i == 1 { 2.0 / scale } else { scale },
                    ),
                    p20_us: None,
                    p80_us: None,
                    tflops: None,
                    max_abs_err: Some(1e-3),
                    rel_l2: Some(2e-4),
                    ..Default::default()
                })
                .collect()
        } else {
            vec![]
        };
        points.insert(
            g.canonical(),
            Point {
                status: status.parse().unwrap(),
                gate: None,
                detail: String::new(),
                shapes: shape_points,
                eval_ms: Some(1000.0),
            },
        );
    }
    Landscape {
        format: FORMAT.into(),
        problem: "gemm".into(),
        family: "gemm_mma".into(),
        device: "synthetic".into(),
        source: "tests/search.rs".into(),
        points,
    }
    .save(path)
    .unwrap();
    (valid, shapes)
}

/// configs/gemm.toml written to `dir/name` with the repo's templates named (so it loads
/// from any folder) and `extra` appended.
fn gemm_config(dir: &Path, name: &str, extra: &str) -> PathBuf {
    let text = std::fs::read_to_string(root().join("configs/gemm.toml")).unwrap();
    let config = dir.join(name);
    std::fs::write(
        &config,
        text.replace(
            "family = \"gemm_mma\"",
            &format!(
                "family = \"gemm_mma\"\ntemplates = \"{}\"",
                root().join("templates").display()
            ),
        ) + extra,
    )
    .unwrap();
    config
}

fn search(db: &Path, land: &Path, args: &[&str]) -> assert_cmd::assert::Assert {
    Command::cargo_bin("evo")
        .unwrap()
        .current_dir(root())
        .env("EVO_CACHE_DIR", db.parent().unwrap().join("cache"))
        .args(["search", "-c", "configs/gemm.toml", "--no-progress", "--db"])
        .arg(db)
        .arg("--evaluator")
        .arg(format!("replay:{}", land.display()))
        .args(args)
        .assert()
}

/// `evo search` of configs/gemm.toml replaying `land` in the background, each evaluation
/// slowed by `delay_ms` (so it can be stopped mid-run); stdout piped, stderr dropped.
fn spawn_search(db: &Path, land: &Path, delay_ms: u64, args: &[&str]) -> std::process::Child {
    StdCommand::new(assert_cmd::cargo::cargo_bin("evo"))
        .current_dir(root())
        .env("EVO_REPLAY_DELAY_MS", delay_ms.to_string())
        .args(["search", "-c", "configs/gemm.toml", "--no-progress", "--db"])
        .arg(db)
        .arg("--evaluator")
        .arg(format!("replay:{}", land.display()))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Waits (at most a minute) until run `run` of `db` has at least `n` results.
fn wait_for_results(db: &Path, run: &str, n: usize) {
    let start = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(100));
        let done = std::panic::catch_unwind(|| rows(db, run))
            .map(|r| r.iter().filter(|x| x.2.is_some()).count())
            .unwrap_or(0);
        if done >= n {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the search did not get going"
        );
    }
}

/// (generation, genome, status, fitness, origin) of one candidate.
type Row = (u32, String, Option<String>, Option<f64>, String);

/// Every candidate of a run, in id order.
fn rows(db: &Path, run: &str) -> Vec<Row> {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = evo_store::Store::open(db.to_str().unwrap()).await.unwrap();
        let r = store.run(run).await.unwrap().unwrap();
        store
            .candidates(r.id)
            .await
            .unwrap()
            .into_iter()
            .map(|c| {
                (
                    c.generation,
                    c.genome,
                    c.status.map(|s| s.to_string()),
                    c.fitness,
                    c.origin.name().to_string(),
                )
            })
            .collect()
    })
}

#[test]
fn replay_search_is_deterministic_valid_and_applies_the_regression_rule() {
    let dir = tempfile::tempdir().unwrap();
    let land = dir.path().join("landscape.json");
    let (valid, _) = landscape(&land);
    let db = dir.path().join("population.db");
    for run in ["a", "b"] {
        search(
            &db,
            &land,
            &["--run", run, "--budget", "3gen", "--seed", "7"],
        )
        .success()
        .stdout(predicates::str::contains(format!(
            "run {run}: generation budget spent"
        )));
    }
    search(
        &db,
        &land,
        &["--run", "c", "--budget", "3gen", "--seed", "8"],
    )
    .success();
    let (a, b, c) = (rows(&db, "a"), rows(&db, "b"), rows(&db, "c"));
    assert_eq!(a, b, "same seed, same results: same genomes");
    assert_ne!(a, c, "another seed explores differently");
    // Baseline + 3 generations of 32.
    assert_eq!(a.len(), 1 + 3 * 32);
    let genomes: BTreeSet<&String> = a.iter().map(|r| &r.1).collect();
    assert_eq!(genomes.len(), a.len(), "no genome evaluated twice");
    let mut statuses = BTreeMap::new();
    for (generation, genome, status, fitness, origin) in &a {
        assert!(valid.contains(genome), "{genome} is not a valid genome");
        let status = status.as_deref().expect("every candidate evaluated");
        *statuses.entry(status.to_string()).or_insert(0) += 1;
        match status {
            "evaluated" | "regressed" => assert!(fitness.unwrap() > 0.0),
            _ => assert_eq!(*fitness, None),
        }
        if origin == "baseline" {
            assert_eq!((*generation, status, *fitness), (0, "evaluated", Some(1.0)));
        }
    }
    // The landscape has failures, regressions (slower than the baseline on 2 of 3
    // shapes) and improvements; the run met all of them.
    for s in ["evaluated", "regressed", "incorrect"] {
        assert!(statuses.contains_key(s), "no {s} in {statuses:?}");
    }
    let best = a
        .iter()
        .filter(|r| r.2.as_deref() == Some("evaluated"))
        .filter_map(|r| r.3)
        .fold(0.0, f64::max);
    assert!(
        best > 1.0,
        "the search found nothing better than the baseline: {best}"
    );
}

/// With an overlap, a generation is proposed while the last genome of the one before is
/// still being evaluated; its result still lands in the run, once, and the run ends
/// after its last generation's every result.
#[test]
fn overlapping_generations_lose_and_repeat_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let land = dir.path().join("landscape.json");
    let (valid, _) = landscape(&land);
    let db = dir.path().join("population.db");
    Command::cargo_bin("evo")
        .unwrap()
        .current_dir(root())
        .env("EVO_REPLAY_OVERLAP", "1")
        .env("EVO_REPLAY_DELAY_MS", "40")
        .args(["search", "-c", "configs/gemm.toml", "--no-progress", "--db"])
        .arg(&db)
        .arg("--evaluator")
        .arg(format!("replay:{}", land.display()))
        .args(["--run", "o", "--budget", "3gen", "--seed", "7"])
        .assert()
        .success()
        .stdout(predicates::str::contains("run o: generation budget spent"));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (candidates, generations) = rt.block_on(async {
        let store = evo_store::Store::open(db.to_str().unwrap()).await.unwrap();
        let r = store.run("o").await.unwrap().unwrap();
        let c = store.candidates(r.id).await.unwrap();
        let g = store.generations(r.id).await.unwrap();
        (c, g)
    });
    assert_eq!(candidates.len(), 1 + 3 * 32);
    let genomes: BTreeSet<&String> = candidates.iter().map(|c| &c.genome).collect();
    assert_eq!(genomes.len(), candidates.len(), "no genome evaluated twice");
    for c in &candidates {
        assert!(c.status.is_some(), "candidate {} has no result", c.id);
        assert!(valid.contains(&c.genome) || c.origin.name() == "baseline");
    }
    assert_eq!(
        generations.iter().map(|g| g.generation).collect::<Vec<_>>(),
        [0, 1, 2]
    );
    // Each later generation was proposed before the last result of the one before it.
    for g in 1..3u32 {
        let proposed = candidates
            .iter()
            .filter(|c| c.generation == g)
            .map(|c| c.created_at.clone())
            .min()
            .unwrap();
        let last_before = candidates
            .iter()
            .filter(|c| c.generation == g - 1)
            .filter_map(|c| c.evaluated_at.clone())
            .max()
            .unwrap();
        assert!(
            proposed < last_before,
            "generation {g} proposed at {proposed}, after generation {}'s last result at {last_before}",
            g - 1
        );
    }
}

/// An overlapping advance that finds nothing left to propose waits for the results still
/// out (they decide whether the space is exhausted) instead of trying to finish the run
/// over them: the run ends, every valid genome evaluated once.
#[test]
fn an_exhausted_space_ends_an_overlapping_run() {
    let dir = tempfile::tempdir().unwrap();
    let land = dir.path().join("landscape.json");
    let (valid, _) = landscape(&land);
    let config = dir.path().join("exhaustive.toml");
    let gemm = std::fs::read_to_string(root().join("configs/gemm.toml")).unwrap();
    std::fs::write(
        &config,
        format!("{gemm}\n[search]\nstrategy = \"exhaustive\"\npopulation = 48\n"),
    )
    .unwrap();
    let db = dir.path().join("population.db");
    Command::cargo_bin("evo")
        .unwrap()
        .current_dir(root())
        .env("EVO_REPLAY_OVERLAP", "1")
        .arg("search")
        .arg("-c")
        .arg(&config)
        .args(["--no-progress", "--db"])
        .arg(&db)
        .arg("--evaluator")
        .arg(format!("replay:{}", land.display()))
        .args(["--run", "x", "--seed", "5"])
        .timeout(std::time::Duration::from_secs(300))
        .assert()
        .success()
        .stdout(predicates::str::contains("run x: the space is exhausted"));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let candidates = rt.block_on(async {
        let store = evo_store::Store::open(db.to_str().unwrap()).await.unwrap();
        let r = store.run("x").await.unwrap().unwrap();
        store.candidates(r.id).await.unwrap()
    });
    // The baseline is the first valid genome, evaluated first; the exhaustive strategy
    // proposes the others.
    let genomes: BTreeSet<String> = candidates.iter().map(|c| c.genome.clone()).collect();
    assert_eq!(genomes, valid, "every valid genome");
    assert_eq!(candidates.len(), valid.len(), "none twice");
    assert!(candidates.iter().all(|c| c.status.is_some()));
}

#[test]
fn a_killed_search_resumes_without_losing_or_repeating_anything() {
    let dir = tempfile::tempdir().unwrap();
    let land = dir.path().join("landscape.json");
    landscape(&land);
    let db = dir.path().join("population.db");
    // The uninterrupted reference run.
    search(
        &db,
        &land,
        &["--run", "ref", "--budget", "4gen", "--seed", "3"],
    )
    .success();
    // The same run, killed with SIGKILL in the middle of generation 1.
    let mut child = spawn_search(
        &db,
        &land,
        40,
        &["--run", "killed", "--budget", "4gen", "--seed", "3"],
    );
    wait_for_results(&db, "killed", 1 + 32 + 10);
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let before = rows(&db, "killed");
    assert!(
        before.iter().any(|r| r.2.is_none()),
        "killed mid-generation: some candidates pending"
    );
    // A resume that stops on its own budget before the run ends neither waits for nor
    // counts the killed process (a dead pid of this machine) as a host still working: the
    // run is left stopped, not "running".
    let short = search(&db, &land, &["--resume", "killed", "--budget", "5evals"]).success();
    let stderr = String::from_utf8_lossy(&short.get_output().stderr).to_string();
    assert!(!stderr.contains("still work"), "{stderr}");
    let runs = Command::cargo_bin("evo")
        .unwrap()
        .args(["--json", "runs", "--db"])
        .arg(&db)
        .output()
        .unwrap();
    let runs: serde_json::Value = serde_json::from_slice(&runs.stdout).unwrap();
    let killed = runs
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "killed")
        .unwrap();
    assert_ne!(killed["status"], "running", "{killed}");
    search(&db, &land, &["--resume", "killed", "--budget", "4gen"]).success();
    let after = rows(&db, "killed");
    // Every result recorded before the kill is still there, unchanged.
    for (b, a) in before.iter().zip(&after) {
        if b.2.is_some() {
            assert_eq!(b, a);
        }
    }
    assert!(after.iter().all(|r| r.2.is_some()), "nothing left pending");
    let reference = rows(&db, "ref");
    let as_set =
        |v: &[Row]| -> BTreeSet<(u32, String)> { v.iter().map(|r| (r.0, r.1.clone())).collect() };
    for (a, r) in after.iter().zip(&reference) {
        if a.0 < 2 {
            assert_eq!(
                (a.0, &a.1, &a.2, a.3),
                (r.0, &r.1, &r.2, r.3),
                "generations 0-1 differ"
            );
        }
    }
    assert_eq!(after.len(), reference.len());
    assert_eq!(
        as_set(&after),
        as_set(&reference),
        "the resumed run proposes what the uninterrupted one did"
    );
    let _ = Genome::new();
}

#[test]
fn bad_search_arguments_are_explained() {
    let dir = tempfile::tempdir().unwrap();
    let land = dir.path().join("landscape.json");
    let db = dir.path().join("population.db");
    Command::cargo_bin("evo")
        .unwrap()
        .current_dir(root())
        .args(["search", "-c", "configs/gemm.toml", "--db"])
        .arg(&db)
        .args(["--evaluator", "replay:/no/such/file.json"])
        .assert()
        .code(1)
        .stderr(predicates::str::contains("/no/such/file.json"));
    landscape(&land);
    Command::cargo_bin("evo")
        .unwrap()
        .current_dir(root())
        .args(["search", "--resume", "nope", "--db"])
        .arg(&db)
        .assert()
        .code(1)
        .stderr(predicates::str::contains("no run `nope`"));
    Command::cargo_bin("evo")
        .unwrap()
        .current_dir(root())
        .args([
            "search",
            "-c",
            "configs/gemm.toml",
            "--budget",
            "soon",
            "--db",
        ])
        .arg(&db)
        .assert()
        .code(2)
        .stderr(predicates::str::contains("budget `soon`"));
    // A seed that breaks a constraint (one warp, where the family wants 4 to 8) is an
    // error that names the seed and the constraint, not a seed silently dropped.
    let config = gemm_config(
        dir.path(),
        "seeded.toml",
        "\n[search]\nseeds = [\"BLOCK_K=32,BLOCK_M=32,BLOCK_N=32,STAGES=2,SWIZZLE=xor,WARPS_M=1,WARPS_N=1\"]\n",
    );
    Command::cargo_bin("evo")
        .unwrap()
        .current_dir(root())
        .arg("search")
        .arg("-c")
        .arg(&config)
        .arg("--db")
        .arg(&db)
        .arg("--evaluator")
        .arg(format!("replay:{}", land.display()))
        .assert()
        .code(1)
        .stderr(predicates::str::contains(
            "seed `BLOCK_K=32,BLOCK_M=32,BLOCK_N=32,STAGES=2,SWIZZLE=xor,WARPS_M=1,WARPS_N=1` is not a valid genome of family gemm_mma: it violates constraint `warps`",
        ));
    // A baseline that cannot be had (a missing file, a misspelt source) refuses the search
    // and leaves no run behind: the name is free for the corrected config.
    for (baseline, says) in [
        ("import:no_such_baseline.json", "no_such_baseline.json"),
        ("pytorch", "[search] baseline must be"),
    ] {
        let config = gemm_config(
            dir.path(),
            "bad_baseline.toml",
            &format!("\n[search]\nbaseline = \"{baseline}\"\n"),
        );
        Command::cargo_bin("evo")
            .unwrap()
            .current_dir(root())
            .arg("search")
            .arg("-c")
            .arg(&config)
            .args(["--run", "first", "--db"])
            .arg(&db)
            .arg("--evaluator")
            .arg(format!("replay:{}", land.display()))
            .assert()
            .code(1)
            .stderr(predicates::str::contains(says));
        let runs = Command::cargo_bin("evo")
            .unwrap()
            .args(["runs", "--db"])
            .arg(&db)
            .assert()
            .success();
        let listed = String::from_utf8_lossy(&runs.get_output().stdout).to_string();
        assert!(!listed.contains("first"), "{baseline}: {listed}");
    }
}

/// `baseline = "torch"` where PyTorch cannot be measured (here: the replay evaluator runs
/// no GPU) says why and falls back to the first seed genome, which the run then stores as
/// its baseline (fitness 1).
#[test]
fn a_torch_baseline_without_a_gpu_falls_back_to_the_seed_genome() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("population.db");
    let config = dir.path().join("torch.toml");
    let text = std::fs::read_to_string(root().join("configs/sdpa_replay.toml")).unwrap();
    let text = text
        .replace(
            "baseline = \"import:../tests/data/torch_sdpa_baseline_h200.json\"",
            "baseline = \"torch\"",
        )
        .replace(
            "family = \"sdpa_fwd_mma\"",
            &format!(
                "family = \"sdpa_fwd_mma\"\ntemplates = \"{}\"",
                root().join("templates").display()
            ),
        );
    assert!(text.contains("baseline = \"torch\""));
    std::fs::write(&config, text).unwrap();
    let out = Command::cargo_bin("evo")
        .unwrap()
        .current_dir(root())
        .arg("search")
        .arg("-c")
        .arg(&config)
        .args([
            "--no-progress",
            "--run",
            "t",
            "--budget",
            "1gen",
            "--evaluator",
        ])
        .arg(format!(
            "replay:{}",
            root()
                .join("tests/data/landscape_sdpa_fwd_mma_h200.json")
                .display()
        ))
        .arg("--db")
        .arg(&db)
        .assert()
        .success();
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).to_string();
    assert!(
        stderr.contains("PyTorch SDPA cannot be measured here (the replay evaluator runs no GPU): the baseline is the first seed genome instead"),
        "{stderr}"
    );
    // The summary says what the fitness is relative to.
    let stdout = String::from_utf8_lossy(&out.get_output().stdout).to_string();
    assert!(
        stdout.contains("x the baseline genome's speed") && stdout.contains("  baseline: genome:"),
        "{stdout}"
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let sources: Vec<String> = rt.block_on(async {
        let store = evo_store::Store::open(db.to_str().unwrap()).await.unwrap();
        let r = store.run("t").await.unwrap().unwrap();
        let b = store.baselines(r.id).await.unwrap();
        b.into_iter().map(|b| b.source).collect()
    });
    assert_eq!(sources.len(), 5, "{sources:?}");
    assert!(
        sources.iter().all(|s| s.starts_with("genome:")),
        "{sources:?}"
    );
}

/// Replaying the search recorded on an H200: every genome the recorded run evaluated
/// comes back with its recorded fitness (the seed genome's was 0.8066 against PyTorch),
/// and a genome it never evaluated is `not_recorded` ("not in the recorded landscape"),
/// never scored. (With the family as recorded, the replay proposes exactly the recorded
/// genomes; a later change of the family's constraints may propose others.)
#[test]
fn replaying_the_recorded_h200_search() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("population.db");
    let land = root().join("tests/data/landscape_sdpa_fwd_mma_h200.json");
    Command::cargo_bin("evo")
        .unwrap()
        .current_dir(root())
        .args([
            "search",
            "-c",
            "configs/sdpa_replay.toml",
            "--no-progress",
            "--run",
            "replay",
            "--budget",
            "3gen",
        ])
        .arg("--evaluator")
        .arg(format!("replay:{}", land.display()))
        .arg("--db")
        .arg(&db)
        .assert()
        .success();
    let recorded = Landscape::load(&land).unwrap();
    let rows = rows(&db, "replay");
    assert_eq!(rows.len(), 48);
    for (_, genome, status, fitness, _) in &rows {
        match recorded.get(genome) {
            Some(_) => assert!(
                status.as_deref() == Some("regressed") && fitness.is_some(),
                "{genome}: {status:?}"
            ),
            None => assert_eq!(
                (status.as_deref(), *fitness),
                (Some("not_recorded"), None),
                "{genome}"
            ),
        }
    }
    let seed = "BLOCK_M=64,BLOCK_N=64,EPILOGUE=direct,NUM_WARPS=4,PRODUCER_WARPS=1,Q_IN_REGS=true,STAGES=3,SWIZZLE=xor,WARP_SPEC=off";
    let seed_row = rows
        .iter()
        .find(|r| r.1 == seed)
        .expect("the seed genome is proposed first");
    assert!(
        (seed_row.3.unwrap() - 0.8066).abs() < 1e-4,
        "{:?}",
        seed_row.3
    );
}

/// `evo baseline import` replaces a run's baseline and rescores it: against a baseline four
/// times as slow, every fitness quadruples and fewer genomes regress; a resumed search then
/// uses it.
#[test]
fn importing_a_baseline_rescores_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let land = dir.path().join("landscape.json");
    let (_, shapes) = landscape(&land);
    let db = dir.path().join("population.db");
    search(
        &db,
        &land,
        &["--run", "r", "--budget", "1gen", "--seed", "5"],
    )
    .success();
    let before = rows(&db, "r");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let baseline: Vec<(String, f64)> = rt.block_on(async {
        let store = evo_store::Store::open(db.to_str().unwrap()).await.unwrap();
        let run = store.run("r").await.unwrap().unwrap();
        store
            .baselines(run.id)
            .await
            .unwrap()
            .into_iter()
            .map(|b| (b.shape, b.median_us))
            .collect()
    });
    assert_eq!(baseline.len(), shapes.len());
    let file = dir.path().join("slow_baseline.json");
    let entries: Vec<serde_json::Value> = baseline
        .iter()
        .map(|(shape, t)| {
            let vars = Genome::parse(shape).unwrap();
            let obj: serde_json::Map<String, serde_json::Value> =
                vars.iter().map(|(k, v)| (k.clone(), v.to_json())).collect();
            serde_json::json!({"shape": obj, "median_us": 4.0 * t})
        })
        .collect();
    std::fs::write(
        &file,
        serde_json::json!({"format": "evo-baseline-1", "source": "test", "shapes": entries})
            .to_string(),
    )
    .unwrap();
    Command::cargo_bin("evo")
        .unwrap()
        .current_dir(root())
        .args(["baseline", "import"])
        .arg(&file)
        .args(["--run", "r", "--db"])
        .arg(&db)
        .assert()
        .success()
        .stdout(predicates::str::contains("candidates rescored"));
    let after = rows(&db, "r");
    let regressed = |v: &[Row]| {
        v.iter()
            .filter(|r| r.2.as_deref() == Some("regressed"))
            .count()
    };
    assert!(
        regressed(&after) < regressed(&before),
        "{} vs {}",
        regressed(&after),
        regressed(&before)
    );
    for (b, a) in before.iter().zip(&after) {
        assert_eq!((&b.0, &b.1), (&a.0, &a.1));
        match (b.3, a.3) {
            (Some(fb), Some(fa)) => assert!((fa - 4.0 * fb).abs() < 1e-9 * fa, "{fb} -> {fa}"),
            (None, None) => assert_eq!(b.2, a.2, "failures stay failures"),
            other => panic!("fitness appeared or vanished: {other:?}"),
        }
    }
    // The search goes on against the imported baseline.
    search(&db, &land, &["--resume", "r", "--budget", "2gen"]).success();
    assert_eq!(rows(&db, "r").len(), 1 + 2 * 32);
}

/// Ctrl-C (SIGINT) finishes the evaluation in flight, saves, marks the run interrupted
/// and exits 0; the rest of the generation stays pending and `--resume` evaluates it.
/// Several searches started at once on one new database all run (the first open of a
/// file is raced: WAL switch, migrations), and the ones without `--run` get distinct
/// default names.
#[test]
fn searches_started_together_on_a_new_database_all_run() {
    let dir = tempfile::tempdir().unwrap();
    let land = dir.path().join("landscape.json");
    landscape(&land);
    let db = dir.path().join("population.db");
    let names = [Some("a"), Some("b"), None, None, None];
    let children: Vec<_> = names
        .iter()
        .map(|name| {
            let mut c = StdCommand::new(assert_cmd::cargo::cargo_bin("evo"));
            c.current_dir(root())
                .args([
                    "search",
                    "-c",
                    "configs/gemm.toml",
                    "--no-progress",
                    "--budget",
                    "1gen",
                    "--db",
                ])
                .arg(&db)
                .arg("--evaluator")
                .arg(format!("replay:{}", land.display()))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            if let Some(n) = name {
                c.args(["--run", n]);
            }
            c.spawn().unwrap()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{:?}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let runs = Command::cargo_bin("evo")
        .unwrap()
        .args(["--json", "runs", "--db"])
        .arg(&db)
        .assert()
        .success();
    let listed: serde_json::Value = serde_json::from_slice(&runs.get_output().stdout).unwrap();
    let names: BTreeSet<String> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names.len(), 5, "{listed}");
}

/// `evo --json search` prints its report as JSON on stdout (it used to ignore --json).
#[test]
fn search_reports_in_json() {
    let dir = tempfile::tempdir().unwrap();
    let land = dir.path().join("landscape.json");
    landscape(&land);
    let db = dir.path().join("population.db");
    let a = Command::cargo_bin("evo")
        .unwrap()
        .current_dir(root())
        .args([
            "--json",
            "search",
            "-c",
            "configs/gemm.toml",
            "--no-progress",
            "--run",
            "js",
        ])
        .args(["--budget", "1gen", "--db"])
        .arg(&db)
        .arg("--evaluator")
        .arg(format!("replay:{}", land.display()))
        .assert()
        .success();
    let report: serde_json::Value = serde_json::from_slice(&a.get_output().stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&a.get_output().stdout)));
    assert_eq!(report["run"], "js", "{report}");
    assert!(report["evaluated"].as_u64().unwrap() > 0, "{report}");
    assert!(report["statuses"].is_object(), "{report}");
}

/// A replay run started with a relative landscape path resumes from another directory:
/// the run stores the file's absolute path.
#[test]
fn a_replay_run_resumes_from_another_directory() {
    let dir = tempfile::tempdir().unwrap();
    let land = dir.path().join("landscape.json");
    landscape(&land);
    gemm_config(dir.path(), "gemm.toml", "");
    let db = dir.path().join("population.db");
    let search = |cwd: &Path, args: &[&str]| {
        Command::cargo_bin("evo")
            .unwrap()
            .current_dir(cwd)
            .env("EVO_CACHE_DIR", dir.path().join("cache"))
            .args(["search", "--no-progress", "--budget", "1gen", "--db"])
            .arg(&db)
            .args(args)
            .assert()
    };
    search(
        dir.path(),
        &[
            "-c",
            "gemm.toml",
            "--run",
            "rel",
            "--evaluator",
            "replay:landscape.json",
        ],
    )
    .success();
    search(&root(), &["--resume", "rel"]).success();
    // Naming the same file relative to the run's first directory still matches.
    search(
        dir.path(),
        &["--resume", "rel", "--evaluator", "replay:landscape.json"],
    )
    .success();
    // As on another machine: the stored file is gone, a copy stands elsewhere.
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::rename(&land, elsewhere.join("copy.json")).unwrap();
    search(&root(), &["--resume", "rel"])
        .failure()
        .stderr(predicates::str::contains(
            "pass --evaluator replay:FILE with this machine's copy",
        ));
    search(
        &elsewhere,
        &["--resume", "rel", "--evaluator", "replay:copy.json"],
    )
    .success();
}

/// A replay run keeps the landscape it started on: resumed after the file changed, it is
/// refused (its times would mix with the new file's) and the database is left as it was;
/// the run's own landscape resumes it. A run stored before the hash was kept resumes with
/// a note.
#[test]
fn a_replay_run_refuses_a_changed_landscape() {
    let dir = tempfile::tempdir().unwrap();
    let land = dir.path().join("landscape.json");
    landscape(&land);
    let original = std::fs::read(&land).unwrap();
    let db = dir.path().join("population.db");
    search(&db, &land, &["--run", "r", "--budget", "1gen"]).success();
    let run_row = || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let store = evo_store::Store::open(db.to_str().unwrap()).await.unwrap();
            let run = store.run("r").await.unwrap().unwrap();
            store.close().await;
            run
        })
    };
    let before = (run_row(), rows(&db, "r"));
    // The same genomes, one time changed.
    let mut changed = Landscape::load(&land).unwrap();
    let point = changed
        .points
        .values_mut()
        .find(|p| !p.shapes.is_empty())
        .unwrap();
    point.shapes[0].median_us = point.shapes[0].median_us.map(|t| t * 2.0);
    changed.save(&land).unwrap();
    let resume = || {
        Command::cargo_bin("evo")
            .unwrap()
            .current_dir(root())
            .args([
                "search",
                "--resume",
                "r",
                "--no-progress",
                "--budget",
                "2gen",
            ])
            .arg("--db")
            .arg(&db)
            .assert()
    };
    resume()
        .code(1)
        .stderr(predicates::str::contains(format!(
            "landscape {} is not the one run `r` started on",
            land.display()
        )))
        .stderr(predicates::str::contains("--run NEW-NAME"));
    assert_eq!(
        (run_row(), rows(&db, "r")),
        before,
        "a refused resume changes nothing"
    );
    std::fs::write(&land, &original).unwrap();
    resume().success();
    assert!(rows(&db, "r").len() > before.1.len());
    // As stored by an evo that kept no hash: resumed on any landscape, with a note.
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let store = evo_store::Store::open(db.to_str().unwrap()).await.unwrap();
        let run = store.run("r").await.unwrap().unwrap();
        let mut settings = run.run_settings().unwrap().unwrap();
        assert!(settings.landscape_sha256.is_some());
        settings.landscape_sha256 = None;
        store
            .set_run_settings(run.id, &evo_store::to_stored_json(&settings))
            .await
            .unwrap();
        store.close().await;
    });
    changed.save(&land).unwrap();
    Command::cargo_bin("evo")
        .unwrap()
        .current_dir(root())
        .args([
            "search",
            "--resume",
            "r",
            "--no-progress",
            "--budget",
            "3gen",
        ])
        .arg("--db")
        .arg(&db)
        .assert()
        .success()
        .stderr(predicates::str::contains(
            "was stored without its landscape's hash",
        ));
}

/// `evo join` on a SQLite file (one machine's) that lacks the run is refused at once,
/// naming the runs the file holds and how to start one: no host elsewhere is about to
/// create it (it used to wait 10 minutes). A file that is not there is not created.
#[test]
fn joining_a_run_a_sqlite_file_lacks_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let land = dir.path().join("landscape.json");
    landscape(&land);
    let db = dir.path().join("population.db");
    let join = |run: &str| {
        Command::cargo_bin("evo")
            .unwrap()
            .current_dir(root())
            .args(["join", run, "--no-progress", "--db"])
            .arg(&db)
            .timeout(Duration::from_secs(60))
            .assert()
    };
    join("night")
        .code(1)
        .stderr(predicates::str::contains("no population database at"))
        .stderr(predicates::str::contains(
            "evo search -c CONFIG --run night",
        ));
    assert!(!db.exists(), "a refused join creates no database");
    search(&db, &land, &["--run", "day", "--budget", "1gen"]).success();
    join("night")
        .code(1)
        .stderr(predicates::str::contains(format!(
        "no run `night` in {} (it holds `day`): start it with `evo search -c CONFIG --run night",
        db.display()
    )));
}

/// SIGTERM (what a batch scheduler sends) stops a search like Ctrl-C: the evaluations in
/// flight are saved, the run is interrupted (not left running) and resumable.
#[test]
fn sigterm_saves_like_ctrl_c() {
    let dir = tempfile::tempdir().unwrap();
    let land = dir.path().join("landscape.json");
    landscape(&land);
    let db = dir.path().join("population.db");
    let child = spawn_search(
        &db,
        &land,
        100,
        &["--run", "term", "--budget", "2gen", "--seed", "4"],
    );
    wait_for_results(&db, "term", 3);
    StdCommand::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(130),
        "saved, but not done: {:?}",
        out.status
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("run term: interrupted"), "{stdout}");
    let runs = Command::cargo_bin("evo")
        .unwrap()
        .args(["--json", "runs", "--db"])
        .arg(&db)
        .assert()
        .success();
    let text = String::from_utf8_lossy(&runs.get_output().stdout).to_string();
    assert!(text.contains("\"interrupted\""), "{text}");
}

/// A second Ctrl-C aborts at once and says how to continue; the run resumes to the end.
#[test]
fn a_second_ctrl_c_aborts_and_says_how_to_resume() {
    let dir = tempfile::tempdir().unwrap();
    let land = dir.path().join("landscape.json");
    landscape(&land);
    let db = dir.path().join("population.db");
    let child = StdCommand::new(assert_cmd::cargo::cargo_bin("evo"))
        .current_dir(root())
        // Each evaluation lasts 3 s, so the second signal comes while one is in flight.
        .env("EVO_REPLAY_DELAY_MS", "3000")
        .args(["search", "-c", "configs/gemm.toml", "--no-progress", "--db"])
        .arg(&db)
        .arg("--evaluator")
        .arg(format!("replay:{}", land.display()))
        .args(["--run", "twice", "--budget", "2gen", "--seed", "4"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_results(&db, "twice", 3);
    for _ in 0..2 {
        StdCommand::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status()
            .unwrap();
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{:?}", out.status);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("aborted") && stderr.contains("evo search --resume twice --db"),
        "{stderr}"
    );
    search(&db, &land, &["--resume", "twice", "--budget", "2gen"]).success();
    assert!(rows(&db, "twice").iter().all(|r| r.2.is_some()));
}

#[test]
fn ctrl_c_saves_and_resume_finishes() {
    let dir = tempfile::tempdir().unwrap();
    let land = dir.path().join("landscape.json");
    landscape(&land);
    let db = dir.path().join("population.db");
    let child = spawn_search(
        &db,
        &land,
        100,
        &["--run", "int", "--budget", "2gen", "--seed", "4"],
    );
    wait_for_results(&db, "int", 5);
    let interrupted_at = Instant::now();
    StdCommand::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(130),
        "saved, but not done: {:?}",
        out.status
    );
    assert!(
        interrupted_at.elapsed() < Duration::from_secs(5),
        "Ctrl-C waited for more than the evaluation in flight"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("run int: interrupted") && stdout.contains("resume with"),
        "{stdout}"
    );
    let before = rows(&db, "int");
    let pending = before.iter().filter(|r| r.2.is_none()).count();
    assert!(pending > 0, "nothing left pending");
    search(&db, &land, &["--resume", "int", "--budget", "2gen"]).success();
    let after = rows(&db, "int");
    assert_eq!(after.len(), 1 + 2 * 32);
    assert!(after.iter().all(|r| r.2.is_some()));
}

/// `evo --json search-quality` on the exhaustive H200 landscape, 20 seeds, population 16
/// (the shipped search configs' size), value lists as listed or reversed.
fn search_quality_h200(reverse: bool) -> serde_json::Value {
    let mut args = vec![
        "--json",
        "search-quality",
        "-c",
        "configs/sdpa_landscape.toml",
        "--landscape",
        "tests/data/landscape_sdpa64_h200.json.gz",
        "--seeds",
        "20",
        "--population",
        "16",
    ];
    if reverse {
        args.push("--reverse");
    }
    let out = Command::cargo_bin("evo")
        .unwrap()
        .current_dir(root())
        .args(args)
        .assert()
        .success();
    serde_json::from_slice(&out.get_output().stdout).unwrap()
}

fn strategy_row(report: &serde_json::Value, name: &str) -> serde_json::Value {
    report["strategies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["strategy"] == name)
        .unwrap_or_else(|| panic!("no {name} in {report}"))
        .clone()
}

/// The exhaustive H200 landscape of configs/sdpa_landscape.toml (issue 5's benchmark data):
/// it still covers every valid genome of the family as the templates define it today (a
/// change of knobs or constraints shows up here); on it elite-guided evolution gets
/// within 2% of the optimum on every seed, with a lower median than random search, and
/// the surrogate (the default strategy) meets issue 23's targets on this seed sample —
/// median at most 70 evaluations, p75 at most 100, every seed — with the value lists as
/// listed and reversed.
#[test]
fn search_quality_on_the_exhaustive_h200_landscape() {
    let report = search_quality_h200(false);
    let valid = report["valid_genomes"].as_u64().unwrap();
    assert!(valid > 2000, "{report}");
    assert_eq!(report["recorded"].as_u64(), Some(valid), "{report}");
    assert_eq!(report["correct"].as_u64(), Some(valid), "{report}");
    assert_eq!(report["population"].as_u64(), Some(16), "{report}");
    let (surrogate, evolution, random) = (
        strategy_row(&report, "surrogate"),
        strategy_row(&report, "evolution"),
        strategy_row(&report, "random"),
    );
    assert_eq!(evolution["reached"].as_u64(), Some(20), "{evolution}");
    let median = |row: &serde_json::Value| row["median"].as_f64().unwrap();
    assert!(
        median(&evolution) < median(&random),
        "evolution {evolution} random {random}"
    );
    for (rows, label) in [
        (surrogate, "as listed"),
        (
            strategy_row(&search_quality_h200(true), "surrogate"),
            "reversed",
        ),
    ] {
        assert_eq!(rows["reached"].as_u64(), Some(20), "{label}: {rows}");
        assert!(median(&rows) <= 70.0, "{label}: {rows}");
        assert!(rows["p75"].as_f64().unwrap() <= 100.0, "{label}: {rows}");
        assert!(
            median(&rows) < median(&evolution),
            "{label}: {rows} vs {evolution}"
        );
    }
}

/// A second recorded landscape, another problem, family and GPU (the first 104 genomes of
/// an exhaustive gemm_mma recording on an H100): the surrogate, the default strategy, is no
/// worse than evolution there and reaches the best recorded on every seed.
#[test]
fn search_quality_on_the_h100_gemm_landscape() {
    let out = Command::cargo_bin("evo")
        .unwrap()
        .current_dir(root())
        .args([
            "--json",
            "search-quality",
            "-c",
            "configs/gemm_landscape.toml",
            "--landscape",
            "tests/data/landscape_gemm_h100_partial.json.gz",
            "--seeds",
            "20",
            "--population",
            "16",
        ])
        .assert()
        .success();
    let report: serde_json::Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    assert_eq!(report["recorded"].as_u64(), Some(104), "{report}");
    let (surrogate, evolution) = (
        strategy_row(&report, "surrogate"),
        strategy_row(&report, "evolution"),
    );
    assert_eq!(surrogate["reached"].as_u64(), Some(20), "{surrogate}");
    let median = |row: &serde_json::Value| row["median"].as_f64().unwrap();
    assert!(
        median(&surrogate) <= median(&evolution),
        "{surrogate} vs {evolution}"
    );
}

/// The names in `dir`, sorted (what a command left there).
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Bad input is refused before the database is opened: a config that does not load (an
/// unknown key, a shape the family rejects, a seed with a value its knob lacks, a family
/// that is not there), a bad run name or a landscape that is not there creates no
/// database file, and leaves an existing database as it was (no byte changed, no `-wal`
/// or `-shm` beside it). A resume refused for its flags leaves nothing beside the file
/// either.
#[test]
fn invalid_input_creates_no_database_and_leaves_an_existing_one_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let land = dir.path().join("landscape.json");
    landscape(&land);
    let configs = dir.path().join("configs");
    std::fs::create_dir(&configs).unwrap();
    let dbs = dir.path().join("dbs");
    std::fs::create_dir(&dbs).unwrap();
    let edited = |name: &str, from: &str, to: &str| {
        let path = gemm_config(&configs, name, "");
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains(from), "{name}: no `{from}`");
        std::fs::write(&path, text.replacen(from, to, 1)).unwrap();
        path
    };
    let unknown_key = gemm_config(&configs, "key.toml", "\n[search]\nbogus = 1\n");
    let bad_seed = gemm_config(
        &configs,
        "seed.toml",
        "\n[search]\nseeds = [\"BLOCK_K=33,BLOCK_M=64,BLOCK_N=64,STAGES=2,SWIZZLE=xor,WARPS_M=2,WARPS_N=2\"]\n",
    );
    let bad_shape = edited("shape.toml", "K = 1000", "K = 1001");
    let no_family = edited(
        "family.toml",
        "family = \"gemm_mma\"",
        "family = \"gemm_wmma\"",
    );
    let good = gemm_config(&configs, "good.toml", "");
    let replay = format!("replay:{}", land.display());
    let attempt = |db: &Path, config: &Path, extra: &[&str]| {
        Command::cargo_bin("evo")
            .unwrap()
            .current_dir(root())
            .env("EVO_CACHE_DIR", dir.path().join("cache"))
            .args(["search", "--no-progress", "--budget", "1gen", "-c"])
            .arg(config)
            .arg("--db")
            .arg(db)
            .args(extra)
            .assert()
    };
    let cases: Vec<(&Path, Vec<&str>, i32, &str)> = vec![
        (
            &unknown_key,
            vec!["--evaluator", &replay],
            1,
            "unknown key `bogus`",
        ),
        (
            &bad_seed,
            vec!["--evaluator", &replay],
            1,
            "`BLOCK_K` = `33`",
        ),
        (&bad_shape, vec!["--evaluator", &replay], 1, "K = 1001"),
        (
            &no_family,
            vec!["--evaluator", &replay],
            1,
            "gemm_wmma.toml",
        ),
        (
            &good,
            vec!["--evaluator", "replay:/no/such/landscape.json"],
            1,
            "/no/such/landscape.json",
        ),
        (
            &good,
            vec!["--evaluator", &replay, "--run", "../night"],
            2,
            "--run `../night`",
        ),
    ];
    // No database yet: none is created.
    let new_db = dbs.join("new.db");
    for (config, extra, code, says) in &cases {
        attempt(&new_db, config, extra)
            .code(*code)
            .stderr(predicates::str::contains(*says));
        assert!(listing(&dbs).is_empty(), "{says}: left {:?}", listing(&dbs));
    }
    // A database with a run: left as it was.
    let db = dbs.join("population.db");
    attempt(&db, &good, &["--evaluator", &replay, "--run", "day"]).success();
    // The database and the run's log folder.
    let files = listing(&dbs);
    assert_eq!(files, ["evo-logs", "population.db"]);
    let before = std::fs::read(&db).unwrap();
    for (config, extra, code, says) in &cases {
        attempt(&db, config, extra)
            .code(*code)
            .stderr(predicates::str::contains(*says));
        assert_eq!(listing(&dbs), files, "{says}");
        assert!(
            std::fs::read(&db).unwrap() == before,
            "{says}: the database changed"
        );
    }
    // A resume refused for its flags: the run is as it was, nothing is left beside it.
    Command::cargo_bin("evo")
        .unwrap()
        .current_dir(root())
        .args([
            "search",
            "--no-progress",
            "--resume",
            "day",
            "--seed",
            "99",
            "--db",
        ])
        .arg(&db)
        .assert()
        .code(1)
        .stderr(predicates::str::contains("a resumed run keeps them"));
    assert_eq!(listing(&dbs), files);
}

/// `--gpus` of another form is refused (exit 2, the same words) whatever the run: a new
/// GPU run, a new replay run, a resumed replay run and a host joining one, before the
/// database is opened (none is created, an existing one is not touched).
#[test]
fn a_bad_gpu_list_is_refused_on_new_resumed_and_joined_runs() {
    let dir = tempfile::tempdir().unwrap();
    let land = dir.path().join("landscape.json");
    landscape(&land);
    let db = dir.path().join("population.db");
    let says = "error: --gpus: `x` is not a GPU number (give e.g. 0,1 or all)";
    let refused = |args: &[&str], db: &Path| {
        let a = Command::cargo_bin("evo")
            .unwrap()
            .current_dir(root())
            .args(args)
            .args(["--gpus", "x", "--no-progress", "--db"])
            .arg(db)
            .assert()
            .code(2);
        let err = String::from_utf8_lossy(&a.get_output().stderr).to_string();
        assert_eq!(err.trim_end(), says, "{args:?}");
    };
    let replay = format!("replay:{}", land.display());
    refused(&["search", "-c", "configs/gemm.toml"], &db);
    refused(
        &["search", "-c", "configs/gemm.toml", "--evaluator", &replay],
        &db,
    );
    assert!(!db.exists(), "a refused search creates no database");
    search(&db, &land, &["--run", "day", "--budget", "1gen"]).success();
    let before = std::fs::read(&db).unwrap();
    refused(&["search", "--resume", "day", "--budget", "1gen"], &db);
    refused(&["join", "day", "--budget", "1evals"], &db);
    assert!(std::fs::read(&db).unwrap() == before, "the run was touched");
    assert_eq!(
        listing(dir.path()),
        ["evo-logs", "landscape.json", "population.db"],
        "nothing beside the database"
    );
}
