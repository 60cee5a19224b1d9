//! The classifier flags `ctxd eval` and `ctxd serve` share: which classifier distillation asks
//! (`local`, or any OpenAI-compatible model through yes/no log-probabilities) and its settings.

use clap::Args;
use ctxd_engine::distill::{ClassifierKind, ClassifierSettings, Configured};

#[derive(Debug, Default, Args)]
pub struct ClassifierArgs {
    /// The classifier deciding what distillation keeps: `local` (no network, no model files)
    /// or `openai`: any OpenAI-compatible model through yes/no log-probabilities, which
    /// receives what it judges (it needs the URL and model flags below) [default: local].
    #[arg(long, env = "CTXD_CLASSIFIER", value_name = "NAME")]
    pub classifier: Option<String>,
    /// `openai`: the API's base URL, without `/chat/completions`
    /// (`https://api.openai.com/v1`, `http://127.0.0.1:8080/v1`).
    #[arg(long, env = "CTXD_CLASSIFIER_URL", value_name = "URL")]
    pub classifier_url: Option<String>,
    /// `openai`: the model name the server knows.
    #[arg(long, env = "CTXD_CLASSIFIER_MODEL", value_name = "NAME")]
    pub classifier_model: Option<String>,
    /// `openai`: the environment variable holding the API key (its NAME; none for a local
    /// server).
    #[arg(long, env = "CTXD_CLASSIFIER_KEY_ENV", value_name = "NAME")]
    pub classifier_key_env: Option<String>,
    /// `openai`: each request's time limit in milliseconds [default: 10000].
    #[arg(long, env = "CTXD_CLASSIFIER_TIMEOUT_MS", value_name = "MS")]
    pub classifier_timeout_ms: Option<u64>,
    /// `openai`: requests in flight at once [default: 8].
    #[arg(long, env = "CTXD_CLASSIFIER_CONCURRENCY", value_name = "N")]
    pub classifier_concurrency: Option<usize>,
    /// `openai`: USD per million input tokens, for the classifier's cost.
    #[arg(long, env = "CTXD_CLASSIFIER_PRICE_PER_MTOK", value_name = "USD")]
    pub classifier_price_per_mtok: Option<f64>,
}

impl ClassifierArgs {
    /// These flags over `base` (a config file's `[classifier]` table, or the defaults).
    pub fn over(&self, base: &ClassifierSettings) -> anyhow::Result<ClassifierSettings> {
        let mut s = base.clone();
        if let Some(name) = &self.classifier {
            s.kind = ClassifierKind::parse(name).ok_or_else(|| {
                anyhow::anyhow!(
                    "unknown classifier {name:?}: the classifiers are {}",
                    ClassifierKind::NAMES.join(", ")
                )
            })?;
        }
        s.base_url = self.classifier_url.clone().or(s.base_url);
        s.model = self.classifier_model.clone().or(s.model);
        s.api_key_env = self.classifier_key_env.clone().or(s.api_key_env);
        s.timeout_ms = self.classifier_timeout_ms.or(s.timeout_ms);
        s.concurrency = self.classifier_concurrency.or(s.concurrency);
        s.price_per_mtok = self.classifier_price_per_mtok.or(s.price_per_mtok);
        Ok(s)
    }
}

/// The classifier `settings` name, checked; an error names the flag (a setting of the other
/// kind is an error).
pub fn configured(settings: &ClassifierSettings) -> anyhow::Result<Configured> {
    Configured::from_settings(settings).map_err(|e| {
        let flag = match e.field {
            "base_url" => "--classifier-url",
            "model" => "--classifier-model",
            "api_key_env" => "--classifier-key-env",
            "timeout_ms" => "--classifier-timeout-ms",
            "concurrency" => "--classifier-concurrency",
            "price_per_mtok" => "--classifier-price-per-mtok",
            _ => "--classifier",
        };
        anyhow::anyhow!(
            "{flag}: {} (config file: {} in [classifier])",
            e.problem,
            e.field
        )
    })
}
