#![allow(clippy::unwrap_used)]

use serde_json::json;

use super::*;

fn def(name: &str, description: &str) -> ToolDef {
    ToolDef {
        name: name.into(),
        description: description.into(),
        schema: json!({"type": "object", "properties": {"x": {"type": "string"}}}),
    }
}

/// Claude Code's tools as captured (`../shared/clients/captured/requests_claude.jsonl`), with
/// the start of their descriptions.
fn claude_tools() -> Vec<ToolDef> {
    vec![
        def(
            "Agent",
            "Launch a new agent to handle complex, multi-step tasks autonomously.",
        ),
        def(
            "Bash",
            "Executes a given bash command and returns its output.",
        ),
        def(
            "CronCreate",
            "Schedule a prompt to run at a future time, recurring on a cron schedule.",
        ),
        def(
            "CronDelete",
            "Cancel a cron job previously scheduled with CronCreate.",
        ),
        def("Edit", "Performs exact string replacements in files."),
        def(
            "NotebookEdit",
            "Completely replaces the contents of a specific cell in a Jupyter notebook.",
        ),
        def("Read", "Reads a file from the local filesystem."),
        def(
            "WebFetch",
            "Fetches content from a specified URL and processes it using an AI model.",
        ),
        def(
            "WebSearch",
            "Allows Claude to search the web and use the results to inform responses.",
        ),
        def("Write", "Writes a file to the local filesystem."),
    ]
}

fn names_of(hits: &[Hit<'_>]) -> Vec<String> {
    hits.iter().map(|h| h.tool.name.clone()).collect()
}

#[test]
fn words_split_names_and_drop_filler() {
    assert_eq!(words("WebFetch"), ["web", "fetch"]);
    assert_eq!(words("exec_command"), ["exec", "command"]);
    assert_eq!(words("I need a tool to fetch a URL"), ["fetch", "url"]);
    assert_eq!(words("NotebookEdit"), ["notebook", "edit"]);
}

#[test]
fn the_name_outweighs_the_description_and_an_exact_name_comes_first() {
    let tools = claude_tools();
    let hits = search(&tools, "fetch a web page");
    assert_eq!(names_of(&hits)[..2], ["WebFetch", "WebSearch"]);
    assert!(hits[0].score > hits[1].score);
    // `cron` is in both crons' names, `schedule` in both descriptions (`scheduled`): a tie,
    // in the client's order.
    let hits = search(&tools, "cron schedule");
    assert_eq!(names_of(&hits)[..2], ["CronCreate", "CronDelete"]);
    // An exact name wins over every word match, and activates alone.
    let hits = search(&tools, "notebookedit");
    assert_eq!(names_of(&hits)[0], "NotebookEdit");
    assert_eq!(to_activate(&hits).len(), 1);
    assert!(search(&tools, "kubernetes").is_empty());
    assert!(search(&tools, "   ").is_empty());
}

#[test]
fn a_search_activates_the_best_few() {
    let tools = claude_tools();
    // `web` is in both names, and in WebSearch's description too.
    let hits = search(&tools, "web");
    let chosen: Vec<&str> = to_activate(&hits).iter().map(|t| t.name.as_str()).collect();
    assert_eq!(chosen, ["WebSearch", "WebFetch"]);
    let many: Vec<ToolDef> = (0..6).map(|i| def(&format!("Task{i}"), "task")).collect();
    assert_eq!(to_activate(&search(&many, "task")).len(), MAX_ACTIVATED);
}

#[test]
fn find_answers_and_records_only_what_becomes_active() {
    let tools = claude_tools();
    let base = BaseTools::default();
    let row = base.row(Some("claude-code"));
    let offered = |n: &str| row.iter().any(|b| b == n);
    let found = find(&tools, "fetch a web page", offered);
    let record = found.record.unwrap();
    assert_eq!(record.activated, ["WebFetch", "WebSearch"]);
    assert!(
        found.text.contains("- WebFetch: Fetches content"),
        "{}",
        found.text
    );
    assert_eq!(Record::from_entry(&record.to_entry()), Some(record));
    // A base tool found is named, not recorded.
    let found = find(&tools, "Bash", offered);
    assert!(found.record.is_none() && found.text.contains("Bash (already available)"));
    // No match: the names that could be activated, never the offered ones.
    let found = find(&tools, "kubernetes", offered);
    assert!(found.record.is_none());
    assert!(
        found.text.contains("CronCreate") && !found.text.contains("Bash"),
        "{}",
        found.text
    );
}

fn user(text: &str) -> EntryKind {
    EntryKind::Message(Message::text(Role::User, text))
}

fn assistant_calling(name: &str) -> EntryKind {
    EntryKind::Message(Message::new(
        Role::Assistant,
        vec![ContentBlock::ToolCall {
            id: format!("c-{name}"),
            name: name.into(),
            arguments: json!({}),
        }],
    ))
}

fn results(name: &str) -> EntryKind {
    EntryKind::Message(Message::new(
        Role::User,
        vec![ContentBlock::ToolResult {
            call_id: format!("c-{name}"),
            tool_name: None,
            content: vec![ContentBlock::text("ok")],
            is_error: false,
        }],
    ))
}

#[test]
fn activations_last_until_the_next_prompt() {
    let mut s = Session::default();
    s.push_linear(EntryKind::ToolDefs {
        tools: claude_tools(),
    });
    s.push_linear(user("look up the docs"));
    s.push_linear(assistant_calling(FIND_CAPABILITY));
    s.push_linear(results(FIND_CAPABILITY));
    s.push_linear(Record::new("web", vec!["WebFetch".into()]).to_entry());
    let branch: Vec<usize> = (0..s.entries.len()).collect();
    assert!(activated(&s, &branch).contains("WebFetch"));
    assert_eq!(tools_in_force(&s, &branch).len(), 10);
    // A reminder of ctxd's is no prompt; the call of a tool that was not offered activates it.
    let mut reminder = Message::text(Role::User, "[ctxd] budget");
    reminder.injected = Some("ctxd/reminder".into());
    s.push_linear(EntryKind::Message(reminder));
    s.push_linear(assistant_calling("CronCreate"));
    s.push_linear(results("CronCreate"));
    let branch: Vec<usize> = (0..s.entries.len()).collect();
    let active = activated(&s, &branch);
    assert!(active.contains("WebFetch") && active.contains("CronCreate"));
    // The next prompt: the base set is back.
    s.push_linear(user("now something else"));
    let branch: Vec<usize> = (0..s.entries.len()).collect();
    assert!(activated(&s, &branch).is_empty());
}

#[test]
fn a_replay_counts_what_would_be_left_out() {
    let mut s = Session::default();
    let mut tools = claude_tools();
    tools.push(ToolDef {
        name: "web_search".into(),
        description: String::new(),
        schema: json!({"type": "web_search_20250305", "name": "web_search"}),
    });
    s.push_linear(EntryKind::ToolDefs {
        tools: tools.clone(),
    });
    s.push_linear(user("go"));
    s.push_linear(assistant_calling("WebFetch"));
    let branch: Vec<usize> = (0..s.entries.len()).collect();
    let base = vec!["Bash".to_owned(), "Read".to_owned()];
    let kept = ["Bash", "Read", "WebFetch", "web_search"];
    let want = avoided_tokens(&tools, |n| kept.contains(&n));
    assert_eq!(left_out(&s, &branch, &base), want);
    assert!(want > 0);
    assert_eq!(left_out(&Session::default(), &[], &base), 0);
}

#[test]
fn what_is_kept_and_what_is_avoided() {
    let base = vec!["Bash".to_owned(), "Read".to_owned()];
    let active: BTreeSet<String> = ["WebFetch".to_owned()].into();
    fn f(name: &str) -> Candidate<'_> {
        Candidate {
            name,
            function: true,
        }
    }
    assert!(keep(f("Bash"), &base, &active, None));
    assert!(keep(f("WebFetch"), &base, &active, None));
    assert!(!keep(f("CronCreate"), &base, &active, None));
    assert!(keep(f("CronCreate"), &base, &active, Some("CronCreate")));
    let server = Candidate {
        name: "web_search",
        function: false,
    };
    assert!(keep(server, &base, &active, None));
    let tools = claude_tools();
    let kept = |n: &str| keep(f(n), &base, &active, None);
    let avoided = avoided_tokens(&tools, kept);
    let all: u64 = tools.iter().map(def_tokens).sum();
    let shown: u64 = tools.iter().filter(|t| kept(&t.name)).map(def_tokens).sum();
    assert_eq!(avoided + shown, all);
    assert!(avoided > shown);
}
