//! Crashes: a store dropped without closing, and a process killed with SIGKILL while it
//! writes. Nothing committed is lost, nothing is duplicated, no result is half-written.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use evo_store::{CandidateId, RunStatus, Store};

const SHAPES: [i64; 3] = [256, 1024, 4096];

#[tokio::test]
async fn pending_candidates_survive_a_store_that_was_never_closed() {
    let (_dir, path) = temp_db();
    let store = open(&path).await;
    let run = store.create_run(&new_run("crashy")).await.unwrap();
    let ids = store
        .insert_candidates(run, &candidates(0..10, 0))
        .await
        .unwrap();
    for (i, id) in ids.iter().take(5).enumerate() {
        let ms: Vec<_> = SHAPES
            .iter()
            .map(|&s| measurement(s, 10.0 + i as f64))
            .collect();
        store
            .record_result(*id, &evaluated(1.0 + i as f64), &ms)
            .await
            .unwrap();
    }
    // Leak it: no close, no checkpoint, connections never finalized (as in a crash).
    std::mem::forget(store);

    let store = open(&path).await;
    let run_row = store.run("crashy").await.unwrap().unwrap();
    assert_eq!(
        run_row.status,
        RunStatus::Running,
        "a crashed run still reads as running"
    );
    let all = store.candidates(run).await.unwrap();
    assert_eq!(all.len(), 10, "nothing lost, nothing duplicated");
    assert_eq!(store.seen_hashes(run).await.unwrap().len(), 10);
    let pending: Vec<CandidateId> = store
        .pending_candidates(run)
        .await
        .unwrap()
        .iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(
        pending,
        ids[5..].to_vec(),
        "the unrecorded half, in id order"
    );
    for (i, id) in ids.iter().take(5).enumerate() {
        let c = store.candidate(*id).await.unwrap().unwrap();
        assert_eq!(c.fitness, Some(1.0 + i as f64));
        assert_eq!(store.measurements(*id).await.unwrap().len(), SHAPES.len());
    }
    // Resuming: the pending ones get their results, and then none is pending.
    for id in &pending {
        store
            .record_result(*id, &evaluated(0.5), &[])
            .await
            .unwrap();
    }
    assert!(store.pending_candidates(run).await.unwrap().is_empty());
    store.close().await;
}

const CHILD_ENV: &str = "EVO_STORE_CRASH_CHILD_DB";
const BATCH: i64 = 10;

/// Run by `sigkill_loses_nothing_committed` in a child process: inserts candidates in
/// batches and records their results one by one, forever, printing `INSERTED <n>` and
/// `COMMITTED <id>` after each commit, until it is killed.
#[tokio::test]
#[ignore = "helper process of sigkill_loses_nothing_committed"]
async fn crash_child() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    let store = Store::open(&path).await.unwrap();
    let run = store.create_run(&new_run("killed")).await.unwrap();
    let mut recorded = 0usize;
    // Bounded, in case the parent dies without killing it.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    for batch in 0.. {
        if std::time::Instant::now() > deadline {
            break;
        }
        let ids = store
            .insert_candidates(run, &candidates(batch * BATCH..(batch + 1) * BATCH, 0))
            .await
            .unwrap();
        println!("INSERTED {}", ids.len());
        for id in ids {
            let ms: Vec<_> = SHAPES.iter().map(|&s| measurement(s, 5.0)).collect();
            store
                .record_result(id, &evaluated(1.0 + id.0 as f64), &ms)
                .await
                .unwrap();
            println!("COMMITTED {}", id.0);
            recorded += 1;
            if recorded == 25 {
                println!("READY");
            }
        }
    }
}

/// Kills (SIGKILL) and reaps the child when dropped, so a failing test leaves no process.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn after<'a>(line: &'a str, tag: &str) -> Option<&'a str> {
    line.find(tag).map(|i| line[i + tag.len()..].trim())
}

#[tokio::test]
async fn sigkill_loses_nothing_committed() {
    let (_dir, path) = temp_db();
    let mut child = Killed(
        Command::new(std::env::current_exe().unwrap())
            .args([
                "crash_child",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, &path)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut lines = BufReader::new(child.0.stdout.take().unwrap()).lines();
    let mut committed: Vec<i64> = Vec::new();
    let mut inserted = 0usize;
    let mut ready = false;
    let mut parse = |line: &str, committed: &mut Vec<i64>| {
        // libtest may print `test crash_child ... ` before the first line.
        if let Some(n) = after(line, "INSERTED ") {
            inserted += n.parse::<usize>().unwrap();
        } else if let Some(id) = after(line, "COMMITTED ") {
            committed.push(id.parse().unwrap());
        }
    };
    for line in lines.by_ref() {
        let line = line.unwrap();
        parse(&line, &mut committed);
        if line.ends_with("READY") {
            ready = true;
            break;
        }
    }
    assert!(ready, "the child stopped before it was ready");
    drop(child); // SIGKILL, while it is writing
    for line in lines {
        parse(&line.unwrap(), &mut committed);
    }
    let inserted = inserted;

    let store = open(&path).await;
    let run = store.run("killed").await.unwrap().unwrap().id;
    let all = store.candidates(run).await.unwrap();
    // The batch being inserted at the kill may have committed before it was reported.
    assert!(
        all.len() == inserted || all.len() == inserted + BATCH as usize,
        "{} candidates, {inserted} reported inserted",
        all.len()
    );
    assert_eq!(all.len() % BATCH as usize, 0, "a batch was half inserted");
    assert_eq!(
        store.seen_hashes(run).await.unwrap().len(),
        all.len(),
        "duplicates"
    );
    let recorded: Vec<i64> = all
        .iter()
        .filter(|c| !c.is_pending())
        .map(|c| c.id.0)
        .collect();
    for id in &committed {
        assert!(recorded.contains(id), "committed result of {id} was lost");
    }
    // Every result is whole: recorded ones have all their measurements, pending none.
    for c in &all {
        let n = store.measurements(c.id).await.unwrap().len();
        if c.is_pending() {
            assert_eq!(n, 0, "pending candidate {} has measurements", c.id);
        } else {
            assert_eq!(n, SHAPES.len(), "candidate {} has a partial result", c.id);
            assert_eq!(c.fitness, Some(1.0 + c.id.0 as f64));
        }
    }
    // Results were recorded in id order, so the pending ones are exactly the tail.
    let pending: Vec<i64> = store
        .pending_candidates(run)
        .await
        .unwrap()
        .iter()
        .map(|c| c.id.0)
        .collect();
    let tail: Vec<i64> = all.iter().map(|c| c.id.0).skip(recorded.len()).collect();
    assert_eq!(pending, tail);
    store.close().await;
}
