//! The OTLP exporters' HTTP client: cairn's reqwest client (built through `net`, so TLS is set
//! up as for every other request) behind the SDK's `HttpClient` trait, instead of a client of
//! the exporter's own.
//!
//! The SDK's batch processor and metric reader call it from threads of their own, outside the
//! runtime, so each request is spawned on the runtime whose handle the client keeps, and awaited
//! from there. Each request ends within the exporter's timeout; a collector's answer is read up
//! to 64 KiB. A redirect is followed only within the collector's origin (the
//! headers may carry a key). A collector that cannot be reached, or refuses a batch, is logged once per outage:
//! one warning at the first failure, none for the batches after it until one gets through.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};

/// The most of a collector's answer read.
const MOST_ANSWER: usize = 64 * 1024;

/// Sends the exporters' requests on `runtime`.
#[derive(Clone, Debug)]
pub struct Client {
    http: Option<reqwest::Client>,
    runtime: tokio::runtime::Handle,
    /// A failure was logged, and nothing got through since.
    warned: Arc<AtomicBool>,
}

impl Client {
    /// A client whose requests end within `timeout`.
    pub fn new(runtime: tokio::runtime::Handle, timeout: Duration) -> Self {
        let built = crate::net::client_builder()
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(5)))
            .redirect(reqwest::redirect::Policy::custom(same_origin))
            .build();
        let http = match built {
            Ok(http) => Some(http),
            Err(err) => {
                tracing::warn!(%err, "cannot build the telemetry HTTP client; nothing is exported");
                None
            }
        };
        Self { http, runtime, warned: Arc::new(AtomicBool::new(false)) }
    }

    /// Logs `why` unless a failure was logged since the last batch that got through.
    fn failed(&self, why: &str) {
        if !self.warned.swap(true, Ordering::Relaxed) {
            tracing::warn!("telemetry export failed ({why}); later failures are not logged until an export succeeds");
        }
    }
}

#[async_trait::async_trait]
impl HttpClient for Client {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let Some(http) = self.http.clone() else { return Err("no HTTP client".into()) };
        let (parts, body) = request.into_parts();
        let request = http.request(parts.method, parts.uri.to_string()).headers(parts.headers).body(body);
        let sent = self.runtime.spawn(async move {
            let mut response = request.send().await?;
            let status = response.status();
            let mut body = Vec::new();
            crate::net::read_at_most(&mut response, &mut body, MOST_ANSWER).await?;
            Ok::<_, reqwest::Error>((status, body))
        });
        let answer = match sent.await {
            Ok(Ok(answer)) => answer,
            Ok(Err(err)) => {
                self.failed(&without_query(&err));
                return Err(Box::new(err));
            }
            Err(err) => {
                self.failed("the runtime is shutting down");
                return Err(Box::new(err));
            }
        };
        let (status, body) = answer;
        if status.is_success() {
            self.warned.store(false, Ordering::Relaxed);
        } else {
            self.failed(&format!("the collector answered {status}"));
        }
        Ok(Response::builder().status(status).body(Bytes::from(body))?)
    }
}

/// Follows a collector's redirect only to its own origin (scheme, host and port), a few times:
/// `OTEL_EXPORTER_OTLP_HEADERS` often carries a key in a header of the vendor's own naming, which
/// reqwest would pass on to any host, with the batch.
fn same_origin(attempt: reqwest::redirect::Attempt<'_>) -> reqwest::redirect::Action {
    let first = attempt.previous().first().map(reqwest::Url::origin);
    if attempt.previous().len() > MOST_REDIRECTS || first != Some(attempt.url().origin()) {
        attempt.stop()
    } else {
        attempt.follow()
    }
}

/// The most redirects a batch follows, all within the collector's origin.
const MOST_REDIRECTS: usize = 3;

/// A request error, said without the URL's query (a collector's URL may carry a key there).
fn without_query(err: &reqwest::Error) -> String {
    let mut err_text = err.to_string();
    if let Some(url) = err.url().filter(|url| url.query().is_some()) {
        let mut bare = url.clone();
        bare.set_query(None);
        err_text = err_text.replace(url.as_str(), bare.as_str());
    }
    err_text
}
