//! Write facts on a request ([`ctxd_core::mechanisms::writes`]): when the request's new elements bring
//! the results of write calls in the branch's last assistant message, the edits stripping their
//! content (each showing its fact) are appended after them, before the request is projected,
//! and go to the store with the request's batch. Every later request shows the same edits; the
//! prefix before the stripped message is the previous request's, byte for byte.

use ctxd_core::mechanisms::writes::{self, Settings};
use ctxd_store::NewEntry;

use super::hash;
use super::log::SessionLog;

/// Plan and append the write-facts edits for the request whose new entries are `fresh`
/// (positions in `log`); returns them for the store. `now` stamps them.
pub fn strip_writes(
    log: &mut SessionLog,
    settings: &Settings,
    fresh: &[usize],
    now: &str,
) -> Vec<NewEntry> {
    if !settings.enabled || fresh.is_empty() {
        return Vec::new();
    }
    let drafts = writes::plan(&log.session, &log.branch(), fresh, settings);
    let mut parent = log.leaf();
    drafts
        .into_iter()
        .map(|d| {
            let tag = format!("write facts {}", d.target);
            let (pos, entry) = log.append_under(
                parent,
                "write_facts",
                &hash::text(&tag),
                d.kind,
                Some(now.to_owned()),
            );
            parent = Some(pos);
            NewEntry::new(entry)
        })
        .collect()
}
