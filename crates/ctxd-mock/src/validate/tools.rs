//! The `tools` field, every API: what a gateway that rewrites the tool list could get wrong.
//!
//! - Tool names are unique.
//! - A `tool_choice` naming a tool names one of `tools` (Anthropic `{"type":"tool","name"}`,
//!   Chat `{"type":"function","function":{"name"}}`, Responses `{"type":"function","name"}`).
//!
//! The messages follow the providers' wording as far as it is known; tests match the rule.

use std::borrow::Cow;

use serde::Deserialize;

use super::Refusal;
use crate::request::{lenient, Head};
use crate::Api;

#[derive(Debug, Default, Deserialize)]
struct Choice<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    function: Option<ChoiceFunction<'a>>,
}

#[derive(Debug, Default, Deserialize)]
struct ChoiceFunction<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
}

pub(super) fn check(api: Api, head: &Head) -> Result<(), Refusal> {
    let tools = head.tools();
    let names: Vec<&str> = tools
        .iter()
        .filter_map(|t| {
            t.name
                .as_deref()
                .or_else(|| t.function.as_ref().and_then(|f| f.name.as_deref()))
        })
        .collect();
    for (i, n) in names.iter().enumerate() {
        if names[..i].contains(n) {
            let r = Refusal::new(
                "tools.unique_names",
                format!("tools: Tool names must be unique ({n:?} appears twice)."),
            );
            return Err(match api {
                Api::Anthropic => r,
                _ => r.param("tools"),
            });
        }
    }
    let choice: Choice = lenient(head.tool_choice);
    let chosen = match api {
        Api::OpenAiChat => choice.function.and_then(|f| f.name),
        Api::Anthropic | Api::OpenAiResponses | Api::Gemini => choice.name,
    };
    if let Some(chosen) = chosen {
        if !names.contains(&chosen.as_ref()) {
            let r = Refusal::new(
                "tools.choice_not_offered",
                format!("tool_choice: Tool '{chosen}' not found in 'tools'."),
            );
            return Err(match api {
                Api::Anthropic => r,
                _ => r.param("tool_choice"),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn run(api: Api, body: &str) -> Result<(), &'static str> {
        let head: Head = serde_json::from_str(body).unwrap();
        check(api, &head).map_err(|r| r.rule)
    }

    #[test]
    fn names_unique_and_the_choice_offered() {
        let a = r#"{"tools":[{"name":"a","input_schema":{}},{"name":"b","input_schema":{}}],"tool_choice":{"type":"tool","name":"b"}}"#;
        assert_eq!(run(Api::Anthropic, a), Ok(()));
        let a = r#"{"tools":[{"name":"a","input_schema":{}}],"tool_choice":{"type":"tool","name":"b"}}"#;
        assert_eq!(run(Api::Anthropic, a), Err("tools.choice_not_offered"));
        let a = r#"{"tools":[{"name":"a","input_schema":{}},{"name":"a","input_schema":{}}]}"#;
        assert_eq!(run(Api::Anthropic, a), Err("tools.unique_names"));
        let c = r#"{"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}}"#;
        assert_eq!(run(Api::OpenAiChat, c), Err("tools.choice_not_offered"));
        let c =
            r#"{"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"required"}"#;
        assert_eq!(run(Api::OpenAiChat, c), Ok(()));
        let r = r#"{"tools":[{"type":"function","name":"f"},{"type":"web_search"}],"tool_choice":{"type":"function","name":"f"}}"#;
        assert_eq!(run(Api::OpenAiResponses, r), Ok(()));
    }
}
