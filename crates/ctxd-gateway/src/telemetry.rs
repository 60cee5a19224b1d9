//! OpenTelemetry, opt-in: with `--otlp-endpoint` each request's exchange with the provider is
//! exported as a span over OTLP/HTTP (JSON), named and attributed after the GenAI semantic
//! conventions (`gen_ai.*`: operation, provider, models, response id, finish reason, tokens in,
//! out and cached) with ctxd's own beside them (`ctxd.*`: session, project, agent, cost billed,
//! tokens sent against the whole conversation and saved by mechanism). Never content: no
//! prompt, answer or tool output is an attribute. Without an endpoint nothing is built, so
//! nothing connects anywhere.
//!
//! One span per client request: the hidden rounds ctxd answers itself are folded into it
//! (`ctxd.served_tools`), their usage summed as the client's view sums it.

use std::time::{Duration, SystemTime};

use opentelemetry::trace::{Span, SpanKind, Status, Tracer, TracerProvider as _};
use opentelemetry::KeyValue;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider};

/// How long a batch of spans waits before it is sent: short, so a collector sees a request
/// within a second (the exporter's thread does the sending, never a request).
const BATCH_DELAY: Duration = Duration::from_millis(500);

/// The exporter, when an endpoint is configured.
#[derive(Default)]
pub struct Telemetry {
    exporting: Option<(SdkTracerProvider, opentelemetry_sdk::trace::SdkTracer)>,
}

/// What one request's span says.
pub struct RequestSpan<'a> {
    pub api: crate::api::Api,
    pub upstream: &'a str,
    pub started: SystemTime,
    pub ended: SystemTime,
    pub caller: &'a ctxd_engine::Caller,
    /// The response as the client got it (`None`: failed or abandoned).
    pub response: Option<&'a ctxd_formats::wire::stream::Assembled>,
    pub outcome: &'static str,
    /// What the provider billed, at the model's price (`None`: no price known).
    pub cost_usd: Option<f64>,
    /// ctxd's measure of the request (tokens sent, the whole conversation, saved by mechanism).
    pub measured: Option<&'a ctxd_core::savings::Record>,
    /// ctxd answered calls of its own tools inside this request (hidden rounds).
    pub served_tools: bool,
}

impl Telemetry {
    /// The exporter to `endpoint` (`http://host:4318`, or the full `.../v1/traces`), or none.
    /// Blocking: its HTTP client has a runtime of its own; call it off the async threads.
    pub fn start(endpoint: Option<&str>) -> Result<Telemetry, String> {
        let Some(endpoint) = endpoint else {
            return Ok(Telemetry::default());
        };
        let base = endpoint.trim_end_matches('/');
        let url = if base.ends_with("/v1/traces") {
            base.to_owned()
        } else {
            format!("{base}/v1/traces")
        };
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpJson)
            .with_endpoint(url)
            .with_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| format!("--otlp-endpoint {endpoint}: {e}"))?;
        let batches = BatchSpanProcessor::builder(exporter)
            .with_batch_config(
                BatchConfigBuilder::default()
                    .with_scheduled_delay(BATCH_DELAY)
                    .build(),
            )
            .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(batches)
            .with_resource(
                opentelemetry_sdk::Resource::builder()
                    .with_service_name("ctxd")
                    .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
                    .build(),
            )
            .build();
        let tracer = provider.tracer("ctxd");
        Ok(Telemetry {
            exporting: Some((provider, tracer)),
        })
    }

    pub fn is_on(&self) -> bool {
        self.exporting.is_some()
    }

    /// Export one request's span (queued; sent by the exporter's thread).
    pub fn request(&self, r: RequestSpan) {
        let Some((_, tracer)) = &self.exporting else {
            return;
        };
        let model = r
            .response
            .and_then(|a| a.model.clone())
            .or_else(|| r.caller.model.clone());
        let name = match &model {
            Some(m) => format!("chat {m}"),
            None => "chat".to_owned(),
        };
        let mut span = tracer
            .span_builder(name)
            .with_kind(SpanKind::Client)
            .with_start_time(r.started)
            .with_attributes(attributes(&r, model))
            .start(tracer);
        if r.response.is_none() {
            span.set_status(Status::error(r.outcome));
        }
        span.end_with_timestamp(r.ended);
    }

    /// Send what is queued and stop. Blocking.
    pub fn shutdown(&self) {
        if let Some((provider, _)) = &self.exporting {
            if let Err(e) = provider.shutdown() {
                tracing::warn!(error = %e, "OpenTelemetry: the last spans were not sent");
            }
        }
    }
}

/// The span's attributes: GenAI's conventions, then ctxd's.
fn attributes(r: &RequestSpan, model: Option<String>) -> Vec<KeyValue> {
    let provider = match r.api {
        crate::api::Api::Anthropic => "anthropic",
        crate::api::Api::Chat | crate::api::Api::Responses => "openai",
        crate::api::Api::Gemini => "gcp.gemini",
    };
    let mut a = vec![
        KeyValue::new("gen_ai.operation.name", "chat"),
        KeyValue::new("gen_ai.provider.name", provider),
        KeyValue::new("gen_ai.system", provider),
        KeyValue::new("ctxd.api", r.api.route()),
        KeyValue::new("ctxd.outcome", r.outcome),
        KeyValue::new("ctxd.served_tools", r.served_tools),
    ];
    if let Some(m) = &r.caller.model {
        a.push(KeyValue::new("gen_ai.request.model", m.clone()));
    }
    if let Ok(url) = reqwest::Url::parse(r.upstream) {
        if let Some(host) = url.host_str() {
            a.push(KeyValue::new("server.address", host.to_owned()));
        }
        if let Some(port) = url.port_or_known_default() {
            a.push(KeyValue::new("server.port", i64::from(port)));
        }
    }
    if let Some(resp) = r.response {
        if let Some(m) = model {
            a.push(KeyValue::new("gen_ai.response.model", m));
        }
        if let Some(id) = &resp.response_id {
            a.push(KeyValue::new("gen_ai.response.id", id.clone()));
        }
        if let Some(reason) = &resp.stop_reason {
            a.push(KeyValue::new(
                "gen_ai.response.finish_reasons",
                opentelemetry::Value::Array(
                    vec![opentelemetry::StringValue::from(reason.clone())].into(),
                ),
            ));
        }
        if let Some(u) = &resp.usage {
            let tokens = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
            a.push(KeyValue::new(
                "gen_ai.usage.input_tokens",
                tokens(u.prompt_tokens()),
            ));
            a.push(KeyValue::new(
                "gen_ai.usage.output_tokens",
                tokens(u.output),
            ));
            a.push(KeyValue::new(
                "gen_ai.usage.cache_read.input_tokens",
                tokens(u.cache_read),
            ));
            a.push(KeyValue::new(
                "gen_ai.usage.cache_creation.input_tokens",
                tokens(u.cache_write),
            ));
        }
    }
    if let Some(usd) = r.cost_usd {
        a.push(KeyValue::new("ctxd.cost.usd", usd));
    }
    let c = r.caller;
    if let Some(id) = c.session {
        a.push(KeyValue::new("ctxd.session.id", id));
    }
    if let Some(key) = &c.session_key {
        a.push(KeyValue::new("ctxd.session.key", key.clone()));
    }
    if let Some(p) = &c.project {
        a.push(KeyValue::new("ctxd.project", p.clone()));
    }
    if let Some(agent) = &c.agent {
        a.push(KeyValue::new("ctxd.agent", agent.clone()));
    }
    if let Some(m) = r.measured {
        let tokens = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        a.push(KeyValue::new("ctxd.tokens.sent", tokens(m.sent)));
        a.push(KeyValue::new("ctxd.tokens.whole", tokens(m.whole)));
        a.push(KeyValue::new("ctxd.tokens.saved", m.saved_total()));
        for (mechanism, saved) in m.saved.iter() {
            a.push(KeyValue::new(
                format!("ctxd.tokens.saved.{}", mechanism.name()),
                saved,
            ));
        }
        if let Some(usd) = m.usd() {
            a.push(KeyValue::new("ctxd.cost_saved.usd", usd));
        }
    }
    a
}
