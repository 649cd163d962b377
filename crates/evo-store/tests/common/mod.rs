//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use evo_core::{Gate, Status};
use evo_core::{Genome, Value, Vars};
use evo_store::{CandidateResult, NewCandidate, NewMeasurement, NewRun, Origin, Store};

/// A fresh directory and the database path inside it (not created yet).
pub fn temp_db() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("population.db");
    (dir, path)
}

pub async fn open(path: &Path) -> Store {
    Store::open(path.to_str().unwrap()).await.expect("open")
}

/// The PostgreSQL server of the tests (scripts/test.sh starts one and exports it), or
/// `None` with a printed reason.
pub fn pg_url() -> Option<String> {
    match std::env::var("EVO_TEST_PG_URL") {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ => {
            eprintln!(
                "skipping the PostgreSQL case: EVO_TEST_PG_URL is unset (scripts/test.sh \
                 starts a server with scripts/install-postgres.sh and sets it)"
            );
            None
        }
    }
}

/// A URL of the test server whose tables live in a new, empty schema: every test gets
/// a database of its own.
pub async fn fresh_pg(url: &str) -> String {
    use sqlx::Connection;
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let mut conn = sqlx::PgConnection::connect(url)
        .await
        .expect("connect to EVO_TEST_PG_URL");
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let schema = format!(
        "t_{}_{}_{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
    );
    sqlx::query(&format!("CREATE SCHEMA {schema}"))
        .execute(&mut conn)
        .await
        .expect("create a test schema");
    let _ = conn.close().await;
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}options=-c%20search_path%3D{schema}")
}

/// A store in a fresh schema of the test server, or `None` (reason printed).
pub async fn open_pg() -> Option<Store> {
    let url = fresh_pg(&pg_url()?).await;
    Some(
        Store::open(&url)
            .await
            .expect("open the PostgreSQL test database"),
    )
}

/// `both_backends!(name);` before `async fn name(store: Store)` runs the test on a fresh
/// SQLite file (`name::sqlite`) and on a fresh PostgreSQL schema (`name::postgres`,
/// skipped with a reason when EVO_TEST_PG_URL is unset).
#[macro_export]
macro_rules! both_backends {
    ($name:ident) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                let (_dir, path) = $crate::common::temp_db();
                super::$name($crate::common::open(&path).await).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                let Some(store) = $crate::common::open_pg().await else {
                    return;
                };
                super::$name(store).await;
            }
        }
    };
}

pub fn new_run(name: &str) -> NewRun {
    NewRun {
        name: name.into(),
        config_toml: "problem = \"gemm\"\nfamily = \"gemm_mma\"\n".into(),
        problem: "gemm".into(),
        family: "gemm_mma".into(),
        seed: 42,
        strategy: "evolution".into(),
        evaluator: "gpu".into(),
        device: Some("NVIDIA H100 80GB HBM3".into()),
        driver: Some("580.65".into()),
        nvrtc_version: Some("13.0".into()),
        arch: Some("sm_90a".into()),
    }
}

/// A distinct genome per `i`.
pub fn genome(i: i64) -> Genome {
    Genome::parse(&format!(
        "BLOCK_M={},STAGES={},SWIZZLE=xor",
        16 * (i + 1),
        i % 4 + 1
    ))
    .unwrap()
}

pub fn candidates(range: std::ops::Range<i64>, generation: u32) -> Vec<NewCandidate> {
    range
        .map(|i| NewCandidate::new(genome(i), generation, Origin::Random))
        .collect()
}

pub fn shape(seq: i64) -> Vars {
    let mut v = Vars::new();
    v.insert("BATCH".into(), Value::Int(1));
    v.insert("HEADS".into(), Value::Int(8));
    v.insert("SEQ".into(), Value::Int(seq));
    v
}

pub fn measurement(seq: i64, median_us: f64) -> NewMeasurement {
    NewMeasurement {
        shape: shape(seq),
        median_us: Some(median_us),
        p20_us: Some(median_us * 0.98),
        p80_us: Some(median_us * 1.03),
        samples: vec![median_us * 0.97, median_us, median_us * 1.04],
        tflops: Some(512.5),
        peak_fraction: Some(0.52),
        max_abs_err: Some(1.5e-3),
        rel_l2: Some(2.0e-4),
    }
}

pub fn evaluated(fitness: f64) -> CandidateResult {
    CandidateResult {
        status: Status::Evaluated,
        gate: Some(Gate::Timing),
        detail: None,
        resources: Some(serde_json::json!({"registers": 128, "smem_bytes": 49152, "spills": 0})),
        fitness: Some(fitness),
        eval_ms: Some(812.5),
        source_key: Some("src-abc".into()),
    }
}

pub fn failed(status: &str, gate: &str) -> CandidateResult {
    CandidateResult {
        gate: Some(gate.parse().expect("a gate name")),
        detail: Some(format!("{gate} failed")),
        ..CandidateResult::new(status.parse().expect("a status name"))
    }
}
