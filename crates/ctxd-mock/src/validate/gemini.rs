//! Google Gemini `generateContent`: the request shapes the real API refuses, with its messages
//! where they are known (`400 INVALID_ARGUMENT`), and the mock's own rules (named below) where
//! the product wants the mock stricter than Google.
//!
//! - `gemini.function_name` / `gemini.function_unique`: every `functionDeclarations[].name` is
//!   valid (a letter or `_` first, then letters, digits, `_`, `.`, `:`, `-`; at most 64, as
//!   Google documents) and unique across `tools`.
//! - `gemini.contents`: `contents` is a non-empty array.
//! - `gemini.role`: roles are `user` or `model` (function responses go in a `user` turn; the
//!   old `function` role is refused); a lone content may omit its role.
//! - `gemini.empty_parts`: every content has parts.
//! - `gemini.part_data`: every part has exactly one data field (`text`, `inlineData`,
//!   `fileData`, `functionCall`, `functionResponse`, `executableCode`, `codeExecutionResult`);
//!   a part carrying only a `thoughtSignature` passes.
//! - `gemini.first_role`, `gemini.alternation`, `gemini.last_role` (the mock's rules): the
//!   conversation starts with `user`, alternates `user`/`model` strictly, and ends with `user`.
//! - `gemini.function_call_unanswered`, `gemini.function_response_count`,
//!   `gemini.function_response_unexpected`: every `functionCall` of a model turn is answered in
//!   the next content by one `functionResponse` with its `name` (and `id`, when either has
//!   one), in any order; a `functionResponse` answers a call of the content right before it.
//! - `gemini.thought_signature`: a `thoughtSignature` the mock issued must sit on the part it
//!   was issued for (a thought's text, a call's name and arguments); foreign ones pass.
//! - `gemini.thought_signature_missing`: in the current tool loop (the model turns after the
//!   last user content that is not only function responses), a model turn whose first
//!   `functionCall` the mock signed must carry the signature there, as Gemini 3 demands.

use std::borrow::Cow;
use std::collections::HashSet;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use super::Refusal;
use crate::request::Head;
use crate::signature::{self, Verdict};

#[derive(Debug, Deserialize)]
struct Content<'a> {
    #[serde(borrow, default)]
    role: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    parts: Option<Vec<Part<'a>>>,
}

/// A part: which data fields it has, what the pairing and signature rules read.
#[derive(Debug, Default, Deserialize)]
struct Part<'a> {
    #[serde(borrow, default)]
    text: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "inlineData", alias = "inline_data")]
    inline_data: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "fileData", alias = "file_data")]
    file_data: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "functionCall", alias = "function_call")]
    function_call: Option<Call<'a>>,
    #[serde(
        borrow,
        default,
        rename = "functionResponse",
        alias = "function_response"
    )]
    function_response: Option<Call<'a>>,
    #[serde(borrow, default, rename = "executableCode", alias = "executable_code")]
    executable_code: Option<&'a RawValue>,
    #[serde(
        borrow,
        default,
        rename = "codeExecutionResult",
        alias = "code_execution_result"
    )]
    code_execution_result: Option<&'a RawValue>,
    #[serde(
        borrow,
        default,
        rename = "thoughtSignature",
        alias = "thought_signature"
    )]
    thought_signature: Option<Cow<'a, str>>,
}

/// A `functionCall` or `functionResponse`: its name, id, and (calls) arguments.
#[derive(Debug, Default, Deserialize)]
struct Call<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(default)]
    args: Option<Value>,
}

impl Part<'_> {
    /// The names of the data fields set.
    fn data(&self) -> Vec<&'static str> {
        let mut set = Vec::new();
        let fields = [
            ("text", self.text.is_some()),
            ("inlineData", self.inline_data.is_some()),
            ("fileData", self.file_data.is_some()),
            ("functionCall", self.function_call.is_some()),
            ("functionResponse", self.function_response.is_some()),
            ("executableCode", self.executable_code.is_some()),
            ("codeExecutionResult", self.code_execution_result.is_some()),
        ];
        for (name, present) in fields {
            if present {
                set.push(name);
            }
        }
        set
    }

    /// What a signature on this part is bound to ([`crate::signature`]).
    fn signed_content(&self) -> String {
        if let Some(call) = &self.function_call {
            return signature::function_call_content(
                call.name.as_deref().unwrap_or_default(),
                call.args.as_ref(),
            );
        }
        self.text
            .and_then(|t| serde_json::from_str::<Cow<str>>(t.get()).ok())
            .map(Cow::into_owned)
            .unwrap_or_default()
    }
}

#[derive(Debug, Default, Deserialize)]
struct Tool<'a> {
    #[serde(
        borrow,
        default,
        rename = "functionDeclarations",
        alias = "function_declarations"
    )]
    declarations: Option<Vec<Declaration<'a>>>,
}

#[derive(Debug, Default, Deserialize)]
struct Declaration<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
}

/// Google's documented rule for function names.
pub(crate) fn valid_function_name(name: &str) -> bool {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    first_ok
        && name.len() <= 64
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-'))
}

fn invalid(rule: &'static str, message: impl Into<String>) -> Refusal {
    Refusal::new(rule, message)
}

/// The declared function names, or the refusal of a bad or repeated one.
fn declarations(head: &Head) -> Result<(), Refusal> {
    let tools: Vec<Tool> = match head.tools.map(|t| serde_json::from_str(t.get())) {
        Some(Ok(tools)) => tools,
        _ => return Ok(()),
    };
    let mut seen = HashSet::new();
    for (t, tool) in tools.iter().enumerate() {
        for (d, decl) in tool.declarations.iter().flatten().enumerate() {
            let name = decl.name.as_deref().unwrap_or_default();
            let at = format!("GenerateContentRequest.tools[{t}].function_declarations[{d}].name");
            if !valid_function_name(name) {
                return Err(invalid(
                    "gemini.function_name",
                    format!(
                        "* {at}: Invalid function name. Must start with a letter or an \
                         underscore. Must be alphameric (a-z, A-Z, 0-9), underscores (_), dots \
                         (.), colons (:), or dashes (-), with a maximum length of 64.\n"
                    ),
                ));
            }
            if !seen.insert(name) {
                return Err(invalid(
                    "gemini.function_unique",
                    format!("* {at}: Duplicate function declaration found: {name}\n"),
                ));
            }
        }
    }
    Ok(())
}

/// Every rule; `signed(hash)` says whether the mock signed the call content with that hash
/// ([`signature::fnv1a64`] of [`signature::function_call_content`]).
pub(crate) fn check(head: &Head, signed: &dyn Fn(u64) -> bool) -> Result<(), Refusal> {
    declarations(head)?;
    let missing = || {
        invalid(
            "gemini.contents",
            "* GenerateContentRequest.contents: contents is not specified\n",
        )
    };
    let Some(raw) = head.contents else {
        return Err(missing());
    };
    let Ok(raw) = serde_json::from_str::<Vec<&RawValue>>(raw.get()) else {
        return Ok(()); // a shape the rules cannot read
    };
    if raw.is_empty() {
        return Err(missing());
    }
    let mut contents = Vec::with_capacity(raw.len());
    for r in &raw {
        match serde_json::from_str::<Content>(r.get()) {
            Ok(c) => contents.push(c),
            Err(_) => return Ok(()),
        }
    }
    let lone = contents.len() == 1;
    // true: user.
    let mut roles = Vec::with_capacity(contents.len());
    for (i, c) in contents.iter().enumerate() {
        let user = match c.role.as_deref() {
            Some("user") => true,
            Some("model") => false,
            None | Some("") if lone => true,
            _ => {
                return Err(invalid(
                    "gemini.role",
                    "Please use a valid role: user, model.",
                ))
            }
        };
        roles.push(user);
        let parts = c.parts.as_deref().unwrap_or_default();
        if parts.is_empty() {
            return Err(invalid(
                "gemini.empty_parts",
                format!(
                    "* GenerateContentRequest.contents[{i}].parts: contents.parts must not be \
                     empty.\n"
                ),
            ));
        }
        for (j, p) in parts.iter().enumerate() {
            let data = p.data();
            if data.is_empty() && p.thought_signature.is_none() {
                return Err(invalid(
                    "gemini.part_data",
                    format!(
                        "* GenerateContentRequest.contents[{i}].parts[{j}].data: required oneof \
                         field 'data' must have one initialized field\n"
                    ),
                ));
            }
            if data.len() > 1 {
                return Err(invalid(
                    "gemini.part_data",
                    format!(
                        "Invalid value at 'contents[{i}].parts[{j}]' (oneof), oneof field \
                         'data' is already set. Cannot set '{}'",
                        data[1]
                    ),
                ));
            }
        }
    }
    if !roles[0] {
        return Err(invalid(
            "gemini.first_role",
            "Please ensure that multiturn requests start with a user turn.",
        ));
    }
    if let Some(i) = (1..roles.len()).find(|&i| roles[i] == roles[i - 1]) {
        return Err(invalid(
            "gemini.alternation",
            format!(
                "Please ensure that multiturn requests alternate between user and model \
                 (contents[{}] and contents[{i}] are both {}).",
                i - 1,
                if roles[i] { "user" } else { "model" }
            ),
        ));
    }
    if roles.last() == Some(&false) {
        return Err(invalid(
            "gemini.last_role",
            "Please ensure that multiturn requests ends with a user role or a function response.",
        ));
    }
    for (i, c) in contents.iter().enumerate() {
        let parts = c.parts.as_deref().unwrap_or_default();
        if roles[i] {
            check_responses(&contents, i)?;
            continue;
        }
        let calls = parts.iter().filter(|p| p.function_call.is_some()).count();
        if calls == 0 {
            continue;
        }
        let next = contents[i + 1].parts.as_deref().unwrap_or_default();
        let answers = next
            .iter()
            .filter(|p| p.function_response.is_some())
            .count();
        if answers == 0 {
            return Err(invalid(
                "gemini.function_call_unanswered",
                format!(
                    "Please ensure that function call turn is followed by a function response \
                     turn (contents[{i}] has {calls} function call(s), contents[{}] answers \
                     none).",
                    i + 1
                ),
            ));
        }
        if answers != calls {
            return Err(invalid(
                "gemini.function_response_count",
                "Please ensure that the number of function response parts is equal to the number \
                 of function call parts of the function call turn.",
            ));
        }
    }
    for (i, c) in contents.iter().enumerate() {
        for (j, p) in c.parts.iter().flatten().enumerate() {
            let Some(sig) = p.thought_signature.as_deref() else {
                continue;
            };
            if signature::verify(sig, &p.signed_content()) == Verdict::Invalid {
                return Err(invalid(
                    "gemini.thought_signature",
                    format!(
                        "Corrupted thought signature. (contents[{i}].parts[{j}]: the signature \
                         was issued for another part)"
                    ),
                ));
            }
        }
    }
    check_loop_signatures(&contents, &roles, signed)
}

/// The user content `i`'s function responses each answer a call of content `i - 1`.
fn check_responses(contents: &[Content], i: usize) -> Result<(), Refusal> {
    let parts = contents[i].parts.as_deref().unwrap_or_default();
    let responses: Vec<(usize, &Call)> = parts
        .iter()
        .enumerate()
        .filter_map(|(j, p)| p.function_response.as_ref().map(|r| (j, r)))
        .collect();
    if responses.is_empty() {
        return Ok(());
    }
    let calls: Vec<&Call> = i
        .checked_sub(1)
        .map(|p| {
            contents[p]
                .parts
                .iter()
                .flatten()
                .filter_map(|p| p.function_call.as_ref())
                .collect()
        })
        .unwrap_or_default();
    if calls.is_empty() {
        return Err(invalid(
            "gemini.function_response_unexpected",
            "Please ensure that function response turn comes immediately after a function call \
             turn.",
        ));
    }
    let mut used = vec![false; calls.len()];
    for (j, r) in responses {
        let matching = calls.iter().enumerate().position(|(k, c)| {
            !used[k] && c.name == r.name && (c.id.is_none() && r.id.is_none() || c.id == r.id)
        });
        match matching {
            Some(k) => used[k] = true,
            None => {
                return Err(invalid(
                    "gemini.function_response_unexpected",
                    format!(
                        "contents[{i}].parts[{j}]: the function response `{}`{} answers no \
                         function call of contents[{}].",
                        r.name.as_deref().unwrap_or_default(),
                        r.id.as_deref()
                            .map(|id| format!(" (id {id})"))
                            .unwrap_or_default(),
                        i - 1
                    ),
                ))
            }
        }
    }
    Ok(())
}

/// The current tool loop's model turns keep the signature the mock gave their first call.
fn check_loop_signatures(
    contents: &[Content],
    roles: &[bool],
    signed: &dyn Fn(u64) -> bool,
) -> Result<(), Refusal> {
    let only_responses = |c: &Content| {
        c.parts
            .iter()
            .flatten()
            .all(|p| p.function_response.is_some())
    };
    let start = (0..contents.len())
        .rev()
        .find(|&i| roles[i] && !only_responses(&contents[i]))
        .unwrap_or(0);
    for (i, c) in contents.iter().enumerate().skip(start) {
        if roles[i] {
            continue;
        }
        let Some(first) = c.parts.iter().flatten().find(|p| p.function_call.is_some()) else {
            continue;
        };
        if first.thought_signature.is_some() {
            continue;
        }
        let content = first.signed_content();
        if signed(signature::fnv1a64(content.as_bytes())) {
            let name = first
                .function_call
                .as_ref()
                .and_then(|c| c.name.as_deref())
                .unwrap_or_default();
            return Err(invalid(
                "gemini.thought_signature_missing",
                format!(
                    "Function call is missing a thought_signature in functionCall parts. This is \
                     required for tools to work correctly, and missing thought_signature may \
                     lead to degraded model performance. Additional data, function call \
                     `default_api:{name}` , position {}. Please refer to \
                     https://ai.google.dev/gemini-api/docs/thought-signatures for more details.",
                    i + 1
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run_signed(body: Value, signed: &dyn Fn(u64) -> bool) -> Result<(), &'static str> {
        let text = body.to_string();
        let head: Head = serde_json::from_str(&text).unwrap();
        check(&head, signed).map_err(|r| r.rule)
    }

    fn run(contents: Value) -> Result<(), &'static str> {
        run_signed(json!({"contents": contents}), &|_| false)
    }

    fn user(text: &str) -> Value {
        json!({"role": "user", "parts": [{"text": text}]})
    }

    fn model_calls(names: &[&str]) -> Value {
        let parts: Vec<Value> = names
            .iter()
            .map(|n| json!({"functionCall": {"name": n, "args": {"command": "ls"}}}))
            .collect();
        json!({"role": "model", "parts": parts})
    }

    fn responses(names: &[&str]) -> Value {
        let parts: Vec<Value> = names
            .iter()
            .map(|n| json!({"functionResponse": {"name": n, "response": {"output": "a"}}}))
            .collect();
        json!({"role": "user", "parts": parts})
    }

    #[test]
    fn contents_roles_parts() {
        assert_eq!(run_signed(json!({}), &|_| false), Err("gemini.contents"));
        assert_eq!(run(json!([])), Err("gemini.contents"));
        assert_eq!(run(json!([{"parts": [{"text": "hi"}]}])), Ok(()));
        assert_eq!(
            run(json!([user("a"), {"parts": [{"text": "b"}]}, user("c")])),
            Err("gemini.role")
        );
        assert_eq!(
            run(json!([user("a"), model_calls(&["f"]),
                {"role": "function", "parts": [{"functionResponse": {"name": "f", "response": {}}}]}])),
            Err("gemini.role")
        );
        assert_eq!(
            run(json!([{"role": "user", "parts": []}])),
            Err("gemini.empty_parts")
        );
        assert_eq!(run(json!([{"role": "user"}])), Err("gemini.empty_parts"));
        assert_eq!(
            run(json!([{"role": "user", "parts": [{}]}])),
            Err("gemini.part_data")
        );
        assert_eq!(
            run(json!([{"role": "user", "parts": [{"text": "a", "inlineData": {}}]}])),
            Err("gemini.part_data")
        );
        assert_eq!(
            run(json!([{"role": "user", "parts": [{"text": "a", "thought": true}]}])),
            Ok(())
        );
    }

    #[test]
    fn alternation_and_ends() {
        assert_eq!(
            run(json!([{"role": "model", "parts": [{"text": "a"}]}, user("b")])),
            Err("gemini.first_role")
        );
        assert_eq!(
            run(json!([user("a"), user("b")])),
            Err("gemini.alternation")
        );
        assert_eq!(
            run(json!([user("a"), {"role": "model", "parts": [{"text": "b"}]}])),
            Err("gemini.last_role")
        );
    }

    #[test]
    fn calls_and_responses_pair_up() {
        assert_eq!(
            run(json!([
                user("a"),
                model_calls(&["f", "g"]),
                responses(&["g", "f"])
            ])),
            Ok(())
        );
        assert_eq!(
            run(json!([user("a"), model_calls(&["f"]), user("b")])),
            Err("gemini.function_call_unanswered")
        );
        assert_eq!(
            run(json!([
                user("a"),
                model_calls(&["f", "g"]),
                responses(&["f"])
            ])),
            Err("gemini.function_response_count")
        );
        assert_eq!(
            run(json!([user("a"), model_calls(&["f"]), responses(&["h"])])),
            Err("gemini.function_response_unexpected")
        );
        assert_eq!(
            run(json!([responses(&["f"])])),
            Err("gemini.function_response_unexpected")
        );
        // Ids, when present, must match too.
        let call = json!({"role": "model", "parts": [
            {"functionCall": {"name": "f", "id": "c1", "args": {}}}]});
        let answer = |id: &str| {
            json!({"role": "user", "parts": [
            {"functionResponse": {"name": "f", "id": id, "response": {}}}]})
        };
        assert_eq!(run(json!([user("a"), call, answer("c1")])), Ok(()));
        assert_eq!(
            run(json!([user("a"), call, answer("c2")])),
            Err("gemini.function_response_unexpected")
        );
    }

    #[test]
    fn declarations_are_valid_and_unique() {
        let body = |names: &[&str]| {
            let decls: Vec<Value> = names.iter().map(|n| json!({"name": n})).collect();
            json!({"contents": [user("a")], "tools": [{"functionDeclarations": decls}]})
        };
        assert_eq!(
            run_signed(body(&["run_shell", "a.b-c:d", "_x"]), &|_| false),
            Ok(())
        );
        assert_eq!(
            run_signed(body(&["9lives"]), &|_| false),
            Err("gemini.function_name")
        );
        assert_eq!(
            run_signed(body(&["has space"]), &|_| false),
            Err("gemini.function_name")
        );
        let long = "a".repeat(65);
        assert_eq!(
            run_signed(body(&[&long]), &|_| false),
            Err("gemini.function_name")
        );
        assert_eq!(
            run_signed(body(&["f", "f"]), &|_| false),
            Err("gemini.function_unique")
        );
    }

    #[test]
    fn signatures_verify_and_are_required_in_the_loop() {
        let args = json!({"command": "ls"});
        let content = signature::function_call_content("f", Some(&args));
        let sig = signature::sign("r1", &content);
        let hash = signature::fnv1a64(content.as_bytes());
        let signed_call = |sig: Option<&str>, args: &Value| {
            let mut part = json!({"functionCall": {"name": "f", "args": args}});
            if let Some(sig) = sig {
                part["thoughtSignature"] = json!(sig);
            }
            json!({"role": "model", "parts": [part]})
        };
        let issued = move |h: u64| h == hash;
        let body = |call: Value| json!({"contents": [user("a"), call, responses(&["f"])]});
        assert_eq!(
            run_signed(body(signed_call(Some(&sig), &args)), &issued),
            Ok(())
        );
        assert_eq!(
            run_signed(
                body(signed_call(Some(&sig), &json!({"command": "rm"}))),
                &issued
            ),
            Err("gemini.thought_signature")
        );
        assert_eq!(
            run_signed(body(signed_call(Some("Zm9yZWlnbg=="), &args)), &issued),
            Ok(())
        );
        assert_eq!(
            run_signed(body(signed_call(None, &args)), &issued),
            Err("gemini.thought_signature_missing")
        );
        // Outside the current loop (a user text came after), a missing signature is fine.
        let old = json!({"contents": [user("a"), signed_call(None, &args), responses(&["f"]),
            {"role": "model", "parts": [{"text": "done"}]}, user("next")]});
        assert_eq!(run_signed(old, &issued), Ok(()));
        // A call the mock never signed: not its to demand.
        assert_eq!(
            run_signed(body(signed_call(None, &args)), &|_| false),
            Ok(())
        );
    }
}
