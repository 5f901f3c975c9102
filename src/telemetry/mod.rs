//! Telemetry: the turn's spans and metrics exported over OTLP, when the standard
//! `OTEL_EXPORTER_OTLP_*` variables ask for it, and nothing at all when they do not.
//!
//! [`from_env`] reads the variables once, at start-up: an endpoint (`OTEL_EXPORTER_OTLP_ENDPOINT`,
//! or `_TRACES_ENDPOINT` / `_METRICS_ENDPOINT` for one signal) turns a signal on; without one, or
//! with `OTEL_SDK_DISABLED=true` (or `OTEL_TRACES_EXPORTER` / `OTEL_METRICS_EXPORTER` = `none`),
//! no exporter is built and the spans of [`spans`] are switched off at their call sites. The
//! protocol is `http/protobuf` (the default and the only one: `http/json` would add the JSON
//! serde code of every OTLP type, which the binary's size cannot afford); `grpc`, `http/json`
//! and anything else are refused with one line on stderr, and that signal exports nothing. The exporters read the
//! endpoint, `_HEADERS` and `_TIMEOUT` variables themselves, the SDK `OTEL_SERVICE_NAME` and
//! `OTEL_RESOURCE_ATTRIBUTES` (the service is `cairn` unless they name one).
//!
//! Export is off the turn's path: spans go through the SDK's batch processor and metrics through
//! its periodic reader, each on a thread of its own, and the batches are sent by cairn's own
//! HTTP client on the runtime ([`http`]). A collector that is down costs a turn nothing and logs
//! one warning per outage. [`shutdown`] flushes both at exit, within a bound, so a dead collector
//! never holds the process. Spans live under the target [`TARGET`]; only that target reaches the
//! exporter, and the log layers never show it.

mod http;
pub mod spans;

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::SdkTracerProvider;

/// The `tracing` target of the exported spans.
pub const TARGET: &str = "cairn::otel";

/// The exporters in use; set once, by [`from_env`], when a variable asked for one.
static ACTIVE: OnceLock<Active> = OnceLock::new();

/// `[telemetry] log_prompts`: the user's prompt goes on the turn span.
static LOG_PROMPTS: AtomicBool = AtomicBool::new(false);

struct Active {
    tracer: Option<SdkTracerProvider>,
    meter: Option<SdkMeterProvider>,
    instruments: Option<spans::Instruments>,
}

/// A layer of `tracing` that exports the spans of [`TARGET`], boxed for the log's registry.
pub type Layer = Box<dyn tracing_subscriber::Layer<tracing_subscriber::Registry> + Send + Sync>;

/// One signal's protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Protocol {
    Protobuf,
}

/// Builds the exporters the environment asks for (`lookup` reads a variable; empty counts as
/// unset), sending on `runtime`. Returns the layer that feeds spans to the trace exporter, when
/// there is one. Call once, before the log's registry is installed.
pub fn from_env(lookup: &dyn Fn(&str) -> Option<String>, runtime: &tokio::runtime::Handle) -> Option<Layer> {
    let get = |name: &str| lookup(name).filter(|value| !value.trim().is_empty());
    let Signals { traces, metrics, refused } = signals(&get);
    for line in &refused {
        say(line);
    }
    if traces.is_none() && metrics.is_none() {
        return None;
    }
    let timeout = get("OTEL_EXPORTER_OTLP_TIMEOUT")
        .and_then(|millis| millis.trim().parse::<u64>().ok())
        .map_or(Duration::from_secs(10), Duration::from_millis);
    let client = http::Client::new(runtime.clone(), timeout);
    let resource = resource(&get);
    let tracer = traces.and_then(|protocol| {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(protocol.otlp())
            .with_http_client(client.clone())
            .with_retry_policy(opentelemetry_otlp::RetryPolicy::disabled())
            .build();
        match exporter {
            Ok(exporter) => {
                Some(SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource.clone()).build())
            }
            Err(err) => {
                say(&unquoted(&format!("cannot export traces: {err}"), &get));
                None
            }
        }
    });
    let meter = metrics.and_then(|protocol| {
        let exporter = opentelemetry_otlp::MetricExporter::builder()
            .with_http()
            .with_protocol(protocol.otlp())
            .with_http_client(client.clone())
            .with_retry_policy(opentelemetry_otlp::RetryPolicy::disabled())
            .build();
        match exporter {
            Ok(exporter) => Some(
                SdkMeterProvider::builder().with_periodic_exporter(exporter).with_resource(resource.clone()).build(),
            ),
            Err(err) => {
                say(&unquoted(&format!("cannot export metrics: {err}"), &get));
                None
            }
        }
    });
    let instruments = meter
        .as_ref()
        .map(|meter| spans::Instruments::new(&opentelemetry::metrics::MeterProvider::meter(meter, "cairn")));
    let layer = tracer.as_ref().map(|provider| {
        use tracing_subscriber::Layer as _;
        let targets = tracing_subscriber::filter::Targets::new().with_target(TARGET, tracing::Level::TRACE);
        let layer = tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("cairn"))
            .with_location(false)
            .with_tracked_inactivity(false)
            .with_threads(false)
            .with_level(false)
            .with_target(false)
            .with_filter(targets);
        Box::new(layer) as Layer
    });
    if tracer.is_none() && meter.is_none() {
        return None;
    }
    let _ = ACTIVE.set(Active { tracer, meter, instruments });
    layer
}

/// The variables whose values may hold a key (a URL's password, a header): never shown.
const PRIVATE: [&str; 6] = [
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
];

/// `text` (an exporter's error, which quotes what it could not use) with the value of each
/// [`PRIVATE`] variable replaced by its name.
fn unquoted(text: &str, get: &dyn Fn(&str) -> Option<String>) -> String {
    let mut text = text.to_owned();
    for name in PRIVATE {
        if let Some(value) = get(name) {
            text = text.replace(&value, &format!("${name}"));
        }
    }
    text
}

/// What the environment asks to export, and over which protocol.
#[derive(Debug, Default, PartialEq, Eq)]
struct Signals {
    traces: Option<Protocol>,
    metrics: Option<Protocol>,
    /// One line for each signal whose protocol is refused.
    refused: Vec<String>,
}

/// Reads the variables that decide what is exported (`get` answers `None` for unset or empty).
fn signals(get: &dyn Fn(&str) -> Option<String>) -> Signals {
    let mut signals = Signals::default();
    if get("OTEL_SDK_DISABLED").is_some_and(|value| value.trim().eq_ignore_ascii_case("true")) {
        return signals;
    }
    let any = get("OTEL_EXPORTER_OTLP_ENDPOINT").is_some();
    let mut protocol = |signal: &str| {
        let endpoint = any || get(&format!("OTEL_EXPORTER_OTLP_{signal}_ENDPOINT")).is_some();
        let exporter = get(&format!("OTEL_{signal}_EXPORTER"));
        if !endpoint || exporter.is_some_and(|value| value.trim().eq_ignore_ascii_case("none")) {
            return None;
        }
        let own = format!("OTEL_EXPORTER_OTLP_{signal}_PROTOCOL");
        let (name, value) = match get(&own) {
            Some(value) => (own, value),
            None => match get("OTEL_EXPORTER_OTLP_PROTOCOL") {
                Some(value) => ("OTEL_EXPORTER_OTLP_PROTOCOL".to_owned(), value),
                None => return Some(Protocol::Protobuf),
            },
        };
        match value.trim() {
            "http/protobuf" => Some(Protocol::Protobuf),
            other => {
                let other: String = other.chars().take(40).collect();
                signals.refused.push(format!(
                    "{name}={other}: cairn exports OTLP as http/protobuf only; set it to http/protobuf or \
                     unset it (no {} are exported)",
                    signal.to_ascii_lowercase()
                ));
                None
            }
        }
    };
    let (traces, metrics) = (protocol("TRACES"), protocol("METRICS"));
    Signals { traces, metrics, ..signals }
}

impl Protocol {
    fn otlp(self) -> opentelemetry_otlp::Protocol {
        match self {
            Self::Protobuf => opentelemetry_otlp::Protocol::HttpBinary,
        }
    }
}

/// The SDK's resource (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`), named `cairn` when they
/// name no service, with cairn's version.
fn resource(get: &dyn Fn(&str) -> Option<String>) -> opentelemetry_sdk::Resource {
    let named = get("OTEL_SERVICE_NAME").is_some()
        || get("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|attributes| {
            attributes.split(',').any(|pair| pair.split_once('=').is_some_and(|(key, _)| key.trim() == "service.name"))
        });
    let builder = opentelemetry_sdk::Resource::builder()
        .with_attribute(opentelemetry::KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
    if named { builder.build() } else { builder.with_service_name("cairn").build() }
}

/// Whether spans and metrics are exported at all.
pub fn active() -> bool {
    ACTIVE.get().is_some()
}

/// The metric instruments, when metrics are exported.
fn instruments() -> Option<&'static spans::Instruments> {
    ACTIVE.get().and_then(|active| active.instruments.as_ref())
}

/// `[telemetry] log_prompts` from the configuration: prompts go on the turn span.
pub fn set_log_prompts(on: bool) {
    LOG_PROMPTS.store(on, Ordering::Relaxed);
}

fn log_prompts() -> bool {
    LOG_PROMPTS.load(Ordering::Relaxed)
}

/// Flushes and stops the exporters, each on a thread of its own so that a slow endpoint for one
/// signal does not cost the other its flush, giving up after `limit`: what the collector has not
/// taken by then is dropped. Call once, at exit, while the runtime still runs.
pub fn shutdown(limit: Duration) {
    let Some(active) = ACTIVE.get() else { return };
    let deadline = std::time::Instant::now() + limit;
    let (done, finished) = std::sync::mpsc::channel();
    let mut flushing = 0;
    let mut flush = |name: &str, stop: Box<dyn FnOnce() + Send>| {
        let done = done.clone();
        let started = std::thread::Builder::new().name(format!("otel-flush-{name}")).spawn(move || {
            stop();
            let _ = done.send(());
        });
        if started.is_ok() {
            flushing += 1;
        }
    };
    if let Some(tracer) = active.tracer.clone() {
        flush("traces", Box::new(move || drop(tracer.shutdown_with_timeout(limit))));
    }
    if let Some(meter) = active.meter.clone() {
        flush("metrics", Box::new(move || drop(meter.shutdown_with_timeout(limit))));
    }
    for _ in 0..flushing {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if finished.recv_timeout(left).is_err() {
            tracing::warn!(seconds = limit.as_secs_f32(), "telemetry not flushed in time; the rest is dropped");
            return;
        }
    }
}

#[cfg(test)]
mod tests;

/// One line on stderr about the telemetry setup (logging may not be up yet).
fn say(line: &str) {
    use std::io::Write as _;
    // A variable's value is the environment's: no control character reaches the terminal.
    let _ = writeln!(std::io::stderr().lock(), "cairn: telemetry: {}", crate::visible::text(line));
}
