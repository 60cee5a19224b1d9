//! What the client was shown in place of a hidden exchange (ctxd's tool calls and their
//! results, which the client never sees): one view event per element the client will echo, the
//! first naming the entries it stands for. [`SessionLog`](super::SessionLog) matches the
//! client's echo against these events and projects the real exchange, so the model always sees
//! its own tool history.

use ctxd_core::model::{Entry, EntryKind, Message};
use serde_json::{json, Value};

/// The event recording what the client was shown in place of a hidden exchange.
pub const VIEW_EVENT: &str = "ctxd.client_view";

/// The view events for what the client was shown (`shown`, the elements it will echo) in
/// place of the entries `covers`: parented by the caller in order.
pub fn view_events(shown: &[Message], covers: &[String]) -> Vec<EntryKind> {
    shown
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let mut detail = json!({ "message": m });
            if i == 0 {
                detail["covers"] = json!(covers);
            }
            EntryKind::Event {
                name: VIEW_EVENT.to_owned(),
                detail: Some(detail),
            }
        })
        .collect()
}

/// A view event's message and the ids it covers (`None` for any other entry).
pub fn read_view(entry: &Entry) -> Option<(Message, Vec<String>)> {
    let EntryKind::Event {
        name,
        detail: Some(detail),
    } = &entry.kind
    else {
        return None;
    };
    if name != VIEW_EVENT {
        return None;
    }
    let message: Message = serde_json::from_value(detail.get("message")?.clone()).ok()?;
    let covers = detail
        .get("covers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    Some((message, covers))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn view_events_read_back() {
        let m = Message::text(ctxd_core::model::Role::Assistant, "shown");
        let kinds = view_events(std::slice::from_ref(&m), &["a".into(), "b".into()]);
        let entry = Entry {
            id: ctxd_core::model::EntryId::new("v"),
            parent: None,
            timestamp: None,
            sidechain: false,
            kind: kinds[0].clone(),
        };
        assert_eq!(read_view(&entry), Some((m, vec!["a".into(), "b".into()])));
    }
}
