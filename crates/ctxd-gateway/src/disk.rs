//! The free space of the file system holding a store.

use std::path::Path;

/// Bytes free (for an unprivileged writer) and the size of the file system holding `path`;
/// `None` where that cannot be read.
pub fn disk_space(path: &Path) -> Option<(u64, u64)> {
    #[cfg(unix)]
    {
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let st = rustix::fs::statvfs(dir).ok()?;
        Some((
            st.f_bavail.saturating_mul(st.f_frsize),
            st.f_blocks.saturating_mul(st.f_frsize),
        ))
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}
