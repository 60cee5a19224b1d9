//! mini-swe-agent `.traj.json`: `{info{model_stats, config, exit_status, submission},
//! messages, trajectory_format, instance_id}`.
//!
//! `messages` are OpenAI-chat shaped (system, user, assistant with `tool_calls`, tool), plus a
//! final `exit` message holding the submission, which the model never saw (kept as an event).
//! Each message's `extra` holds what the agent recorded beside it: for an assistant message the
//! provider's whole response (`extra.response`, a litellm ModelResponse with `id`, `model`,
//! `usage`), for every message a Unix `timestamp`. Entries are linear, `L<n>` being the n-th
//! message. `info.model_stats` holds cumulative totals: a `billed_totals` event at the end.

use serde_json::{Map, Value};

use ctxd_core::model::{Agent, EntryKind, Message, Role, Session, Usage};

use crate::builder::Builder;
use crate::error::{ImportError, Warning};
use crate::swe_agent::{billed_totals, path_str, prepend_thinking};
use crate::util::{iso_from_unix_millis, str_field, string_field, u64_field};
use crate::wire::openai_chat::text_of;
use crate::wire::{openai_chat, openai_responses};

pub(crate) fn import(doc: &Value, warnings: &mut Vec<Warning>) -> Result<Session, ImportError> {
    let Some(messages) = doc.get("messages").and_then(Value::as_array) else {
        return Err(ImportError::Malformed {
            format: "mini-swe-agent",
            message: "`messages` is not a list".into(),
        });
    };
    let info = doc.get("info").unwrap_or(&Value::Null);
    let mut b = Builder::default();
    {
        let meta = &mut b.session.meta;
        meta.agent = Some(Agent::MiniSweAgent);
        meta.format = match str_field(doc, "trajectory_format") {
            Some(f) => match f.strip_prefix("mini-swe-agent-") {
                Some(v) => format!("mini-swe-agent/{v}"),
                None => f.to_owned(),
            },
            None => String::from("mini-swe-agent"),
        };
        meta.id = string_field(doc, "instance_id");
        meta.model = path_str(info, &["config", "model", "model_name"]);
    }

    let mut system_seen = false;
    let mut assistant_seen = false;
    let mut first_response_model = None;
    for (i, m) in messages.iter().enumerate() {
        let n = i + 1;
        if !m.is_object() {
            warnings.push(Warning::general(format!(
                "message {n} is not an object: skipped"
            )));
            continue;
        }
        let extra = m.get("extra").unwrap_or(&Value::Null);
        let timestamp = extra
            .get("timestamp")
            .and_then(Value::as_f64)
            .and_then(|secs| iso_from_unix_millis((secs * 1000.0).round() as i64));
        if b.session.meta.started_at.is_none() {
            b.session.meta.started_at.clone_from(&timestamp);
        }
        let kind = match str_field(m, "role") {
            Some("system") if !system_seen => {
                system_seen = true;
                EntryKind::SystemPrompt {
                    text: text_of(&openai_chat::parts(
                        m.get("content").unwrap_or(&Value::Null),
                    )),
                }
            }
            Some("exit") => {
                let mut detail = Map::new();
                if let Some(extra) = extra.as_object() {
                    detail.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
                }
                if !detail.contains_key("submission") {
                    if let Some(c) = m.get("content") {
                        detail.insert("submission".into(), c.clone());
                    }
                }
                EntryKind::Event {
                    name: "exit".into(),
                    detail: Some(Value::Object(detail)),
                }
            }
            _ => {
                let mut msg = openai_chat::message(m);
                match msg.role {
                    Role::Assistant => {
                        assistant_seen = true;
                        prepend_thinking(&mut msg, m.get("thinking_blocks"));
                        if let Some(response) = extra.get("response") {
                            attach_response(&mut msg, response);
                        }
                        if first_response_model.is_none() {
                            first_response_model.clone_from(&msg.model);
                        }
                    }
                    // Observations and format-error notes the agent sends as user messages
                    // (mini-swe-agent 1.x has no tool role).
                    Role::User if assistant_seen => msg.injected = Some("observation".into()),
                    _ => {}
                }
                EntryKind::Message(msg)
            }
        };
        b.push_linear(n, timestamp, kind);
    }

    if let Some(totals) = info.get("model_stats").and_then(billed_totals) {
        b.push_linear(messages.len() + 1, None, totals);
    }
    if b.session.meta.model.is_none() {
        b.session.meta.model = first_response_model;
    }
    Ok(b.finish())
}

/// Model, response id, stop reason and usage from the provider response kept in `extra`.
fn attach_response(msg: &mut Message, response: &Value) {
    msg.model = string_field(response, "model");
    msg.response_id = string_field(response, "id");
    msg.stop_reason = response
        .get("choices")
        .and_then(|c| c.get(0))
        .and_then(|c| string_field(c, "finish_reason"))
        .or_else(|| string_field(response, "stop_reason"));
    if let Some(u) = response.get("usage").filter(|u| u.is_object()) {
        msg.usage = Some(usage(u));
    }
}

/// A litellm usage: Chat-shaped (`prompt_tokens` including cached tokens; for Anthropic models
/// also including `cache_creation_input_tokens`), or Responses/Anthropic-shaped.
fn usage(u: &Value) -> Usage {
    if u.get("prompt_tokens").is_none() && u.get("input_tokens").is_some() {
        if u.get("cache_read_input_tokens").is_some()
            || u.get("cache_creation_input_tokens").is_some()
        {
            return crate::wire::anthropic::usage(u);
        }
        return openai_responses::usage(u);
    }
    let mut usage = openai_chat::usage(u);
    if usage.cache_read == 0 {
        // DeepSeek's own field, when litellm did not copy it into `prompt_tokens_details`.
        if let Some(hit) = u64_field(u, "prompt_cache_hit_tokens") {
            let hit = hit.min(usage.input);
            usage.input -= hit;
            usage.cache_read = hit;
        }
    }
    if let Some(write) = u64_field(u, "cache_creation_input_tokens") {
        let write = write.min(usage.input);
        usage.input -= write;
        usage.cache_write = write;
    }
    usage
}
