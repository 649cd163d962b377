//! Round trips of every table, uniqueness, ordering and validation.

#[macro_use]
mod common;

use common::*;
use evo_core::{Gate, Genome, Status};
use evo_store::{
    shape_key, CandidateId, CandidateResult, GenerationRow, NewCandidate, NewProfile, Origin,
    RunId, RunStatus, Store, StoreError, PENDING,
};
use serde_json::json;

both_backends!(runs_round_trip);
async fn runs_round_trip(store: Store) {
    let mut new = new_run("r1");
    new.seed = u64::MAX - 7; // does not fit an i64: stored as the same bits
    new.evaluator = "replay:runs/r0.jsonl".into();
    let id = store.create_run(&new).await.unwrap();

    let run = store.run("r1").await.unwrap().expect("run by name");
    assert_eq!(run.id, id);
    assert_eq!(run.name, "r1");
    assert_eq!(run.config_toml, new.config_toml);
    assert_eq!(run.problem, "gemm");
    assert_eq!(run.family, "gemm_mma");
    assert_eq!(run.seed, u64::MAX - 7);
    assert_eq!(run.strategy, "evolution");
    assert_eq!(run.evaluator, "replay:runs/r0.jsonl");
    assert_eq!(run.device.as_deref(), Some("NVIDIA H100 80GB HBM3"));
    assert_eq!(run.driver.as_deref(), Some("580.65"));
    assert_eq!(run.nvrtc_version.as_deref(), Some("13.0"));
    assert_eq!(run.arch.as_deref(), Some("sm_90a"));
    assert_eq!(run.status, RunStatus::Running);
    assert_eq!(run.search_state, None);
    assert_eq!(run.evo_version, env!("CARGO_PKG_VERSION"));
    assert!(run.created_at.ends_with('Z') && run.created_at.len() == 24);

    // By id, as text and as RunId.
    assert_eq!(
        store.run(&id.to_string()).await.unwrap().unwrap().name,
        "r1"
    );
    assert_eq!(store.run_by_id(id).await.unwrap().unwrap().name, "r1");
    assert!(store.run("nope").await.unwrap().is_none());
    assert!(store.run("999").await.unwrap().is_none());

    // A name wins over an id: a run named "1" is found by name even if run 1 exists.
    let named_one = store.create_run(&new_run(&id.to_string())).await.unwrap();
    assert_ne!(named_one, id);
    assert_eq!(
        store.run(&id.to_string()).await.unwrap().unwrap().id,
        named_one
    );

    // Names are unique.
    let err = store.create_run(&new_run("r1")).await.unwrap_err();
    assert!(
        matches!(err, StoreError::RunExists(ref n) if n == "r1"),
        "{err}"
    );
    assert!(err.to_string().contains("r1"));
    assert!(matches!(
        store.create_run(&new_run("  ")).await,
        Err(StoreError::Invalid { .. })
    ));

    store
        .set_run_status(id, RunStatus::Interrupted)
        .await
        .unwrap();
    let state = json!({"rng": [1, 2, 3], "generation": 4, "population": ["a", "b"]});
    store.save_search_state(id, &state).await.unwrap();
    let run = store.run_by_id(id).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Interrupted);
    assert_eq!(run.search_state, Some(state));
    assert!(run.updated_at >= run.created_at);

    assert!(matches!(
        store.set_run_status(RunId(9999), RunStatus::Finished).await,
        Err(StoreError::NoSuchRun(_))
    ));
    assert!(matches!(
        store.save_search_state(RunId(9999), &json!({})).await,
        Err(StoreError::NoSuchRun(_))
    ));
    store.close().await;
}

both_backends!(candidates_and_measurements_round_trip);
async fn candidates_and_measurements_round_trip(store: Store) {
    let run = store.create_run(&new_run("r")).await.unwrap();

    let parent = genome(0);
    let child = Genome::parse("BLOCK_M=64,STAGES=3,SWIZZLE=none").unwrap();
    let mut new = NewCandidate::new(child.clone(), 3, Origin::Crossover)
        .with_parents([parent.hash().0, genome(1).hash().0]);
    new.source_key = Some("key-1".into());
    let ids = store
        .insert_candidates(
            run,
            &[NewCandidate::new(parent.clone(), 0, Origin::Seed), new],
        )
        .await
        .unwrap();
    assert_eq!(ids.len(), 2);
    assert!(ids[0] < ids[1]);

    let c = store.candidate(ids[1]).await.unwrap().expect("candidate");
    assert_eq!(c.id, ids[1]);
    assert_eq!(c.run_id, run);
    assert_eq!(c.genome, "BLOCK_M=64,STAGES=3,SWIZZLE=none");
    assert_eq!(c.hash, child.hash().0);
    assert_eq!(c.parse_genome().unwrap(), child);
    assert_eq!(c.generation, 3);
    assert_eq!(c.parents, vec![parent.hash().0, genome(1).hash().0]);
    assert_eq!(c.origin, Origin::Crossover);
    assert!(c.is_pending());
    assert_eq!(c.status, None);
    assert_eq!(c.fitness, None);
    assert_eq!(c.source_key.as_deref(), Some("key-1"));
    assert_eq!(c.evaluated_at, None);

    let by_hash = store
        .candidate_by_hash(run, &child.hash().0)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(by_hash, c);
    assert!(store
        .candidate_by_hash(run, "0000")
        .await
        .unwrap()
        .is_none());
    assert!(store.candidate(CandidateId(999)).await.unwrap().is_none());
    let upper = child.hash().0[..6].to_ascii_uppercase();
    let by_prefix = store.candidates_by_hash_prefix(&upper).await.unwrap();
    assert!(by_prefix.iter().any(|x| x.id == c.id));
    assert!(by_prefix
        .iter()
        .all(|x| x.hash.starts_with(&child.hash().0[..6])));
    for nothing in ["", "%", "zz", "_"] {
        assert!(store
            .candidates_by_hash_prefix(nothing)
            .await
            .unwrap()
            .is_empty());
    }

    let mut nan_err = measurement(2048, 90.0);
    nan_err.max_abs_err = Some(f64::NAN);
    nan_err.rel_l2 = Some(f64::INFINITY);
    let measurements = vec![measurement(1024, 40.0), nan_err];
    let mut result = evaluated(1.25);
    result.source_key = Some("key-2".into());
    store
        .record_result(ids[1], &result, &measurements)
        .await
        .unwrap();

    let c = store.candidate(ids[1]).await.unwrap().unwrap();
    assert_eq!(c.status, Some(Status::Evaluated));
    assert_eq!(c.gate, Some(Gate::Timing));
    assert_eq!(c.resources, result.resources);
    assert_eq!(c.fitness, Some(1.25));
    assert_eq!(c.eval_ms, Some(812.5));
    assert_eq!(c.source_key.as_deref(), Some("key-2"));
    assert!(c.evaluated_at.is_some());

    let got = store.measurements(ids[1]).await.unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].candidate_id, ids[1]);
    assert_eq!(got[0].shape, "BATCH=1,HEADS=8,SEQ=1024");
    assert_eq!(got[0].shape, shape_key(&shape(1024)));
    assert_eq!(got[0].measured.shape, shape(1024));
    assert_eq!(got[0].median_us, Some(40.0));
    assert_eq!(got[0].p20_us, Some(40.0 * 0.98));
    assert_eq!(got[0].p80_us, Some(40.0 * 1.03));
    assert_eq!(got[0].samples, measurements[0].samples);
    assert_eq!(got[0].tflops, Some(512.5));
    assert_eq!(got[0].peak_fraction, Some(0.52));
    assert_eq!(got[0].max_abs_err, Some(1.5e-3));
    assert_eq!(got[0].rel_l2, Some(2.0e-4));
    assert_eq!(got[1].shape, "BATCH=1,HEADS=8,SEQ=2048");
    assert_eq!(got[1].max_abs_err, None, "NaN is stored as NULL");
    assert_eq!(got[1].rel_l2, Some(f64::INFINITY));

    // A result is written once.
    let again = store
        .record_result(ids[1], &evaluated(2.0), &[])
        .await
        .unwrap_err();
    assert!(
        matches!(again, StoreError::AlreadyRecorded(id) if id == ids[1]),
        "{again}"
    );
    assert_eq!(
        store.candidate(ids[1]).await.unwrap().unwrap().fitness,
        Some(1.25)
    );
    assert!(matches!(
        store
            .record_result(CandidateId(999), &evaluated(1.0), &[])
            .await,
        Err(StoreError::NoSuchCandidate(CandidateId(999)))
    ));

    // A failed candidate without measurements; the source key is kept when not given.
    store
        .record_result(ids[0], &failed("compile_failed", "compile"), &[])
        .await
        .unwrap();
    let c0 = store.candidate(ids[0]).await.unwrap().unwrap();
    assert_eq!(c0.status, Some(Status::CompileFailed));
    assert_eq!(c0.detail.as_deref(), Some("compile failed"));
    assert_eq!(c0.fitness, None);
    assert!(store.measurements(ids[0]).await.unwrap().is_empty());

    assert_eq!(
        store
            .candidates(run)
            .await
            .unwrap()
            .iter()
            .map(|c| c.id)
            .collect::<Vec<_>>(),
        ids
    );
    store.close().await;
}

both_backends!(invalid_results_change_nothing);
async fn invalid_results_change_nothing(store: Store) {
    let run = store.create_run(&new_run("r")).await.unwrap();
    let ids = store
        .insert_candidates(run, &candidates(0..1, 0))
        .await
        .unwrap();
    let bad: Vec<(CandidateResult, Vec<_>)> = vec![
        (
            CandidateResult {
                fitness: Some(2.0),
                ..failed("compile_failed", "compile")
            },
            vec![],
        ),
        (evaluated(f64::INFINITY), vec![]),
        (
            evaluated(1.0),
            vec![measurement(1024, 1.0), measurement(1024, 2.0)],
        ),
        (evaluated(1.0), vec![measurement(1024, f64::NAN)]),
    ];
    for (result, ms) in &bad {
        let err = store.record_result(ids[0], result, ms).await.unwrap_err();
        assert!(matches!(err, StoreError::Invalid { .. }), "{err}");
    }
    let c = store.candidate(ids[0]).await.unwrap().unwrap();
    assert!(c.is_pending());
    assert!(store.measurements(ids[0]).await.unwrap().is_empty());

    // A regressed candidate may keep its fitness.
    let regressed = CandidateResult {
        fitness: Some(0.8),
        ..failed("regressed", "timing")
    };
    store
        .record_result(ids[0], &regressed, &[measurement(1024, 5.0)])
        .await
        .unwrap();
    assert_eq!(
        store.candidate(ids[0]).await.unwrap().unwrap().fitness,
        Some(0.8)
    );
    store.close().await;
}

both_backends!(unique_run_and_hash_is_enforced);
async fn unique_run_and_hash_is_enforced(store: Store) {
    let run = store.create_run(&new_run("a")).await.unwrap();
    let other = store.create_run(&new_run("b")).await.unwrap();
    let first = store
        .insert_candidates(run, &candidates(0..3, 0))
        .await
        .unwrap();
    assert_eq!(first.len(), 3);

    // A batch with one genome already in the run inserts nothing.
    let batch = candidates(2..6, 1);
    let err = store.insert_candidates(run, &batch).await.unwrap_err();
    match &err {
        StoreError::DuplicateCandidate { run: r, hash } => {
            assert_eq!(*r, run);
            assert_eq!(*hash, genome(2).hash().0);
        }
        e => panic!("expected DuplicateCandidate, got {e}"),
    }
    assert_eq!(store.candidates(run).await.unwrap().len(), 3);

    // Twice in one batch is also a duplicate.
    let twice = vec![
        NewCandidate::new(genome(10), 1, Origin::Mutation),
        NewCandidate::new(genome(10), 1, Origin::Mutation),
    ];
    assert!(matches!(
        store.insert_candidates(run, &twice).await,
        Err(StoreError::DuplicateCandidate { .. })
    ));
    assert_eq!(store.candidates(run).await.unwrap().len(), 3);

    // The same genome in another run is fine: uniqueness is per run.
    let ids = store
        .insert_candidates(other, &candidates(0..3, 0))
        .await
        .unwrap();
    assert!(
        ids.iter().all(|id| !first.contains(id)),
        "ids are unique across runs"
    );

    // The skipping variant inserts the new ones and reports the rest as None.
    let mut batch = candidates(2..6, 1);
    batch.push(NewCandidate::new(genome(5), 1, Origin::Mutation));
    let got = store
        .insert_candidates_skipping_seen(run, &batch)
        .await
        .unwrap();
    assert_eq!(got.len(), 5);
    assert_eq!(got[0], None);
    assert!(got[1].is_some() && got[2].is_some() && got[3].is_some());
    assert_eq!(got[4], None, "second copy in the batch is skipped");
    let seen = store.seen_hashes(run).await.unwrap();
    assert_eq!(seen.len(), 6);
    for i in 0..6 {
        assert!(seen.contains(&genome(i).hash().0));
    }
    assert!(matches!(
        store
            .insert_candidates(RunId(999), &candidates(0..1, 0))
            .await,
        Err(StoreError::NoSuchRun(_))
    ));
    store.close().await;
}

both_backends!(elites_are_by_fitness_then_id);
async fn elites_are_by_fitness_then_id(store: Store) {
    let run = store.create_run(&new_run("r")).await.unwrap();
    let ids = store
        .insert_candidates(run, &candidates(0..7, 0))
        .await
        .unwrap();
    // fitness per candidate; two ties at 2.0; a regressed one with a higher fitness and a
    // failed one must not be elites; an evaluated one without fitness neither.
    store
        .record_result(ids[0], &evaluated(1.0), &[])
        .await
        .unwrap();
    store
        .record_result(ids[1], &evaluated(2.0), &[])
        .await
        .unwrap();
    store
        .record_result(ids[2], &evaluated(3.0), &[])
        .await
        .unwrap();
    store
        .record_result(ids[3], &evaluated(2.0), &[])
        .await
        .unwrap();
    let regressed = CandidateResult {
        fitness: Some(9.0),
        ..failed("regressed", "timing")
    };
    store.record_result(ids[4], &regressed, &[]).await.unwrap();
    store
        .record_result(ids[5], &failed("incorrect", "correctness"), &[])
        .await
        .unwrap();
    let no_fitness = CandidateResult {
        fitness: None,
        ..evaluated(0.0)
    };
    store.record_result(ids[6], &no_fitness, &[]).await.unwrap();

    let elites = store.elites(run, 10).await.unwrap();
    let order: Vec<_> = elites.iter().map(|c| c.id).collect();
    assert_eq!(order, vec![ids[2], ids[1], ids[3], ids[0]]);
    let top2 = store.elites(run, 2).await.unwrap();
    assert_eq!(
        top2.iter().map(|c| c.id).collect::<Vec<_>>(),
        vec![ids[2], ids[1]]
    );
    assert!(store.elites(run, 0).await.unwrap().is_empty());

    let counts = store.status_counts(run).await.unwrap();
    assert_eq!(counts.get("evaluated"), Some(&5));
    assert_eq!(counts.get("regressed"), Some(&1));
    assert_eq!(counts.get("incorrect"), Some(&1));
    assert_eq!(counts.get(PENDING), None);

    let summaries = store.runs().await.unwrap();
    assert_eq!(summaries.len(), 1);
    assert_eq!(
        summaries[0].best_fitness,
        Some(3.0),
        "regressed 9.0 is not best"
    );
    assert_eq!(summaries[0].best_regressed, Some(9.0));
    assert_eq!(summaries[0].candidates, 7);
    store.close().await;
}

both_backends!(run_summaries_count_per_status);
async fn run_summaries_count_per_status(store: Store) {
    let a = store.create_run(&new_run("a")).await.unwrap();
    let b = store.create_run(&new_run("b")).await.unwrap();
    let ids = store
        .insert_candidates(a, &candidates(0..5, 0))
        .await
        .unwrap();
    store
        .record_result(ids[0], &evaluated(1.5), &[])
        .await
        .unwrap();
    store
        .record_result(ids[1], &failed("timed_out", "timing"), &[])
        .await
        .unwrap();
    store
        .save_generation(&GenerationRow {
            run_id: a,
            generation: 2,
            ..Default::default()
        })
        .await
        .unwrap();
    store.set_run_status(b, RunStatus::Finished).await.unwrap();

    let runs = store.runs().await.unwrap();
    assert_eq!(
        runs.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(),
        ["a", "b"]
    );
    let ra = &runs[0];
    assert_eq!(ra.id, a);
    assert_eq!(ra.candidates, 5);
    assert_eq!(ra.counts.get(PENDING), Some(&3));
    assert_eq!(ra.counts.get("evaluated"), Some(&1));
    assert_eq!(ra.counts.get("timed_out"), Some(&1));
    assert_eq!(ra.best_fitness, Some(1.5));
    assert_eq!(ra.last_generation, Some(2));
    assert_eq!(ra.status, RunStatus::Running);
    let rb = &runs[1];
    assert_eq!(rb.candidates, 0);
    assert!(rb.counts.is_empty());
    assert_eq!(rb.best_fitness, None);
    assert_eq!(rb.last_generation, None);
    assert_eq!(rb.status, RunStatus::Finished);
    assert_eq!(store.status_counts(a).await.unwrap().get(PENDING), Some(&3));

    // The summaries serialize for `--json`.
    let text = serde_json::to_string(&runs).unwrap();
    assert!(text.contains("\"status\":\"finished\""), "{text}");
    store.close().await;
}

both_backends!(baselines_round_trip);
async fn baselines_round_trip(store: Store) {
    let run = store.create_run(&new_run("r")).await.unwrap();
    let s1 = shape_key(&shape(1024));
    let s2 = shape_key(&shape(4096));
    store
        .set_baselines(
            run,
            &[
                (s2.clone(), 200.0, "import:torch_sdpa.json"),
                (s1.clone(), 50.0, "import:torch_sdpa.json"),
            ],
        )
        .await
        .unwrap();
    // Setting one again overwrites it and keeps the other.
    store
        .set_baselines(run, &[(s1.as_str(), 45.5, "genome:3faffb3e200ffd91")])
        .await
        .unwrap();
    let got = store.baselines(run).await.unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].shape, s1);
    assert_eq!(got[0].median_us, 45.5);
    assert_eq!(got[0].source, "genome:3faffb3e200ffd91");
    assert_eq!(got[0].run_id, run);
    assert_eq!(got[1].shape, s2);
    assert_eq!(got[1].median_us, 200.0);
    assert_eq!(got[1].source, "import:torch_sdpa.json");

    assert!(matches!(
        store.set_baselines(run, &[(s1.as_str(), 0.0, "x")]).await,
        Err(StoreError::Invalid { .. })
    ));
    assert!(matches!(
        store
            .set_baselines(RunId(77), &[(s1.as_str(), 1.0, "x")])
            .await,
        Err(StoreError::NoSuchRun(_))
    ));
    assert_eq!(store.baselines(run).await.unwrap()[0].median_us, 45.5);
    store.close().await;
}

both_backends!(generations_round_trip);
async fn generations_round_trip(store: Store) {
    let run = store.create_run(&new_run("r")).await.unwrap();
    assert!(store.latest_generation(run).await.unwrap().is_none());
    for g in [1u32, 0, 2] {
        store
            .save_generation(&GenerationRow {
                run_id: run,
                generation: g,
                elites: json!([format!("elite-{g}")]),
                insights: json!({"BLOCK_M": {"64": g}}),
                state: json!({"rng": g}),
                best_fitness: Some(1.0 + f64::from(g)),
                evaluated: u64::from(g) * 10,
            })
            .await
            .unwrap();
    }
    let gens = store.generations(run).await.unwrap();
    assert_eq!(
        gens.iter().map(|g| g.generation).collect::<Vec<_>>(),
        [0, 1, 2]
    );
    assert_eq!(gens[1].elites, json!(["elite-1"]));
    assert_eq!(gens[1].insights, json!({"BLOCK_M": {"64": 1}}));
    assert_eq!(gens[1].state, json!({"rng": 1}));
    assert_eq!(gens[1].best_fitness, Some(2.0));
    assert_eq!(gens[1].evaluated, 10);
    assert_eq!(gens[1].run_id, run);

    // Saving a generation again replaces it; with the state, atomically.
    let redo = GenerationRow {
        run_id: run,
        generation: 2,
        elites: json!(["redo"]),
        insights: json!({}),
        state: json!({"rng": 99}),
        best_fitness: None,
        evaluated: 3,
    };
    store
        .save_generation_and_state(&redo, &json!({"resume": true}))
        .await
        .unwrap();
    let latest = store.latest_generation(run).await.unwrap().unwrap();
    assert_eq!(latest.generation, 2);
    assert_eq!(latest.elites, json!(["redo"]));
    assert_eq!(latest.best_fitness, None);
    assert_eq!(latest.evaluated, 3);
    assert_eq!(store.generations(run).await.unwrap().len(), 3);
    assert_eq!(
        store.run_by_id(run).await.unwrap().unwrap().search_state,
        Some(json!({"resume": true}))
    );

    let missing = GenerationRow {
        run_id: RunId(404),
        ..redo.clone()
    };
    assert!(matches!(
        store.save_generation(&missing).await,
        Err(StoreError::NoSuchRun(_))
    ));
    assert!(matches!(
        store.save_generation_and_state(&missing, &json!({})).await,
        Err(StoreError::NoSuchRun(_))
    ));
    store.close().await;
}

both_backends!(profiles_round_trip_and_runs_delete_with_everything);
async fn profiles_round_trip_and_runs_delete_with_everything(store: Store) {
    let run = store.create_run(&new_run("r")).await.unwrap();
    let keep = store.create_run(&new_run("keep")).await.unwrap();
    let ids = store
        .insert_candidates(run, &candidates(0..2, 0))
        .await
        .unwrap();
    let kept = store
        .insert_candidates(keep, &candidates(0..1, 0))
        .await
        .unwrap();
    store
        .record_result(ids[0], &evaluated(1.1), &[measurement(1024, 3.0)])
        .await
        .unwrap();
    let p1 = store
        .insert_profile(
            ids[0],
            &NewProfile {
                tool: "ncu".into(),
                shape: Some(shape_key(&shape(1024))),
                metrics: json!({"sm__throughput.avg.pct_of_peak_sustained_elapsed": 71.5}),
            },
        )
        .await
        .unwrap();
    let p2 = store
        .insert_profile(
            ids[0],
            &NewProfile {
                tool: "nsys".into(),
                shape: None,
                metrics: json!({"kernels": 1}),
            },
        )
        .await
        .unwrap();
    let profiles = store.profiles(ids[0]).await.unwrap();
    assert_eq!(profiles.iter().map(|p| p.id).collect::<Vec<_>>(), [p1, p2]);
    assert_eq!(profiles[0].candidate_id, ids[0]);
    assert_eq!(profiles[0].tool, "ncu");
    assert_eq!(
        profiles[0].shape.as_deref(),
        Some("BATCH=1,HEADS=8,SEQ=1024")
    );
    assert_eq!(
        profiles[0].metrics,
        json!({"sm__throughput.avg.pct_of_peak_sustained_elapsed": 71.5})
    );
    assert_eq!(profiles[1].shape, None);
    assert!(store.profiles(ids[1]).await.unwrap().is_empty());
    assert!(matches!(
        store
            .insert_profile(
                CandidateId(12345),
                &NewProfile {
                    tool: "ncu".into(),
                    shape: None,
                    metrics: json!({})
                }
            )
            .await,
        Err(StoreError::NoSuchCandidate(_))
    ));

    store
        .set_baselines(run, &[("BATCH=1", 1.0, "import:x")])
        .await
        .unwrap();
    store.delete_run(run).await.unwrap();
    assert!(store.run_by_id(run).await.unwrap().is_none());
    assert!(store.candidate(ids[0]).await.unwrap().is_none());
    assert!(store.measurements(ids[0]).await.unwrap().is_empty());
    assert!(store.profiles(ids[0]).await.unwrap().is_empty());
    assert!(store.baselines(run).await.unwrap().is_empty());
    assert!(store.candidate(kept[0]).await.unwrap().is_some());
    assert!(matches!(
        store.delete_run(run).await,
        Err(StoreError::NoSuchRun(_))
    ));
    store.close().await;
}

both_backends!(meta_records_schema_version_and_creator);
async fn meta_records_schema_version_and_creator(store: Store) {
    let meta = store.meta().await.unwrap();
    assert_eq!(
        meta.get("schema_version").map(String::as_str),
        Some(evo_store::schema_version().to_string().as_str())
    );
    assert_eq!(
        meta.get("created_by").cloned(),
        Some(format!("evo {}", env!("CARGO_PKG_VERSION")))
    );
    store.close().await;
}

#[tokio::test]
async fn url_forms_create_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("plain.db");
    let url = dir.path().join("url.db");
    assert!(!plain.exists() && !url.exists());
    let a = Store::open(plain.to_str().unwrap()).await.unwrap();
    let b = Store::open(&format!("sqlite://{}", url.display()))
        .await
        .unwrap();
    assert!(plain.exists() && url.exists());
    assert_eq!(b.path(), url.as_path());
    assert_eq!(b.file(), Some(url.as_path()));
    a.create_run(&new_run("x")).await.unwrap();
    a.close().await;
    b.close().await;
    // Reopening keeps the data (migrations are not re-applied destructively).
    let a = Store::open(plain.to_str().unwrap()).await.unwrap();
    assert!(a.run("x").await.unwrap().is_some());
    a.close().await;

    let err = Store::open("mysql://localhost/evo").await.unwrap_err();
    assert!(matches!(err, StoreError::UnsupportedUrl { .. }), "{err}");
    assert!(err.to_string().contains("postgres://"), "{err}");
}

/// A PostgreSQL server that refuses the connection (nothing listens at the port) is said at
/// once, naming the host and port and not the password; the pool alone retried a refused
/// connection for its 30 s acquire timeout.
#[tokio::test]
async fn a_refused_postgres_connection_fails_at_once() {
    // A port nothing listens on: bound, then freed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://evo:s3cret@127.0.0.1:{port}/evo");
    let started = std::time::Instant::now();
    let err = Store::open(&url).await.unwrap_err();
    let waited = started.elapsed();
    assert!(matches!(err, StoreError::Refused { .. }), "{err}");
    assert!(
        waited < std::time::Duration::from_secs(5),
        "{waited:?}: {err}"
    );
    let said = err.to_string();
    assert!(said.contains(&format!("127.0.0.1:{port}")), "{said}");
    assert!(said.contains("refused"), "{said}");
    assert!(!said.contains("s3cret"), "{said}");
    // The read commands' open says the same.
    let err = Store::open_to_read(&url).await.unwrap_err();
    assert!(matches!(err, StoreError::Refused { .. }), "{err}");
}
