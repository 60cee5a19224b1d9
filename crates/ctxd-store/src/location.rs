//! Opening a store by its location: a file path, or a `postgres://` URL.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::{Backend, Checkpoints, Durability, ServeLock, SqliteStore, StoreError, WalPressure};

/// Where a store lives, parsed from `--store`: a file path, or a `postgres://` URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    Sqlite(PathBuf),
    Postgres(String),
}

impl From<PathBuf> for Location {
    fn from(path: PathBuf) -> Self {
        Self::Sqlite(path)
    }
}

impl From<&str> for Location {
    fn from(text: &str) -> Self {
        Self::parse(text)
    }
}

impl std::fmt::Display for Location {
    /// The path, or the URL without its password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Sqlite(path) => write!(f, "{}", path.display()),
            Self::Postgres(url) => f.write_str(&redact(url)),
        }
    }
}

impl Location {
    pub fn parse(text: &str) -> Self {
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            Self::Postgres(text.to_owned())
        } else {
            Self::Sqlite(PathBuf::from(text))
        }
    }
}

/// Open the store at `location`, creating and migrating it as needed. `durability` applies to
/// SQLite (PostgreSQL's is the server's own `synchronous_commit`).
pub fn open(location: &Location, durability: Durability) -> Result<Box<dyn Backend>, StoreError> {
    match location {
        Location::Sqlite(path) => Ok(Box::new(SqliteStore::open(path, durability)?)),
        Location::Postgres(url) => open_postgres(url),
    }
}

#[cfg(feature = "postgres")]
fn open_postgres(url: &str) -> Result<Box<dyn Backend>, StoreError> {
    Ok(Box::new(crate::PgStore::open(url)?))
}

/// A URL is still told from a file path without the feature, so it is refused with its reason
/// instead of being opened as a SQLite file of that name.
#[cfg(not(feature = "postgres"))]
fn open_postgres(url: &str) -> Result<Box<dyn Backend>, StoreError> {
    Err(StoreError::Open {
        path: redact(url),
        message: "this ctxd was built without PostgreSQL support (the `postgres` cargo feature, \
                  on by default); use a SQLite file, or a build with the feature"
            .to_owned(),
    })
}

/// What a gateway holds beside its store while it serves it: for a SQLite file, the file's
/// [`ServeLock`] (one gateway per file) and the [`Checkpoints`] thread (WAL checkpoints off the
/// commit path); nothing for a database several gateways share, which orders their writes.
#[derive(Default)]
pub struct Serving {
    /// Held for its drop: the OS releases the lock with the file.
    _lock: Option<ServeLock>,
    checkpoints: Option<Checkpoints>,
}

impl Serving {
    /// After the store's last commit: one last checkpoint, then the thread ends. The lock is
    /// held until the `Serving` is dropped.
    pub fn stop_checkpoints(&mut self) {
        if let Some(checkpoints) = self.checkpoints.take() {
            checkpoints.stop();
        }
    }
}

/// Open the store at `location` for a gateway listening on `listening` (written into a SQLite
/// store's lock, for `ctxd run` to find it); `pressure` is raised when the WAL needs cutting
/// back from the writer's connection.
pub fn serve(
    location: &Location,
    durability: Durability,
    listening: Option<SocketAddr>,
    pressure: WalPressure,
) -> Result<(Box<dyn Backend>, Serving), StoreError> {
    match location {
        Location::Sqlite(path) => {
            let lock = ServeLock::acquire_for(path, listening)?;
            let store = SqliteStore::open(path, durability)?;
            let checkpoints = Checkpoints::start(&store, path, pressure)?;
            let serving = Serving {
                _lock: Some(lock),
                checkpoints: Some(checkpoints),
            };
            Ok((Box::new(store), serving))
        }
        other => Ok((open(other, durability)?, Serving::default())),
    }
}

/// A connection URL with its password replaced, for messages and logs.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (auth, host) = match rest.rsplit_once('@') {
        Some((auth, host)) => (auth, host),
        None => return url.to_owned(),
    };
    let user = auth.split_once(':').map_or(auth, |(user, _)| user);
    if user.len() == auth.len() {
        return url.to_owned();
    }
    format!("{scheme}://{user}:***@{host}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(not(feature = "postgres"))]
    #[test]
    fn a_postgres_url_without_the_feature_is_refused_with_its_reason() {
        let Err(err) = open(
            &Location::parse("postgres://u:secret@h/db"),
            Durability::Full,
        ) else {
            panic!("opened");
        };
        let text = err.to_string();
        assert!(text.contains("built without PostgreSQL support"), "{text}");
        assert!(!text.contains("secret"), "{text}");
    }

    #[test]
    fn serving_a_sqlite_file_holds_its_lock_until_dropped() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let location = Location::Sqlite(dir.path().join("s.db"));
        let path = dir.path().join("s.db");
        let addr = "127.0.0.1:4001".parse().ok();
        let served = serve(&location, Durability::Normal, addr, WalPressure::default());
        let Ok((store, mut serving)) = served else {
            panic!("not served");
        };
        assert!(store.quick_commit());
        assert_eq!(
            ServeLock::serving(&path).as_deref(),
            Some("http://127.0.0.1:4001")
        );
        let again = serve(&location, Durability::Full, None, WalPressure::default());
        assert!(matches!(again, Err(StoreError::AlreadyServed { .. })));
        serving.stop_checkpoints();
        drop((store, serving));
        assert_eq!(ServeLock::serving(&path), None);
    }

    #[test]
    fn locations_and_redaction() {
        assert_eq!(
            Location::parse("/tmp/x.db"),
            Location::Sqlite("/tmp/x.db".into())
        );
        assert!(matches!(
            Location::parse("postgresql://u@h/db"),
            Location::Postgres(_)
        ));
        assert_eq!(
            redact("postgres://ctxd:secret@db:5432/ctxd"),
            "postgres://ctxd:***@db:5432/ctxd"
        );
        assert_eq!(redact("postgres://ctxd@db/ctxd"), "postgres://ctxd@db/ctxd");
        assert_eq!(redact("postgres://db/ctxd"), "postgres://db/ctxd");
    }
}
