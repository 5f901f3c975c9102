//! Which variables turn which signal on, over which protocol, and what is refused.

use super::{Protocol, Signals, signals, unquoted};

fn with(vars: &[(&str, &str)]) -> Signals {
    let vars: Vec<(String, String)> = vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    signals(&|name: &str| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()).filter(|v| !v.trim().is_empty()))
}

const ENDPOINT: (&str, &str) = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318");

#[test]
fn nothing_is_exported_without_an_endpoint() {
    assert_eq!(with(&[]), Signals::default());
    let no_endpoint = with(&[("OTEL_EXPORTER_OTLP_HEADERS", "a=b"), ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]);
    assert_eq!(no_endpoint, Signals::default(), "no warning either: nothing was asked");
    assert_eq!(with(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "  ")]), Signals::default());
}

#[test]
fn an_endpoint_exports_both_signals_over_protobuf_by_default() {
    let both = with(&[ENDPOINT]);
    assert_eq!((both.traces, both.metrics), (Some(Protocol::Protobuf), Some(Protocol::Protobuf)));
    let named = with(&[ENDPOINT, ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")]);
    assert_eq!((named.traces, named.metrics), (Some(Protocol::Protobuf), Some(Protocol::Protobuf)));
    let mixed = with(&[
        ENDPOINT,
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
        ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "http/protobuf"),
    ]);
    assert_eq!((mixed.traces, mixed.metrics), (None, Some(Protocol::Protobuf)), "a signal's own variable wins");
    assert!(mixed.refused[0].starts_with("OTEL_EXPORTER_OTLP_PROTOCOL=http/json:"), "{:?}", mixed.refused);
}

#[test]
fn a_signals_own_endpoint_exports_that_signal_only() {
    let traces = with(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c/v1/traces")]);
    assert_eq!((traces.traces, traces.metrics), (Some(Protocol::Protobuf), None));
    let metrics = with(&[("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://c/v1/metrics")]);
    assert_eq!((metrics.traces, metrics.metrics), (None, Some(Protocol::Protobuf)));
}

#[test]
fn disabled_sdk_or_a_none_exporter_turns_export_off() {
    assert_eq!(with(&[ENDPOINT, ("OTEL_SDK_DISABLED", "TRUE")]), Signals::default());
    assert_eq!(with(&[ENDPOINT, ("OTEL_SDK_DISABLED", "false")]).traces, Some(Protocol::Protobuf));
    let no_traces = with(&[ENDPOINT, ("OTEL_TRACES_EXPORTER", "none")]);
    assert_eq!((no_traces.traces, no_traces.metrics), (None, Some(Protocol::Protobuf)));
}

#[test]
fn grpc_json_and_unknown_protocols_are_refused_naming_the_variable_and_the_fix() {
    let grpc = with(&[ENDPOINT, ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]);
    assert_eq!((grpc.traces, grpc.metrics), (None, None));
    assert_eq!(grpc.refused.len(), 2);
    assert!(grpc.refused[0].starts_with("OTEL_EXPORTER_OTLP_PROTOCOL=grpc:"), "{}", grpc.refused[0]);
    assert!(grpc.refused.iter().all(|line| line.contains("set it to http/protobuf or unset it")));
    let odd = with(&[ENDPOINT, ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/xml\u{1b}[31m")]);
    assert_eq!((odd.traces, odd.metrics), (None, Some(Protocol::Protobuf)));
    assert!(odd.refused[0].starts_with("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/xml"), "{:?}", odd.refused);
}

#[test]
fn an_exporters_error_never_quotes_an_endpoint_or_a_header() {
    let get = |name: &str| match name {
        "OTEL_EXPORTER_OTLP_ENDPOINT" => Some("http://u:pw@bad host".to_owned()),
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS" => Some("api-key=k9".to_owned()),
        _ => None,
    };
    let said = unquoted("invalid endpoint 'http://u:pw@bad host': bad; header 'api-key=k9'", &get);
    assert_eq!(
        said,
        "invalid endpoint '$OTEL_EXPORTER_OTLP_ENDPOINT': bad; header '$OTEL_EXPORTER_OTLP_TRACES_HEADERS'"
    );
}
