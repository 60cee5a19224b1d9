//! OpenAI Chat Completions: tool calls and their answers.
//!
//! - `messages` is present and not empty.
//! - An assistant message with `tool_calls` is followed by one `tool` message per call id
//!   before any other user or assistant message (system and developer messages may come
//!   anywhere), including at the end of the conversation.
//! - A `tool` message answers a call of the assistant message before it (only tool, system and
//!   developer messages in between).
//! - `top_logprobs` only with `logprobs: true`, and a whole number from 0 to 20.

use std::borrow::Cow;

use serde::Deserialize;

use super::Refusal;
use crate::request::Head;

#[derive(Debug, Deserialize)]
struct Msg<'a> {
    #[serde(borrow, default)]
    role: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    tool_calls: Option<Vec<CallHead<'a>>>,
    #[serde(borrow, default)]
    tool_call_id: Option<Cow<'a, str>>,
}

#[derive(Debug, Deserialize)]
struct CallHead<'a> {
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
}

/// The assistant message whose calls are being answered.
struct Open<'a> {
    index: usize,
    ids: Vec<Cow<'a, str>>,
    answered: Vec<bool>,
}

impl Open<'_> {
    fn unanswered(&self) -> Result<(), Refusal> {
        let missing: Vec<&str> = self
            .ids
            .iter()
            .zip(&self.answered)
            .filter(|(_, a)| !**a)
            .map(|(id, _)| id.as_ref())
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        Err(Refusal::new(
            "chat.tool_calls_unanswered",
            format!(
                "An assistant message with 'tool_calls' must be followed by tool messages \
                 responding to each 'tool_call_id'. The following tool_call_ids did not have \
                 response messages: {}",
                missing.join(", ")
            ),
        )
        .param(format!("messages.[{}].role", self.index)))
    }
}

/// The most `top_logprobs` OpenAI accepts.
pub(crate) const MAX_TOP_LOGPROBS: i64 = 20;

/// `top_logprobs` needs `logprobs: true` and lies in 0..=20, with OpenAI's messages.
fn logprobs(head: &Head) -> Result<(), Refusal> {
    let Some(n) = head.top_logprobs() else {
        return Ok(());
    };
    if !head.wants_logprobs() {
        return Err(Refusal::new(
            "chat.top_logprobs_without_logprobs",
            "The 'top_logprobs' parameter is only allowed when 'logprobs' is enabled.",
        )
        .param("top_logprobs"));
    }
    if n > MAX_TOP_LOGPROBS {
        return Err(Refusal::new(
            "chat.top_logprobs_range",
            format!(
                "Invalid 'top_logprobs': integer above maximum value. Expected a value <= \
                 {MAX_TOP_LOGPROBS}, but got {n} instead."
            ),
        )
        .param("top_logprobs")
        .code("integer_above_max_value"));
    }
    if n < 0 {
        return Err(Refusal::new(
            "chat.top_logprobs_range",
            format!(
                "Invalid 'top_logprobs': integer below minimum value. Expected a value >= 0, \
                 but got {n} instead."
            ),
        )
        .param("top_logprobs")
        .code("integer_below_min_value"));
    }
    Ok(())
}

pub(super) fn check(head: &Head) -> Result<(), Refusal> {
    logprobs(head)?;
    let Some(raw) = head.messages.as_deref() else {
        return Err(
            Refusal::new("chat.messages", "Missing required parameter: 'messages'.")
                .param("messages")
                .code("missing_required_parameter"),
        );
    };
    if raw.is_empty() {
        return Err(Refusal::new(
            "chat.messages",
            "Invalid 'messages': empty array. Expected an array with minimum length 1, but got \
             an empty array instead.",
        )
        .param("messages")
        .code("empty_array"));
    }
    let mut open: Option<Open> = None;
    for (i, r) in raw.iter().enumerate() {
        let Ok(m) = serde_json::from_str::<Msg>(r.get()) else {
            return Ok(()); // a shape the rules cannot read
        };
        match m.role.as_deref() {
            Some("system" | "developer") => {}
            Some("tool") => {
                let id = m.tool_call_id.as_deref().unwrap_or_default();
                let slot = open
                    .as_mut()
                    .and_then(|o| o.ids.iter().position(|c| c == id).map(|p| (o, p)));
                match slot {
                    Some((o, p)) => o.answered[p] = true,
                    None => {
                        return Err(Refusal::new(
                            "chat.tool_message_unexpected",
                            "Invalid parameter: messages with role 'tool' must be a response to \
                             a preceeding message with 'tool_calls'.",
                        )
                        .param(format!("messages.[{i}].role")))
                    }
                }
            }
            _ => {
                if let Some(o) = open.take() {
                    o.unanswered()?;
                }
                let ids: Vec<Cow<str>> = m
                    .tool_calls
                    .unwrap_or_default()
                    .into_iter()
                    .map(|c| c.id.unwrap_or_default())
                    .collect();
                if m.role.as_deref() == Some("assistant") && !ids.is_empty() {
                    open = Some(Open {
                        index: i,
                        answered: vec![false; ids.len()],
                        ids,
                    });
                }
            }
        }
    }
    match open {
        Some(o) => o.unanswered(),
        None => Ok(()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn run(messages: Value) -> Result<(), Refusal> {
        let text = json!({"model": "gpt-4o", "messages": messages}).to_string();
        let head: Head = serde_json::from_str(&text).unwrap();
        check(&head)
    }

    fn call(ids: &[&str]) -> Value {
        let calls: Vec<Value> = ids
            .iter()
            .map(|id| {
                json!({"id": id, "type": "function",
                "function": {"name": "bash", "arguments": "{}"}})
            })
            .collect();
        json!({"role": "assistant", "content": null, "tool_calls": calls})
    }

    fn tool(id: &str) -> Value {
        json!({"role": "tool", "tool_call_id": id, "content": "a"})
    }

    #[test]
    fn calls_are_answered_before_anything_else() {
        let user = json!({"role": "user", "content": "hi"});
        let sys = json!({"role": "system", "content": "s"});
        assert!(run(json!([
            sys,
            user,
            call(&["a", "b"]),
            tool("b"),
            sys,
            tool("a"),
            user
        ]))
        .is_ok());
        assert!(run(
            json!([user, {"role": "assistant", "content": "x", "tool_calls": null}, user])
        )
        .is_ok());
        let err = run(json!([user, call(&["a", "b"]), tool("a"), user])).unwrap_err();
        assert_eq!(
            err.message,
            "An assistant message with 'tool_calls' must be followed by tool messages responding \
             to each 'tool_call_id'. The following tool_call_ids did not have response messages: b"
        );
        assert_eq!(err.param.as_deref(), Some("messages.[1].role"));
        assert_eq!(
            run(json!([user, call(&["a"])])).unwrap_err().rule,
            "chat.tool_calls_unanswered"
        );
    }

    #[test]
    fn tool_messages_answer_the_call_before() {
        let user = json!({"role": "user", "content": "hi"});
        let err = run(json!([user, tool("a")])).unwrap_err();
        assert_eq!(
            err.message,
            "Invalid parameter: messages with role 'tool' must be a response to a preceeding \
             message with 'tool_calls'."
        );
        assert_eq!(err.param.as_deref(), Some("messages.[1].role"));
        let err = run(json!([user, call(&["a"]), tool("x")])).unwrap_err();
        assert_eq!(err.rule, "chat.tool_message_unexpected");
        let err = run(json!([user, call(&["a"]), tool("a"), user, tool("a")])).unwrap_err();
        assert_eq!(err.param.as_deref(), Some("messages.[4].role"));
    }

    #[test]
    fn top_logprobs_needs_logprobs_and_at_most_20() {
        let head = |extra: Value| -> Result<(), Refusal> {
            let mut body =
                json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]});
            for (k, v) in extra.as_object().unwrap() {
                body[k] = v.clone();
            }
            let text = body.to_string();
            check(&serde_json::from_str::<Head>(&text).unwrap())
        };
        assert!(head(json!({"logprobs": true, "top_logprobs": 20})).is_ok());
        assert!(head(json!({"logprobs": true})).is_ok());
        assert!(head(json!({"logprobs": false, "top_logprobs": null})).is_ok());
        let e = head(json!({"top_logprobs": 5})).unwrap_err();
        assert_eq!(e.rule, "chat.top_logprobs_without_logprobs");
        assert_eq!(e.param.as_deref(), Some("top_logprobs"));
        assert_eq!(
            head(json!({"logprobs": false, "top_logprobs": 5}))
                .unwrap_err()
                .rule,
            "chat.top_logprobs_without_logprobs"
        );
        let e = head(json!({"logprobs": true, "top_logprobs": 21})).unwrap_err();
        assert_eq!(e.code, Some("integer_above_max_value"));
        assert!(e.message.contains("got 21"), "{}", e.message);
        let e = head(json!({"logprobs": true, "top_logprobs": -1})).unwrap_err();
        assert_eq!(e.code, Some("integer_below_min_value"));
    }

    #[test]
    fn messages_are_required() {
        let head: Head = serde_json::from_str(r#"{"model":"m"}"#).unwrap();
        assert_eq!(
            check(&head).unwrap_err().code,
            Some("missing_required_parameter")
        );
        assert_eq!(run(json!([])).unwrap_err().code, Some("empty_array"));
    }
}
