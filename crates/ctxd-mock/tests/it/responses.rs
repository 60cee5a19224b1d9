//! OpenAI Responses, JSON and SSE, with reasoning items and Codex's tool kinds.

use ctxd_mock::{Config, Reasoning};
use serde_json::{json, Value};

use crate::support::{names, post, start, start_with};

fn tools() -> Value {
    json!([{"type": "function", "name": "exec_command", "strict": false,
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"},
            "workdir": {"type": "string"}}, "required": ["cmd"]}},
           {"type": "custom", "name": "apply_patch"},
           {"type": "web_search"}])
}

fn body(stream: bool, done: bool) -> Value {
    let mut input = vec![
        json!({"type": "message", "role": "developer", "content": "rules"}),
        json!({"type": "message", "role": "user",
                                "content": [{"type": "input_text", "text": "list the files"}]}),
    ];
    if done {
        input.push(
            json!({"type": "function_call", "call_id": "c1", "name": "exec_command",
                          "arguments": "{\"cmd\":\"ls\"}"}),
        );
        input.push(json!({"type": "function_call_output", "call_id": "c1", "output": "README.md"}));
    }
    json!({"model": "gpt-5.5", "stream": stream, "input": input, "tools": tools(),
           "tool_choice": "auto", "store": false})
}

#[tokio::test]
async fn json_tool_call_then_final_text() {
    let mock = start().await;
    let b = body(false, false);
    let r = post(&mock, "/v1/responses", &b).await.json();
    assert_eq!(r["object"], "response");
    assert_eq!(r["status"], "completed");
    assert_eq!(r["model"], "gpt-5.5");
    let item = &r["output"][0];
    assert_eq!(item["type"], "function_call");
    assert_eq!(item["name"], "exec_command");
    assert_eq!(item["arguments"], "{\"cmd\":\"ls\"}");
    assert!(item["call_id"].as_str().unwrap().starts_with("call_"));
    assert_eq!(
        r["usage"]["input_tokens"].as_u64().unwrap() as usize,
        b.to_string().len() / 4
    );

    let r = post(&mock, "/v1/responses", &body(false, true))
        .await
        .json();
    let item = &r["output"][0];
    assert_eq!(item["type"], "message");
    assert_eq!(
        item["content"][0],
        json!({"type": "output_text", "text": "done", "annotations": []})
    );
}

#[tokio::test]
async fn stream_follows_the_real_event_sequence() {
    let mock = start().await;
    let events = post(&mock, "/v1/responses", &body(true, true))
        .await
        .events();
    assert_eq!(
        names(&events),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed"
        ]
    );
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e.data["sequence_number"], i);
        assert_eq!(Some(e.data["type"].as_str().unwrap()), e.name.as_deref());
    }
    assert_eq!(events[4].data["delta"], "done");
    let completed = &events[8].data["response"];
    assert_eq!(completed["status"], "completed");
    assert_eq!(completed["output"][0], events[7].data["item"]);
    assert!(completed["usage"]["total_tokens"].as_u64().unwrap() > 0);

    let events = post(&mock, "/v1/responses", &body(true, false))
        .await
        .events();
    assert_eq!(
        names(&events),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed"
        ]
    );
    assert_eq!(events[2].data["item"]["arguments"], "");
    assert_eq!(events[2].data["item"]["status"], "in_progress");
    assert_eq!(events[3].data["delta"], "{\"cmd\":\"ls\"}");
    assert_eq!(events[5].data["item"]["status"], "completed");
}

#[tokio::test]
async fn encrypted_reasoning_when_asked() {
    let mock = start_with(Config {
        reasoning: Reasoning::WhenAsked,
        ..Config::default()
    })
    .await;
    let mut b = body(false, true);
    assert_eq!(
        post(&mock, "/v1/responses", &b).await.json()["output"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    b["include"] = json!(["reasoning.encrypted_content"]);
    b["reasoning"] = json!({"effort": "medium"});
    let r = post(&mock, "/v1/responses", &b).await.json();
    let rs = &r["output"][0];
    assert_eq!(rs["type"], "reasoning");
    assert!(rs["id"].as_str().unwrap().starts_with("rs_"));
    assert!(rs["encrypted_content"]
        .as_str()
        .unwrap()
        .starts_with("gAAAAA"));
    assert_eq!(r["output"][1]["type"], "message");
    assert!(
        r["usage"]["output_tokens_details"]["reasoning_tokens"]
            .as_u64()
            .unwrap()
            > 0
    );

    b["stream"] = json!(true);
    let events = post(&mock, "/v1/responses", &b).await.events();
    assert_eq!(events[2].data["item"]["type"], "reasoning");
    assert_eq!(events[3].data["type"], "response.output_item.done");
    assert!(events[3].data["item"]["encrypted_content"]
        .as_str()
        .unwrap()
        .starts_with("gAAAAA"));
    assert_eq!(events[4].data["type"], "response.output_item.added");
    assert_eq!(events[4].data["output_index"], 1);
}

#[tokio::test]
async fn local_shell_and_string_input() {
    let mock = start().await;
    let b = json!({"model": "m", "input": "list the files", "tools": [{"type": "local_shell"}]});
    let r = post(&mock, "/v1/responses", &b).await.json();
    let item = &r["output"][0];
    assert_eq!(item["type"], "local_shell_call");
    assert_eq!(
        item["action"],
        json!({"type": "exec", "command": ["bash", "-lc", "ls"]})
    );
}
