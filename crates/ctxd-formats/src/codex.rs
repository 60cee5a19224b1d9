//! Codex CLI rollouts (`~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl`), current and legacy.
//!
//! Current rollouts hold one `{timestamp, type, payload}` object a line: `session_meta`,
//! `turn_context`, `response_item` (the Responses API items the model saw, mapped by
//! [`crate::wire::openai_responses::item`]), `event_msg` (UI events: most repeat response items
//! and are skipped; `token_count` carries the provider's usage), `compacted`, and newer kinds
//! (`world_state`, ...) kept as events. Legacy rollouts (before about Sep 2025) start with a bare
//! meta object, then `{"record_type":"state"}` markers and bare response items.
//!
//! The session is linear: every entry is chained to the previous one ([`Builder::push_linear`]).

use serde_json::{Map, Value};

use ctxd_core::model::{Agent, Compaction, ContentBlock, EntryKind, Message, Role, Session, Usage};

use crate::builder::Builder;
use crate::error::{ImportError, Warning};
use crate::jsonl::LineImporter;
use crate::util::{str_field, string_field, u64_field};
use crate::wire::openai_responses;

/// Token totals of a `token_count` event, to recognise the repeats Codex writes (the same
/// response's usage is reported again after each tool call).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Totals {
    input: u64,
    cached: u64,
    output: u64,
    reasoning: u64,
    total: u64,
}

impl Totals {
    fn of(v: &Value) -> Self {
        Self {
            input: u64_field(v, "input_tokens").unwrap_or(0),
            cached: u64_field(v, "cached_input_tokens").unwrap_or(0),
            output: u64_field(v, "output_tokens").unwrap_or(0),
            reasoning: u64_field(v, "reasoning_output_tokens").unwrap_or(0),
            total: u64_field(v, "total_tokens").unwrap_or(0),
        }
    }
}

/// Line types of the current format, which always carry a `payload`.
const ENVELOPE_TYPES: &[&str] = &[
    "session_meta",
    "turn_context",
    "response_item",
    "event_msg",
    "compacted",
];

#[derive(Default)]
pub(crate) struct Importer {
    builder: Builder,
    /// The first `session_meta` (or legacy meta line) has been read.
    seen_meta: bool,
    legacy: bool,
    /// The model of the latest `turn_context`.
    model: Option<String>,
    provider: Option<String>,
    /// The system prompt in effect, so an unchanged one is not recorded twice.
    system: Option<String>,
    last_totals: Option<Totals>,
    /// Context size (prompt + output) of the latest counted response, for compactions.
    last_context: Option<u64>,
}

impl LineImporter for Importer {
    const FORMAT: &'static str = "codex";

    fn line(&mut self, line_no: usize, line: &str) -> Result<(), String> {
        let value: Value = serde_json::from_str(line).map_err(|e| format!("invalid JSON: {e}"))?;
        let Value::Object(mut obj) = value else {
            return Err("not a JSON object".into());
        };
        if obj.contains_key("record_type") {
            // Legacy `{"record_type":"state"}` markers carry nothing the model saw.
            self.legacy = true;
            return Ok(());
        }
        let timestamp = take_string(&mut obj, "timestamp");
        let ty = take_string(&mut obj, "type");
        match (ty, obj.remove("payload")) {
            (Some(ty), Some(payload)) => self.record(line_no, timestamp, &ty, payload),
            (Some(ty), None) if ENVELOPE_TYPES.contains(&ty.as_str()) => {
                Err(format!("a `{ty}` line without a payload"))
            }
            (Some(ty), None) => {
                // Legacy bare response item: put its type back and map it like a payload.
                self.legacy = true;
                obj.insert("type".into(), Value::String(ty.clone()));
                self.response_item(line_no, timestamp, &ty, Value::Object(obj));
                Ok(())
            }
            (None, _) if obj.contains_key("id") && !self.seen_meta => {
                self.legacy = true;
                self.session_meta(line_no, timestamp, &Value::Object(obj));
                Ok(())
            }
            (None, _) => Err("not a Codex rollout line (no type)".into()),
        }
    }

    fn finish(mut self, warnings: &mut Vec<Warning>) -> Result<Session, ImportError> {
        if !self.seen_meta {
            warnings.push(Warning::general(
                "no session_meta line: the session id, cwd and version are unknown",
            ));
            self.builder.session.meta.agent = Some(Agent::Codex);
            self.builder.session.meta.format = if self.legacy {
                "codex/legacy".into()
            } else {
                "codex/rollout".into()
            };
        }
        Ok(self.builder.finish())
    }
}

impl Importer {
    fn record(
        &mut self,
        line_no: usize,
        ts: Option<String>,
        ty: &str,
        payload: Value,
    ) -> Result<(), String> {
        match ty {
            "session_meta" => self.session_meta(line_no, ts, &payload),
            "turn_context" => self.turn_context(line_no, ts, &payload),
            "response_item" => {
                let item_ty = str_field(&payload, "type").unwrap_or("message").to_owned();
                self.response_item(line_no, ts, &item_ty, payload);
            }
            "event_msg" => self.event_msg(line_no, ts, payload),
            "compacted" => self.compacted(line_no, ts, &payload),
            // `world_state`, `inter_agent_communication_metadata` and kinds not known yet: kept.
            other => {
                self.builder.push_linear(
                    line_no,
                    ts,
                    EntryKind::Event {
                        name: other.to_owned(),
                        detail: Some(payload),
                    },
                );
            }
        }
        Ok(())
    }

    fn session_meta(&mut self, line_no: usize, ts: Option<String>, p: &Value) {
        if self.seen_meta {
            // Forked and subagent rollouts repeat their ancestors' meta lines: an event.
            let mut detail = Map::new();
            for key in ["id", "forked_from_id", "parent_thread_id", "cli_version"] {
                if let Some(v) = p.get(key).filter(|v| !v.is_null()) {
                    detail.insert(key.into(), v.clone());
                }
            }
            self.builder.push_linear(
                line_no,
                ts,
                EntryKind::Event {
                    name: "session_meta".into(),
                    detail: Some(Value::Object(detail)),
                },
            );
            return;
        }
        self.seen_meta = true;
        let meta = &mut self.builder.session.meta;
        meta.agent = Some(Agent::Codex);
        meta.id = string_field(p, "id").or_else(|| string_field(p, "session_id"));
        meta.cwd = string_field(p, "cwd");
        meta.started_at = string_field(p, "timestamp").or_else(|| ts.clone());
        meta.format = match str_field(p, "cli_version") {
            Some(v) => format!("codex/{v}"),
            None if self.legacy => "codex/legacy".into(),
            None => "codex/rollout".into(),
        };
        meta.parent_session = string_field(p, "forked_from_id")
            .or_else(|| string_field(p, "parent_thread_id"))
            .or_else(|| {
                p.pointer("/source/subagent/thread_spawn/parent_thread_id")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            });
        if let Some(model) = string_field(p, "model") {
            meta.model = Some(model.clone());
            self.model = Some(model);
        }
        self.provider = string_field(p, "model_provider");
        // `base_instructions` is the request's `instructions`; without it, older rollouts put the
        // instructions they sent in `instructions`.
        let system = p
            .get("base_instructions")
            .and_then(instructions_text)
            .or_else(|| p.get("instructions").and_then(instructions_text));
        if let Some(text) = system {
            self.set_system(line_no, ts, text);
        }
    }

    fn set_system(&mut self, line_no: usize, ts: Option<String>, text: String) {
        if self.system.as_deref() == Some(text.as_str()) {
            return;
        }
        self.system = Some(text.clone());
        self.builder
            .push_linear(line_no, ts, EntryKind::SystemPrompt { text });
    }

    fn turn_context(&mut self, line_no: usize, ts: Option<String>, p: &Value) {
        if let Some(model) = str_field(p, "model").filter(|m| !m.is_empty()) {
            if self.model.as_deref() != Some(model) {
                self.model = Some(model.to_owned());
                let meta = &mut self.builder.session.meta;
                if meta.model.is_none() {
                    meta.model = Some(model.to_owned());
                }
                self.builder.push_linear(
                    line_no,
                    ts.clone(),
                    EntryKind::ModelChange {
                        provider: self.provider.clone(),
                        model: model.to_owned(),
                    },
                );
            }
        }
        // A turn may override the base instructions; other settings (sandbox, approval policy,
        // user/developer instructions, which also arrive as messages) are not context.
        if let Some(text) = p.get("base_instructions").and_then(instructions_text) {
            self.set_system(line_no, ts, text);
        }
    }

    fn response_item(&mut self, line_no: usize, ts: Option<String>, ty: &str, payload: Value) {
        let kind = match ty {
            "ghost_snapshot" => EntryKind::Event {
                name: "ghost_snapshot".into(),
                detail: payload.get("ghost_commit").cloned(),
            },
            _ => EntryKind::Message(self.message(&payload)),
        };
        self.builder.push_linear(line_no, ts, kind);
    }

    /// A response item as a message, with Codex's injected context marked.
    fn message(&self, it: &Value) -> Message {
        let mut msg = match str_field(it, "type") {
            // A message another agent sent to this one (multi-agent rollouts).
            Some("agent_message") => Message::new(
                Role::User,
                openai_responses::parts(it.get("content").unwrap_or(&Value::Null)),
            )
            .injected("agent-message"),
            _ => openai_responses::item(it),
        };
        match msg.role {
            Role::User => msg.injected = msg.injected.or_else(|| injected_user(&msg.content)),
            Role::Developer | Role::System => {
                msg.injected = Some(injected_developer(&msg.content));
            }
            Role::Assistant => msg.model.clone_from(&self.model),
            Role::Tool => {}
        }
        msg
    }

    fn event_msg(&mut self, line_no: usize, ts: Option<String>, payload: Value) {
        let ty = str_field(&payload, "type")
            .unwrap_or("event_msg")
            .to_owned();
        match ty.as_str() {
            "token_count" => self.token_count(line_no, ts, &payload),
            // These repeat response items (the user's prompt, the answer, reasoning summaries).
            "user_message"
            | "agent_message"
            | "agent_reasoning"
            | "agent_reasoning_raw_content"
            | "agent_reasoning_section_break" => {}
            _ => {
                if ty == "thread_name_updated" {
                    if let Some(name) = str_field(&payload, "thread_name") {
                        self.builder.session.meta.title = Some(name.to_owned());
                    }
                }
                if ty == "task_started" {
                    self.context_window(&payload);
                }
                let detail = if bulky_event(&ty) {
                    scalars(payload)
                } else {
                    payload
                };
                self.builder.push_linear(
                    line_no,
                    ts,
                    EntryKind::Event {
                        name: ty,
                        detail: Some(detail),
                    },
                );
            }
        }
    }

    fn context_window(&mut self, v: &Value) {
        if let Some(w) = u64_field(v, "model_context_window").filter(|w| *w > 0) {
            self.builder.session.meta.context_window = Some(w);
        }
    }

    /// `token_count{info{total_token_usage, last_token_usage, model_context_window}}`: one usage
    /// entry per response. Codex writes the event again (with the same totals) after tool calls
    /// and on rate-limit updates; only a change of the running total is a new response.
    fn token_count(&mut self, line_no: usize, ts: Option<String>, p: &Value) {
        let Some(info) = p.get("info").filter(|i| i.is_object()) else {
            return;
        };
        self.context_window(info);
        let totals = info.get("total_token_usage").map(Totals::of);
        if totals.is_some() && totals == self.last_totals {
            return;
        }
        self.last_totals = totals;
        let Some(last) = info.get("last_token_usage").filter(|l| l.is_object()) else {
            return;
        };
        let usage = codex_usage(last);
        if usage.is_zero() {
            return;
        }
        self.last_context = Some(usage.prompt_tokens() + usage.output);
        self.builder
            .push_linear(line_no, ts, EntryKind::Usage { usage });
    }

    fn compacted(&mut self, line_no: usize, ts: Option<String>, p: &Value) {
        let replacement = p
            .get("replacement_history")
            .and_then(Value::as_array)
            .map(|items| items.iter().map(|it| self.message(it)).collect());
        self.builder.push_linear(
            line_no,
            ts,
            EntryKind::Compaction(Compaction {
                summary: string_field(p, "message").unwrap_or_default(),
                first_kept: None,
                tokens_before: self.last_context,
                replacement,
            }),
        );
    }
}

/// Codex usage: `input_tokens` include `cached_input_tokens` (and the cache writes some
/// providers report); `output_tokens` include `reasoning_output_tokens`.
fn codex_usage(last: &Value) -> Usage {
    let mut usage = openai_responses::usage(last);
    if let Some(write) = u64_field(last, "cache_write_input_tokens") {
        let write = write.min(usage.input);
        usage.input -= write;
        usage.cache_write = write;
    }
    usage
}

/// `base_instructions` is a string in older rollouts and `{text}` in newer ones.
fn instructions_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Object(_) => string_field(v, "text").filter(|s| !s.is_empty()),
        _ => None,
    }
}

fn take_string(obj: &mut Map<String, Value>, key: &str) -> Option<String> {
    match obj.remove(key) {
        Some(Value::String(s)) => Some(s),
        Some(other) => {
            obj.insert(key.into(), other);
            None
        }
        None => None,
    }
}

fn first_text(content: &[ContentBlock]) -> Option<&str> {
    content.iter().find_map(|b| match b {
        ContentBlock::Text { text } => Some(text.trim_start()),
        _ => None,
    })
}

/// The fragments Codex injects as `user` messages, by their opening marker (codex-rs
/// `CONTEXTUAL_USER_FRAGMENT_MATCHERS`, plus the older `<user_instructions>` wrapper).
const USER_MARKERS: &[(&str, &str)] = &[
    ("# AGENTS.md instructions", "agents-md"),
    ("<INSTRUCTIONS>", "agents-md"),
    ("<user_instructions>", "user-instructions"),
    ("<environment_context>", "environment-context"),
    ("<turn_aborted>", "turn-aborted"),
    ("<user_shell_command>", "user-shell-command"),
    ("<skill>", "skill"),
    ("<subagent_notification>", "subagent-notification"),
    ("<agent_message_board_notification>", "agent-message-board"),
    ("<codex_internal_context", "codex-internal-context"),
    ("<goal_context>", "goal-context"),
    ("<recommended_plugins>", "recommended-plugins"),
    ("<hook_prompt", "hook-prompt"),
];

/// The kind of context Codex injected as this `user` message (`environment-context`, ...),
/// `None` for what a person typed. The gateway records Codex's requests as sent; readers that
/// count prompts ask this.
pub fn injected_user(content: &[ContentBlock]) -> Option<String> {
    let text = first_text(content)?;
    USER_MARKERS
        .iter()
        .find(|(marker, _)| text.starts_with(marker))
        .map(|(_, kind)| (*kind).to_owned())
}

/// Developer messages are always the agent's: typed by their leading tag when they have one
/// (`<permissions instructions>`, `<skills_instructions>`, `<collaboration_mode>`, ...).
fn injected_developer(content: &[ContentBlock]) -> String {
    let tag = first_text(content)
        .and_then(|t| t.strip_prefix('<'))
        .map(|t| {
            t.chars()
                .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | ' ' | '-'))
                .take(48)
                .collect::<String>()
        })
        .filter(|t| !t.is_empty());
    match tag {
        Some(tag) => tag.trim().replace([' ', '_'], "-"),
        None => "developer-instructions".into(),
    }
}

/// Events that repeat a tool call's whole output (the response items hold it already).
fn bulky_event(ty: &str) -> bool {
    ty.ends_with("_end")
        || ty.ends_with("_delta")
        || ty.ends_with("_request")
        || ty.ends_with("_response")
        || ty.starts_with("item_")
}

/// Only the short scalar fields of an event (ids, status, exit codes).
fn scalars(payload: Value) -> Value {
    let Value::Object(obj) = payload else {
        return payload;
    };
    let kept: Map<String, Value> = obj
        .into_iter()
        .filter(|(_, v)| match v {
            Value::String(s) => s.len() <= 256,
            Value::Array(_) | Value::Object(_) => false,
            _ => true,
        })
        .collect();
    Value::Object(kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn import(lines: &[&str]) -> (Session, Vec<Warning>) {
        let text = lines.join("\n");
        let mut warnings = Vec::new();
        let session = crate::jsonl::run(text.as_bytes(), Importer::default(), &mut warnings)
            .unwrap_or_else(|e| panic!("{e}"));
        (session, warnings)
    }

    #[test]
    fn repeated_token_counts_are_counted_once() {
        let tc = r#"{"timestamp":"t","type":"event_msg","payload":{"type":"token_count","info":{"total_token_usage":{"input_tokens":100,"cached_input_tokens":60,"output_tokens":7,"total_tokens":107},"last_token_usage":{"input_tokens":100,"cached_input_tokens":60,"output_tokens":7,"total_tokens":107},"model_context_window":1000}}}"#;
        let (s, w) = import(&[
            r#"{"timestamp":"t","type":"session_meta","payload":{"id":"x","cli_version":"0.1"}}"#,
            tc,
            tc,
        ]);
        assert!(w.is_empty());
        let usages: Vec<Usage> = s
            .entries
            .iter()
            .filter_map(|e| match &e.kind {
                EntryKind::Usage { usage } => Some(*usage),
                _ => None,
            })
            .collect();
        assert_eq!(usages.len(), 1);
        assert_eq!(
            (usages[0].input, usages[0].cache_read, usages[0].output),
            (40, 60, 7)
        );
        assert_eq!(s.meta.context_window, Some(1000));
        assert_eq!(s.meta.format, "codex/0.1");
    }

    #[test]
    fn developer_tags_name_the_injection() {
        let c = vec![ContentBlock::text("<permissions instructions>\nx")];
        assert_eq!(injected_developer(&c), "permissions-instructions");
        let c = vec![ContentBlock::text("You are Codex")];
        assert_eq!(injected_developer(&c), "developer-instructions");
        let c = vec![ContentBlock::text(
            "  <environment_context>\n</environment_context>",
        )];
        assert_eq!(injected_user(&c).as_deref(), Some("environment-context"));
        assert_eq!(injected_user(&[ContentBlock::text("<div>hi</div>")]), None);
    }
}
