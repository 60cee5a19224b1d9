//! The one-gateway-per-file lock of a SQLite store, and how `ctxd run` finds the gateway
//! serving a store from it.

use std::io::{Read, Seek, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use crate::StoreError;

/// One gateway per SQLite file (its indexed sessions would not see another's writes): held for
/// the gateway's life, an exclusive lock on `<store>.serve.lock`, released by the OS when the
/// process ends however it ends (no stale lock after a SIGKILL). CLI commands do not take it:
/// their writes are ordinary transactions, safe beside the gateway's.
pub struct ServeLock {
    _file: std::fs::File,
}

impl ServeLock {
    /// The lock of `store` for a process that serves no HTTP (`ctxd store vacuum`).
    pub fn acquire(store: &Path) -> Result<Self, StoreError> {
        Self::acquire_for(store, None)
    }

    /// The lock of `store`, naming the holder's pid and, for a gateway, the URL it listens on
    /// (how `ctxd run` finds the gateway already serving the store).
    pub fn acquire_for(store: &Path, listening: Option<SocketAddr>) -> Result<Self, StoreError> {
        let path = lock_path(store);
        let io = |e: std::io::Error| StoreError::Open {
            path: PathBuf::from(&path).display().to_string(),
            message: e.to_string(),
        };
        if let Some(dir) = store.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let pid = holder.lines().next().unwrap_or("").trim();
                return Err(StoreError::AlreadyServed {
                    store: store.display().to_string(),
                    holder: if pid.is_empty() {
                        String::new()
                    } else {
                        format!(" (pid {pid})")
                    },
                });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
        }
        file.set_len(0).map_err(io)?;
        file.rewind().map_err(io)?;
        writeln!(file, "{}", std::process::id()).map_err(io)?;
        if let Some(addr) = listening {
            writeln!(file, "http://{addr}").map_err(io)?;
        }
        Ok(ServeLock { _file: file })
    }

    /// The URL of the gateway serving `store` now, from its lock: `None` when no process holds
    /// the lock (a file left by one that ended says nothing), or its holder serves no HTTP.
    pub fn serving(store: &Path) -> Option<String> {
        let mut file = std::fs::File::open(lock_path(store)).ok()?;
        match file.try_lock_shared() {
            Err(std::fs::TryLockError::WouldBlock) => {}
            // Free: nobody serves it (the shared lock is released with the file).
            _ => return None,
        }
        let mut holder = String::new();
        file.read_to_string(&mut holder).ok()?;
        holder
            .lines()
            .nth(1)
            .map(str::trim)
            .filter(|u| u.starts_with("http://"))
            .map(str::to_owned)
    }
}

/// `<store>.serve.lock`.
pub(crate) fn lock_path(store: &Path) -> std::ffi::OsString {
    let mut path = store.as_os_str().to_owned();
    path.push(".serve.lock");
    path
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_at_a_time_and_the_url_is_found_from_the_lock() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("s.db");
        assert_eq!(ServeLock::serving(&store), None);
        let addr: SocketAddr = "127.0.0.1:4000".parse().unwrap();
        let lock = ServeLock::acquire_for(&store, Some(addr)).unwrap();
        assert_eq!(
            ServeLock::serving(&store).as_deref(),
            Some("http://127.0.0.1:4000")
        );
        let err = ServeLock::acquire(&store).err().unwrap();
        let pid = format!("(pid {})", std::process::id());
        assert!(
            matches!(&err, StoreError::AlreadyServed { holder, .. } if holder.contains(&pid)),
            "{err}"
        );
        drop(lock);
        assert_eq!(ServeLock::serving(&store), None);
        assert!(ServeLock::acquire(&store).is_ok());
    }
}
