#![allow(clippy::unwrap_used, clippy::expect_used)]

//! The logprob classifier against the mock model server on 127.0.0.1: answers read from
//! log-probabilities, usage, errors and timeouts keeping items, the concurrency limit.

use std::time::{Duration, Instant};

use ctxd_core::distill::{self, Answer, Ask, Config, Missing, Phase, Plan};
use ctxd_core::model::{ContentBlock, EntryKind, Message, Role, Session};
use ctxd_core::tree::active_branch;
use ctxd_engine::distill::{
    ask, Classifier, ClassifierKind, ClassifierSettings, Configured, Limits, LogprobClassifier,
    Pass,
};
use ctxd_mock::{Config as MockConfig, MockServer, Reply, Shape};
use serde_json::{json, Value};

/// A finished run with `outputs` large tool outputs (one batch each), each `lines` lines long;
/// `steer` goes into every output (a `mock:p=…` directive steers the mock's yes/no answers).
fn session(outputs: usize, lines: usize, steer: &str) -> Session {
    let mut s = Session::default();
    let mut push = |kind: EntryKind| s.push_linear(kind);
    push(EntryKind::Message(Message::text(
        Role::User,
        "count the widgets",
    )));
    for i in 0..outputs {
        push(EntryKind::Message(Message::new(
            Role::Assistant,
            vec![ContentBlock::ToolCall {
                id: format!("c{i}"),
                name: "bash".into(),
                arguments: json!({"command": format!("widgets --page {i}")}),
            }],
        )));
        let mut text = format!("{steer}\n");
        for l in 0..lines {
            text.push_str(&format!(
                "widget_line {i}-{l} noise noise noise noise noise noise noise noise noise noise noise noise\n"
            ));
            if l % 20 == 19 {
                text.push('\n');
            }
        }
        push(EntryKind::Message(Message::new(
            Role::Tool,
            vec![ContentBlock::ToolResult {
                call_id: format!("c{i}"),
                tool_name: Some("bash".into()),
                content: vec![ContentBlock::text(text)],
                is_error: false,
            }],
        )));
    }
    push(EntryKind::Message(Message::text(
        Role::Assistant,
        "There are 3 pages.",
    )));
    s
}

fn plan(s: &Session) -> Plan {
    distill::plan(s, &active_branch(s), &Config::default(), Phase::RunEnd)
}

fn classifier(mock: &MockServer, concurrency: usize, timeout_ms: u64) -> LogprobClassifier {
    let settings = ClassifierSettings {
        kind: ClassifierKind::OpenAi,
        base_url: Some(format!("{}/v1", mock.base_url())),
        model: Some("judge-1".into()),
        concurrency: Some(concurrency),
        timeout_ms: Some(timeout_ms),
        price_per_mtok: Some(0.5),
        ..ClassifierSettings::default()
    };
    match Configured::from_settings(&settings).unwrap() {
        Configured::OpenAi(c) => c,
        other => panic!("{other:?}"),
    }
}

fn limits(concurrency: usize) -> Limits {
    Limits {
        budget: Duration::from_secs(20),
        concurrency,
    }
}

fn chat_requests(mock: &MockServer) -> Vec<Value> {
    mock.requests()
        .iter()
        .filter(|r| r.route() == "/v1/chat/completions")
        .map(|r| r.json().unwrap())
        .collect()
}

#[tokio::test]
async fn answers_are_read_from_logprobs_and_usage_is_recorded() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let s = session(1, 60, "mock:p=0.9");
    let p = plan(&s);
    assert_eq!(p.batches.len(), 1);
    let n = p.questions.len();
    assert!(n >= 4, "{n} questions");
    let c = classifier(&mock, 4, 5_000);
    assert_eq!(c.name(), "openai:judge-1");
    let a = ask(&c, &p, &limits(6)).await;
    assert!(!a.timed_out);
    for (q, answer) in p.questions.iter().zip(&a.answers) {
        match (&q.ask, answer) {
            (Ask::YesNo, Ok(Answer::Yes(y))) => assert!((y - 0.9).abs() < 1e-3, "{y}"),
            (Ask::Choice(options), Ok(Answer::Choice(ps))) => {
                assert_eq!(ps.len(), options.len());
                assert!((ps.iter().sum::<f32>() - 1.0).abs() < 1e-3, "{ps:?}");
            }
            other => panic!("{other:?}"),
        }
    }
    // One request per question, each as the classifier sends it.
    let bodies = chat_requests(&mock);
    assert_eq!(bodies.len(), n);
    assert_eq!(a.usage.requests, n as u64);
    let tokens: u64 = mock
        .requests()
        .iter()
        .map(|r| (r.body_len / 4) as u64)
        .sum();
    assert_eq!(a.usage.input_tokens, tokens, "the servers' prompt_tokens");
    assert!((a.usage.cost_usd - tokens as f64 * 0.5 / 1e6).abs() < 1e-12);
    for b in &bodies {
        assert_eq!(b["model"], "judge-1");
        assert_eq!(b["max_tokens"], 1);
        assert_eq!(b["temperature"], 0);
        assert_eq!(b["logprobs"], true);
        assert_eq!(b["top_logprobs"], 20);
        let user = b["messages"][1]["content"].as_str().unwrap();
        assert!(user.contains("<user_question>\ncount the widgets\n</user_question>"));
        assert!(user.contains("<final_answer>\nThere are 3 pages.\n</final_answer>"));
        assert!(user.contains("<chunk_1 lines 1-"), "{user}");
    }
    assert!(mock
        .requests()
        .iter()
        .all(|r| r.header("authorization").is_none()));
    // Every question of the batch shares its text up to the question (prefix caches).
    let users: Vec<&str> = bodies
        .iter()
        .map(|b| b["messages"][1]["content"].as_str().unwrap())
        .collect();
    let prefix = users[0].split("Question:").next().unwrap();
    assert!(users.iter().all(|u| u.starts_with(prefix)));
    // Everything said yes: the output stays.
    let d = distill::decide(&s, &p, &a.answers, &Config::default());
    assert!(d.edits.is_empty(), "{:?}", d.results);
}

#[tokio::test]
async fn scripted_distributions_become_exact_answers() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let s = session(1, 60, "");
    let p = plan(&s);
    assert!(p.questions.iter().any(|q| matches!(q.ask, Ask::Choice(_))));
    // One permit: the questions go in order, and take the script in order.
    for q in &p.questions {
        mock.script().push(match &q.ask {
            Ask::YesNo => Reply::sampled(&[("No", 0.6), (" yes", 0.2), ("Yes", 0.1), ("The", 0.1)]),
            Ask::Choice(_) => Reply::sampled(&[("B", 0.6), ("a", 0.2), (" C", 0.1), ("I", 0.1)]),
        });
    }
    let a = ask(&classifier(&mock, 1, 5_000), &p, &limits(1)).await;
    for (q, answer) in p.questions.iter().zip(&a.answers) {
        match (&q.ask, answer.as_ref().unwrap()) {
            (Ask::YesNo, Answer::Yes(y)) => assert!((y - 0.3 / 0.9).abs() < 1e-4, "{y}"),
            (Ask::Choice(options), Answer::Choice(ps)) => {
                let mut want = vec![0.0; options.len()];
                want[0] = 0.2 / 0.9;
                want[1] = 0.6 / 0.9;
                want[2] = 0.1 / 0.9;
                for (p, w) in ps.iter().zip(want) {
                    assert!((p - w).abs() < 1e-4, "{ps:?}");
                }
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(mock.script().is_empty());
}

#[tokio::test]
async fn the_api_key_comes_from_the_named_variable() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    // A variable only this test reads.
    std::env::set_var("CTXD_TEST_LOGPROB_KEY", "sk-test-123");
    let settings = ClassifierSettings {
        kind: ClassifierKind::OpenAi,
        base_url: Some(format!("{}/v1", mock.base_url())),
        model: Some("judge-1".into()),
        api_key_env: Some("CTXD_TEST_LOGPROB_KEY".into()),
        ..ClassifierSettings::default()
    };
    let c = Configured::from_settings(&settings).unwrap();
    assert!(!format!("{c:?}").contains("sk-test-123"), "never kept");
    let s = session(1, 20, "mock:p=0.2");
    let a = ask(&c, &plan(&s), &limits(6)).await;
    assert!(a.answers.iter().all(Result::is_ok));
    let r = mock.requests();
    assert!(!r.is_empty());
    assert!(r
        .iter()
        .all(|r| r.header("authorization") == Some("Bearer sk-test-123")));

    // A server that echoes the key in an error: the error does not carry it.
    mock.script().push(Reply::error(
        401,
        "Incorrect API key provided: sk-test-123.",
    ));
    let p = plan(&s);
    let pass = Pass::new(&p);
    let e = c.classify(&pass, &p.batches[0]).await.unwrap_err();
    assert!(e.0.contains("HTTP 401") && e.0.contains("[api key]"), "{e}");
    assert!(!e.0.contains("sk-test-123"), "{e}");
}

#[tokio::test]
async fn an_http_error_or_an_unreadable_answer_keeps_the_batch() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let s = session(3, 60, "mock:p=0.05");
    let p = plan(&s);
    assert_eq!(p.batches.len(), 3);
    // The runner asks one batch at a time: the first batch's first request gets a 500, the
    // second batch's an answer that is neither yes nor no.
    mock.script().push(Reply::error(500, "the model fell over"));
    let c = classifier(&mock, 1, 5_000);
    let a = ask(&c, &p, &limits(1)).await;
    for &q in &p.batches[0].questions {
        assert_eq!(a.answers[q], Err(Missing::Error));
    }
    assert!(p.batches[1..]
        .iter()
        .flat_map(|b| &b.questions)
        .all(|&q| a.answers[q].is_ok()));
    let d = distill::decide(&s, &p, &a.answers, &Config::default());
    assert_eq!(d.edits.len(), 2, "the failed batch's output is kept");
    assert!(d.results.iter().any(|r| r.reason == "error"));

    mock.script().push(Reply::text("Maybe"));
    let a = ask(&c, &p, &limits(1)).await;
    let first = &p.questions[p.batches[0].questions[0]];
    assert_eq!(first.ask, Ask::YesNo);
    assert!(p.batches[0]
        .questions
        .iter()
        .all(|&q| a.answers[q] == Err(Missing::Error)));
}

#[tokio::test]
async fn a_slow_server_times_out_and_keeps() {
    // The request's own limit: the first request waits 3 s, the classifier gives up at 200 ms.
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let s = session(2, 60, "mock:p=0.05");
    let p = plan(&s);
    mock.script()
        .push(Reply::default_turn().first_byte_delay(Duration::from_secs(3)));
    let started = Instant::now();
    let a = ask(&classifier(&mock, 1, 200), &p, &limits(1)).await;
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(p.batches[0]
        .questions
        .iter()
        .all(|&q| a.answers[q] == Err(Missing::Error)));
    assert!(p.batches[1].questions.iter().all(|&q| a.answers[q].is_ok()));

    // The pass's budget: every reply takes 2 s, the budget is 300 ms.
    let slow = MockConfig {
        shape: Shape {
            first_byte_delay: Duration::from_secs(2),
            ..Shape::default()
        },
        ..MockConfig::default()
    };
    let mock = MockServer::start(slow).await.unwrap();
    let started = Instant::now();
    let a = ask(
        &classifier(&mock, 4, 10_000),
        &p,
        &Limits {
            budget: Duration::from_millis(300),
            concurrency: 6,
        },
    )
    .await;
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(a.timed_out);
    assert!(a.answers.iter().all(|x| *x == Err(Missing::Timeout)));
    let d = distill::decide(&s, &p, &a.answers, &Config::default());
    assert!(d.edits.is_empty());
}

#[tokio::test]
async fn requests_in_flight_stay_within_the_limit() {
    const DELAY: Duration = Duration::from_millis(150);
    let config = MockConfig {
        shape: Shape {
            first_byte_delay: DELAY,
            ..Shape::default()
        },
        ..MockConfig::default()
    };
    let mock = MockServer::start(config).await.unwrap();
    // Two outputs, two batches asked at once by the runner: the classifier's own limit (2)
    // holds across them.
    let s = session(2, 60, "mock:p=0.7");
    let p = plan(&s);
    let n = p.questions.len();
    let started = Instant::now();
    let a = ask(&classifier(&mock, 2, 5_000), &p, &limits(6)).await;
    let elapsed = started.elapsed();
    assert!(a.answers.iter().all(Result::is_ok));
    let arrivals: Vec<f64> = mock.requests().iter().map(|r| r.received_at).collect();
    assert_eq!(arrivals.len(), n);
    // Requests in flight together arrive within a few ms; the next ones a delay later.
    let window = DELAY.as_secs_f64() / 2.0;
    let peak = arrivals
        .iter()
        .map(|t| {
            arrivals
                .iter()
                .filter(|u| **u <= *t && **u > t - window)
                .count()
        })
        .max()
        .unwrap();
    assert_eq!(peak, 2, "{arrivals:?}");
    assert!(
        elapsed >= DELAY * (n as u32 / 2),
        "{elapsed:?} for {n} requests"
    );
    eprintln!(
        "{n} questions, 2 in flight, {} ms each: {:.0} ms",
        DELAY.as_millis(),
        elapsed.as_secs_f64() * 1e3
    );
}

/// Throughput against the mock (no delay): `cargo test -p ctxd-engine --test logprob --
/// --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement"]
async fn throughput() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let s = session(6, 400, "");
    let p = plan(&s);
    for concurrency in [1, 4, 8, 16] {
        let c = classifier(&mock, concurrency, 5_000);
        let started = Instant::now();
        let a = ask(&c, &p, &limits(6)).await;
        let secs = started.elapsed().as_secs_f64();
        assert!(a.answers.iter().all(Result::is_ok));
        eprintln!(
            "concurrency {concurrency}: {} requests in {} batches, {:.0} ms, {:.0} requests/s, {:.1} ms per batch, {} input tokens",
            a.usage.requests,
            p.batches.len(),
            secs * 1e3,
            a.usage.requests as f64 / secs,
            secs * 1e3 / p.batches.len() as f64,
            a.usage.input_tokens
        );
    }
}
