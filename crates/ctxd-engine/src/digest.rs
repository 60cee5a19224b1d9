//! Shell-output digests on a request's new elements: the core's policy
//! ([`ctxd_core::mechanisms::digest`]) applied when a turn's request is planned, before it is projected,
//! so the model never sees a large shell output whole.
//!
//! Three steps, so that the token counter (not `Send`) is never held across an await:
//! 1. [`prepare`] (sync): the candidates among the new elements, each with its local digest
//!    and, when a model summarizes, its prompt and its fallback (the truncated tail);
//! 2. [`Summarizer::summarize`] (async): the configured model's summaries, each within the
//!    model's time limit; a failure or a timeout keeps the fallback;
//! 3. [`commit`] (sync): the `ContextEdit` entries appended after the request's last element,
//!    in the request's own batch.
//!
//! The summarizer is [`Summarizer::Local`] unless an OpenAI-compatible model is configured (the
//! gateway's `[classifier]` with `kind = "openai"`: the same endpoint, model and key).

use std::time::Duration;

use ctxd_core::mechanisms::digest::{self, Candidate, Config, Pointer};
use ctxd_core::model::EntryKind;
use ctxd_core::tokens::TokenCounter;
use ctxd_store::NewEntry;
use serde::Deserialize;
use serde_json::json;

use crate::distill::openai::LogprobSettings;
use crate::turn::{hash, SessionLog};

/// Who writes a digest.
#[derive(Debug, Default)]
pub enum Summarizer {
    /// Head, tail, error and warning lines (no network).
    #[default]
    Local,
    /// An OpenAI-compatible chat model.
    Model(ChatSummarizer),
}

/// An OpenAI-compatible chat model asked for summaries (`POST {base_url}/chat/completions`).
#[derive(Debug)]
pub struct ChatSummarizer {
    model: String,
    url: String,
    api_key_env: Option<String>,
    timeout: Duration,
    client: reqwest::Client,
}

impl ChatSummarizer {
    /// The model of `settings` (a validated openai classifier's), each request within its time
    /// limit.
    pub fn new(settings: &LogprobSettings) -> Result<Self, String> {
        let client = reqwest::Client::builder()
            .timeout(settings.timeout)
            .connect_timeout(settings.timeout.min(Duration::from_secs(10)))
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        Ok(Self {
            model: settings.model.clone(),
            url: format!(
                "{}/chat/completions",
                settings.base_url.trim_end_matches('/')
            ),
            api_key_env: settings.api_key_env.clone(),
            timeout: settings.timeout,
            client,
        })
    }

    async fn ask(&self, system: &str, user: &str, max_tokens: u64) -> Result<String, String> {
        let body = json!({
            "model": self.model,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": user},
            ],
            "max_tokens": max_tokens,
            "temperature": 0,
            "stream": false,
        });
        let body =
            serde_json::to_vec(&body).map_err(|e| format!("cannot encode the request: {e}"))?;
        let mut request = self
            .client
            .post(&self.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        if let Some(var) = &self.api_key_env {
            let key = std::env::var(var).map_err(|_| format!("{var} is not set"))?;
            request = request.bearer_auth(key);
        }
        let response = request.send().await.map_err(|e| {
            if e.is_timeout() {
                format!("no answer within {} ms", self.timeout.as_millis())
            } else {
                format!("{}: {e}", self.url)
            }
        })?;
        let status = response.status();
        if status != reqwest::StatusCode::OK {
            return Err(format!("{} answered HTTP {status}", self.url));
        }
        #[derive(Deserialize)]
        struct Completion {
            choices: Vec<Choice>,
        }
        #[derive(Deserialize)]
        struct Choice {
            message: Content,
        }
        #[derive(Deserialize)]
        struct Content {
            content: Option<String>,
        }
        let bytes = response
            .bytes()
            .await
            .map_err(|e| format!("{}: {e}", self.url))?;
        let c: Completion = serde_json::from_slice(&bytes)
            .map_err(|e| format!("{} sent no chat completion: {e}", self.url))?;
        c.choices
            .into_iter()
            .next()
            .and_then(|c| c.message.content)
            .filter(|t| !t.trim().is_empty())
            .ok_or_else(|| format!("{} answered no text", self.url))
    }
}

/// One digest being made.
#[derive(Debug)]
pub struct Pending {
    pub candidate: Candidate,
    /// How the digest points back to the raw output.
    pointer: Pointer,
    /// The digest's text so far: the local digest, or (a model summarizing) the fallback until
    /// the summary comes.
    pub text: String,
    /// A model's prompt (system, user), when one summarizes.
    prompt: Option<(String, String)>,
    /// What wrote the text: `local`, `model`, `fallback`.
    pub source: &'static str,
}

/// Digests of one request, between [`prepare`] and [`commit`].
#[derive(Debug, Default)]
pub struct Prepared {
    pub digests: Vec<Pending>,
}

impl Prepared {
    pub fn is_empty(&self) -> bool {
        self.digests.is_empty()
    }
}

/// What a request's digests need to know about it.
#[derive(Clone, Copy, Debug)]
pub struct DigestContext<'a> {
    /// The gateway's agent name (`claude-code`, `codex`, `pi`, ...).
    pub agent: Option<&'a str>,
    /// The model has `recall`: digests name it with the entry's id.
    pub recall: bool,
    /// The store session, for `recall`'s history item ids (`None`: entry ids).
    pub store_session: Option<i64>,
    /// A model summarizes (the local digest is not made).
    pub summarized: bool,
}

/// Step 1: the digests of the elements at `new` (positions of the request's new elements).
pub fn prepare(
    log: &SessionLog,
    new: &[usize],
    cfg: &Config,
    cx: DigestContext<'_>,
    counter: &dyn TokenCounter,
) -> Prepared {
    if new.is_empty() {
        return Prepared::default();
    }
    let branch = log.branch();
    let found = digest::candidates(&log.session, &branch, new, cx.agent, cfg, counter);
    let digests = found
        .into_iter()
        .map(|candidate| {
            let pointer = pointer_of(&candidate, cx);
            let (text, prompt, source) = if cx.summarized {
                (
                    digest::render_fallback(&candidate, &pointer, cfg.fallback_bytes),
                    Some(digest::summary_prompt(&candidate, cfg)),
                    "fallback",
                )
            } else {
                (
                    digest::render_local(&candidate, &pointer, cfg, counter),
                    None,
                    "local",
                )
            };
            Pending {
                candidate,
                pointer,
                text,
                prompt,
                source,
            }
        })
        .collect();
    Prepared { digests }
}

/// The pointer a candidate's digest names: `recall` with the id it takes, where offered.
pub fn pointer_of(c: &Candidate, cx: DigestContext<'_>) -> Pointer {
    if !cx.recall {
        return Pointer::NoRecall;
    }
    Pointer::Recall(match cx.store_session {
        Some(s) => {
            ctxd_core::history::item_id(ctxd_core::history::item_key(s, c.entry_id.as_str()))
        }
        None => c.entry_id.0.clone(),
    })
}

impl Summarizer {
    /// Whether a model summarizes.
    pub fn is_model(&self) -> bool {
        matches!(self, Summarizer::Model(_))
    }

    /// Step 2: a model's summaries, all at once; each failure keeps its fallback.
    pub async fn summarize(&self, prepared: &mut Prepared, cfg: &Config) {
        let Summarizer::Model(model) = self else {
            return;
        };
        let asks = prepared.digests.iter().map(|p| async move {
            match &p.prompt {
                Some((system, user)) => Some(model.ask(system, user, cfg.max_tokens).await),
                None => None,
            }
        });
        let answers = futures_util::future::join_all(asks).await;
        for (p, answer) in prepared.digests.iter_mut().zip(answers) {
            match answer {
                Some(Ok(summary)) => {
                    p.text = digest::render_summary(
                        &p.candidate,
                        &summary,
                        &model.model,
                        &p.pointer,
                        cfg,
                    );
                    p.source = "model";
                }
                Some(Err(e)) => {
                    tracing::info!(
                        output = %p.candidate.label,
                        error = %e,
                        "digest summary failed; the truncated tail goes instead"
                    );
                }
                None => {}
            }
        }
    }
}

/// Step 3: the digests' edits appended after the log's leaf (the request's last element),
/// returned for the request's batch.
pub fn commit(log: &mut SessionLog, prepared: Prepared, now: &str) -> Vec<NewEntry> {
    if prepared.is_empty() {
        return Vec::new();
    }
    let pairs: Vec<(Candidate, String)> = prepared
        .digests
        .into_iter()
        .map(|p| (p.candidate, p.text))
        .collect();
    let mut parent = log.leaf();
    let mut out = Vec::new();
    for kind in digest::drafts(&log.session, &pairs) {
        let tag = match &kind {
            EntryKind::ContextEdit { target, .. } => format!("digest {target}"),
            _ => "digest".to_owned(),
        };
        let (pos, entry) = log.append_under(
            parent,
            "digest",
            &hash::text(&tag),
            kind,
            Some(now.to_owned()),
        );
        parent = Some(pos);
        out.push(NewEntry::new(entry));
    }
    out
}
