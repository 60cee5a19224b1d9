//! The built-in turn logic, the same for the three APIs as `shared/clients/mock_llm.py`:
//! tools offered and the last non-system message is user text → call the shell-like tool with
//! `ls`; a tool result after the last user text (or anything else) → the final text.

use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use crate::request::{lenient, BlockHead, Head, ItemHead, ToolHead};
use crate::Api;

/// Preferred tools, in order: what each agent calls its shell.
const SHELL_TOOLS: [&str; 7] = [
    "Bash",
    "bash",
    "shell",
    "shell_command",
    "exec_command",
    "local_shell",
    "run_shell_command",
];

/// How a Responses tool call is rendered, after the offered tool's `type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ToolKind {
    Function,
    LocalShell,
    Custom,
    /// A server tool (web search, ...): rendered as a function call, as the Python mock does.
    Other,
}

/// A tool call the turn logic chose.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Call {
    pub name: String,
    pub args: Value,
    pub kind: ToolKind,
}

/// What the built-in logic answers.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Turn {
    Final,
    Tool(Call),
}

pub(crate) fn decide(api: Api, head: &Head) -> Turn {
    let wants_tool = match api {
        Api::Anthropic => last_is_user_text_anthropic(head),
        Api::OpenAiChat => last_is_user_chat(head),
        Api::OpenAiResponses => last_is_user_responses(head),
        Api::Gemini => last_is_user_text_gemini(head),
    };
    if !wants_tool {
        return Turn::Final;
    }
    match pick_tool(&head.tools_for(api)) {
        Some(call) => Turn::Tool(call),
        None => Turn::Final,
    }
}

/// The kind of the offered tool called `name` (Responses renders calls after it).
pub(crate) fn kind_of(tools: &[ToolHead], name: &str) -> ToolKind {
    tools
        .iter()
        .map(normalise)
        .find(|(n, _, _)| n.as_deref() == Some(name))
        .map_or(ToolKind::Function, |(_, _, kind)| kind)
}

/// The last message that is not a system/developer entry (Claude Code puts `role: system`
/// entries inside `messages`), parsed from the end so earlier messages stay unread.
fn last_non_system<'a>(items: &[&'a RawValue]) -> Option<ItemHead<'a>> {
    items
        .iter()
        .rev()
        .map(|raw| lenient::<ItemHead>(Some(raw)))
        .find(|m| !is_system(m))
}

fn is_system(m: &ItemHead) -> bool {
    matches!(m.role.as_deref(), Some("system" | "developer"))
}

fn last_is_user_text_anthropic(head: &Head) -> bool {
    let Some(last) = head.messages.as_deref().and_then(last_non_system) else {
        return false;
    };
    if last.role.as_deref() != Some("user") {
        return false;
    }
    let Some(content) = last.content else {
        return true; // treated as empty text, like the Python mock
    };
    if !content.get().starts_with('[') {
        return true; // a string is text
    }
    let blocks: Vec<BlockHead> = lenient(Some(content));
    let has = |t: &str| blocks.iter().any(|b| b.kind.as_deref() == Some(t));
    !has("tool_result") && has("text")
}

/// Gemini: the last content is the user's and holds something other than function responses.
fn last_is_user_text_gemini(head: &Head) -> bool {
    #[derive(Default, serde::Deserialize)]
    struct Content {
        #[serde(default)]
        role: Option<String>,
        #[serde(default)]
        parts: Vec<Value>,
    }
    let contents: Vec<&RawValue> = lenient(head.contents);
    let Some(last) = contents.last().map(|c| lenient::<Content>(Some(c))) else {
        return false;
    };
    matches!(last.role.as_deref(), None | Some("user"))
        && last
            .parts
            .iter()
            .any(|p| p.get("functionResponse").is_none() && p.get("function_response").is_none())
}

fn last_is_user_chat(head: &Head) -> bool {
    head.messages
        .as_deref()
        .and_then(last_non_system)
        .is_some_and(|m| m.role.as_deref() == Some("user"))
}

/// Walks `input` from the end: the turn is the user's when the last non-system item is a user
/// message (a `*_output` item after it means a tool result came back).
fn last_is_user_responses(head: &Head) -> bool {
    let Some(input) = head.input else {
        return false;
    };
    if input.get().starts_with('"') {
        return true;
    }
    let items: Vec<&RawValue> = lenient(Some(input));
    let last = items
        .iter()
        .rev()
        .map(|raw| lenient::<ItemHead>(Some(raw)))
        .find(|it| !is_system(it));
    last.is_some_and(|it| {
        it.role.as_deref() == Some("user") && it.kind.as_deref().unwrap_or("message") == "message"
    })
}

/// (name, schema, kind) of a tool in any of the three shapes.
fn normalise<'a>(tool: &ToolHead<'a>) -> (Option<String>, Option<&'a RawValue>, ToolKind) {
    if tool.input_schema.is_some() {
        return (
            tool.name.as_deref().map(str::to_owned),
            tool.input_schema,
            ToolKind::Function,
        );
    }
    if let (Some("function"), Some(f)) = (tool.kind.as_deref(), &tool.function) {
        return (
            f.name.as_deref().map(str::to_owned),
            f.parameters,
            ToolKind::Function,
        );
    }
    let kind = match tool.kind.as_deref() {
        None | Some("function") => ToolKind::Function,
        Some("local_shell") => ToolKind::LocalShell,
        Some("custom") => ToolKind::Custom,
        Some(_) => ToolKind::Other,
    };
    let name = tool
        .name
        .as_deref()
        .or(tool.kind.as_deref())
        .map(str::to_owned);
    (name, tool.parameters, kind)
}

/// The shell-like tool if one is offered, else the first function, else the first tool.
fn pick_tool(tools: &[ToolHead]) -> Option<Call> {
    let norm: Vec<_> = tools
        .iter()
        .map(normalise)
        .filter(|(n, _, _)| n.as_deref().is_some_and(|n| !n.is_empty()))
        .collect();
    let callable = |k: ToolKind| matches!(k, ToolKind::Function | ToolKind::LocalShell);
    let chosen = SHELL_TOOLS
        .iter()
        .find_map(|want| {
            norm.iter()
                .find(|(n, _, k)| n.as_deref() == Some(*want) && callable(*k))
        })
        .or_else(|| norm.iter().find(|(_, _, k)| *k == ToolKind::Function))
        .or_else(|| norm.first())?;
    let (name, schema, kind) = chosen;
    let schema: Value = lenient(*schema);
    Some(Call {
        name: name.clone().unwrap_or_default(),
        args: shell_args(&schema),
        kind: *kind,
    })
}

/// Arguments running `ls`, shaped after the tool's JSON schema: `command` or `cmd` (a string,
/// or an argv array), a description if the schema has one, placeholders for other required
/// fields.
pub(crate) fn shell_args(schema: &Value) -> Value {
    let empty = Map::new();
    let props = schema
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let mut args = Map::new();
    let key = ["command", "cmd"]
        .into_iter()
        .find(|k| props.contains_key(*k))
        .unwrap_or("command");
    let is_array = props.get(key).and_then(|p| p.get("type")) == Some(&json!("array"));
    let command = if is_array {
        json!(["bash", "-lc", "ls"])
    } else {
        json!("ls")
    };
    args.insert(key.to_owned(), command);
    if props.contains_key("description") {
        args.insert(
            "description".into(),
            json!("List files in the current directory"),
        );
    }
    let required = schema
        .get("required")
        .and_then(Value::as_array)
        .map_or(&[][..], |v| v);
    for name in required.iter().filter_map(Value::as_str) {
        if args.contains_key(name) {
            continue;
        }
        let placeholder = match props
            .get(name)
            .and_then(|p| p.get("type"))
            .and_then(Value::as_str)
        {
            Some("integer" | "number") => json!(10000),
            Some("boolean") => json!(false),
            Some("array") => json!([]),
            Some("object") => json!({}),
            _ => json!("."),
        };
        args.insert(name.to_owned(), placeholder);
    }
    Value::Object(args)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn turn(api: Api, body: Value) -> Turn {
        let text = body.to_string();
        let head: Head = serde_json::from_str(&text).unwrap();
        decide(api, &head)
    }

    fn tool_name(t: Turn) -> String {
        match t {
            Turn::Tool(c) => c.name,
            Turn::Final => "<final>".into(),
        }
    }

    #[test]
    fn anthropic_calls_bash_then_finishes() {
        let tools = json!([{"name": "Read", "input_schema": {}},
            {"name": "Bash", "input_schema": {"properties": {"command": {"type": "string"},
             "description": {"type": "string"}, "timeout": {"type": "number"}},
             "required": ["command", "timeout"]}}]);
        let first = json!({"tools": tools, "messages": [
            {"role": "user", "content": [{"type": "text", "text": "list"}]},
            {"role": "system", "content": "mid-conversation system"}]});
        let Turn::Tool(call) = turn(Api::Anthropic, first) else {
            panic!("no tool call")
        };
        assert_eq!(call.name, "Bash");
        assert_eq!(
            call.args,
            json!({"command": "ls", "description": "List files in the current directory",
                   "timeout": 10000})
        );
        let second = json!({"tools": tools, "messages": [
            {"role": "user", "content": "list"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "Bash", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "a"},
                                         {"type": "text", "text": "more"}]}]});
        assert_eq!(turn(Api::Anthropic, second), Turn::Final);
        assert_eq!(
            turn(
                Api::Anthropic,
                json!({"messages": [{"role": "user", "content": "hi"}]})
            ),
            Turn::Final
        );
        assert_eq!(turn(Api::Anthropic, json!({"tools": tools})), Turn::Final);
    }

    #[test]
    fn chat_uses_the_last_role() {
        let tools = json!([{"type": "function", "function": {"name": "bash",
            "parameters": {"properties": {"command": {"type": "string"}}}}}]);
        let ask = json!({"tools": tools, "messages": [{"role": "system", "content": "s"},
            {"role": "user", "content": "list"}]});
        assert_eq!(tool_name(turn(Api::OpenAiChat, ask)), "bash");
        let done = json!({"tools": tools, "messages": [{"role": "user", "content": "list"},
            {"role": "assistant", "tool_calls": []}, {"role": "tool", "content": "a"}]});
        assert_eq!(turn(Api::OpenAiChat, done), Turn::Final);
    }

    #[test]
    fn responses_walks_input_items() {
        let tools = json!([{"type": "custom", "name": "apply_patch"},
            {"type": "function", "name": "exec_command",
             "parameters": {"properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}},
            {"type": "web_search"}]);
        let ask = json!({"tools": tools, "input": [{"type": "message", "role": "developer", "content": "d"},
            {"type": "message", "role": "user", "content": "list"},
            {"type": "message", "role": "developer", "content": "late"}]});
        let Turn::Tool(call) = turn(Api::OpenAiResponses, ask) else {
            panic!("no tool call")
        };
        assert_eq!(
            (call.name.as_str(), call.args, call.kind),
            ("exec_command", json!({"cmd": "ls"}), ToolKind::Function)
        );
        let done = json!({"tools": tools, "input": [{"role": "user", "content": "list"},
            {"type": "function_call", "call_id": "c", "name": "exec_command", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c", "output": "a"}]});
        assert_eq!(turn(Api::OpenAiResponses, done), Turn::Final);
        assert_eq!(
            tool_name(turn(
                Api::OpenAiResponses,
                json!({"tools": tools, "input": "list"})
            )),
            "exec_command"
        );
    }

    #[test]
    fn local_shell_and_fallbacks() {
        let tools = json!([{"type": "web_search"}, {"type": "local_shell"}]);
        let Turn::Tool(call) = turn(Api::OpenAiResponses, json!({"tools": tools, "input": "x"}))
        else {
            panic!("no tool call")
        };
        assert_eq!(
            (call.name.as_str(), call.kind),
            ("local_shell", ToolKind::LocalShell)
        );
        let tools = json!([{"type": "web_search"}]);
        assert_eq!(
            tool_name(turn(
                Api::OpenAiResponses,
                json!({"tools": tools, "input": "x"})
            )),
            "web_search"
        );
        let tools = json!([{"name": "Read", "input_schema": {}}]);
        let t = turn(
            Api::Anthropic,
            json!({"tools": tools, "messages": [{"role": "user", "content": "x"}]}),
        );
        assert_eq!(tool_name(t), "Read");
    }

    #[test]
    fn argv_commands_and_kinds() {
        let schema = json!({"properties": {"command": {"type": "array"}}});
        assert_eq!(
            shell_args(&schema),
            json!({"command": ["bash", "-lc", "ls"]})
        );
        assert_eq!(shell_args(&json!(null)), json!({"command": "ls"}));
        let tools: Vec<ToolHead> =
            serde_json::from_str(r#"[{"type":"custom","name":"apply_patch"}]"#).unwrap();
        assert_eq!(kind_of(&tools, "apply_patch"), ToolKind::Custom);
        assert_eq!(kind_of(&tools, "other"), ToolKind::Function);
    }
}
