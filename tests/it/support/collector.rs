//! A local OTLP collector for the telemetry specs: it takes `/v1/traces` and `/v1/metrics` over
//! HTTP on 127.0.0.1, keeps every request (path, content type, body) and counts the connections
//! made to it; OTLP/JSON bodies are read back as spans and metric names. It can also be slow (it
//! holds every request unanswered) or be a port nobody listens on.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, Uri};
use serde_json::Value;

/// One request the collector got.
#[derive(Clone, Debug)]
pub struct Received {
    pub path: String,
    pub content_type: String,
    pub body: Bytes,
}

/// One exported span, as OTLP/JSON spells it.
#[derive(Clone, Debug)]
pub struct Span {
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    pub parent_id: String,
    pub attributes: serde_json::Map<String, Value>,
}

impl Span {
    /// An attribute's value as text (OTLP/JSON writes integers as strings too).
    pub fn attr(&self, key: &str) -> Option<String> {
        let value = self.attributes.get(key)?;
        let inner = value.as_object()?.values().next()?;
        Some(match inner {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        })
    }
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

    /// Every span of every OTLP/JSON trace request.
    pub fn spans(&self) -> Vec<Span> {
        let mut spans = Vec::new();
        for request in self.received().iter().filter(|request| request.path == "/v1/traces") {
            let body: Value = serde_json::from_slice(&request.body).expect("an OTLP/JSON body");
            for resource in body["resourceSpans"].as_array().into_iter().flatten() {
                for scope in resource["scopeSpans"].as_array().into_iter().flatten() {
                    for span in scope["spans"].as_array().into_iter().flatten() {
                        let attributes = span["attributes"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .map(|kv| (kv["key"].as_str().unwrap().to_owned(), kv["value"].clone()))
                            .collect();
                        let text = |key: &str| span[key].as_str().unwrap_or_default().to_owned();
                        spans.push(Span {
                            name: text("name"),
                            trace_id: text("traceId"),
                            span_id: text("spanId"),
                            parent_id: text("parentSpanId"),
                            attributes,
                        });
                    }
                }
            }
        }
        spans
    }

    /// The resource of the first trace request, as `key=value` lines.
    pub fn resource(&self) -> String {
        let traces = self.received().into_iter().find(|request| request.path == "/v1/traces").expect("traces");
        let body: Value = serde_json::from_slice(&traces.body).unwrap();
        body["resourceSpans"][0]["resource"].to_string()
    }

    /// The names of every metric of every OTLP/JSON metrics request.
    pub fn metric_names(&self) -> Vec<String> {
        let mut names = Vec::new();
        for request in self.received().iter().filter(|request| request.path == "/v1/metrics") {
            let body: Value = serde_json::from_slice(&request.body).expect("an OTLP/JSON body");
            for resource in body["resourceMetrics"].as_array().into_iter().flatten() {
                for scope in resource["scopeMetrics"].as_array().into_iter().flatten() {
                    for metric in scope["metrics"].as_array().into_iter().flatten() {
                        names.push(metric["name"].as_str().unwrap_or_default().to_owned());
                    }
                }
            }
        }
        names
    }

    /// The body of every metrics request, as text.
    pub fn metrics_text(&self) -> String {
        let metrics = self.received().into_iter().filter(|request| request.path == "/v1/metrics");
        metrics.map(|request| String::from_utf8_lossy(&request.body).into_owned()).collect()
    }
}
