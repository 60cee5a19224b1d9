//! [`LogprobClassifier`]: any OpenAI-compatible chat model (OpenAI, llama.cpp server, vLLM,
//! Ollama) as a classifier, through the log-probabilities of a one-token answer.
//!
//! Each question is one `POST {base_url}/chat/completions` with `max_tokens: 1`,
//! `temperature: 0`, `logprobs: true` and `top_logprobs: 20` ([`prompt`] has the words,
//! [`probs`] the reading). A batch's requests share their text up to the question, so the
//! first goes alone and the rest follow together once it is back: by then the server's prefix
//! cache holds the shared part (OpenAI caches prefixes, vLLM and llama.cpp reuse them). At most
//! `concurrency` requests are in flight across every batch of the classifier (the runner's own
//! limit counts batches). Any failure (a status other than 200, a body that is not a
//! completion, no log-probabilities, an answer that is neither yes nor no, a timeout) fails the
//! batch, and the runner keeps its items.
//!
//! The API key is read from the environment variable the settings name at each request: it is
//! never stored, logged or shown in an error.

pub mod probs;
pub mod prompt;

use std::time::Duration;

use futures_util::future::try_join_all;
use serde::Deserialize;
use serde_json::json;
use tokio::sync::Semaphore;

use ctxd_core::distill::{Answer, Ask, Batch};

use super::{Classifier, ClassifierError, Pass, Reply};
use probs::Alternative;

/// Alternatives asked for the first token (OpenAI's maximum, vLLM's default limit).
pub const TOP_LOGPROBS: u8 = 20;
/// Characters of an error body quoted in an error.
const ERROR_BODY_CHARS: usize = 300;

/// A logprob classifier's settings, validated (see `ClassifierSettings` for the raw form).
#[derive(Clone, Debug, PartialEq)]
pub struct LogprobSettings {
    /// The API's base, up to and without `/chat/completions` (`https://api.openai.com/v1`,
    /// `http://127.0.0.1:8080/v1`).
    pub base_url: String,
    pub model: String,
    /// The environment variable holding the API key (`None`: no `Authorization` header, as a
    /// local server wants).
    pub api_key_env: Option<String>,
    /// Each request's time limit (connecting, sending, reading the reply).
    pub timeout: Duration,
    /// Requests in flight at once.
    pub concurrency: usize,
    /// USD per million input tokens, for the records' cost.
    pub price_per_mtok: Option<f64>,
}

/// Any OpenAI-compatible chat model, asked one question per request.
#[derive(Debug)]
pub struct LogprobClassifier {
    name: String,
    url: String,
    settings: LogprobSettings,
    client: reqwest::Client,
    permits: Semaphore,
}

impl LogprobClassifier {
    /// The client for `settings` (which [`super::ClassifierSettings`] validated).
    pub fn new(settings: LogprobSettings) -> Result<Self, ClassifierError> {
        let client = reqwest::Client::builder()
            .timeout(settings.timeout)
            .connect_timeout(settings.timeout.min(Duration::from_secs(10)))
            .tcp_nodelay(true)
            .build()
            .map_err(|e| ClassifierError(format!("cannot build the HTTP client: {e}")))?;
        Ok(Self {
            name: format!("openai:{}", settings.model),
            url: format!(
                "{}/chat/completions",
                settings.base_url.trim_end_matches('/')
            ),
            permits: Semaphore::new(settings.concurrency.max(1)),
            client,
            settings,
        })
    }

    pub fn settings(&self) -> &LogprobSettings {
        &self.settings
    }

    /// One question: its answer and the input tokens the server counted.
    async fn ask_one(&self, message: &str, ask: &Ask) -> Result<(Answer, u64), ClassifierError> {
        let body = json!({
            "model": self.settings.model,
            "messages": [
                {"role": "system", "content": prompt::SYSTEM},
                {"role": "user", "content": message},
            ],
            "max_tokens": 1,
            "temperature": 0,
            "logprobs": true,
            "top_logprobs": TOP_LOGPROBS,
            "stream": false,
        });
        let body = serde_json::to_vec(&body)
            .map_err(|e| ClassifierError(format!("cannot encode the request: {e}")))?;
        let mut request = self
            .client
            .post(&self.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        let mut key = None;
        if let Some(var) = &self.settings.api_key_env {
            let k = std::env::var(var).map_err(|_| {
                ClassifierError(format!(
                    "the environment variable {var} (api_key_env) is not set"
                ))
            })?;
            request = request.bearer_auth(&k);
            key = Some(k);
        }
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| ClassifierError("the classifier is shutting down".into()))?;
        let response = request.send().await.map_err(|e| self.http_error(&e))?;
        let status = response.status();
        let bytes = response.bytes().await.map_err(|e| self.http_error(&e))?;
        if status != reqwest::StatusCode::OK {
            let mut text = String::from_utf8_lossy(&bytes).into_owned();
            // A server echoing the key back must not put it in a log.
            if let Some(k) = key.as_deref().filter(|k| !k.is_empty()) {
                text = text.replace(k, "[api key]");
            }
            let text: String = text.chars().take(ERROR_BODY_CHARS).collect();
            return Err(ClassifierError(format!(
                "{} answered HTTP {status}: {text}",
                self.url
            )));
        }
        let completion: Completion = serde_json::from_slice(&bytes)
            .map_err(|e| ClassifierError(format!("{} sent no chat completion: {e}", self.url)))?;
        let alternatives = completion.first_token();
        let answer = match ask {
            Ask::YesNo => probs::yes_probability(&alternatives).map(Answer::Yes),
            Ask::Choice(options) => {
                probs::choice_probabilities(&alternatives, options.len()).map(Answer::Choice)
            }
        }
        .map_err(|e| ClassifierError(format!("{}: {e}", self.settings.model)))?;
        let tokens = completion.usage.map_or(0, |u| u.prompt_tokens);
        Ok((answer, tokens))
    }

    fn http_error(&self, e: &reqwest::Error) -> ClassifierError {
        if e.is_timeout() {
            ClassifierError(format!(
                "{} did not answer within {} ms",
                self.url,
                self.settings.timeout.as_millis()
            ))
        } else if e.is_connect() {
            ClassifierError(format!("cannot connect to {}", self.url))
        } else {
            ClassifierError(format!("{}: {e}", self.url))
        }
    }

    async fn classify_batch(
        &self,
        pass: &Pass<'_>,
        batch: &Batch,
    ) -> Result<Reply, ClassifierError> {
        let plan = pass.plan;
        let messages = prompt::batch(plan, batch).map_err(|e| ClassifierError(e.to_string()))?;
        let asks: Vec<&Ask> = batch
            .questions
            .iter()
            .map(|&q| &plan.questions[q].ask)
            .collect();
        let mut answered = Vec::with_capacity(messages.len());
        if let (Some(first), Some(ask)) = (messages.first(), asks.first()) {
            answered.push(self.ask_one(first, ask).await?);
        }
        let rest = messages
            .iter()
            .zip(&asks)
            .skip(1)
            .map(|(m, ask)| self.ask_one(m, ask));
        answered.extend(try_join_all(rest).await?);
        let input_tokens: u64 = answered.iter().map(|a| a.1).sum();
        Ok(Reply {
            requests: answered.len() as u64,
            input_tokens,
            cost_usd: self
                .settings
                .price_per_mtok
                .map_or(0.0, |p| p * input_tokens as f64 / 1e6),
            answers: answered.into_iter().map(|a| a.0).collect(),
        })
    }
}

impl Classifier for LogprobClassifier {
    fn name(&self) -> &str {
        &self.name
    }

    fn classify<'a>(
        &'a self,
        pass: &'a Pass<'a>,
        batch: &'a Batch,
    ) -> impl std::future::Future<Output = Result<Reply, ClassifierError>> + Send + 'a {
        self.classify_batch(pass, batch)
    }
}

/// The parts of a chat completion the classifier reads.
#[derive(Debug, Deserialize)]
struct Completion {
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<Usage>,
}

#[derive(Debug, Deserialize)]
struct Choice {
    #[serde(default)]
    logprobs: Option<Logprobs>,
}

#[derive(Debug, Deserialize)]
struct Logprobs {
    #[serde(default)]
    content: Option<Vec<TokenLogprob>>,
}

#[derive(Debug, Deserialize)]
struct TokenLogprob {
    token: String,
    #[serde(default)]
    logprob: Option<f64>,
    #[serde(default)]
    top_logprobs: Vec<TopLogprob>,
}

#[derive(Debug, Deserialize)]
struct TopLogprob {
    token: String,
    #[serde(default)]
    logprob: Option<f64>,
}

#[derive(Debug, Deserialize)]
struct Usage {
    #[serde(default)]
    prompt_tokens: u64,
}

impl Completion {
    /// The first token's alternatives, the sampled token among them (empty: no logprobs).
    fn first_token(&self) -> Vec<Alternative> {
        let Some(first) = self
            .choices
            .first()
            .and_then(|c| c.logprobs.as_ref())
            .and_then(|l| l.content.as_ref())
            .and_then(|c| c.first())
        else {
            return Vec::new();
        };
        let mut out: Vec<Alternative> = first
            .top_logprobs
            .iter()
            .filter_map(|t| Some(Alternative::new(t.token.clone(), t.logprob?)))
            .collect();
        if let Some(lp) = first.logprob {
            out.push(Alternative::new(first.token.clone(), lp));
        }
        out
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_first_token_of_a_completion() {
        let c: Completion = serde_json::from_value(json!({
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Yes"},
                "logprobs": {"content": [{"token": "Yes", "logprob": -0.2, "bytes": [89, 101, 115],
                    "top_logprobs": [{"token": "Yes", "logprob": -0.2}, {"token": "No", "logprob": -1.8},
                                     {"token": "Maybe", "logprob": null}]}],
                    "refusal": null},
                "finish_reason": "length"}],
            "usage": {"prompt_tokens": 412, "completion_tokens": 1, "total_tokens": 413}
        }))
        .unwrap();
        let alts = c.first_token();
        assert_eq!(alts.len(), 3, "{alts:?}");
        let p = probs::yes_probability(&alts).unwrap();
        let want = (-0.2f64).exp() / ((-0.2f64).exp() + (-1.8f64).exp());
        assert!((f64::from(p) - want).abs() < 1e-5);
        assert_eq!(c.usage.unwrap().prompt_tokens, 412);
    }

    #[test]
    fn a_completion_without_logprobs_has_no_alternatives() {
        for v in [
            json!({"choices": [{"message": {"content": "Yes"}, "logprobs": null}]}),
            json!({"choices": []}),
            json!({"choices": [{"logprobs": {"content": []}}]}),
        ] {
            let c: Completion = serde_json::from_value(v).unwrap();
            assert!(c.first_token().is_empty());
            assert_eq!(
                probs::yes_probability(&c.first_token()),
                Err(probs::Unreadable::NoLogprobs)
            );
        }
    }
}
