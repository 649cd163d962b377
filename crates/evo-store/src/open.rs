//! Opening a database: where it is, whether it is one evo may touch, WAL, migrations.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sqlx::migrate::{MigrateError, Migrator};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{ConnectOptions, Connection, Row, SqliteConnection};

use crate::error::{Ctx, StoreError};
use crate::Store;

/// The migrations in `crates/evo-store/migrations`, embedded at build time.
pub(crate) static MIGRATOR: Migrator = sqlx::migrate!("./migrations");

/// How long a statement waits for another connection's write lock before failing.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections in the pool (SQLite in WAL mode: many readers, one writer at a time).
const MAX_CONNECTIONS: u32 = 4;

/// The first 16 bytes of every SQLite 3 database file.
const SQLITE_HEADER: &[u8; 16] = b"SQLite format 3\0";

/// `evo <version>`, as recorded in `meta.created_by` and `runs.evo_version`.
pub(crate) const EVO_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The schema versions (migration versions) this build knows, ascending.
pub fn known_schema_versions() -> Vec<i64> {
    MIGRATOR.iter().map(|m| m.version).collect()
}

/// The newest schema version this build knows: what it migrates every database to.
pub fn schema_version() -> i64 {
    MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0)
}

/// The file behind `population.db`, `some/dir/x.db`, `sqlite://x.db`, `sqlite:x.db` or
/// `sqlite:///abs/x.db`.
pub(crate) fn database_path(url_or_path: &str) -> Result<PathBuf, StoreError> {
    let unsupported = |reason| StoreError::UnsupportedUrl {
        url: url_or_path.to_string(),
        reason,
    };
    let text = url_or_path.trim();
    if text.is_empty() {
        return Err(unsupported("the location is empty"));
    }
    let path = if let Some(rest) = text
        .strip_prefix("sqlite://")
        .or_else(|| text.strip_prefix("sqlite:"))
    {
        if rest.contains('?') {
            return Err(unsupported("URL parameters are not supported"));
        }
        rest
    } else if text.contains("://") {
        return Err(unsupported("only SQLite databases are supported"));
    } else {
        text
    };
    if path.is_empty() {
        return Err(unsupported("the URL names no file"));
    }
    if path == ":memory:" || path.starts_with("file::memory:") {
        return Err(unsupported(
            "in-memory databases are not supported (a population must outlive the process)",
        ));
    }
    Ok(PathBuf::from(path))
}

/// Checks, without writing anything, that the file at `path` (if it exists and is not
/// empty) is an evo population database this build may open.
async fn check_existing(path: &Path) -> Result<(), StoreError> {
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(StoreError::Io {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    if meta.is_dir() {
        return Err(StoreError::NotSqlite {
            path: path.to_path_buf(),
            reason: "it is a directory".into(),
        });
    }
    if meta.len() == 0 {
        // SQLite treats an empty file as an empty database.
        return Ok(());
    }
    let mut header = Vec::with_capacity(16);
    std::fs::File::open(path)
        .and_then(|f| f.take(16).read_to_end(&mut header))
        .map_err(|source| StoreError::Io {
            path: path.to_path_buf(),
            source,
        })?;
    if header.as_slice() != SQLITE_HEADER {
        return Err(StoreError::NotSqlite {
            path: path.to_path_buf(),
            reason: "it does not start with the SQLite header".into(),
        });
    }

    // Read-only: no journal mode change, no migrations table, no meta rows. Without a
    // `-wal` file beside it (no evo has it open and none died with it open) the main file
    // is the whole database: read it as immutable, so SQLite does not even create the
    // `-wal` and `-shm` files. With one, read through it (it may hold committed data).
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    let immutable = !Path::new(&wal).exists();
    let mut conn = SqliteConnectOptions::new()
        .filename(path)
        .read_only(true)
        .immutable(immutable)
        .busy_timeout(BUSY_TIMEOUT)
        .connect()
        .await
        .map_err(|e| StoreError::Open {
            path: path.to_path_buf(),
            source: Box::new(e),
        })?;
    let result = inspect(&mut conn, path).await;
    let _ = conn.close().await;
    result
}

async fn inspect(conn: &mut SqliteConnection, path: &Path) -> Result<(), StoreError> {
    let tables: Vec<String> = sqlx::query(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' \
         ORDER BY name",
    )
    .fetch_all(&mut *conn)
    .await
    .map_err(|e| match &e {
        sqlx::Error::Database(d) if d.message().contains("not a database") => {
            StoreError::NotSqlite {
                path: path.to_path_buf(),
                reason: d.message().to_string(),
            }
        }
        _ => StoreError::Open {
            path: path.to_path_buf(),
            source: Box::new(e),
        },
    })?
    .iter()
    .map(|row| row.get::<String, _>(0))
    .collect();
    if tables.is_empty() {
        return Ok(());
    }
    let has = |name: &str| tables.iter().any(|t| t == name);
    if !has("_sqlx_migrations") && !has("meta") {
        return Err(StoreError::NotEvoDatabase {
            path: path.to_path_buf(),
            tables: tables.join(", "),
        });
    }
    let known = known_schema_versions();
    let mut unknown: Vec<i64> = Vec::new();
    if has("_sqlx_migrations") {
        let versions: Vec<i64> =
            sqlx::query_scalar("SELECT version FROM _sqlx_migrations ORDER BY version")
                .fetch_all(&mut *conn)
                .await
                .ctx(|| format!("reading the schema versions of {}", path.display()))?;
        unknown.extend(versions.into_iter().filter(|v| !known.contains(v)));
    }
    if has("meta") {
        let recorded: Option<String> =
            sqlx::query_scalar("SELECT value FROM meta WHERE key = 'schema_version'")
                .fetch_optional(&mut *conn)
                .await
                .ctx(|| format!("reading meta.schema_version of {}", path.display()))?;
        if let Some(v) = recorded.and_then(|v| v.trim().parse::<i64>().ok()) {
            if v > schema_version() && !unknown.contains(&v) {
                unknown.push(v);
            }
        }
    }
    if unknown.is_empty() {
        Ok(())
    } else {
        unknown.sort_unstable();
        Err(too_new(path, unknown))
    }
}

fn too_new(path: &Path, unknown: Vec<i64>) -> StoreError {
    StoreError::TooNew {
        path: path.to_path_buf(),
        unknown,
        known_max: schema_version(),
        evo_version: EVO_VERSION,
    }
}

pub(crate) async fn open(url_or_path: &str) -> Result<Store, StoreError> {
    let path = database_path(url_or_path)?;
    check_existing(&path).await?;

    let open_err = |e: sqlx::Error| StoreError::Open {
        path: path.clone(),
        source: Box::new(e),
    };
    let options = SqliteConnectOptions::new()
        .filename(&path)
        .create_if_missing(true)
        .foreign_keys(true)
        .busy_timeout(BUSY_TIMEOUT)
        // FULL: a committed transaction survives a power loss too, not only a killed
        // process; one fsync per result is nothing next to a GPU evaluation.
        .synchronous(SqliteSynchronous::Full);
    let pool = SqlitePoolOptions::new()
        .max_connections(MAX_CONNECTIONS)
        .connect_with(options)
        .await
        .map_err(open_err)?;

    // WAL is a property of the file: set it once here rather than on every connection
    // (switching needs a lock that the busy timeout does not wait for).
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode = WAL")
        .fetch_one(&pool)
        .await
        .map_err(open_err)?;
    if !mode.eq_ignore_ascii_case("wal") {
        pool.close().await;
        return Err(StoreError::Open {
            path,
            source: format!("SQLite refused WAL journal mode (it reports `{mode}`)").into(),
        });
    }

    if let Err(e) = MIGRATOR.run(&pool).await {
        pool.close().await;
        return Err(match e {
            // Another evo added a migration between our check and now.
            MigrateError::VersionMissing(v) => too_new(&path, vec![v]),
            e => StoreError::Migrate {
                path,
                source: Box::new(e),
            },
        });
    }

    let mut tx = pool
        .begin_with("BEGIN IMMEDIATE")
        .await
        .ctx(|| "writing meta".into())?;
    sqlx::query(
        "INSERT INTO meta (key, value) VALUES ('created_by', $1) ON CONFLICT (key) DO NOTHING",
    )
    .bind(format!("evo {EVO_VERSION}"))
    .execute(&mut *tx)
    .await
    .ctx(|| "writing meta.created_by".into())?;
    sqlx::query(
        "INSERT INTO meta (key, value) VALUES ('schema_version', $1) \
         ON CONFLICT (key) DO UPDATE SET value = excluded.value WHERE meta.value <> excluded.value",
    )
    .bind(schema_version().to_string())
    .execute(&mut *tx)
    .await
    .ctx(|| "writing meta.schema_version".into())?;
    tx.commit().await.ctx(|| "writing meta".into())?;

    Ok(Store { pool, path })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations() {
        assert_eq!(
            database_path("population.db").unwrap(),
            PathBuf::from("population.db")
        );
        assert_eq!(
            database_path("sqlite://runs/x.db").unwrap(),
            PathBuf::from("runs/x.db")
        );
        assert_eq!(
            database_path("sqlite:///abs/x.db").unwrap(),
            PathBuf::from("/abs/x.db")
        );
        assert_eq!(database_path("sqlite:x.db").unwrap(), PathBuf::from("x.db"));
        for bad in [
            "",
            "postgres://h/db",
            "sqlite::memory:",
            "sqlite://x.db?mode=ro",
            "sqlite://",
        ] {
            assert!(
                matches!(database_path(bad), Err(StoreError::UnsupportedUrl { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn migrations_are_embedded() {
        assert_eq!(known_schema_versions(), vec![1]);
        assert_eq!(schema_version(), 1);
    }
}
