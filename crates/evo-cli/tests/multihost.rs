//! One run shared by three `evo` processes through PostgreSQL, on the replay evaluator:
//! the run's first host (`evo search`) is killed with SIGKILL while it holds a genome;
//! the two others (`evo join`) finish the run. Afterwards every genome the search
//! produced was evaluated exactly once, the genome the dead host held went back to the
//! queue when its lease expired, and the genomes, results, generations and elites equal
//! those of a single-process SQLite run with the same seed and replayed results.
//!
//! Needs EVO_TEST_PG_URL (scripts/test.sh starts a server and sets it); skips with a
//! printed reason without it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command as StdCommand, Stdio};
use std::time::{Duration, Instant};

use assert_cmd::cargo::CommandCargoExt;
use evo_store::Store;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn pg_url() -> Option<String> {
    match std::env::var("EVO_TEST_PG_URL") {
        Ok(u) if !u.trim().is_empty() => Some(u),
        _ => {
            eprintln!("skipping: EVO_TEST_PG_URL is unset (scripts/test.sh starts PostgreSQL with scripts/install-postgres.sh and sets it)");
            None
        }
    }
}

const LANDSCAPE: &str = "tests/data/landscape_sdpa_fwd_mma_h200.json";
const GENERATIONS: &str = "6gen";
const SEED: &str = "11";

fn evo(log: &Path, args: &[&str]) -> Child {
    let out = std::fs::File::create(log).unwrap();
    StdCommand::cargo_bin("evo")
        .unwrap()
        .current_dir(root())
        // Slow enough that a host can be killed mid-evaluation.
        .env("EVO_REPLAY_DELAY_MS", "60")
        .args(args)
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .stdin(Stdio::null())
        .spawn()
        .unwrap()
}

/// Everything that must agree between the runs: per genome (generation, status,
/// fitness, origin, parents), the generation rows' elites and best fitness.
type Outcome = (
    BTreeMap<String, (u32, Option<String>, Option<f64>, String, Vec<String>)>,
    Vec<(u32, serde_json::Value, Option<f64>)>,
);

async fn outcome(store: &Store, run: &str) -> Outcome {
    let r = store.run(run).await.unwrap().expect("run");
    let genomes = store
        .candidates(r.id)
        .await
        .unwrap()
        .into_iter()
        .map(|c| {
            (
                c.hash,
                (
                    c.generation,
                    c.status.map(|s| s.to_string()),
                    c.fitness,
                    c.origin.name().to_string(),
                    c.parents,
                ),
            )
        })
        .collect();
    let generations = store
        .generations(r.id)
        .await
        .unwrap()
        .into_iter()
        .map(|g| (g.generation, g.elites, g.best_fitness))
        .collect();
    (genomes, generations)
}

fn wait(child: &mut Child, log: &Path, limit: Duration) {
    let t = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(
                status.success(),
                "{} failed: {}",
                log.display(),
                std::fs::read_to_string(log).unwrap_or_default()
            );
            return;
        }
        if t.elapsed() > limit {
            let _ = child.kill();
            panic!(
                "{} did not finish in {limit:?}: {}",
                log.display(),
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn three_hosts_one_killed_equal_a_single_process_run() {
    let Some(url) = pg_url() else { return };
    let dir = tempfile::tempdir().unwrap();
    let land = root().join(LANDSCAPE);
    let evaluator = format!("replay:{}", land.display());
    let common = [
        "-c",
        "configs/sdpa_replay.toml",
        "--no-progress",
        "--budget",
        GENERATIONS,
        "--seed",
        SEED,
        "--evaluator",
        &evaluator,
    ];

    // The reference: one process, SQLite.
    let sqlite = dir.path().join("population.db");
    let log = dir.path().join("reference.log");
    let mut args = vec!["search", "--run", "ref", "--db", sqlite.to_str().unwrap()];
    args.extend(common);
    let mut reference = evo(&log, &args);
    wait(&mut reference, &log, Duration::from_secs(300));

    // The shared run: a fresh name in the test database.
    let run = format!(
        "multihost-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let store = rt
        .block_on(Store::open(&url))
        .expect("open EVO_TEST_PG_URL");
    let logs: Vec<PathBuf> = ["a", "b", "c"]
        .iter()
        .map(|h| dir.path().join(format!("host-{h}.log")))
        .collect();
    let mut args = vec!["search", "--run", &run, "--db", &url, "--lease", "5s"];
    args.extend(common);
    let mut a = evo(&logs[0], &args);
    let a_pid = a.id();
    // The others join once the run exists.
    let t = Instant::now();
    let run_id = loop {
        if let Some(r) = rt.block_on(store.run(&run)).unwrap() {
            break r.id;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the run never appeared: {}",
            std::fs::read_to_string(&logs[0]).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let join = ["join", &run, "--db", &url, "--no-progress"];
    let mut b = evo(&logs[1], &join);
    let mut c = evo(&logs[2], &join);

    // Kill the first host midway, while it holds a genome.
    let a_prefix = format!(":{a_pid}:");
    let t = Instant::now();
    let held = loop {
        let cands = rt.block_on(store.candidates(run_id)).unwrap();
        let done = cands.iter().filter(|c| c.status.is_some()).count();
        let held = cands.iter().find(|c| {
            c.status.is_none()
                && c.lease_owner
                    .as_deref()
                    .is_some_and(|o| o.contains(&a_prefix))
        });
        if let (true, Some(held)) = (done >= 24, held) {
            break held.id;
        }
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "host a never held a genome after 24 results: {}",
            std::fs::read_to_string(&logs[0]).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    a.kill().unwrap(); // SIGKILL
    a.wait().unwrap();
    let killed_at = rt.block_on(store.candidates(run_id)).unwrap();
    assert!(
        killed_at.iter().any(|c| c.status.is_none()),
        "the run was not midway when host a died"
    );

    wait(&mut b, &logs[1], Duration::from_secs(300));
    wait(&mut c, &logs[2], Duration::from_secs(300));

    let r = rt.block_on(store.run(&run)).unwrap().unwrap();
    assert_eq!(r.status, evo_store::RunStatus::Finished);
    let cands = rt.block_on(store.candidates(run_id)).unwrap();
    assert!(cands.iter().all(|c| c.status.is_some()), "none lost");
    // Exactly once: each result was recorded by one host, and the hosts' own counts of
    // recorded results add up to the number of genomes (nothing evaluated and thrown
    // away: no lease was lost by a live host).
    let hosts = rt.block_on(store.hosts(run_id)).unwrap();
    assert_eq!(hosts.len(), 3);
    let by_a = cands
        .iter()
        .filter(|c| c.evaluated_by.as_deref().unwrap().contains(&a_prefix))
        .count() as u64;
    let by_joiners: u64 = hosts
        .iter()
        .filter(|h| !h.id.contains(&a_prefix))
        .map(|h| {
            assert!(h.finished_at.is_some(), "{h:?}");
            assert_eq!(h.stats.as_ref().unwrap()["lost_leases"], 0, "{h:?}");
            h.evaluated
        })
        .sum();
    assert!(by_joiners > 0 && by_a > 0);
    assert_eq!(by_a + by_joiners, cands.len() as u64);
    // The genome the dead host held went back to the queue after its lease and was
    // evaluated by another host.
    let held = cands.iter().find(|c| c.id == held).unwrap();
    assert_eq!(held.claims, 2, "{held:?}");
    assert!(!held.evaluated_by.as_deref().unwrap().contains(&a_prefix));

    // The same genomes, results, generations and elites as the single-process run.
    let reference_store = rt.block_on(Store::open(sqlite.to_str().unwrap())).unwrap();
    let want = rt.block_on(outcome(&reference_store, "ref"));
    let got = rt.block_on(outcome(&store, &run));
    assert_eq!(want.0.len(), got.0.len(), "as many genomes");
    for (hash, w) in &want.0 {
        assert_eq!(got.0.get(hash), Some(w), "genome {hash}");
    }
    assert_eq!(want.1, got.1, "generations and elites");
    assert_eq!(got.1.len(), 6);
    eprintln!(
        "{} genomes; host a (killed) recorded {by_a}, the joiners {by_joiners}",
        cands.len()
    );
}

/// Run `run` of configs/sdpa_replay.toml on the recorded landscape in `db`, one generation,
/// to its end.
fn one_generation(log: &Path, run: &str, db: &str) {
    let land = root().join(LANDSCAPE);
    let mut a = evo(
        log,
        &[
            "search",
            "-c",
            "configs/sdpa_replay.toml",
            "--no-progress",
            "--run",
            run,
            "--db",
            db,
            "--budget",
            "1gen",
            "--evaluator",
            &format!("replay:{}", land.display()),
        ],
    );
    wait(&mut a, log, Duration::from_secs(120));
}

#[test]
fn another_evaluator_or_a_finished_run_is_refused() {
    let Some(url) = pg_url() else { return };
    let run = format!("refuse-{}", std::process::id());
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("a.log");
    one_generation(&log, &run, &url);
    let out = StdCommand::cargo_bin("evo")
        .unwrap()
        .current_dir(root())
        .args([
            "search",
            "--resume",
            &run,
            "--db",
            &url,
            "--evaluator",
            "replay:other.json",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("every host of a run uses the same evaluator"),
        "{err}"
    );
    // A finished run has nothing to join.
    let out = StdCommand::cargo_bin("evo")
        .unwrap()
        .current_dir(root())
        .args(["join", &run, "--db", &url])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nothing to join"), "{err}");
}

/// A joining host does not wait 10 minutes for a baseline that no host is measuring: here
/// the run's only host stopped before measuring it (a replay run edited back to `running`,
/// its baseline deleted, its host unfinished with a heartbeat long ago, as after a SIGKILL
/// during the baseline). `evo join` refuses within seconds and names `evo search --resume`.
/// (SQLite; the file is edited with python3's sqlite3, skipped without it.)
#[test]
fn join_refuses_a_run_whose_hosts_stopped_before_its_baseline() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("population.db");
    let run = "no-baseline";
    let log = dir.path().join("a.log");
    one_generation(&log, run, db.to_str().unwrap());
    let edit = StdCommand::new("python3")
        .arg("-c")
        .arg(
            "import sqlite3, sys\n\
             db = sqlite3.connect(sys.argv[1])\n\
             db.execute('DELETE FROM baselines')\n\
             db.execute(\"UPDATE runs SET status = 'running'\")\n\
             db.execute('UPDATE hosts SET finished_at = NULL, heartbeat_ms = 0')\n\
             db.commit()",
        )
        .arg(&db)
        .output();
    match edit {
        Ok(o) => assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr)),
        Err(e) => {
            eprintln!("skipping: no python3 to edit the database ({e})");
            return;
        }
    }
    let started = Instant::now();
    let out = StdCommand::cargo_bin("evo")
        .unwrap()
        .current_dir(root())
        .args(["join", run, "--no-progress", "--db", db.to_str().unwrap()])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("has no baseline, and no other host is working on it")
            && err.contains("evo search --resume no-baseline"),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
}
