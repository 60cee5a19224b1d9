//! The few fields of a request body the reply logic reads. Everything else is skipped without
//! being built (large `messages` arrays stay raw slices of the body), so a 1 MB request costs
//! one scan.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

/// The top level of a request body, any of the four APIs.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Head<'a> {
    #[serde(borrow, default)]
    pub model: Option<Cow<'a, str>>,
    #[serde(default)]
    pub stream: Option<bool>,
    /// Anthropic and Chat.
    #[serde(borrow, default)]
    pub messages: Option<Vec<&'a RawValue>>,
    /// Responses: a string or an array of items.
    #[serde(borrow, default)]
    pub input: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub tools: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub stream_options: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub thinking: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub reasoning: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub include: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub tool_choice: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub previous_response_id: Option<&'a RawValue>,
    /// Chat: `logprobs` and `top_logprobs`.
    #[serde(borrow, default)]
    pub logprobs: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub top_logprobs: Option<&'a RawValue>,
    /// Gemini: `contents` and `generationConfig` (the model and streaming come from the
    /// route, not the body).
    #[serde(borrow, default)]
    pub contents: Option<&'a RawValue>,
    #[serde(
        borrow,
        default,
        rename = "generationConfig",
        alias = "generation_config"
    )]
    pub generation_config: Option<&'a RawValue>,
}

/// A message or input item: only what decides the turn.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ItemHead<'a> {
    #[serde(borrow, default)]
    pub role: Option<Cow<'a, str>>,
    #[serde(borrow, default, rename = "type")]
    pub kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub content: Option<&'a RawValue>,
}

/// A content block: only its type.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct BlockHead<'a> {
    #[serde(borrow, default, rename = "type")]
    pub kind: Option<Cow<'a, str>>,
}

/// A tool definition in any of the three shapes.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ToolHead<'a> {
    #[serde(borrow, default)]
    pub name: Option<Cow<'a, str>>,
    #[serde(borrow, default, rename = "type")]
    pub kind: Option<Cow<'a, str>>,
    /// Anthropic.
    #[serde(borrow, default)]
    pub input_schema: Option<&'a RawValue>,
    /// Responses (flat function tools); Gemini function declarations (`parameters` or
    /// `parametersJsonSchema`).
    #[serde(
        borrow,
        default,
        alias = "parametersJsonSchema",
        alias = "parameters_json_schema"
    )]
    pub parameters: Option<&'a RawValue>,
    /// Chat.
    #[serde(borrow, default)]
    pub function: Option<FunctionHead<'a>>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct FunctionHead<'a> {
    #[serde(borrow, default)]
    pub name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub parameters: Option<&'a RawValue>,
}

/// Parses a raw value leniently: a wrong shape reads as "absent" (the mock is not a validator).
pub(crate) fn lenient<'a, T: Deserialize<'a> + Default>(raw: Option<&'a RawValue>) -> T {
    raw.and_then(|r| serde_json::from_str(r.get()).ok())
        .unwrap_or_default()
}

impl<'a> Head<'a> {
    pub(crate) fn stream(&self) -> bool {
        self.stream.unwrap_or(false)
    }

    pub(crate) fn model(&self) -> &str {
        self.model.as_deref().unwrap_or("mock-model")
    }

    pub(crate) fn tools(&self) -> Vec<ToolHead<'a>> {
        let raw: Vec<&RawValue> = lenient(self.tools);
        raw.into_iter().map(|t| lenient(Some(t))).collect()
    }

    /// The offered tools as `api` declares them: Gemini's are the `functionDeclarations` of
    /// every `tools` entry, flattened.
    pub(crate) fn tools_for(&self, api: crate::Api) -> Vec<ToolHead<'a>> {
        if api != crate::Api::Gemini {
            return self.tools();
        }
        #[derive(Default, Deserialize)]
        struct GeminiTool<'b> {
            #[serde(borrow, default, rename = "functionDeclarations")]
            #[serde(alias = "function_declarations")]
            declarations: Option<Vec<&'b RawValue>>,
        }
        let raw: Vec<&RawValue> = lenient(self.tools);
        raw.into_iter()
            .flat_map(|t| {
                lenient::<GeminiTool>(Some(t))
                    .declarations
                    .unwrap_or_default()
            })
            .map(|d| lenient(Some(d)))
            .collect()
    }

    /// Gemini: `generationConfig.thinkingConfig.includeThoughts` is true.
    pub(crate) fn wants_thoughts(&self) -> bool {
        let config: Value = lenient(self.generation_config);
        let thinking = config
            .get("thinkingConfig")
            .or_else(|| config.get("thinking_config"));
        thinking
            .and_then(|t| {
                t.get("includeThoughts")
                    .or_else(|| t.get("include_thoughts"))
            })
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }

    /// Chat: `stream_options.include_usage`.
    pub(crate) fn include_usage(&self) -> bool {
        #[derive(Default, Deserialize)]
        struct Opts {
            #[serde(default)]
            include_usage: Option<bool>,
        }
        lenient::<Opts>(self.stream_options)
            .include_usage
            .unwrap_or(false)
    }

    /// Chat: `logprobs: true`.
    pub(crate) fn wants_logprobs(&self) -> bool {
        self.logprobs.is_some_and(|r| r.get() == "true")
    }

    /// Chat: `top_logprobs` as a number (`None`: absent or null; a number that is not a whole
    /// one reads as -1, which strict mode refuses).
    pub(crate) fn top_logprobs(&self) -> Option<i64> {
        let raw = self.top_logprobs?.get();
        if raw == "null" {
            return None;
        }
        Some(raw.parse::<i64>().unwrap_or(-1))
    }

    /// Chat: the text of the last user message (a string, or its `text` parts joined).
    pub(crate) fn last_user_text(&self) -> String {
        #[derive(Default, Deserialize)]
        struct Msg<'b> {
            #[serde(borrow, default)]
            role: Option<Cow<'b, str>>,
            #[serde(default)]
            content: Option<serde_json::Value>,
        }
        let Some(messages) = self.messages.as_deref() else {
            return String::new();
        };
        for raw in messages.iter().rev() {
            let m: Msg = lenient(Some(raw));
            if m.role.as_deref() != Some("user") {
                continue;
            }
            return match m.content {
                Some(serde_json::Value::String(s)) => s,
                Some(serde_json::Value::Array(parts)) => parts
                    .iter()
                    .filter_map(|p| p.get("text").and_then(|t| t.as_str()))
                    .collect::<Vec<_>>()
                    .join("\n"),
                _ => String::new(),
            };
        }
        String::new()
    }

    /// Anthropic: `thinking.type` is `enabled` or `adaptive`.
    pub(crate) fn wants_thinking(&self) -> bool {
        let t: BlockHead = lenient(self.thinking);
        matches!(t.kind.as_deref(), Some("enabled" | "adaptive"))
    }

    /// Responses: a `reasoning` object, or encrypted reasoning in `include`.
    pub(crate) fn wants_reasoning(&self) -> bool {
        let include: Vec<Cow<str>> = lenient(self.include);
        self.reasoning.is_some_and(|r| r.get().starts_with('{'))
            || include.iter().any(|i| i == "reasoning.encrypted_content")
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn reads_only_the_needed_fields() {
        let body =
            br#"{"model":"m\u00e9","stream":true,"messages":[{"role":"user","content":"hi"}],
            "tools":[{"name":"Bash","input_schema":{}}, 3],"thinking":{"type":"adaptive"},
            "stream_options":{"include_usage":true},"extra":{"deep":[1,2,3]}}"#;
        let head: Head = serde_json::from_slice(body).unwrap();
        assert_eq!(head.model(), "mé");
        assert!(head.stream());
        assert_eq!(head.messages.as_ref().unwrap().len(), 1);
        let tools = head.tools();
        assert_eq!(tools.len(), 2);
        assert_eq!(tools[0].name.as_deref(), Some("Bash"));
        assert!(tools[1].name.is_none());
        assert!(head.wants_thinking());
        assert!(head.include_usage());
        assert!(!head.wants_reasoning());
    }

    #[test]
    fn odd_optional_fields_read_as_absent() {
        let body = br#"{"stream":null,"tools":"x","thinking":7,"stream_options":[],
            "reasoning":null,"include":["reasoning.encrypted_content"]}"#;
        let head: Head = serde_json::from_slice(body).unwrap();
        assert!(!head.stream());
        assert_eq!(head.model(), "mock-model");
        assert!(head.tools().is_empty());
        assert!(!head.wants_thinking());
        assert!(!head.include_usage());
        assert!(head.wants_reasoning());
    }
}
