//! Opening a database: where it is (a SQLite file or a PostgreSQL URL), whether it is
//! one evo may touch, WAL (SQLite), migrations.
//!
//! Both backends go through sqlx's `Any` driver, so every query in `store.rs` is one
//! text for both; what must differ per backend (DDL, the transaction's `BEGIN`, row
//! locks) is chosen by [`DbKind`]. The migrations of the two backends live in
//! `migrations/sqlite` and `migrations/postgres` with the same version numbers and the
//! same tables and columns.

use std::path::{Path, PathBuf};
use std::time::Duration;

use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::migrate::{MigrateError, Migrator};
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{ConnectOptions, Connection, Executor, Row, SqliteConnection};

use crate::error::{Ctx, StoreError};
use crate::Store;

/// The SQLite migrations (`crates/evo-store/migrations/sqlite`), embedded at build time.
pub(crate) static MIGRATOR: Migrator = sqlx::migrate!("./migrations/sqlite");

/// The PostgreSQL migrations: the same versions and tables as [`MIGRATOR`].
pub(crate) static PG_MIGRATOR: Migrator = sqlx::migrate!("./migrations/postgres");

/// Which database server holds the population.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DbKind {
    /// One file, one host (the default).
    Sqlite,
    /// A server that many hosts share (`postgres://...`).
    Postgres,
}

/// Where a population lives, parsed from `--db`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Location {
    Sqlite(PathBuf),
    Postgres(String),
}

/// `postgres://user:secret@host/db` → `postgres://user:***@host/db` (for messages).
pub fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_string();
    };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    match (authority.rfind('@'), authority.find(':')) {
        (Some(at), Some(colon)) if colon < at => format!(
            "{}{}:***{}",
            &url[..scheme_end + 3],
            &authority[..colon],
            &rest[at..]
        ),
        _ => url.to_string(),
    }
}

/// How long a statement waits for another connection's write lock before failing.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections in the pool (SQLite in WAL mode: many readers, one writer at a time).
const MAX_CONNECTIONS: u32 = 4;

/// How long a connection to a PostgreSQL server may take (the first, and each one the pool
/// waits for later).
const PG_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

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
/// `sqlite:///abs/x.db`, or the server of `postgres://...` / `postgresql://...`.
pub(crate) fn database_location(url_or_path: &str) -> Result<Location, StoreError> {
    let text = url_or_path.trim();
    if text.starts_with("postgres://") || text.starts_with("postgresql://") {
        return Ok(Location::Postgres(text.to_string()));
    }
    database_path(text).map(Location::Sqlite)
}

/// The SQLite file a database location names (`population.db`, `sqlite://x.db`, ...), or
/// `None` for a PostgreSQL server; a location evo cannot open (another scheme, an
/// in-memory database, ...) is [`StoreError::UnsupportedUrl`]. Nothing is touched: callers
/// check `--db` with it before anything else.
pub fn database_file(url_or_path: &str) -> Result<Option<PathBuf>, StoreError> {
    Ok(match database_location(url_or_path)? {
        Location::Sqlite(path) => Some(path),
        Location::Postgres(_) => None,
    })
}

fn database_path(url_or_path: &str) -> Result<PathBuf, StoreError> {
    let unsupported = |reason| StoreError::UnsupportedUrl {
        url: redact_url(url_or_path),
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
        return Err(unsupported(
            "only SQLite files and PostgreSQL servers (postgres://) are supported",
        ));
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

/// What [`check_existing`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Existing {
    /// No file, an empty one, or a database without every migration of this build:
    /// opening it writes (creates, migrates).
    NeedsWrite,
    /// An evo database at this build's schema: it can be read without writing.
    Current,
}

/// Checks, without writing anything, that the file at `path` (if it exists and is not
/// empty) is an evo population database this build may open.
async fn check_existing(path: &Path) -> Result<Existing, StoreError> {
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Existing::NeedsWrite),
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
        return Ok(Existing::NeedsWrite);
    }
    // The header is SQLite's to check (a file that is not a database fails the first
    // read): no descriptor of the file is opened outside SQLite, since closing one drops
    // every POSIX lock this process holds on it, those of its other open stores included.
    // Read-only: no journal mode change, no migrations table, no meta rows. Without a
    // `-wal` file beside it (no evo has it open and none died with it open) the main file
    // is the whole database: read it as immutable, so SQLite does not even create the
    // `-wal` and `-shm` files. With one, read through it (it may hold committed data).
    let mut conn = read_only_options(path)
        .connect()
        .await
        .map_err(|e| read_error(path, e))?;
    let result = inspect(&mut conn, path).await;
    let _ = conn.close().await;
    result
}

/// The write-ahead log beside the SQLite file at `path`.
fn wal_file(path: &Path) -> PathBuf {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    PathBuf::from(wal)
}

/// If a `-wal` file is beside the SQLite file at `path`: folds it into the file (a
/// checkpoint) on one connection of its own and closes that, and the last connection to close
/// removes the log with its `-shm` (see [`Store::close`]). Best effort, nothing to report: a
/// file another process holds open keeps its log, and that process's close removes it.
pub(crate) async fn fold_log(path: &Path) {
    if !wal_file(path).exists() {
        return;
    }
    let options = SqliteConnectOptions::new()
        .filename(path)
        .busy_timeout(BUSY_TIMEOUT);
    if let Ok(mut conn) = options.connect().await {
        // (A connection opens the log only when it first reads the database.)
        let _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").await;
        let _ = conn.close().await;
    }
}

/// Options that read the file without writing it or creating anything beside it (see
/// [`check_existing`]).
fn read_only_options(path: &Path) -> SqliteConnectOptions {
    SqliteConnectOptions::new()
        .filename(path)
        .read_only(true)
        .immutable(!wal_file(path).exists())
        .busy_timeout(BUSY_TIMEOUT)
}

/// An error reading the file at `path`: [`StoreError::NotSqlite`] where SQLite says it is
/// not a database, else [`StoreError::Open`].
fn read_error(path: &Path, e: sqlx::Error) -> StoreError {
    match &e {
        sqlx::Error::Database(d) if d.message().contains("not a database") => {
            StoreError::NotSqlite {
                path: path.to_path_buf(),
                reason: "it does not start with the SQLite header".into(),
            }
        }
        _ => StoreError::Open {
            path: path.to_path_buf(),
            source: Box::new(e),
        },
    }
}

async fn inspect(conn: &mut SqliteConnection, path: &Path) -> Result<Existing, StoreError> {
    let tables: Vec<String> = sqlx::query(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' \
         ORDER BY name",
    )
    .fetch_all(&mut *conn)
    .await
    .map_err(|e| read_error(path, e))?
    .iter()
    .map(|row| row.get::<String, _>(0))
    .collect();
    if tables.is_empty() {
        return Ok(Existing::NeedsWrite);
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
    let mut applied: Vec<i64> = Vec::new();
    if has("_sqlx_migrations") {
        applied = sqlx::query_scalar(
            "SELECT version FROM _sqlx_migrations WHERE success ORDER BY version",
        )
        .fetch_all(&mut *conn)
        .await
        .ctx(|| format!("reading the schema versions of {}", path.display()))?;
        unknown.extend(applied.iter().copied().filter(|v| !known.contains(v)));
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
    if !unknown.is_empty() {
        unknown.sort_unstable();
        return Err(too_new(path, unknown));
    }
    Ok(if known.iter().all(|v| applied.contains(v)) {
        Existing::Current
    } else {
        Existing::NeedsWrite
    })
}

fn too_new(path: &Path, unknown: Vec<i64>) -> StoreError {
    StoreError::TooNew {
        path: path.to_path_buf(),
        unknown,
        known_max: schema_version(),
        evo_version: EVO_VERSION,
    }
}

/// Opens an existing database to read it: a SQLite file at this build's schema is opened
/// read-only (nothing is written, nothing created beside it, so a file or folder without
/// write permission can be read); one that needs a migration, and PostgreSQL, are opened
/// as [`open`] does.
pub(crate) async fn open_to_read(url_or_path: &str) -> Result<Store, StoreError> {
    sqlx::any::install_default_drivers();
    let path = match database_location(url_or_path)? {
        Location::Sqlite(path) => path,
        Location::Postgres(url) => return open_postgres(url).await,
    };
    if check_existing(&path).await? == Existing::NeedsWrite {
        return open_sqlite(path).await;
    }
    let pool = sqlite_pool(read_only_options(&path), &path).await?;
    let location = path.display().to_string();
    Ok(Store {
        pool,
        kind: DbKind::Sqlite,
        path: Some(path),
        read_only: true,
        location,
    })
}

pub(crate) async fn open(url_or_path: &str) -> Result<Store, StoreError> {
    sqlx::any::install_default_drivers();
    match database_location(url_or_path)? {
        Location::Sqlite(path) => open_sqlite(path).await,
        Location::Postgres(url) => open_postgres(url).await,
    }
}

/// Opens (creating and migrating) a SQLite database. Several evo processes opening one new
/// file at the same moment race for its creation: the WAL switch needs a lock the busy
/// timeout does not wait for ("database is locked"), and a migration checked before
/// another process applied it fails ("table … already exists", "duplicate column"). Such
/// an attempt is made again, from the start, after a short pause (a migration that fails
/// for another reason fails on every attempt, and is returned after the last); any other
/// error is returned at once.
async fn open_sqlite(path: PathBuf) -> Result<Store, StoreError> {
    const ATTEMPTS: u32 = 40;
    let mut attempt = 1;
    loop {
        match open_sqlite_once(path.clone()).await {
            Err(e) if attempt < ATTEMPTS && lost_an_opening_race(&e) => {
                tokio::time::sleep(std::time::Duration::from_millis(
                    25 * u64::from(attempt.min(8)),
                ))
                .await;
                attempt += 1;
            }
            result => return result,
        }
    }
}

/// Whether `e` is what a concurrent first open of the same file looks like.
fn lost_an_opening_race(e: &StoreError) -> bool {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(&s.to_string());
        source = s.source();
    }
    // Each migration is one transaction (SQLite's DDL is transactional): one that lost
    // the race ("already exists", "duplicate column", …) left nothing behind, and a
    // migration that fails for another reason fails again on every attempt.
    matches!(e, StoreError::Migrate { .. })
        || (matches!(e, StoreError::Open { .. } | StoreError::Db { .. })
            && text.contains("database is locked"))
}

/// A pool of connections to a SQLite file through sqlx's `Any` driver, each set up alike.
async fn sqlite_pool(
    options: SqliteConnectOptions,
    path: &Path,
) -> Result<sqlx::AnyPool, StoreError> {
    let open_err = |e: sqlx::Error| StoreError::Open {
        path: path.to_path_buf(),
        source: Box::new(e),
    };
    let options = AnyConnectOptions::from_url(&options.to_url_lossy()).map_err(open_err)?;
    AnyPoolOptions::new()
        .max_connections(MAX_CONNECTIONS)
        .after_connect(|conn, _| {
            Box::pin(async move {
                // FULL: a committed transaction survives a power loss too, not only a
                // killed process; one fsync per result is nothing next to a GPU evaluation.
                // (Foreign keys are on by default in sqlx's SQLite options, not through Any.)
                conn.execute(
                    format!(
                        "PRAGMA busy_timeout = {}; PRAGMA synchronous = FULL; \
                         PRAGMA foreign_keys = ON",
                        BUSY_TIMEOUT.as_millis()
                    )
                    .as_str(),
                )
                .await?;
                Ok(())
            })
        })
        .connect_with(options)
        .await
        .map_err(open_err)
}

/// Refuses at once a database this process cannot write (the file, or its folder where
/// SQLite creates its -wal and -shm files), instead of letting every connection fail.
fn check_writable(path: &Path) -> Result<(), StoreError> {
    let denied = |e: &std::io::Error| e.kind() == std::io::ErrorKind::PermissionDenied;
    let read_only = |what: String| StoreError::ReadOnly {
        path: path.to_path_buf(),
        what,
    };
    // access(2), not an open: closing a descriptor of the file would drop the POSIX locks
    // this process's other connections hold on it.
    match rustix::fs::access(path, rustix::fs::Access::WRITE_OK) {
        Err(e) if e == rustix::io::Errno::ACCESS || e == rustix::io::Errno::ROFS => {
            return Err(read_only("the file".into()));
        }
        _ => {}
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        return Err(StoreError::NoFolder {
            path: path.to_path_buf(),
            folder: dir.to_path_buf(),
        });
    }
    let probe = dir.join(format!(".evo-write-probe-{}", std::process::id()));
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
    {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            Ok(())
        }
        Err(e) if denied(&e) || e.kind() == std::io::ErrorKind::ReadOnlyFilesystem => {
            Err(read_only(format!("its folder {}", dir.display())))
        }
        // Anything else (the folder is missing, ...) is SQLite's to report.
        Err(_) => Ok(()),
    }
}

async fn open_sqlite_once(path: PathBuf) -> Result<Store, StoreError> {
    check_existing(&path).await?;
    check_writable(&path)?;

    let open_err = |e: sqlx::Error| StoreError::Open {
        path: path.clone(),
        source: Box::new(e),
    };
    let create = SqliteConnectOptions::new()
        .filename(&path)
        .create_if_missing(true);
    let pool = sqlite_pool(create, &path).await?;

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
    let location = path.display().to_string();
    finish_open(Store {
        pool,
        kind: DbKind::Sqlite,
        path: Some(path),
        read_only: false,
        location,
    })
    .await
}

/// Checks, without writing anything, that the PostgreSQL database (its current schema)
/// is empty or an evo population database this build may open.
async fn check_existing_postgres(pool: &sqlx::AnyPool, shown: &Path) -> Result<(), StoreError> {
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT CAST(table_name AS TEXT) FROM information_schema.tables \
         WHERE table_schema = current_schema() ORDER BY table_name",
    )
    .fetch_all(pool)
    .await
    .ctx(|| format!("listing the tables of {}", shown.display()))?;
    if tables.is_empty() {
        return Ok(());
    }
    let has = |name: &str| tables.iter().any(|t| t == name);
    if !has("_sqlx_migrations") && !has("meta") {
        return Err(StoreError::NotEvoDatabase {
            path: shown.to_path_buf(),
            tables: tables.join(", "),
        });
    }
    let known: Vec<i64> = PG_MIGRATOR.iter().map(|m| m.version).collect();
    let mut unknown: Vec<i64> = Vec::new();
    if has("_sqlx_migrations") {
        let versions: Vec<i64> =
            sqlx::query_scalar("SELECT version FROM _sqlx_migrations ORDER BY version")
                .fetch_all(pool)
                .await
                .ctx(|| format!("reading the schema versions of {}", shown.display()))?;
        unknown.extend(versions.into_iter().filter(|v| !known.contains(v)));
    }
    if unknown.is_empty() {
        Ok(())
    } else {
        Err(too_new(shown, unknown))
    }
}

/// The server a PostgreSQL URL names, as `host:port` (or its Unix socket), for messages:
/// never the user or the password.
fn pg_server(url: &str) -> String {
    match url.parse::<sqlx::postgres::PgConnectOptions>() {
        Ok(o) => match o.get_socket() {
            Some(socket) => socket.display().to_string(),
            None => format!("{}:{}", o.get_host(), o.get_port()),
        },
        Err(_) => redact_url(url),
    }
}

async fn open_postgres(url: String) -> Result<Store, StoreError> {
    let location = redact_url(&url);
    let shown = PathBuf::from(&location);
    let open_err = |e: sqlx::Error| StoreError::Open {
        path: shown.clone(),
        source: Box::new(e),
    };
    let options: AnyConnectOptions = url.parse().map_err(open_err)?;
    // One connection first, outside the pool: the pool takes a refused connection for a
    // server still starting and tries again until its acquire timeout, so a wrong host or
    // port (or a server that is down) took 30 s to be said.
    match tokio::time::timeout(PG_CONNECT_TIMEOUT, options.connect()).await {
        Ok(Ok(conn)) => {
            let _ = conn.close().await;
        }
        Ok(Err(sqlx::Error::Io(e))) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            return Err(StoreError::Refused {
                server: pg_server(&url),
                url: location,
            });
        }
        Ok(Err(e)) => return Err(open_err(e)),
        Err(_) => {
            return Err(StoreError::ConnectTimeout {
                server: pg_server(&url),
                url: location,
                waited_s: PG_CONNECT_TIMEOUT.as_secs(),
            })
        }
    }
    let pool = AnyPoolOptions::new()
        .max_connections(MAX_CONNECTIONS)
        .acquire_timeout(PG_CONNECT_TIMEOUT)
        .connect_with(options)
        .await
        .map_err(open_err)?;
    if let Err(e) = check_existing_postgres(&pool, &shown).await {
        pool.close().await;
        return Err(e);
    }
    finish_open(Store {
        pool,
        kind: DbKind::Postgres,
        path: None,
        read_only: false,
        location,
    })
    .await
}

/// Migrations and the `meta` rows, the same for both backends.
async fn finish_open(store: Store) -> Result<Store, StoreError> {
    let shown = PathBuf::from(&store.location);
    let migrator = match store.kind {
        DbKind::Sqlite => &MIGRATOR,
        DbKind::Postgres => &PG_MIGRATOR,
    };
    // On PostgreSQL the migrator holds an advisory lock: hosts starting together
    // migrate one after the other.
    if let Err(e) = migrator.run(&store.pool).await {
        store.pool.close().await;
        return Err(match e {
            // Another evo added a migration between our check and now.
            MigrateError::VersionMissing(v) => too_new(&shown, vec![v]),
            e => StoreError::Migrate {
                path: shown,
                source: Box::new(e),
            },
        });
    }

    let mut tx = store.write_tx("writing meta").await?;
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
    Ok(store)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations() {
        assert_eq!(
            database_location("postgres://u:p@h:5432/db").unwrap(),
            Location::Postgres("postgres://u:p@h:5432/db".into())
        );
        assert_eq!(
            redact_url("postgres://u:p@h:5432/db"),
            "postgres://u:***@h:5432/db"
        );
        assert_eq!(redact_url("postgres://h/db"), "postgres://h/db");
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
            "mysql://h/db",
            "sqlite::memory:",
            "sqlite://x.db?mode=ro",
            "sqlite://",
        ] {
            assert!(
                matches!(database_path(bad), Err(StoreError::UnsupportedUrl { .. })),
                "{bad}"
            );
        }
        // A refused URL is shown without its password.
        let shown = database_path("mysql://u:secret@h/db")
            .unwrap_err()
            .to_string();
        assert!(
            shown.contains("mysql://u:***@h/db") && !shown.contains("secret"),
            "{shown}"
        );
    }

    #[test]
    fn migrations_are_embedded() {
        assert_eq!(known_schema_versions(), vec![1, 2]);
        assert_eq!(schema_version(), 2);
        let pg: Vec<i64> = PG_MIGRATOR.iter().map(|m| m.version).collect();
        assert_eq!(
            pg,
            known_schema_versions(),
            "both backends have the same versions"
        );
    }
}
