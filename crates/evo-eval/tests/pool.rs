//! The watchdog and worker replacement, with fake workers (shell scripts) that answer,
//! hang, die, or never start. No GPU needed.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use evo_core::config::TimeoutConfig;
use evo_eval::pool::{Pool, WorkerCommand};
use evo_eval::protocol::{CorrectnessPlan, Cubin, Job};
use evo_eval::Status;

/// A fake worker: says ready, then for each request behaves as `mode` says. Every
/// start appends a line to `starts.log` next to the script.
fn fake(dir: &Path, mode: &str) -> WorkerCommand {
    let script = dir.join(format!("fake-{mode}.sh"));
    let log = dir.join("starts.log");
    let body = format!(
        r#"#!/usr/bin/env bash
echo start >> {log:?}
echo '{{"type":"ready","pid":'$$',"device":null}}'
while read -r line; do
  id=$(printf '%s' "$line" | grep -o '"id":[0-9]*' | head -1 | cut -d: -f2)
  case "{mode}" in
    ok) echo '{{"type":"result","id":'$id',"status":"evaluated","gate":null,"detail":"fine","shapes":[],"kernels":[],"elapsed_ms":1.0}}' ;;
    hang) sleep 1000 ;;
    die) echo "illegal memory access, giving up" >&2; exit 9 ;;
    crash) echo '{{"type":"result","id":'$id',"status":"crashed","gate":null,"detail":"CUDA_ERROR_ILLEGAL_ADDRESS","shapes":[],"kernels":[],"elapsed_ms":1.0}}'; exit 4 ;;
    garbage) echo 'this is not json' ;;
  esac
done
"#
    );
    std::fs::write(&script, body).unwrap();
    WorkerCommand {
        program: PathBuf::from("bash"),
        args: vec![script.display().to_string()],
    }
}

fn job(id: u64) -> Job {
    Job {
        id,
        problem: "gemm".into(),
        label: format!("job{id}"),
        cubin: Cubin(vec![1, 2, 3]),
        kernels: vec!["gemm".into()],
        shapes: vec![],
        correctness: CorrectnessPlan {
            seeds: vec![1],
            adversarial: false,
            repeat_check: false,
            guard_bytes: 16,
            tolerance: vec![],
            end_to_end: None,
        },
        timing: None,
        batch_seed: None,
        contiguous: vec![],
    }
}

fn quick() -> TimeoutConfig {
    TimeoutConfig {
        startup_s: 5.0,
        job_base_s: 1.0,
        per_shape_s: 0.0,
        per_timed_shape_s: 0.0,
    }
}

fn starts(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("starts.log"))
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

#[tokio::test]
async fn answers_come_back_and_the_worker_is_reused() {
    let dir = tempfile::tempdir().unwrap();
    let pool = Pool::new(vec![(0, fake(dir.path(), "ok"))], quick());
    for id in 1..=3 {
        let r = pool.evaluate(job(id)).await;
        assert_eq!(
            (r.id, r.status, r.detail.as_str()),
            (id, Status::Evaluated, "fine")
        );
    }
    assert_eq!(starts(dir.path()), 1);
    pool.shutdown().await;
}

#[tokio::test]
async fn a_hanging_worker_times_out_and_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let pool = Pool::new(vec![(0, fake(dir.path(), "hang"))], quick());
    let t = Instant::now();
    let r = pool.evaluate(job(1)).await;
    assert_eq!(r.status, Status::TimedOut, "{}", r.detail);
    assert!(r.detail.contains("killed"));
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "watchdog took {:?}",
        t.elapsed()
    );
    let r = pool.evaluate(job(2)).await;
    assert_eq!(r.status, Status::TimedOut);
    assert_eq!(starts(dir.path()), 2, "a new worker for the second job");
}

#[tokio::test]
async fn a_dying_worker_is_crashed_with_its_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let pool = Pool::new(vec![(0, fake(dir.path(), "die"))], quick());
    let r = pool.evaluate(job(1)).await;
    assert_eq!(r.status, Status::Crashed);
    assert!(r.detail.contains("exit status: 9"), "{}", r.detail);
    assert!(r.detail.contains("illegal memory access"), "{}", r.detail);
    let r = pool.evaluate(job(2)).await;
    assert_eq!(r.status, Status::Crashed);
    assert_eq!(starts(dir.path()), 2);
}

#[tokio::test]
async fn a_reported_crash_replaces_the_worker() {
    let dir = tempfile::tempdir().unwrap();
    let pool = Pool::new(vec![(0, fake(dir.path(), "crash"))], quick());
    for id in 1..=2 {
        let r = pool.evaluate(job(id)).await;
        assert_eq!(r.status, Status::Crashed);
        assert!(r.detail.contains("ILLEGAL_ADDRESS"));
    }
    assert_eq!(starts(dir.path()), 2);
}

#[tokio::test]
async fn garbage_answers_and_failed_starts_are_crashes() {
    let dir = tempfile::tempdir().unwrap();
    let pool = Pool::new(vec![(0, fake(dir.path(), "garbage"))], quick());
    let r = pool.evaluate(job(1)).await;
    assert_eq!(r.status, Status::Crashed);
    assert!(r.detail.contains("this is not json"), "{}", r.detail);

    let missing = WorkerCommand {
        program: PathBuf::from("/nonexistent/evo"),
        args: vec![],
    };
    let pool = Pool::new(vec![(0, missing)], quick());
    let r = pool.evaluate(job(1)).await;
    assert_eq!(r.status, Status::Crashed);
    assert!(r.detail.contains("did not start"), "{}", r.detail);

    let silent = WorkerCommand {
        program: PathBuf::from("bash"),
        args: vec!["-c".into(), "echo no gpu here >&2; exit 3".into()],
    };
    let pool = Pool::new(vec![(0, silent)], quick());
    let r = pool.evaluate(job(1)).await;
    assert!(
        r.detail.contains("before it was ready") && r.detail.contains("no gpu here"),
        "{}",
        r.detail
    );
}

#[tokio::test]
async fn several_workers_run_in_parallel() {
    let dir = tempfile::tempdir().unwrap();
    let pool = std::sync::Arc::new(Pool::new(
        vec![(0, fake(dir.path(), "hang")), (1, fake(dir.path(), "hang"))],
        quick(),
    ));
    let t = Instant::now();
    let (a, b) = tokio::join!(pool.evaluate(job(1)), pool.evaluate(job(2)));
    assert_eq!((a.status, b.status), (Status::TimedOut, Status::TimedOut));
    // Two 1 s deadlines in parallel, not in series.
    assert!(
        t.elapsed() < Duration::from_millis(1900),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(pool.starts().await, vec![1, 1]);
}

/// Workers live in their own process group, so a SIGINT to the orchestrator's group
/// (Ctrl-C in a terminal) does not reach them.
#[tokio::test]
async fn workers_have_their_own_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let pgid_file = dir.path().join("pgid");
    let script = dir.path().join("pgid.sh");
    std::fs::write(
        &script,
        format!(
            "#!/usr/bin/env bash\nps -o pgid= -p $$ | tr -d ' ' > {pgid_file:?}\necho '{{\"type\":\"ready\",\"pid\":'$$',\"device\":null}}'\nwhile read -r line; do id=$(printf '%s' \"$line\" | grep -o '\"id\":[0-9]*' | head -1 | cut -d: -f2); echo '{{\"type\":\"result\",\"id\":'$id',\"status\":\"evaluated\",\"gate\":null,\"detail\":\"\",\"shapes\":[],\"kernels\":[],\"elapsed_ms\":1.0}}'; done\n"
        ),
    )
    .unwrap();
    let pool = Pool::new(
        vec![(
            0,
            WorkerCommand {
                program: PathBuf::from("bash"),
                args: vec![script.display().to_string()],
            },
        )],
        quick(),
    );
    assert_eq!(pool.evaluate(job(1)).await.status, Status::Evaluated);
    let ours = std::process::Command::new("ps")
        .args(["-o", "pgid=", "-p", &std::process::id().to_string()])
        .output()
        .unwrap();
    let ours = String::from_utf8_lossy(&ours.stdout).trim().to_string();
    let theirs = std::fs::read_to_string(&pgid_file)
        .unwrap()
        .trim()
        .to_string();
    assert!(!theirs.is_empty() && !ours.is_empty());
    assert_ne!(
        theirs, ours,
        "the worker shares the orchestrator's process group"
    );
    pool.shutdown().await;
}
