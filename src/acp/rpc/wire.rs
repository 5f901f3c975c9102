//! The JSON-RPC 2.0 messages cairn writes, as borrowed views serialized straight to a line:
//! a notification, a request to the client, and a request's answer (a result or an error).

use agent_client_protocol_schema::v1::Error;
use serde::Serialize;
use serde_json::Value;
use serde_json::value::RawValue;

#[derive(Serialize)]
pub(super) struct NotificationOut<'a, P> {
    pub(super) jsonrpc: &'static str,
    pub(super) method: &'a str,
    pub(super) params: &'a P,
}

#[derive(Serialize)]
pub(super) struct RequestOut<'a, P> {
    pub(super) jsonrpc: &'static str,
    pub(super) id: u64,
    pub(super) method: &'a str,
    pub(super) params: &'a P,
}

#[derive(Serialize)]
pub(super) struct SuccessOut<'a> {
    pub(super) jsonrpc: &'static str,
    pub(super) id: &'a RawValue,
    pub(super) result: &'a Value,
}

#[derive(Serialize)]
pub(super) struct ErrorOut<'a> {
    pub(super) jsonrpc: &'static str,
    pub(super) id: &'a RawValue,
    pub(super) error: &'a Error,
}
