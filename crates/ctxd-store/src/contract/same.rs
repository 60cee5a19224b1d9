//! When an append meets an id the session already holds. Entry ids derive from their content
//! and parent, so the same request planned by two gateways (a retry racing its original) gives
//! the same ids: the later append reads the winner's entry instead of failing. Two answers
//! with the same content under the same parent differ only in what the provider said about
//! them (usage, response id, model, stop reason): the winner's is kept.

use ctxd_core::model::{EntryKind, Message};

/// Whether `stored` (an entry's stored body and parent) stands for `new` (under `parent`).
pub(crate) fn stands_for(
    stored_parent: Option<&str>,
    stored_body: &str,
    parent: Option<&str>,
    new: &EntryKind,
) -> bool {
    if stored_parent != parent {
        return false;
    }
    let Ok(stored) = serde_json::from_str::<EntryKind>(stored_body) else {
        return false;
    };
    match (&stored, new) {
        (EntryKind::Message(a), EntryKind::Message(b)) => same_message(a, b),
        _ => &stored == new,
    }
}

fn same_message(a: &Message, b: &Message) -> bool {
    a.role == b.role && a.content == b.content && a.injected == b.injected
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use ctxd_core::model::{Role, Usage};

    #[test]
    fn the_same_content_under_the_same_parent_stands_for_the_new_entry() {
        let mut a = Message::text(Role::Assistant, "done");
        a.response_id = Some("msg_1".into());
        let mut b = a.clone();
        b.response_id = Some("msg_2".into());
        b.usage = Some(Usage::default());
        let body = serde_json::to_string(&EntryKind::Message(a)).unwrap();
        assert!(stands_for(
            Some("p"),
            &body,
            Some("p"),
            &EntryKind::Message(b.clone())
        ));
        assert!(!stands_for(
            Some("q"),
            &body,
            Some("p"),
            &EntryKind::Message(b)
        ));
        let other = EntryKind::Message(Message::text(Role::Assistant, "not done"));
        assert!(!stands_for(Some("p"), &body, Some("p"), &other));
    }
}
