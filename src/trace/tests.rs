//! The W3C grammar as `from_meta` holds a client to it, and the headers a model request gets.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};

use super::{TraceContext, current, enter, scope};

const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

fn read(parent: Value, state: Option<Value>) -> Option<TraceContext> {
    let mut meta = json!({ "traceparent": parent });
    if let Some(state) = state {
        meta["tracestate"] = state;
    }
    TraceContext::from_meta(Some(&meta))
}

fn parent(text: &str) -> Option<TraceContext> {
    read(json!(text), None)
}

#[test]
fn a_valid_traceparent_is_read_field_by_field() {
    let trace = parent(PARENT).unwrap();
    assert_eq!(trace.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(trace.parent_id(), "00f067aa0ba902b7");
    assert_eq!(trace.flags(), "01");
    assert_eq!(trace.state(), None);
    // Flags are passed on as they came, whatever bits are set.
    assert_eq!(parent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-ff").unwrap().flags(), "ff");
}

#[test]
fn no_meta_or_no_traceparent_is_no_context() {
    assert_eq!(TraceContext::from_meta(None), None);
    assert_eq!(TraceContext::from_meta(Some(&json!("00-…"))), None);
    assert_eq!(TraceContext::from_meta(Some(&json!({"tracestate": "a=b"}))), None);
    assert_eq!(TraceContext::from_meta(Some(&json!({"traceparent": null}))), None);
}

#[test]
fn every_malformed_traceparent_is_ignored() {
    let bad = [
        "",
        "00",
        // Uppercase hex, anywhere.
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00F067AA0BA902B7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0A",
        "0A-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        // Not hex.
        "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902bz-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0x",
        "xy-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        // All-zero ids.
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        // The forbidden version.
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        // Fields too short, too long, or not where they belong.
        "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e47366-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
        "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
        "004bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",
        // Version 00 has nothing after its flags.
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        // Whitespace and header injection.
        " 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 ",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\nx-injected: 1",
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-\r\nx-injected: 1",
        // A later version's extra fields must follow a dash.
        "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01.what-the-future-will-be-like",
    ];
    for text in bad {
        assert_eq!(parent(text), None, "{text:?}");
    }
    let overlong = format!("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-{}", "a".repeat(300));
    assert_eq!(parent(&overlong), None);
    for not_text in [json!(1), json!(true), json!([PARENT]), json!({"value": PARENT})] {
        assert_eq!(read(not_text.clone(), None), None, "{not_text}");
    }
}

#[test]
fn a_later_version_is_read_for_the_fields_version_00_has() {
    for text in [
        "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future-will-be-like",
    ] {
        let trace = parent(text).unwrap_or_else(|| panic!("{text} is read"));
        assert_eq!(trace.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        // And passed on as version 00.
        assert!(trace.child().unwrap().to_str().unwrap().starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"));
    }
}

#[test]
fn a_valid_tracestate_is_kept_as_it_came() {
    let cases = [
        "rojo=00f067aa0ba902b7",
        "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE",
        "rojo=00f067aa0ba902b7 , congo=t61rcWkgMzE",
        "tenant@vendor=value,a/b*c_d-e=  leading spaces kept",
        "a=1,,b=2",
        "a=1,\tb=2",
        // Spaces after a value are whitespace around its member, not part of it.
        "key=trailing ",
    ];
    for state in cases {
        let trace = read(json!(PARENT), Some(json!(state))).unwrap();
        assert_eq!(trace.state(), Some(state), "{state:?}");
    }
    let at_the_limit: Vec<String> = (0..32).map(|i| format!("k{i}=v")).collect();
    let at_the_limit = at_the_limit.join(",");
    assert_eq!(read(json!(PARENT), Some(json!(at_the_limit))).unwrap().state(), Some(at_the_limit.as_str()));
    let long = format!("k={}", "v".repeat(256));
    let long = [&long[..], "a=b"].join(",");
    assert!(long.len() <= 512);
    assert!(read(json!(PARENT), Some(json!(long))).unwrap().state().is_some());
}

#[test]
fn an_empty_tracestate_is_not_passed_on() {
    for state in ["", " ", ",", " , ,\t"] {
        assert_eq!(read(json!(PARENT), Some(json!(state))).unwrap().state(), None, "{state:?}");
    }
}

#[test]
fn an_invalid_tracestate_is_dropped_and_the_traceparent_kept() {
    let members: Vec<String> = (0..33).map(|i| format!("k{i}=v")).collect();
    let cases = [
        json!(format!("k={}", "v".repeat(600))),
        json!(format!("a={},b={}", "v".repeat(256), "w".repeat(256))),
        json!(members.join(",")),
        json!("a=1,a=2"),
        json!("Upper=1"),
        json!("_key=1"),
        json!("key"),
        json!("key="),
        json!("key=a=b"),
        json!("key=   "),
        json!("key=\u{7f}"),
        json!("key=caf\u{e9}"),
        json!("key=1\r\nx-injected: 1"),
        json!("key=1\nx-injected: 1"),
        json!(format!("{}=1", "k".repeat(257))),
        json!(42),
    ];
    for state in cases {
        let trace =
            read(json!(PARENT), Some(state.clone())).unwrap_or_else(|| panic!("{state}: the traceparent stands"));
        assert_eq!(trace.state(), None, "{state}");
        assert_eq!(trace.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
    }
}

#[test]
fn each_child_has_the_trace_and_flags_and_a_parent_id_of_its_own() {
    let trace = read(json!(PARENT), Some(json!("rojo=1"))).unwrap();
    let mut seen = std::collections::HashSet::new();
    for _ in 0..100 {
        let child = trace.child().unwrap();
        let child = child.to_str().unwrap();
        assert_eq!(child.len(), 55);
        let fields: Vec<&str> = child.split('-').collect();
        assert_eq!(fields[..2], ["00", "4bf92f3577b34da6a3ce929d0e0e4736"]);
        assert_eq!(fields[3], "01");
        assert_ne!(fields[2], "00f067aa0ba902b7");
        assert_ne!(fields[2], "0000000000000000");
        // A child is a valid traceparent itself.
        assert_eq!(parent(child).map(|again| again.parent_id().to_owned()).as_deref(), Some(fields[2]));
        assert!(seen.insert(fields[2].to_owned()), "parent ids repeat");
    }
}

#[test]
fn the_headers_go_on_the_request() {
    let client = crate::net::client_builder().build().unwrap();
    let trace = read(json!(PARENT), Some(json!("rojo=1,congo=2"))).unwrap();
    let request = trace.propagate(client.post("http://127.0.0.1:9/v1/chat")).build().unwrap();
    let parent = request.headers()["traceparent"].to_str().unwrap();
    assert!(parent.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-") && parent.ends_with("-01"), "{parent}");
    assert_eq!(request.headers()["tracestate"], "rojo=1,congo=2");
    let bare = parent_only(&client);
    assert!(bare.headers().contains_key("traceparent"));
    assert!(!bare.headers().contains_key("tracestate"));
}

fn parent_only(client: &reqwest::Client) -> reqwest::Request {
    let trace = parent(PARENT).unwrap();
    trace.propagate(client.post("http://127.0.0.1:9/v1/chat")).build().unwrap()
}

#[tokio::test]
async fn the_current_context_is_the_scoped_one() {
    assert_eq!(current(), None);
    let trace = parent(PARENT);
    let span = tracing::Span::none();
    assert_eq!(enter(trace.as_ref(), &span, "m", current), trace);
    let inner = trace.clone();
    let nested = async move { (current(), enter(None, &tracing::Span::none(), "m", current)) };
    assert_eq!(scope(trace.clone(), nested).await, (inner, None));
    assert_eq!(current(), None);
}

#[test]
fn a_span_of_ours_is_named_as_the_parent_as_it_is_with_the_clients_state() {
    let client = read(json!(PARENT), Some(json!("congo=t61rcWkgMzE"))).unwrap();
    let trace_id = [0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36];
    let ours = TraceContext::of_span(trace_id, [0xab, 0, 0, 0, 0, 0, 0, 0x01], 1, Some(&client));
    assert_eq!(ours.trace_id(), client.trace_id());
    assert_eq!(ours.parent_id(), "ab00000000000001");
    assert_eq!(ours.flags(), "01");
    assert_eq!(ours.state(), Some("congo=t61rcWkgMzE"));
    for _ in 0..2 {
        let child = ours.child().unwrap();
        assert_eq!(child.to_str().unwrap(), "00-4bf92f3577b34da6a3ce929d0e0e4736-ab00000000000001-01");
    }
    let alone = TraceContext::of_span(trace_id, [0xff; 8], 0, None);
    assert_eq!(alone.state(), None);
    assert_eq!(alone.child().unwrap().to_str().unwrap(), "00-4bf92f3577b34da6a3ce929d0e0e4736-ffffffffffffffff-00");
}
