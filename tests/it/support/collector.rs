//! A local OTLP collector for the telemetry specs: it takes `/v1/traces` and `/v1/metrics` over
//! HTTP on 127.0.0.1, keeps every request (path, content type, body) and counts the connections
//! made to it; the OTLP protobuf bodies are read back as spans and metric names. It can also be
//! slow (it holds every request unanswered) or be a port nobody listens on.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, Uri};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Kind;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use prost::Message as _;

/// One request the collector got.
#[derive(Clone, Debug)]
pub struct Received {
    pub path: String,
    pub content_type: String,
    pub body: Bytes,
}

/// One exported span: ids in lowercase hex, attributes as text.
#[derive(Clone, Debug)]
pub struct Span {
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    pub parent_id: String,
    pub attributes: Vec<(String, String)>,
}

impl Span {
    pub fn attr(&self, key: &str) -> Option<String> {
        self.attributes.iter().find(|(name, _)| name == key).map(|(_, value)| value.clone())
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// An attribute's value as text.
fn text(value: Option<&AnyValue>) -> String {
    match value.and_then(|value| value.value.as_ref()) {
        Some(Kind::StringValue(text)) => text.clone(),
        Some(Kind::IntValue(number)) => number.to_string(),
        Some(Kind::DoubleValue(number)) => number.to_string(),
        Some(Kind::BoolValue(flag)) => flag.to_string(),
        other => format!("{other:?}"),
    }
}

fn attributes(list: &[KeyValue]) -> Vec<(String, String)> {
    list.iter().map(|kv| (kv.key.clone(), text(kv.value.as_ref()))).collect()
}

pub struct Collector {
    pub url: String,
    received: Arc<Mutex<Vec<Received>>>,
    connections: Arc<Mutex<usize>>,
}

impl Collector {
    /// A collector answering every request 200 at once.
    pub async fn start() -> Self {
        Self::serve(Duration::ZERO).await
    }

    /// A collector that holds each request `delay` before it answers.
    pub async fn slow(delay: Duration) -> Self {
        Self::serve(delay).await
    }

    async fn serve(delay: Duration) -> Self {
        let received = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(Mutex::new(0));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let kept = Arc::clone(&received);
        let app = axum::Router::new().fallback(move |uri: Uri, headers: HeaderMap, body: Bytes| {
            let kept = Arc::clone(&kept);
            async move {
                let content_type =
                    headers.get("content-type").and_then(|value| value.to_str().ok()).unwrap_or_default().to_owned();
                kept.lock().unwrap().push(Received { path: uri.path().to_owned(), content_type, body });
                tokio::time::sleep(delay).await;
                "{}"
            }
        });
        let counted = Arc::clone(&connections);
        tokio::spawn(async move {
            loop {
                let Ok((socket, _)) = listener.accept().await else { break };
                *counted.lock().unwrap() += 1;
                let app = app.clone();
                tokio::spawn(async move {
                    let service = hyper_util::service::TowerToHyperService::new(app);
                    let _ = hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .serve_connection(hyper_util::rt::TokioIo::new(socket), service)
                        .await;
                });
            }
        });
        Self { url, received, connections }
    }

    /// A collector answering every request `307` to the same path at `to` (another origin).
    pub async fn redirecting(to: &str) -> Self {
        let received = Arc::new(Mutex::new(Vec::new()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (kept, to) = (Arc::clone(&received), to.to_owned());
        let app = axum::Router::new().fallback(move |uri: Uri| {
            let (kept, to) = (Arc::clone(&kept), to.clone());
            async move {
                let path = uri.path().to_owned();
                let location = format!("{to}{path}");
                kept.lock().unwrap().push(Received { path, content_type: String::new(), body: Bytes::new() });
                (axum::http::StatusCode::TEMPORARY_REDIRECT, [(axum::http::header::LOCATION, location)])
            }
        });
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { url, received, connections: Arc::new(Mutex::new(0)) }
    }

    /// A URL nobody listens on: a port bound, then let go.
    pub async fn down() -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        drop(listener);
        url
    }

    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    pub fn connections(&self) -> usize {
        *self.connections.lock().unwrap()
    }

    fn traces(&self) -> Vec<ExportTraceServiceRequest> {
        let traces = self.received().into_iter().filter(|request| request.path == "/v1/traces");
        traces.map(|request| ExportTraceServiceRequest::decode(request.body).expect("OTLP protobuf")).collect()
    }

    /// Every span of every trace request.
    pub fn spans(&self) -> Vec<Span> {
        let mut spans = Vec::new();
        for request in self.traces() {
            for resource in request.resource_spans {
                for scope in resource.scope_spans {
                    for span in scope.spans {
                        spans.push(Span {
                            name: span.name,
                            trace_id: hex(&span.trace_id),
                            span_id: hex(&span.span_id),
                            parent_id: hex(&span.parent_span_id),
                            attributes: attributes(&span.attributes),
                        });
                    }
                }
            }
        }
        spans
    }

    /// The resource attributes of the first trace request.
    pub fn resource(&self) -> Vec<(String, String)> {
        let first = self.traces().into_iter().next().expect("traces");
        let resource = first.resource_spans.into_iter().next().and_then(|spans| spans.resource).expect("a resource");
        attributes(&resource.attributes)
    }

    /// Every metric of every metrics request: its name and the attributes of its points.
    pub fn metrics(&self) -> Vec<(String, Vec<(String, String)>)> {
        let mut metrics = Vec::new();
        let requests = self.received().into_iter().filter(|request| request.path == "/v1/metrics");
        for request in requests {
            let request = ExportMetricsServiceRequest::decode(request.body).expect("OTLP protobuf");
            for resource in request.resource_metrics {
                for scope in resource.scope_metrics {
                    for metric in scope.metrics {
                        let points: Vec<&[KeyValue]> = match &metric.data {
                            Some(Data::Sum(sum)) => sum.data_points.iter().map(|p| p.attributes.as_slice()).collect(),
                            Some(Data::Gauge(gauge)) => {
                                gauge.data_points.iter().map(|p| p.attributes.as_slice()).collect()
                            }
                            Some(Data::Histogram(histogram)) => {
                                histogram.data_points.iter().map(|p| p.attributes.as_slice()).collect()
                            }
                            _ => Vec::new(),
                        };
                        let seen = points.into_iter().flat_map(attributes).collect();
                        metrics.push((metric.name, seen));
                    }
                }
            }
        }
        metrics
    }
}
