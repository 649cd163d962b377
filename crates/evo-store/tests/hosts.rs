//! Several hosts on one run: exclusive claims, lease expiry and heartbeats, results
//! written only under a held lease, and generation advances that exactly one host wins.
//! Each test runs on SQLite and on PostgreSQL (EVO_TEST_PG_URL).

#[macro_use]
mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::*;
use evo_core::{Gate, Status};
use evo_store::{
    Advance, CandidateResult, GenerationRow, NewCandidate, NewHost, Origin, RunStatus, Store,
    StoreError,
};
use serde_json::json;

fn host(id: &str) -> NewHost {
    NewHost {
        id: id.into(),
        hostname: "h".into(),
        pid: 1,
        device: None,
        gpus: 0,
        evaluator: "replay:x".into(),
    }
}

fn failed() -> CandidateResult {
    CandidateResult {
        gate: Some(Gate::Compile),
        ..CandidateResult::new(Status::CompileFailed)
    }
}

both_backends!(claims_are_exclusive_under_concurrency);
async fn claims_are_exclusive_under_concurrency(store: Store) {
    let run = store.create_run(&new_run("r")).await.unwrap();
    let rows: Vec<NewCandidate> = (0..60)
        .map(|i| NewCandidate::new(genome(i), 0, Origin::Random))
        .collect();
    let ids = store.insert_candidates(run, &rows).await.unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    for h in 0..4 {
        let store = store.clone();
        tasks.spawn(async move {
            let me = format!("host{h}");
            store.register_host(run, &host(&me)).await.unwrap();
            let mut mine = Vec::new();
            loop {
                let got = store
                    .claim_candidates(run, &me, 3, Duration::from_secs(60))
                    .await
                    .unwrap();
                if got.is_empty() {
                    break;
                }
                for c in got {
                    store
                        .record_claimed_result(c.id, &me, &failed(), &[])
                        .await
                        .unwrap();
                    mine.push(c.id);
                }
            }
            mine
        });
    }
    let mut all = Vec::new();
    while let Some(r) = tasks.join_next().await {
        all.extend(r.unwrap());
    }
    let unique: BTreeSet<_> = all.iter().copied().collect();
    assert_eq!(all.len(), 60, "each candidate claimed and recorded once");
    assert_eq!(unique, ids.iter().copied().collect());
    for c in store.candidates(run).await.unwrap() {
        assert_eq!(c.claims, 1, "{c:?}");
        assert!(c.evaluated_by.unwrap().starts_with("host"));
    }
    assert_eq!(store.hosts(run).await.unwrap().len(), 4);
    store.close().await;
}

both_backends!(expired_leases_go_back_to_the_queue);
async fn expired_leases_go_back_to_the_queue(store: Store) {
    let run = store.create_run(&new_run("r")).await.unwrap();
    let rows: Vec<NewCandidate> = (0..3)
        .map(|i| NewCandidate::new(genome(i), 0, Origin::Random))
        .collect();
    store.insert_candidates(run, &rows).await.unwrap();
    let short = Duration::from_millis(300);
    let a = store.claim_candidates(run, "a", 2, short).await.unwrap();
    assert_eq!(a.len(), 2);
    // b gets only the third while a's leases hold.
    let b = store.claim_candidates(run, "b", 5, short).await.unwrap();
    assert_eq!(b.len(), 1);
    assert!(b[0].id > a[1].id, "oldest first");
    // a's heartbeat extends both of its leases; b sends none.
    assert_eq!(
        store.heartbeat("a", Duration::from_secs(5)).await.unwrap(),
        2
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    // b's lease expired: its candidate goes to c; a's are still held.
    assert_eq!(
        store
            .claim_candidates(run, "c", 5, short)
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(store
        .claim_candidates(run, "d", 5, short)
        .await
        .unwrap()
        .is_empty());
    // b's late result is refused: c holds that candidate now.
    let err = store
        .record_claimed_result(b[0].id, "b", &failed(), &[])
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::LeaseLost { .. }), "{err}");
    store
        .record_claimed_result(b[0].id, "c", &failed(), &[])
        .await
        .unwrap();
    let c = store.candidate(b[0].id).await.unwrap().unwrap();
    assert_eq!(c.claims, 2);
    assert_eq!(c.evaluated_by.as_deref(), Some("c"));
    // Recording twice is refused whoever asks.
    assert!(matches!(
        store
            .record_claimed_result(b[0].id, "c", &failed(), &[])
            .await,
        Err(StoreError::AlreadyRecorded(_))
    ));
    // a releases its leases (a clean stop): they are claimable at once.
    assert_eq!(store.release_leases("a").await.unwrap(), 2);
    let d = store.claim_candidates(run, "d", 5, short).await.unwrap();
    assert_eq!(
        d.iter().map(|c| c.id).collect::<Vec<_>>(),
        a.iter().map(|c| c.id).collect::<Vec<_>>()
    );
    store.close().await;
}

fn generation(run: evo_store::RunId, g: u32) -> GenerationRow {
    GenerationRow {
        run_id: run,
        generation: g,
        elites: json!([]),
        insights: json!({}),
        state: json!({"generation": g}),
        best_fitness: None,
        evaluated: 0,
    }
}

both_backends!(exactly_one_host_advances_a_generation);
async fn exactly_one_host_advances_a_generation(store: Store) {
    let run = store.create_run(&new_run("r")).await.unwrap();
    // Generation 0 proposed by whichever of 4 racing hosts wins.
    let proposals: Vec<NewCandidate> = (0..5)
        .map(|i| NewCandidate::new(genome(i), 0, Origin::Random))
        .collect();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let (store, proposals) = (store.clone(), proposals.clone());
        tasks.spawn(async move {
            let state = json!({"generation": 0});
            store
                .advance_generation(
                    run,
                    &Advance {
                        expected_latest: None,
                        completed: None,
                        next_generation: 0,
                        proposals: &proposals,
                        search_state: &state,
                        finish: false,
                        overlap: 0,
                    },
                )
                .await
                .unwrap()
        });
    }
    let mut wins = 0;
    while let Some(r) = tasks.join_next().await {
        wins += usize::from(r.unwrap());
    }
    assert_eq!(wins, 1);
    assert_eq!(store.candidates(run).await.unwrap().len(), 5);

    // Not while anything is pending.
    let next: Vec<NewCandidate> = (5..8)
        .map(|i| NewCandidate::new(genome(i), 1, Origin::Mutation))
        .collect();
    let g0 = generation(run, 0);
    let state = json!({"generation": 1});
    let advance = Advance {
        expected_latest: None,
        completed: Some(&g0),
        next_generation: 1,
        proposals: &next,
        search_state: &state,
        finish: false,
        overlap: 0,
    };
    assert!(!store.advance_generation(run, &advance).await.unwrap());
    for c in store.pending_candidates(run).await.unwrap() {
        store.record_result(c.id, &failed(), &[]).await.unwrap();
    }
    assert!(store.advance_generation(run, &advance).await.unwrap());
    // A host that saw the old state loses.
    assert!(!store.advance_generation(run, &advance).await.unwrap());
    assert_eq!(
        store
            .latest_generation(run)
            .await
            .unwrap()
            .unwrap()
            .generation,
        0
    );
    assert_eq!(store.candidates(run).await.unwrap().len(), 8);
    assert_eq!(
        store.run_by_id(run).await.unwrap().unwrap().search_state,
        Some(json!({"generation": 1}))
    );

    // The last generation finishes the run.
    for c in store.pending_candidates(run).await.unwrap() {
        store.record_result(c.id, &failed(), &[]).await.unwrap();
    }
    let g1 = generation(run, 1);
    assert!(store
        .advance_generation(
            run,
            &Advance {
                expected_latest: Some(0),
                completed: Some(&g1),
                next_generation: 2,
                proposals: &[],
                search_state: &state,
                finish: true,
                overlap: 0,
            },
        )
        .await
        .unwrap());
    assert_eq!(
        store.run_by_id(run).await.unwrap().unwrap().status,
        RunStatus::Finished
    );
    store.close().await;
}

both_backends!(an_overlapping_advance_tolerates_only_leased_candidates_of_its_generation);
async fn an_overlapping_advance_tolerates_only_leased_candidates_of_its_generation(store: Store) {
    let run = store.create_run(&new_run("r")).await.unwrap();
    let first: Vec<NewCandidate> = (0..5)
        .map(|i| NewCandidate::new(genome(i), 0, Origin::Random))
        .collect();
    let state = json!({});
    let propose = |completed, next_generation, proposals, finish, overlap| Advance {
        expected_latest: None,
        completed,
        next_generation,
        proposals,
        search_state: &state,
        finish,
        overlap,
    };
    assert!(store
        .advance_generation(run, &propose(None, 0, &first, false, 0))
        .await
        .unwrap());
    // Two candidates in evaluation (leased), one unclaimed, two done.
    store.register_host(run, &host("host-a")).await.unwrap();
    let held = store
        .claim_candidates(run, "host-a", 2, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(held.len(), 2);
    let pending = store.pending_candidates(run).await.unwrap();
    for c in pending
        .iter()
        .filter(|c| !held.iter().any(|h| h.id == c.id))
        .take(2)
    {
        store.record_result(c.id, &failed(), &[]).await.unwrap();
    }
    let next: Vec<NewCandidate> = (5..8)
        .map(|i| NewCandidate::new(genome(i), 1, Origin::Mutation))
        .collect();
    let g0 = generation(run, 0);
    // An unclaimed candidate is never overlapped.
    assert!(!store
        .advance_generation(run, &propose(Some(&g0), 1, &next, false, 8))
        .await
        .unwrap());
    let last = store.pending_candidates(run).await.unwrap();
    let unclaimed = last
        .iter()
        .find(|c| !held.iter().any(|h| h.id == c.id))
        .unwrap();
    store
        .record_result(unclaimed.id, &failed(), &[])
        .await
        .unwrap();
    // Two leased candidates pending: not within an overlap of one, not for an advance
    // that finishes the run, and not without overlap.
    for (finish, overlap) in [(false, 1), (true, 2), (false, 0)] {
        assert!(!store
            .advance_generation(run, &propose(Some(&g0), 1, &next, finish, overlap))
            .await
            .unwrap());
    }
    assert!(store
        .advance_generation(run, &propose(Some(&g0), 1, &next, false, 2))
        .await
        .unwrap());
    assert_eq!(store.candidates(run).await.unwrap().len(), 8);
    // Generation 0's last two still pending: generation 1 cannot be completed over them.
    for c in store.pending_candidates(run).await.unwrap() {
        if c.generation == 1 {
            store.record_result(c.id, &failed(), &[]).await.unwrap();
        }
    }
    let g1 = generation(run, 1);
    let after = Advance {
        expected_latest: Some(0),
        ..propose(Some(&g1), 2, &[], false, 8)
    };
    assert!(!store.advance_generation(run, &after).await.unwrap());
    store.close().await;
}

both_backends!(an_overlapping_advance_refuses_a_lapsed_lease);
async fn an_overlapping_advance_refuses_a_lapsed_lease(store: Store) {
    let run = store.create_run(&new_run("r")).await.unwrap();
    let first: Vec<NewCandidate> = (0..2)
        .map(|i| NewCandidate::new(genome(i), 0, Origin::Random))
        .collect();
    let state = json!({});
    let g0 = generation(run, 0);
    let next = [NewCandidate::new(genome(5), 1, Origin::Mutation)];
    let advance = |expected_latest, completed, next_generation, proposals| Advance {
        expected_latest,
        completed,
        next_generation,
        proposals,
        search_state: &state,
        finish: false,
        overlap: 1,
    };
    assert!(store
        .advance_generation(run, &advance(None, None, 0, &first))
        .await
        .unwrap());
    store.register_host(run, &host("host-a")).await.unwrap();
    let done = store
        .claim_candidates(run, "host-a", 1, Duration::from_secs(60))
        .await
        .unwrap();
    store
        .record_result(done[0].id, &failed(), &[])
        .await
        .unwrap();
    // The other one's holder stopped renewing its lease: nobody is evaluating it.
    store
        .claim_candidates(run, "host-a", 1, Duration::from_millis(1))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(!store
        .advance_generation(run, &advance(None, Some(&g0), 1, &next))
        .await
        .unwrap());
    // Claimed again under a live lease, it may be overlapped.
    let again = store
        .claim_candidates(run, "host-a", 1, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(again.len(), 1);
    assert!(store
        .advance_generation(run, &advance(None, Some(&g0), 1, &next))
        .await
        .unwrap());
    store.close().await;
}

both_backends!(hosts_register_and_finish);
async fn hosts_register_and_finish(store: Store) {
    let run = store.create_run(&new_run("r")).await.unwrap();
    store.register_host(run, &host("a")).await.unwrap();
    store
        .insert_candidates(run, &[NewCandidate::new(genome(0), 0, Origin::Random)])
        .await
        .unwrap();
    assert_eq!(
        store
            .claim_candidates(run, "a", 1, Duration::from_secs(60))
            .await
            .unwrap()
            .len(),
        1
    );
    store
        .finish_host("a", 7, 12.5, &json!({"gpu_busy": [0.5]}))
        .await
        .unwrap();
    let hosts = store.hosts(run).await.unwrap();
    assert_eq!(hosts.len(), 1);
    assert_eq!(hosts[0].evaluated, 7);
    assert_eq!(hosts[0].db_ms, 12.5);
    assert!(hosts[0].finished_at.is_some());
    assert_eq!(hosts[0].stats, Some(json!({"gpu_busy": [0.5]})));
    // Finishing released the lease.
    assert_eq!(
        store
            .claim_candidates(run, "b", 1, Duration::from_secs(60))
            .await
            .unwrap()
            .len(),
        1
    );
    store.close().await;
}

both_backends!(null_then_real_floats_in_one_statement);
/// The same statement with a NULL float first and a real one after (a prepared
/// statement typed by the NULL must still take the value).
async fn null_then_real_floats_in_one_statement(store: Store) {
    let run = store.create_run(&new_run("r")).await.unwrap();
    let rows: Vec<NewCandidate> = (0..2)
        .map(|i| NewCandidate::new(genome(i), 0, Origin::Random))
        .collect();
    let ids = store.insert_candidates(run, &rows).await.unwrap();
    store.record_result(ids[0], &failed(), &[]).await.unwrap();
    let ok = CandidateResult {
        fitness: Some(1.25),
        eval_ms: Some(3.5),
        ..CandidateResult::new(Status::Evaluated)
    };
    store.record_result(ids[1], &ok, &[]).await.unwrap();
    let c = store.candidate(ids[1]).await.unwrap().unwrap();
    assert_eq!((c.fitness, c.eval_ms), (Some(1.25), Some(3.5)));
    assert_eq!(
        store.candidate(ids[0]).await.unwrap().unwrap().fitness,
        None
    );
    store.close().await;
}
