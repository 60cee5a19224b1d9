//! SWE-agent `.traj`: one JSON document `{environment, trajectory, history, info, replay_config?}`.
//!
//! `history` is the message list the model saw (roles system/user/assistant/tool, content a
//! string or a list of parts, `tool_calls`, `message_type`); without it the `trajectory` steps
//! (`response` then `observation`) are used. Entries are linear, `L<n>` being the n-th history
//! item (or the n-th message made from the steps). `info.model_stats` holds the run's cumulative
//! billed totals, recorded as a `billed_totals` event at the end: they are not the usage of any
//! one response.

use serde_json::{Map, Value};

use ctxd_core::model::{Agent, ContentBlock, EntryKind, Message, Role, Session};

use crate::builder::Builder;
use crate::error::{ImportError, Warning};
use crate::util::{str_field, string_field, u64_field};
use crate::wire::openai_chat::{self, text_of};

pub(crate) fn import(doc: &Value, warnings: &mut Vec<Warning>) -> Result<Session, ImportError> {
    let Some(obj) = doc.as_object() else {
        return Err(malformed("the document is not a JSON object"));
    };
    let info = obj.get("info").unwrap_or(&Value::Null);
    let replay = replay_config(obj.get("replay_config"));
    let mut b = Builder::default();
    {
        let meta = &mut b.session.meta;
        meta.agent = Some(Agent::SweAgent);
        meta.format = String::from("swe-agent");
        meta.id = string_field(doc, "instance_id")
            .or_else(|| string_field(info, "instance_id"))
            .or_else(|| path_str(&replay, &["problem_statement", "id"]));
        meta.model = path_str(&replay, &["agent", "model", "name"])
            .or_else(|| path_str(info, &["model_name"]))
            .or_else(|| path_str(doc, &["config", "agent", "model", "name"]))
            .or_else(|| path_str(doc, &["config", "model", "model_name"]));
    }

    let mut n = 0usize;
    match obj.get("history") {
        Some(Value::Array(history)) => {
            let mut system_seen = false;
            let mut assistant_seen = false;
            for item in history {
                let Some(kind) = history_item(item, &mut system_seen, &mut assistant_seen) else {
                    warnings.push(Warning::general(format!(
                        "history item {} is not an object: skipped",
                        n + 1
                    )));
                    n += 1;
                    continue;
                };
                n += 1;
                b.push_linear(n, None, kind);
            }
        }
        _ => match obj.get("trajectory") {
            Some(Value::Array(steps)) => {
                warnings.push(Warning::general(
                    "no `history`: messages rebuilt from the trajectory steps (no system prompt \
                     or task text)",
                ));
                for step in steps {
                    for kind in step_kinds(step) {
                        n += 1;
                        b.push_linear(n, None, kind);
                    }
                }
            }
            _ => return Err(malformed("neither `history` nor `trajectory` is a list")),
        },
    }

    if let Some(exit) = exit_event(info) {
        n += 1;
        b.push_linear(n, None, exit);
    }
    if let Some(totals) = info.get("model_stats").and_then(billed_totals) {
        n += 1;
        b.push_linear(n, None, totals);
    }
    if b.session.entries.is_empty() {
        return Err(malformed("no messages in the trajectory"));
    }
    Ok(b.finish())
}

/// One history item as an entry. The first system message is the system prompt; demonstrations
/// and environment observations are context the agent injected.
fn history_item(
    item: &Value,
    system_seen: &mut bool,
    assistant_seen: &mut bool,
) -> Option<EntryKind> {
    let obj = item.as_object()?;
    let role = str_field(item, "role");
    let message_type = str_field(item, "message_type");
    let is_demo = obj.get("is_demo").and_then(Value::as_bool) == Some(true)
        || message_type == Some("demonstration");
    if role == Some("system") && !*system_seen && !is_demo {
        *system_seen = true;
        return Some(EntryKind::SystemPrompt {
            text: text_of(&openai_chat::parts(
                obj.get("content").unwrap_or(&Value::Null),
            )),
        });
    }
    let mut msg = openai_chat::message(item);
    match msg.role {
        Role::Tool => fill_tool_call_id(&mut msg, obj),
        Role::Assistant => {
            prepend_thinking(&mut msg, obj.get("thinking_blocks"));
            if !is_demo {
                *assistant_seen = true;
            }
        }
        _ => {}
    }
    if is_demo {
        msg.injected = Some("demonstration".into());
    } else if msg.role == Role::User
        && (message_type == Some("observation") || (message_type.is_none() && *assistant_seen))
    {
        // The environment's reply to an action, sent as a user message.
        msg.injected = Some("observation".into());
    }
    Some(EntryKind::Message(msg))
}

/// SWE-agent writes `tool_call_ids` (a list) on tool messages instead of `tool_call_id`.
fn fill_tool_call_id(msg: &mut Message, obj: &Map<String, Value>) {
    let id = obj
        .get("tool_call_ids")
        .and_then(Value::as_array)
        .and_then(|ids| ids.first())
        .and_then(Value::as_str);
    if let (Some(id), Some(ContentBlock::ToolResult { call_id, .. })) =
        (id, msg.content.first_mut())
    {
        if call_id.is_empty() {
            *call_id = id.to_owned();
        }
    }
}

/// `thinking_blocks` (Anthropic-shaped, from litellm) before the message's text.
pub(crate) fn prepend_thinking(msg: &mut Message, blocks: Option<&Value>) {
    let Some(blocks) = blocks.and_then(Value::as_array).filter(|b| !b.is_empty()) else {
        return;
    };
    let thinking: Vec<ContentBlock> = blocks
        .iter()
        .map(crate::wire::anthropic::block)
        .filter(|b| !matches!(b, ContentBlock::Thinking { thinking, signature: None, .. } if thinking.is_empty()))
        .collect();
    msg.content.splice(0..0, thinking);
}

/// A trajectory step: the model's response, then the observation it got back.
fn step_kinds(step: &Value) -> Vec<EntryKind> {
    let mut kinds = Vec::with_capacity(2);
    let response = str_field(step, "response").map(str::to_owned).or_else(|| {
        let thought = str_field(step, "thought").unwrap_or_default();
        let action = str_field(step, "action").unwrap_or_default();
        (!thought.is_empty() || !action.is_empty()).then(|| format!("{thought}{action}"))
    });
    if let Some(text) = response {
        let mut msg = Message::text(Role::Assistant, text);
        prepend_thinking(&mut msg, step.get("thinking_blocks"));
        kinds.push(EntryKind::Message(msg));
    }
    if let Some(obs) = str_field(step, "observation") {
        kinds.push(EntryKind::Message(
            Message::text(Role::User, obs).injected("observation"),
        ));
    }
    kinds
}

/// How the run ended: not model context, kept as an event.
fn exit_event(info: &Value) -> Option<EntryKind> {
    let status = info.get("exit_status").filter(|s| !s.is_null())?;
    let mut detail = Map::new();
    detail.insert("exit_status".into(), status.clone());
    if let Some(sub) = info.get("submission").filter(|s| !s.is_null()) {
        detail.insert("submission".into(), sub.clone());
    }
    Some(EntryKind::Event {
        name: "exit".into(),
        detail: Some(Value::Object(detail)),
    })
}

/// `model_stats{tokens_sent, tokens_received, api_calls, instance_cost}`: cumulative totals of
/// the run, as `billed_totals{input, output, api_calls, cost}` (only the keys the file states).
pub(crate) fn billed_totals(stats: &Value) -> Option<EntryKind> {
    let obj = stats.as_object()?;
    let mut detail = Map::new();
    let pairs = [
        ("input", "tokens_sent"),
        ("output", "tokens_received"),
        ("api_calls", "api_calls"),
    ];
    for (to, from) in pairs {
        if let Some(n) = u64_field(stats, from) {
            detail.insert(to.into(), Value::from(n));
        }
    }
    if let Some(cost) = obj
        .get("instance_cost")
        .or_else(|| obj.get("total_cost"))
        .and_then(Value::as_f64)
    {
        detail.insert("cost".into(), Value::from(cost));
    }
    (!detail.is_empty()).then(|| EntryKind::Event {
        name: "billed_totals".into(),
        detail: Some(Value::Object(detail)),
    })
}

/// `replay_config` is the run's config, written as a JSON string (or an object).
fn replay_config(v: Option<&Value>) -> Value {
    match v {
        Some(Value::String(s)) => serde_json::from_str(s).unwrap_or(Value::Null),
        Some(other) => other.clone(),
        None => Value::Null,
    }
}

pub(crate) fn path_str(v: &Value, path: &[&str]) -> Option<String> {
    let mut cur = v;
    for key in path {
        cur = cur.get(key)?;
    }
    cur.as_str().filter(|s| !s.is_empty()).map(str::to_owned)
}

fn malformed(message: &str) -> ImportError {
    ImportError::Malformed {
        format: "swe-agent",
        message: message.into(),
    }
}
