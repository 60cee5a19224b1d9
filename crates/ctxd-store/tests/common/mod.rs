//! One place for running a store test on every backend: a fresh SQLite store, then, when
//! `CTXD_TEST_POSTGRES` holds an admin URL (`postgres://user@127.0.0.1:port/postgres`), a fresh
//! PostgreSQL database created for the test and dropped after it. Unset, the PostgreSQL half is
//! skipped with a note, except under `CI`, where it fails: CI never skips it silently. A build
//! without the `postgres` feature runs the SQLite half only.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicU32, Ordering};
#[cfg(feature = "postgres")]
use std::sync::Arc;

#[cfg(feature = "postgres")]
use ctxd_store::PgStore;
use ctxd_store::{Backend, SqliteStore};

pub const ENV: &str = "CTXD_TEST_POSTGRES";

/// Run `test` on a fresh in-memory SQLite store, then on a fresh PostgreSQL database.
pub fn each_backend(test: impl Fn(&dyn Backend)) {
    test(&SqliteStore::open_in_memory().unwrap());
    #[cfg(feature = "postgres")]
    if let Some(db) = TempDb::create() {
        test(&db.open());
    }
}

/// Run `test` on two fresh stores of each backend (to compare their rows).
pub fn each_backend_pair(test: impl Fn(&dyn Backend, &dyn Backend)) {
    test(
        &SqliteStore::open_in_memory().unwrap(),
        &SqliteStore::open_in_memory().unwrap(),
    );
    #[cfg(feature = "postgres")]
    if let (Some(a), Some(b)) = (TempDb::create(), TempDb::create()) {
        test(&a.open(), &b.open());
    }
}

/// The admin URL, `None` (after a note) when PostgreSQL tests are to be skipped.
pub fn admin_url() -> Option<String> {
    match std::env::var(ENV) {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var_os("CI").is_some() => {
            panic!("{ENV} is not set: under CI the store tests run on PostgreSQL too")
        }
        _ => {
            eprintln!("note: {ENV} is not set: skipping the PostgreSQL half of this test");
            None
        }
    }
}

/// A database of its own for one test, dropped (with its connections) at the end.
pub struct TempDb {
    admin: String,
    pub name: String,
    pub url: String,
}

impl TempDb {
    pub fn create() -> Option<Self> {
        static N: AtomicU32 = AtomicU32::new(0);
        let admin = admin_url()?;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let name = format!(
            "ctxd_test_{}_{}_{nanos}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        admin_sql(&admin, &format!("CREATE DATABASE {name}"));
        let url = with_database(&admin, &name);
        Some(Self { admin, name, url })
    }

    #[cfg(feature = "postgres")]
    pub fn open(&self) -> PgStore {
        PgStore::open(&self.url).unwrap()
    }

    #[cfg(feature = "postgres")]
    pub fn open_arc(&self) -> Arc<dyn Backend> {
        Arc::new(self.open())
    }

    /// Run `sql` in this database (as the admin user).
    pub fn sql(&self, sql: &str) {
        admin_sql(&self.url, sql);
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        admin_sql(
            &self.admin,
            &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
        );
    }
}

/// `admin` with its database replaced by `name` (any query parameters kept).
pub fn with_database(admin: &str, name: &str) -> String {
    let (base, query) = admin
        .split_once('?')
        .map_or((admin, None), |(b, q)| (b, Some(q)));
    let (scheme, rest) = base.split_once("://").unwrap();
    let host = rest.split_once('/').map_or(rest, |(h, _)| h);
    match query {
        Some(q) => format!("{scheme}://{host}/{name}?{q}"),
        None => format!("{scheme}://{host}/{name}"),
    }
}

/// Run `sql` on its own thread (the sync driver must not run inside a test's tokio runtime).
pub fn admin_sql(url: &str, sql: &str) {
    let (url, sql) = (url.to_owned(), sql.to_owned());
    std::thread::spawn(move || {
        let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        client.batch_execute(&sql).unwrap();
    })
    .join()
    .unwrap();
}
