//! The process's OTLP trace exporter: configured from the standard `OTEL_EXPORTER_OTLP_*`
//! variables (endpoint, headers, timeout) or `--otlp-endpoint`, started once, shared by every
//! session's [`TraceSink`].

use std::sync::{Arc, Mutex};

use opentelemetry::trace::TracerProvider;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::{
    Resource,
    trace::{SdkTracer, SdkTracerProvider},
};

use crate::TraceSink;

/// The variables that turn tracing on.
const ENDPOINT_VARIABLES: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
];
/// The variable that lets text into spans, as other GenAI instrumentations name it.
const CAPTURE_CONTENT: &str = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT";

/// Why traces cannot be exported.
#[derive(Debug, thiserror::Error)]
pub enum TracesError {
    #[error("cannot build the OTLP exporter: {0}")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
    #[error("--otlp-endpoint {0:?} is not an http:// or https:// URL")]
    Endpoint(String),
}

/// Where spans go: the process's tracer, and whether they carry text.
#[derive(Clone)]
pub struct Traces {
    provider: SdkTracerProvider,
    tracer: Arc<SdkTracer>,
    /// The endpoint, for messages.
    endpoint: String,
    capture_content: bool,
}

impl std::fmt::Debug for Traces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Traces({})", self.endpoint)
    }
}

impl PartialEq for Traces {
    fn eq(&self, other: &Self) -> bool {
        self.endpoint == other.endpoint
    }
}

impl Eq for Traces {}

/// The one exporter of the process (its batches and its thread are shared by every session).
/// Started under the lock, so two sessions starting at once never build two (dropping the
/// loser's blocking HTTP client inside the async runtime would panic).
static TRACES: Mutex<Option<Traces>> = Mutex::new(None);

impl Traces {
    /// The process's exporter when traces are asked for: `endpoint` (`--otlp-endpoint`, the
    /// base URL spans go to under `/v1/traces`), else the `OTEL_EXPORTER_OTLP_*` variables.
    /// `None` when neither names an endpoint. Must be called inside a tokio runtime.
    pub fn from_env_or(endpoint: Option<&str>) -> Result<Option<Self>, TracesError> {
        let from_env = ENDPOINT_VARIABLES
            .iter()
            .find_map(|name| std::env::var(name).ok().filter(|v| !v.is_empty()));
        if endpoint.is_none() && from_env.is_none() {
            return Ok(None);
        }
        let mut started = TRACES
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(traces) = started.as_ref() {
            return Ok(Some(traces.clone()));
        }
        let traces = Self::start(endpoint, from_env)?;
        *started = Some(traces.clone());
        Ok(Some(traces))
    }

    fn start(endpoint: Option<&str>, from_env: Option<String>) -> Result<Self, TracesError> {
        let mut exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary);
        let shown = match endpoint {
            Some(base) => {
                if !(base.starts_with("http://") || base.starts_with("https://")) {
                    return Err(TracesError::Endpoint(base.to_owned()));
                }
                let url = format!("{}/v1/traces", base.trim_end_matches('/'));
                exporter = exporter.with_endpoint(url.clone());
                url
            }
            None => from_env.unwrap_or_default(),
        };
        let exporter = exporter.build()?;
        let mut resource = Resource::builder();
        if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
            resource = resource.with_service_name("reel");
        }
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource.build())
            .build();
        let tracer = provider.tracer("reel");
        let capture_content = std::env::var(CAPTURE_CONTENT)
            .is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1");
        tracing::info!("exporting traces to {shown} (OTLP, HTTP/protobuf)");
        Ok(Self {
            provider,
            tracer: Arc::new(tracer),
            endpoint: shown,
            capture_content,
        })
    }

    /// The sink that makes session `session_id`'s spans.
    pub fn sink(&self, session_id: &str) -> TraceSink {
        TraceSink::new(self.clone(), session_id)
    }

    pub(crate) fn tracer(&self) -> &SdkTracer {
        &self.tracer
    }

    pub(crate) fn capture_content(&self) -> bool {
        self.capture_content
    }

    /// Exports every span ended so far; waits for the endpoint (up to the exporter's timeout).
    pub(crate) fn flush(&self) {
        if let Err(error) = self.provider.force_flush() {
            tracing::warn!("cannot export traces to {}: {error}", self.endpoint);
        }
    }
}
