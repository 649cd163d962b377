//! The database file: WAL, a second connection, and the files evo must refuse untouched.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use evo_store::{Store, StoreError};
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{ConnectOptions, Connection};

async fn raw(path: &Path) -> sqlx::SqliteConnection {
    SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .connect()
        .await
        .expect("raw connection")
}

fn side_file(path: &Path, suffix: &str) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(suffix);
    PathBuf::from(p)
}

/// The database and its WAL (if any): what a refused open must not change.
#[derive(PartialEq)]
struct Snapshot {
    db: Vec<u8>,
    wal: Option<Vec<u8>>,
    shm: bool,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "db: {} bytes, wal: {:?} bytes, shm: {}",
            self.db.len(),
            self.wal.as_ref().map(Vec::len),
            self.shm
        )
    }
}

fn snapshot(path: &Path) -> Snapshot {
    Snapshot {
        db: std::fs::read(path).unwrap(),
        wal: std::fs::read(side_file(path, "-wal")).ok(),
        shm: side_file(path, "-shm").exists(),
    }
}

/// Asserts `path` is as in `before`, naming the first changed byte if not.
fn assert_unchanged(path: &Path, before: &Snapshot) {
    let after = snapshot(path);
    if after != *before {
        let first = after.db.iter().zip(&before.db).position(|(a, b)| a != b);
        panic!(
            "{} was modified: before {before:?}, after {after:?}, first changed byte {first:?}",
            path.display()
        );
    }
}

#[tokio::test]
async fn wal_mode_is_on() {
    let (_dir, path) = temp_db();
    let store = open(&path).await;
    store.create_run(&new_run("r")).await.unwrap();
    // While the store is open, a committed write lives in the WAL file.
    assert!(
        side_file(&path, "-wal").exists(),
        "no -wal file next to the database"
    );
    store.close().await;
    // WAL is a property of the file: a plain connection that asks for nothing sees it.
    let mut conn = raw(&path).await;
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(mode, "wal");
    conn.close().await.unwrap();
}

/// Closing a store folds the log into the file even while another store of the same file
/// (another evo process's) stays open: the file copied alone holds every committed write.
#[tokio::test]
async fn close_leaves_the_file_complete_without_its_log() {
    let (dir, path) = temp_db();
    let a = open(&path).await;
    let b = open(&path).await;
    let run = a.create_run(&new_run("copied")).await.unwrap();
    a.insert_candidates(run, &candidates(0..40, 0))
        .await
        .unwrap();
    a.close().await;
    let copy = dir.path().join("copy.db");
    std::fs::copy(&path, &copy).unwrap();
    assert!(!side_file(&copy, "-wal").exists());
    let c = open(&copy).await;
    let seen = c
        .run("copied")
        .await
        .unwrap()
        .expect("the copy holds the run");
    assert_eq!(c.candidates(seen.id).await.unwrap().len(), 40);
    c.close().await;
    b.close().await;
}

/// When `close` returns, no `-wal` or `-shm` is left beside the file, however the pool's
/// tasks interleave (a process that exits right after, as the CLI does on a refused resume,
/// leaves nothing). Many rounds on a multi-threaded runtime: the race this guards against
/// (connections closing at the same moment, each leaving the log to the other) is a matter
/// of timing; before the fix a round between the 12th and the 133rd left the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn close_leaves_no_log_beside_the_file() {
    let (_dir, path) = temp_db();
    for round in 0..300 {
        let store = open(&path).await;
        // Reads and a write on several connections at once, as a run's setup does.
        let name = format!("r{round}");
        store.create_run(&new_run(&name)).await.unwrap();
        let (a, b, c) = tokio::join!(store.run(&name), store.runs(), store.run("none"));
        assert!(a.unwrap().is_some() && !b.unwrap().is_empty() && c.unwrap().is_none());
        store.close().await;
        for side in ["-wal", "-shm"] {
            assert!(
                !side_file(&path, side).exists(),
                "round {round}: {side} left beside the closed database"
            );
        }
    }
}

#[tokio::test]
async fn a_second_connection_sees_committed_data() {
    let (_dir, path) = temp_db();
    let a = open(&path).await;
    let b = open(&path).await;
    let run = a.create_run(&new_run("shared")).await.unwrap();
    let ids = a
        .insert_candidates(run, &candidates(0..4, 0))
        .await
        .unwrap();

    let seen = b.run("shared").await.unwrap().expect("b sees a's run");
    assert_eq!(seen.id, run);
    assert_eq!(b.pending_candidates(run).await.unwrap().len(), 4);
    b.record_result(ids[0], &evaluated(1.5), &[measurement(1024, 2.0)])
        .await
        .unwrap();
    assert_eq!(
        a.candidate(ids[0]).await.unwrap().unwrap().fitness,
        Some(1.5)
    );
    assert_eq!(a.measurements(ids[0]).await.unwrap().len(), 1);

    // Both write at once: the busy timeout and IMMEDIATE transactions serialize them.
    let (ra, rb) = tokio::join!(
        async {
            for (i, id) in ids[1..].iter().enumerate().filter(|(i, _)| i % 2 == 0) {
                a.record_result(*id, &evaluated(1.0 + i as f64), &[measurement(64, 1.0)])
                    .await?;
            }
            a.insert_candidates(run, &candidates(100..150, 1)).await
        },
        async {
            for (i, id) in ids[1..].iter().enumerate().filter(|(i, _)| i % 2 == 1) {
                b.record_result(*id, &evaluated(1.0 + i as f64), &[measurement(64, 1.0)])
                    .await?;
            }
            b.insert_candidates(run, &candidates(200..250, 1)).await
        }
    );
    ra.unwrap();
    rb.unwrap();
    assert_eq!(a.candidates(run).await.unwrap().len(), 104);
    assert_eq!(b.pending_candidates(run).await.unwrap().len(), 100);
    a.close().await;
    b.close().await;
}

#[tokio::test]
async fn a_database_from_a_newer_evo_is_refused_untouched() {
    let (_dir, path) = temp_db();
    let store = open(&path).await;
    store.create_run(&new_run("r")).await.unwrap();
    store.close().await;
    let future: i64 = 99_991_231_000_000;
    let mut conn = raw(&path).await;
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES ($1, 'from the future', 1, X'00', 0)",
    )
    .bind(future)
    .execute(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();
    let before = snapshot(&path);

    let err = Store::open(path.to_str().unwrap()).await.unwrap_err();
    assert!(matches!(err, StoreError::TooNew { .. }), "{err}");
    let message = err.to_string();
    assert!(message.contains(&future.to_string()), "{message}");
    assert!(
        message.contains(&format!("up to {}", evo_store::schema_version())),
        "{message}"
    );
    assert!(message.contains("upgrade evo"), "{message}");
    assert!(message.contains("newer evo"), "{message}");
    assert_unchanged(&path, &before);

    // Refused again the same way (the first refusal left nothing behind that changes it).
    assert!(matches!(
        Store::open(path.to_str().unwrap()).await,
        Err(StoreError::TooNew { .. })
    ));
    assert_unchanged(&path, &before);
}

#[tokio::test]
async fn a_newer_database_in_use_is_refused_untouched() {
    // The newer evo still has it open: its migration row is committed but only in the WAL.
    let (_dir, path) = temp_db();
    let newer = open(&path).await;
    newer.create_run(&new_run("r")).await.unwrap();
    let mut conn = raw(&path).await;
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (424242, 'from the future', 1, X'00', 0)",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let before = snapshot(&path);
    assert!(before.wal.as_ref().is_some_and(|w| !w.is_empty()));
    let err = Store::open(path.to_str().unwrap()).await.unwrap_err();
    match &err {
        StoreError::TooNew { unknown, .. } => assert_eq!(unknown, &vec![424242]),
        e => panic!("expected TooNew, got {e}"),
    }
    assert_unchanged(&path, &before);
    conn.close().await.unwrap();
    newer.close().await;
}

#[tokio::test]
async fn a_newer_meta_schema_version_is_refused_untouched() {
    let (_dir, path) = temp_db();
    open(&path).await.close().await;
    let mut conn = raw(&path).await;
    sqlx::query("UPDATE meta SET value = '7' WHERE key = 'schema_version'")
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    let before = snapshot(&path);
    let err = Store::open(path.to_str().unwrap()).await.unwrap_err();
    match &err {
        StoreError::TooNew { unknown, .. } => assert_eq!(unknown, &vec![7]),
        e => panic!("expected TooNew, got {e}"),
    }
    assert_unchanged(&path, &before);
}

#[tokio::test]
async fn a_file_that_is_not_sqlite_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    for (name, bytes) in [
        (
            "notes.db",
            b"these are my notes, not a database\n".repeat(100),
        ),
        ("short.db", b"SQLite".to_vec()),
        ("binary.db", (0u8..=255).cycle().take(8192).collect()),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, &bytes).unwrap();
        let err = Store::open(path.to_str().unwrap()).await.unwrap_err();
        assert!(matches!(err, StoreError::NotSqlite { .. }), "{name}: {err}");
        assert!(err.to_string().contains("not a SQLite database"), "{err}");
        assert!(err.to_string().contains(name), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "{name} was modified");
        assert!(
            !side_file(&path, "-wal").exists(),
            "{name}: a -wal file appeared"
        );
        assert!(
            !side_file(&path, "-shm").exists(),
            "{name}: a -shm file appeared"
        );
    }
    // A directory is not a database either.
    let err = Store::open(dir.path().to_str().unwrap()).await.unwrap_err();
    assert!(matches!(err, StoreError::NotSqlite { .. }), "{err}");
}

#[tokio::test]
async fn another_programs_sqlite_database_is_refused_untouched() {
    let (_dir, path) = temp_db();
    let mut conn = raw(&path).await;
    sqlx::query("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
        .execute(&mut conn)
        .await
        .unwrap();
    sqlx::query("INSERT INTO customers (name) VALUES ('ada')")
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    let before = snapshot(&path);
    let err = Store::open(path.to_str().unwrap()).await.unwrap_err();
    assert!(matches!(err, StoreError::NotEvoDatabase { .. }), "{err}");
    assert!(err.to_string().contains("customers"), "{err}");
    assert_unchanged(&path, &before);
}

#[tokio::test]
async fn an_empty_file_becomes_a_database() {
    let (_dir, path) = temp_db();
    std::fs::write(&path, b"").unwrap();
    let store = open(&path).await;
    store.create_run(&new_run("r")).await.unwrap();
    store.close().await;
    assert!(std::fs::read(&path)
        .unwrap()
        .starts_with(b"SQLite format 3\0"));
}

/// Opening a second store of a file this process already has open leaves the first one's
/// POSIX locks in place: nothing outside SQLite opens (and so, closing, unlocks) the file. A
/// lost shared lock lets another process take the file for itself (delete the WAL under an
/// open store). Checked from a child process: a write lock over SQLite's shared-lock bytes
/// must fail while the stores are open.
#[tokio::test]
async fn a_second_store_keeps_the_first_one_s_locks() {
    let Ok(out) = std::process::Command::new("python3")
        .arg("--version")
        .output()
    else {
        eprintln!("skipping: no python3");
        return;
    };
    assert!(out.status.success());
    let (_dir, path) = temp_db();
    let first = open(&path).await;
    first.create_run(&new_run("r")).await.unwrap();
    assert_eq!(first.runs().await.unwrap().len(), 1);
    let second = open(&path).await;
    // SQLite's lock bytes (os_unix.c): PENDING 0x40000000, RESERVED + 1, SHARED the 510 after.
    let probe = r#"
import fcntl, sys
with open(sys.argv[1], "r+b") as f:
    try:
        fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB, 510, 0x40000002)
    except OSError:
        print("locked")
    else:
        print("unlocked")
"#;
    let out = std::process::Command::new("python3")
        .args(["-c", probe])
        .arg(&path)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        said.trim(),
        "locked",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(second.runs().await.unwrap().len(), 1);
    second.close().await;
    first.close().await;
}
