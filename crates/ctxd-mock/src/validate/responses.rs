//! OpenAI Responses: when `input` is an array, every `function_call` / `custom_tool_call` item
//! has an output item (`function_call_output` / `custom_tool_call_output`) with its `call_id`,
//! and every output item answers a call earlier in the input. With `previous_response_id` the
//! calls may live on the server (the mock keeps no state), so the pairing is not checked.

use std::borrow::Cow;
use std::collections::HashSet;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::Refusal;
use crate::request::Head;

#[derive(Debug, Deserialize)]
struct Item<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    call_id: Option<Cow<'a, str>>,
}

pub(super) fn check(head: &Head) -> Result<(), Refusal> {
    let Some(input) = head.input.filter(|i| i.get().starts_with('[')) else {
        return Ok(());
    };
    if head.previous_response_id.is_some_and(|p| p.get() != "null") {
        return Ok(());
    }
    let Ok(raw) = serde_json::from_str::<Vec<&RawValue>>(input.get()) else {
        return Ok(());
    };
    let mut items = Vec::with_capacity(raw.len());
    for r in raw {
        match serde_json::from_str::<Item>(r.get()) {
            Ok(it) => items.push(it),
            Err(_) => return Ok(()), // a shape the rules cannot read
        }
    }
    let id = |it: &Item| it.call_id.as_deref().unwrap_or_default().to_owned();
    let mut calls = HashSet::new();
    let mut outputs = HashSet::new();
    for it in &items {
        match it.kind.as_deref() {
            Some("function_call" | "custom_tool_call") => {
                calls.insert(id(it));
            }
            Some("function_call_output" | "custom_tool_call_output") => {
                if !calls.contains(&id(it)) {
                    return Err(Refusal::new(
                        "responses.output_unexpected",
                        format!(
                            "No tool call found for function call output with call_id {}.",
                            id(it)
                        ),
                    )
                    .param("input"));
                }
                outputs.insert(id(it));
            }
            _ => {}
        }
    }
    for it in &items {
        if matches!(
            it.kind.as_deref(),
            Some("function_call" | "custom_tool_call")
        ) && !outputs.contains(&id(it))
        {
            return Err(Refusal::new(
                "responses.call_unanswered",
                format!("No tool output found for function call {}.", id(it)),
            )
            .param("input"));
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn run(body: Value) -> Result<(), Refusal> {
        let text = body.to_string();
        let head: Head = serde_json::from_str(&text).unwrap();
        check(&head)
    }

    fn call(id: &str) -> Value {
        json!({"type": "function_call", "call_id": id, "name": "exec_command", "arguments": "{}"})
    }

    fn output(id: &str) -> Value {
        json!({"type": "function_call_output", "call_id": id, "output": "a"})
    }

    #[test]
    fn calls_and_outputs_pair_up() {
        let user = json!({"type": "message", "role": "user", "content": "hi"});
        let custom = json!({"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch",
            "input": "x"});
        let custom_out =
            json!({"type": "custom_tool_call_output", "call_id": "c2", "output": "ok"});
        assert!(
            run(json!({"input": [user, call("c1"), custom, custom_out, output("c1")]})).is_ok()
        );
        assert!(run(json!({"input": "hi"})).is_ok());
        let err = run(json!({"input": [user, call("c1")]})).unwrap_err();
        assert_eq!(err.message, "No tool output found for function call c1.");
        assert_eq!(err.param.as_deref(), Some("input"));
        let err = run(json!({"input": [user, output("c1"), call("c1")]})).unwrap_err();
        assert_eq!(
            err.message,
            "No tool call found for function call output with call_id c1."
        );
        assert_eq!(err.rule, "responses.output_unexpected");
        // Server-side state: the pairing cannot be checked.
        assert!(run(json!({"previous_response_id": "resp_1", "input": [output("c1")]})).is_ok());
        assert!(run(json!({"previous_response_id": null, "input": [output("c1")]})).is_err());
    }
}
