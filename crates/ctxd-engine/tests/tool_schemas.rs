//! The tool definitions ctxd offers, pinned byte for byte: they are sent upstream on every
//! request the gateway serves (and counted), so a change to a schema's text shows up here.

use expect_test::expect_file;
use serde_json::json;

#[test]
fn tool_definitions_are_pinned() {
    let lines: Vec<String> = ctxd_engine::tools::specs()
        .iter()
        .map(|s| {
            json!({"name": s.name, "description": s.description, "parameters": s.parameters})
                .to_string()
        })
        .collect();
    expect_file!["snapshots/tool_definitions.jsonl"].assert_eq(&(lines.join("\n") + "\n"));
}
