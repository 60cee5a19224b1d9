//! What ctxd's tests share, said once: where the shared sessions and captured requests are, a
//! child command that sees none of the user's ctxd settings, and log entries to build sessions
//! from. A dev-dependency only; never in a shipped binary.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use ctxd_core::model::{Entry, EntryId, EntryKind, Message, Role};

/// The shared test data (`sessions/`, `clients/captured/`): `$CTXD_SHARED`, else `shared`
/// beside the repository.
pub fn shared() -> PathBuf {
    std::env::var_os("CTXD_SHARED").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared"),
        PathBuf::from,
    )
}

/// `cmd` with `home` as its `HOME` and none of the user's `CTXD_*`, `XDG_*` or `RUST_LOG` (a
/// default store, an exported `CTXD_STORE` or `CTXD_LISTEN` would change what it does);
/// `CTXD_SHARED`, where the test data is, passes.
pub fn isolated(mut cmd: Command, home: &Path) -> Command {
    for (key, _) in std::env::vars_os() {
        let Some(name) = key.to_str() else { continue };
        if name.starts_with("CTXD_") || name.starts_with("XDG_") || name == "RUST_LOG" {
            cmd.env_remove(&key);
        }
    }
    cmd.env("HOME", home);
    if let Some(shared) = std::env::var_os("CTXD_SHARED") {
        cmd.env("CTXD_SHARED", shared);
    }
    cmd
}

/// Run `cmd`, which must succeed (its stderr is the failure message); its output.
pub fn succeed(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A log entry with no timestamp, on the main line (not a side chain).
pub fn entry(id: &str, parent: Option<&str>, kind: EntryKind) -> Entry {
    Entry {
        id: EntryId::new(id),
        parent: parent.map(EntryId::new),
        timestamp: None,
        sidechain: false,
        kind,
    }
}

/// A message of plain text.
pub fn text(role: Role, text: &str) -> EntryKind {
    EntryKind::Message(Message::text(role, text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn isolated_commands_see_no_ctxd_setting() {
        let home = Path::new("/nonexistent-home");
        let cmd = isolated(Command::new("env"), home);
        let envs: Vec<_> = cmd.get_envs().collect();
        assert!(envs.contains(&("HOME".as_ref(), Some(home.as_os_str()))));
    }

    #[test]
    fn entries_hang_from_their_parent() {
        let e = entry("b", Some("a"), text(Role::User, "hi"));
        assert_eq!(e.parent, Some(EntryId::new("a")));
        assert!(e.timestamp.is_none() && !e.sidechain);
    }
}
