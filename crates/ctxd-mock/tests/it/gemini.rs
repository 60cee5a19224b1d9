//! Google Gemini (`generateContent`): JSON, SSE (`alt=sse`) and JSON-array streams,
//! `countTokens`, the model list, each strict rule with Google's error shape, thought
//! signatures, the implicit cache, scripted errors, credentials in the record.

use ctxd_mock::{Config, Part, Reasoning, Reply};
use serde_json::{json, Value};

use crate::support::{client, post, post_raw, start, start_with, Reply as Res};

const FLASH: &str = "/v1beta/models/gemini-2.5-flash:generateContent";
const STREAM_SSE: &str = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse";
const STREAM_ARRAY: &str = "/v1beta/models/gemini-2.5-flash:streamGenerateContent";

fn tools() -> Value {
    json!([{"functionDeclarations": [
        {"name": "run_shell_command", "description": "Run a shell command",
         "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                        "required": ["command"]}},
        {"name": "read_file", "parametersJsonSchema": {"type": "object"}}]}])
}

fn user(text: &str) -> Value {
    json!({"role": "user", "parts": [{"text": text}]})
}

fn respond(name: &str) -> Value {
    json!({"role": "user", "parts": [
        {"functionResponse": {"name": name, "response": {"output": "README.md"}}}]})
}

fn body(contents: Value) -> Value {
    json!({"contents": contents, "tools": tools(),
           "systemInstruction": {"parts": [{"text": "be brief"}]},
           "generationConfig": {"temperature": 0.2, "maxOutputTokens": 1024}})
}

/// A 400 in Google's shape with the rule in the header; returns the message.
fn refusal(r: &Res, rule: &str) -> String {
    assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.headers["x-mock-refused"], rule);
    let b = r.json();
    assert_eq!(b.as_object().unwrap().len(), 1, "{b}");
    let e = &b["error"];
    assert_eq!(e["code"], 400);
    assert_eq!(e["status"], "INVALID_ARGUMENT");
    assert_eq!(e.as_object().unwrap().len(), 3, "{b}");
    e["message"].as_str().unwrap().to_owned()
}

fn ok(r: &Res) -> Value {
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert!(r.headers.get("x-mock-refused").is_none());
    r.json()
}

/// The `data:` payloads of a Gemini SSE body (events end with `\r\n\r\n`).
fn sse_chunks(body: &[u8]) -> Vec<Value> {
    let text = std::str::from_utf8(body).unwrap();
    assert!(text.ends_with("\r\n\r\n"), "{text:?}");
    text.split("\r\n\r\n")
        .filter(|e| !e.is_empty())
        .map(|e| {
            let data = e.strip_prefix("data: ").unwrap_or_else(|| panic!("{e:?}"));
            serde_json::from_str(data).unwrap()
        })
        .collect()
}

fn parts_of(chunk: &Value) -> &Vec<Value> {
    chunk["candidates"][0]["content"]["parts"]
        .as_array()
        .unwrap()
}

#[tokio::test]
async fn json_reply_calls_the_shell_then_answers() {
    let mock = start().await;
    let first = body(json!([user("list the files")]));
    let r = ok(&post(&mock, FLASH, &first).await);
    let cand = &r["candidates"][0];
    assert_eq!(cand["finishReason"], "STOP");
    assert_eq!(cand["index"], 0);
    assert_eq!(cand["content"]["role"], "model");
    let part = &cand["content"]["parts"][0];
    assert_eq!(
        part["functionCall"],
        json!({"name": "run_shell_command", "args": {"command": "ls"}})
    );
    assert!(part["thoughtSignature"].as_str().unwrap().len() > 20);
    assert_eq!(r["modelVersion"], "gemini-2.5-flash");
    assert!(r["responseId"].as_str().is_some());
    let u = &r["usageMetadata"];
    let prompt = u["promptTokenCount"].as_u64().unwrap();
    assert_eq!(prompt as usize, first.to_string().len() / 4);
    let candidates = u["candidatesTokenCount"].as_u64().unwrap();
    assert_eq!(u["totalTokenCount"].as_u64().unwrap(), prompt + candidates);
    assert!(u.get("cachedContentTokenCount").is_none(), "{u}");

    // The call sent back with its signature, answered: the final text.
    let second = body(json!([user("list the files"),
        {"role": "model", "parts": [part]}, respond("run_shell_command")]));
    let r = ok(&post(&mock, FLASH, &second).await);
    assert_eq!(parts_of(&r), &vec![json!({"text": "done"})]);

    // The same under /v1, and the record has the model's route.
    ok(&post(&mock, "/v1/models/gemini-2.5-flash:generateContent", &first).await);
    let recs = mock.requests();
    assert_eq!(
        recs[0].route(),
        "/v1beta/models/gemini-2.5-flash:generateContent"
    );
    assert_eq!(recs[0].usage.unwrap().input, prompt);
}

#[tokio::test]
async fn scripted_replies_render_in_geminis_shape() {
    let mock = start().await;
    mock.script().push(Reply::parts(vec![
        Part::Text("let me look".into()),
        Part::ToolCall {
            name: "read_file".into(),
            args: json!({"path": "a.rs"}),
        },
        Part::ToolCallWithId {
            id: "call-7".into(),
            name: "run_shell_command".into(),
            args: json!({"command": "pwd"}),
        },
    ]));
    let r = ok(&post(&mock, FLASH, &body(json!([user("go")]))).await);
    let parts = parts_of(&r);
    assert_eq!(parts[0], json!({"text": "let me look"}));
    // The first call carries the signature; an id only where the script gave one.
    assert!(parts[1]["thoughtSignature"].is_string());
    assert_eq!(
        parts[1]["functionCall"],
        json!({"name": "read_file", "args": {"path": "a.rs"}})
    );
    assert!(parts[2].get("thoughtSignature").is_none());
    assert_eq!(parts[2]["functionCall"]["id"], "call-7");

    // A call of a function the request does not declare: the script is wrong, said clearly.
    mock.script().push(Reply::tool_call("rm_rf", json!({})));
    let r = post(&mock, FLASH, &body(json!([user("go")]))).await;
    assert_eq!(r.status, 400);
    let m = r.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(m.contains("`rm_rf`"), "{m}");
}

#[tokio::test]
async fn sse_stream_splits_text_and_finishes_in_the_last_chunk() {
    let mock = start().await;
    mock.script()
        .push(Reply::text("The files are README.md and main.rs."));
    let r = post(&mock, STREAM_SSE, &body(json!([user("list")]))).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.content_type(), "text/event-stream; charset=utf-8");
    let text = String::from_utf8(r.body.clone()).unwrap();
    assert!(!text.contains("[DONE]"));
    let chunks = sse_chunks(&r.body);
    assert!(chunks.len() >= 2, "{chunks:?}");
    let joined: String = chunks
        .iter()
        .flat_map(|c| parts_of(c).clone())
        .map(|p| p["text"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(joined, "The files are README.md and main.rs.");
    for c in &chunks[..chunks.len() - 1] {
        assert!(c["candidates"][0].get("finishReason").is_none());
        assert!(c["usageMetadata"].get("candidatesTokenCount").is_none());
    }
    let last = chunks.last().unwrap();
    assert_eq!(last["candidates"][0]["finishReason"], "STOP");
    let u = &last["usageMetadata"];
    assert_eq!(
        u["totalTokenCount"].as_u64().unwrap(),
        u["promptTokenCount"].as_u64().unwrap() + u["candidatesTokenCount"].as_u64().unwrap()
    );
    assert!(chunks
        .iter()
        .all(|c| c["modelVersion"] == "gemini-2.5-flash"));

    // The built-in tool call, streamed: one chunk with the whole call and its signature.
    let chunks = sse_chunks(
        &post(&mock, STREAM_SSE, &body(json!([user("list")])))
            .await
            .body,
    );
    assert_eq!(chunks.len(), 1);
    let part = &parts_of(&chunks[0])[0];
    assert_eq!(part["functionCall"]["name"], "run_shell_command");
    assert!(part["thoughtSignature"].is_string());
}

#[tokio::test]
async fn a_stream_without_alt_sse_is_one_json_array() {
    let mock = start().await;
    mock.script().push(Reply::text("hello there"));
    let r = post(&mock, STREAM_ARRAY, &body(json!([user("hi")]))).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.content_type(), "application/json");
    assert!(r.headers.get("content-length").is_none(), "sent chunked");
    let text = String::from_utf8(r.body.clone()).unwrap();
    assert!(
        text.starts_with("[{") && text.ends_with("\r\n]"),
        "{text:?}"
    );
    assert!(text.contains("}\r\n,{"), "{text:?}");
    let chunks = r.json();
    let chunks = chunks.as_array().unwrap();
    assert_eq!(chunks.len(), 2);
    assert_eq!(parts_of(&chunks[0])[0]["text"], "hello");
    assert_eq!(parts_of(&chunks[1])[0]["text"], " there");
    assert_eq!(chunks[1]["candidates"][0]["finishReason"], "STOP");
    assert!(chunks[1]["usageMetadata"]["candidatesTokenCount"].is_u64());
}

#[tokio::test]
async fn count_tokens_and_models() {
    let mock = start().await;
    let contents = json!({"contents": [user("how many tokens is this?")]});
    let r = ok(&post(
        &mock,
        "/v1beta/models/gemini-2.5-pro:countTokens",
        &contents,
    )
    .await);
    assert_eq!(
        r["totalTokens"].as_u64().unwrap() as usize,
        contents.to_string().len() / 4
    );
    // Counting a whole request counts what generateContent reports as its prompt.
    let request = body(json!([user("how many tokens is this?")]));
    let wrapped = json!({"generateContentRequest": request});
    let counted = ok(&post(&mock, "/v1beta/models/gemini-2.5-pro:countTokens", &wrapped).await)
        ["totalTokens"]
        .as_u64()
        .unwrap();
    mock.script().push(Reply::text("x"));
    let generated = ok(&post(
        &mock,
        "/v1beta/models/gemini-2.5-pro:generateContent",
        &request,
    )
    .await);
    assert_eq!(
        generated["usageMetadata"]["promptTokenCount"].as_u64(),
        Some(counted)
    );

    let get = |path: &str| {
        let url = format!("{}{path}", mock.base_url());
        async move {
            let res = client().get(url).send().await.unwrap();
            (
                res.status().as_u16(),
                serde_json::from_slice::<Value>(&res.bytes().await.unwrap()).unwrap(),
            )
        }
    };
    let (status, list) = get("/v1beta/models").await;
    assert_eq!(status, 200);
    let pro = list["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "models/gemini-2.5-pro")
        .unwrap()
        .clone();
    assert_eq!(pro["baseModelId"], "gemini-2.5-pro");
    assert_eq!(pro["inputTokenLimit"], 1_048_576);
    assert_eq!(pro["outputTokenLimit"], 65_536);
    assert_eq!(
        pro["supportedGenerationMethods"],
        json!(["generateContent", "countTokens"])
    );
    let (status, one) = get("/v1beta/models/gemini-2.5-flash").await;
    assert_eq!(
        (status, one["name"].as_str()),
        (200, Some("models/gemini-2.5-flash"))
    );
    let (status, missing) = get("/v1beta/models/gpt-5").await;
    assert_eq!(status, 404);
    assert_eq!(missing["error"]["status"], "NOT_FOUND");
    // `/v1/models` answers in Google's shape to Google's credentials.
    let (_, v1) = get("/v1/models?key=k").await;
    assert!(v1["models"].is_array(), "{v1}");
    let (_, openai) = get("/v1/models").await;
    assert_eq!(openai["object"], "list");
    let (status, v1_one) = get("/v1/models/gemini-2.5-pro").await;
    assert_eq!(
        (status, v1_one["inputTokenLimit"].as_u64()),
        (200, Some(1_048_576))
    );
    // Not Google's: OpenAI's 404 as before.
    let (status, gpt) = get("/v1/models/gpt-5").await;
    assert_eq!(
        (status, gpt["error"]["code"].as_str()),
        (404, Some("model_not_found"))
    );
    let (status, _) = get("/v1beta/models/gemini-2.5-pro:generateContent").await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn each_rule_refuses_with_googles_message() {
    let mock = start().await;
    let call = |name: &str| json!({"functionCall": {"name": name, "args": {"command": "ls"}}});
    let model = |parts: Value| json!({"role": "model", "parts": parts});
    let cases: Vec<(Value, &str, &str)> =
        vec![
        (json!({"tools": tools()}), "gemini.contents",
         "* GenerateContentRequest.contents: contents is not specified\n"),
        (body(json!([])), "gemini.contents",
         "* GenerateContentRequest.contents: contents is not specified\n"),
        (body(json!([user("a"), model(json!([call("read_file")])),
            {"role": "function", "parts": [{"functionResponse": {"name": "read_file",
                "response": {}}}]}])),
         "gemini.role", "Please use a valid role: user, model."),
        (body(json!([{"role": "user", "parts": []}])), "gemini.empty_parts",
         "* GenerateContentRequest.contents[0].parts: contents.parts must not be empty.\n"),
        (body(json!([{"role": "user", "parts": [{"thought": true}]}])), "gemini.part_data",
         "* GenerateContentRequest.contents[0].parts[0].data: required oneof field 'data' must \
          have one initialized field\n"),
        (body(json!([{"role": "user", "parts": [{"text": "a",
            "inlineData": {"mimeType": "image/png", "data": "AAAA"}}]}])), "gemini.part_data",
         "Invalid value at 'contents[0].parts[0]' (oneof), oneof field 'data' is already set. \
          Cannot set 'inlineData'"),
        (body(json!([model(json!([{"text": "hi"}])), user("a")])), "gemini.first_role",
         "Please ensure that multiturn requests start with a user turn."),
        (body(json!([user("a"), user("b")])), "gemini.alternation",
         "Please ensure that multiturn requests alternate between user and model (contents[0] \
          and contents[1] are both user)."),
        (body(json!([user("a"), model(json!([{"text": "b"}]))])), "gemini.last_role",
         "Please ensure that multiturn requests ends with a user role or a function response."),
        (body(json!([user("a"), model(json!([call("read_file")])), user("b")])),
         "gemini.function_call_unanswered",
         "Please ensure that function call turn is followed by a function response turn \
          (contents[1] has 1 function call(s), contents[2] answers none)."),
        (body(json!([user("a"), model(json!([call("read_file"), call("run_shell_command")])),
            respond("read_file")])),
         "gemini.function_response_count",
         "Please ensure that the number of function response parts is equal to the number of \
          function call parts of the function call turn."),
        (body(json!([user("a"), model(json!([call("read_file")])),
            respond("run_shell_command")])),
         "gemini.function_response_unexpected",
         "contents[2].parts[0]: the function response `run_shell_command` answers no function \
          call of contents[1]."),
        (body(json!([respond("read_file")])), "gemini.function_response_unexpected",
         "Please ensure that function response turn comes immediately after a function call \
          turn."),
        (json!({"contents": [user("a")], "tools": [{"functionDeclarations": [
            {"name": "run shell"}]}]}), "gemini.function_name",
         "* GenerateContentRequest.tools[0].function_declarations[0].name: Invalid function \
          name. Must start with a letter or an underscore. Must be alphameric (a-z, A-Z, 0-9), \
          underscores (_), dots (.), colons (:), or dashes (-), with a maximum length of 64.\n"),
        (json!({"contents": [user("a")], "tools": [{"functionDeclarations": [{"name": "f"}]},
            {"functionDeclarations": [{"name": "f"}]}]}), "gemini.function_unique",
         "* GenerateContentRequest.tools[1].function_declarations[0].name: Duplicate function \
          declaration found: f\n"),
    ];
    mock.script()
        .push(Reply::text("kept for the valid request"));
    for (b, rule, message) in &cases {
        let m = refusal(&post(&mock, FLASH, b).await, rule);
        assert_eq!(&m, message, "{rule}");
    }
    // No refusal consumed the script.
    let r = ok(&post(&mock, FLASH, &body(json!([user("a")]))).await);
    assert_eq!(parts_of(&r)[0]["text"], "kept for the valid request");
    let recs = mock.requests();
    assert_eq!(recs[0].refused.as_deref(), Some("gemini.contents"));
    assert_eq!(recs.last().unwrap().refused, None);
}

#[tokio::test]
async fn the_window_is_the_models_input_limit() {
    let mock = start_with(Config {
        windows: vec![("gemini-small".into(), 50)],
        ..Config::default()
    })
    .await;
    let b = body(json!([user(&"x".repeat(400))]));
    let tokens = b.to_string().len() / 4;
    let m = refusal(
        &post(&mock, "/v1beta/models/gemini-small:generateContent", &b).await,
        "context_window",
    );
    assert_eq!(
        m,
        format!(
            "The input token count ({tokens}) exceeds the maximum number of tokens allowed (50)."
        )
    );
    // Gemini's default window is 1,048,576 tokens: 4.4 MB of text goes over it.
    let huge = body(json!([user(&"y".repeat(4_400_000))]));
    refusal(&post(&mock, FLASH, &huge).await, "context_window");
    let fits = body(json!([user(&"y".repeat(3_000_000))]));
    ok(&post(&mock, FLASH, &fits).await);
}

#[tokio::test]
async fn signatures_round_trip_and_are_checked() {
    let mock = start().await;
    let ask = user("list the files");
    let first = ok(&post(&mock, FLASH, &body(json!([ask]))).await);
    let part = parts_of(&first)[0].clone();
    let sig = part["thoughtSignature"].as_str().unwrap().to_owned();
    let turn = |parts: Value| {
        body(json!([ask, {"role": "model", "parts": parts}, respond("run_shell_command")]))
    };

    // Sent back unchanged (the arguments' keys reordered or not): accepted.
    ok(&post(&mock, FLASH, &turn(json!([part]))).await);

    // The arguments edited under the signature: refused.
    let mut tampered = part.clone();
    tampered["functionCall"]["args"]["command"] = json!("rm -rf /");
    let m = refusal(
        &post(&mock, FLASH, &turn(json!([tampered]))).await,
        "gemini.thought_signature",
    );
    assert!(m.starts_with("Corrupted thought signature."), "{m}");

    // The signature moved to a text part before the call: refused.
    let moved = json!([{"text": "I will list them.", "thoughtSignature": sig},
        {"functionCall": part["functionCall"]}]);
    refusal(
        &post(&mock, FLASH, &turn(moved)).await,
        "gemini.thought_signature",
    );

    // Dropped within the current tool loop: refused, as Gemini 3 does.
    let bare = json!([{"functionCall": part["functionCall"]}]);
    let m = refusal(
        &post(&mock, FLASH, &turn(bare.clone())).await,
        "gemini.thought_signature_missing",
    );
    assert!(
        m.starts_with(
            "Function call is missing a thought_signature in functionCall parts. This is \
             required for tools to work correctly"
        ),
        "{m}"
    );
    assert!(m.contains("`default_api:run_shell_command`"), "{m}");

    // Outside the current loop (a new user text after the answer): fine without it.
    let older = body(
        json!([ask, {"role": "model", "parts": bare}, respond("run_shell_command"),
        {"role": "model", "parts": [{"text": "done"}]}, user("thanks, now what?")]),
    );
    ok(&post(&mock, FLASH, &older).await);

    // A signature the mock did not issue is not its to judge.
    let mut foreign = part.clone();
    foreign["thoughtSignature"] = json!("CiQBVKhc7vB2cmVhbC1zaWduYXR1cmU=");
    ok(&post(&mock, FLASH, &turn(json!([foreign]))).await);
}

#[tokio::test]
async fn thoughts_when_asked_are_signed_parts() {
    let mock = start_with(Config {
        reasoning: Reasoning::WhenAsked,
        ..Config::default()
    })
    .await;
    let ask = user("list the files");
    let mut b = body(json!([ask]));
    b["generationConfig"]["thinkingConfig"] = json!({"includeThoughts": true,
        "thinkingBudget": 1024});
    let r = ok(&post(&mock, FLASH, &b).await);
    let parts = parts_of(&r).clone();
    assert_eq!(parts[0]["thought"], true);
    assert!(parts[0]["thoughtSignature"].is_string());
    assert!(parts[1]["functionCall"].is_object());
    let thoughts = r["usageMetadata"]["thoughtsTokenCount"].as_u64().unwrap();
    let u = &r["usageMetadata"];
    assert_eq!(
        u["totalTokenCount"].as_u64().unwrap(),
        u["promptTokenCount"].as_u64().unwrap()
            + u["candidatesTokenCount"].as_u64().unwrap()
            + thoughts
    );
    let mut next = b.clone();
    next["contents"] = json!([ask, {"role": "model", "parts": parts},
        respond("run_shell_command")]);
    ok(&post(&mock, FLASH, &next).await);
    next["contents"][1]["parts"][0]["text"] = json!("I thought something else.");
    refusal(&post(&mock, FLASH, &next).await, "gemini.thought_signature");
    // Not asked: no thoughts.
    let r = ok(&post(&mock, FLASH, &body(json!([ask]))).await);
    assert!(parts_of(&r)[0].get("thought").is_none());

    // Streamed, a thought comes whole with its signature: the chunks' parts, kept as they
    // came, are a valid history.
    let streamed = sse_chunks(&post(&mock, STREAM_SSE, &b).await.body);
    let parts: Vec<Value> = streamed.iter().flat_map(|c| parts_of(c).clone()).collect();
    assert_eq!(parts.len(), 2, "{parts:?}");
    assert_eq!(parts[0]["thought"], true);
    assert!(parts[0]["thoughtSignature"].is_string());
    next["contents"][1]["parts"] = json!(parts);
    ok(&post(&mock, FLASH, &next).await);
}

#[tokio::test]
async fn scripted_errors_come_in_googles_shape() {
    let mock = start().await;
    mock.script()
        .push(Reply::error(429, "Resource has been exhausted"));
    let r = post(&mock, FLASH, &body(json!([user("a")]))).await;
    assert_eq!(r.status, 429);
    assert_eq!(
        r.json(),
        json!({"error": {"code": 429, "message": "Resource has been exhausted",
            "status": "RESOURCE_EXHAUSTED"}})
    );
    mock.script()
        .push(Reply::error(503, "The model is overloaded."));
    let r = post(&mock, STREAM_SSE, &body(json!([user("a")]))).await;
    assert_eq!(r.status, 503);
    assert_eq!(r.json()["error"]["status"], "UNAVAILABLE");

    // Mid-stream: a first chunk, then Google's error object as the next event / element.
    mock.script().push(Reply::fail_mid_stream("internal error"));
    let r = post(&mock, STREAM_SSE, &body(json!([user("a")]))).await;
    assert_eq!(r.status, 200);
    let chunks = sse_chunks(&r.body);
    assert_eq!(chunks.len(), 2);
    assert!(chunks[0]["candidates"][0].get("finishReason").is_none());
    assert_eq!(
        chunks[1],
        json!({"error": {"code": 500, "message": "internal error", "status": "INTERNAL"}})
    );
    mock.script().push(Reply::fail_mid_stream("internal error"));
    let r = post(&mock, STREAM_ARRAY, &body(json!([user("a")]))).await;
    let elements = r.json();
    assert_eq!(elements[1]["error"]["status"], "INTERNAL");
    mock.script().push(Reply::fail_mid_stream("internal error"));
    let r = post(&mock, FLASH, &body(json!([user("a")]))).await;
    assert_eq!(r.status, 500);
    assert_eq!(r.json()["error"]["status"], "INTERNAL");

    // Unknown routes under /v1beta answer in Google's shape too.
    let r = post(
        &mock,
        "/v1beta/models/gemini-2.5-flash:embedContent",
        &json!({}),
    )
    .await;
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["error"]["status"], "NOT_FOUND");
}

#[tokio::test]
async fn the_implicit_cache_reports_cached_tokens() {
    let mock = start().await;
    let big = "lorem ipsum ".repeat(1_000);
    let first = body(json!([user(&big)]));
    let r = ok(&post(&mock, FLASH, &first).await);
    assert!(r["usageMetadata"].get("cachedContentTokenCount").is_none());
    let call = parts_of(&r)[0].clone();
    let second = body(json!([user(&big), {"role": "model", "parts": [call]},
        respond("run_shell_command")]));
    let r = ok(&post(&mock, FLASH, &second).await);
    let u = &r["usageMetadata"];
    let cached = u["cachedContentTokenCount"].as_u64().unwrap();
    assert!(cached > 2_900, "{u}");
    // promptTokenCount counts the cached tokens too; the record bills the rest as input.
    let prompt = u["promptTokenCount"].as_u64().unwrap();
    assert_eq!(prompt as usize, second.to_string().len() / 4);
    let usage = mock.requests().last().unwrap().usage.unwrap();
    assert_eq!((usage.input, usage.cache_read), (prompt - cached, cached));
}

#[tokio::test]
async fn both_credential_styles_are_recorded() {
    let mock = start().await;
    let b = body(json!([user("a")])).to_string().into_bytes();
    ok(&post_raw(&mock, FLASH, b.clone(), &[("x-goog-api-key", "header-key")]).await);
    assert_eq!(
        post_raw(&mock, &format!("{STREAM_SSE}&key=query-key"), b, &[])
            .await
            .status,
        200
    );
    let recs = mock.requests();
    assert_eq!(recs[0].header("x-goog-api-key"), Some("header-key"));
    assert_eq!(recs[0].query("key"), None);
    assert_eq!(recs[1].query("key"), Some("query-key"));
    assert_eq!(recs[1].query("alt"), Some("sse"));
    assert_eq!(
        recs[1].route(),
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
    );
    assert_eq!(recs[0].to_json()["headers"]["x-goog-api-key"], "header-key");
}
