//! A script-driven client built on the official Rust ACP SDK, for cairn's conformance tests.
//!
//! `acp-sdk-client SCRIPT -- AGENT [ARGS…]` spawns the agent (which inherits this process's
//! environment), sends `initialize` and then each step of the script through the SDK's typed API,
//! and prints one JSON object: every response and, per step, the session notifications received
//! while it ran. Every request is parsed into the SDK's own type before it is sent and every
//! notification is parsed by the SDK as it arrives, so an update the SDK rejects fails the run
//! (exit status 1, the error on stderr) instead of being skipped.
//!
//! A script is `{"initialize": {…}, "steps": [{"new": {…}}, {"prompt": {…}}, …]}`. Any string
//! `"$session"` in a step is replaced by the id of the last session a `new`, `load`, `resume` or
//! `fork` step named. A `prompt` step may carry `"cancel_subagent": true`: while it runs, the
//! first sub-agent announced by a `subagent_update` is cancelled with `session/cancel` on the
//! sub-agent's own session id. Permission requests are answered with the first `allow_once`
//! option and recorded under `"permissions"`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    ArchiveSessionRequest, CancelNotification, CloseSessionRequest, ForkSessionRequest, InitializeRequest,
    ListSessionsRequest, LoadSessionRequest, NewSessionRequest, PermissionOptionKind, PromptRequest,
    RequestPermissionOutcome, RequestPermissionRequest, RequestPermissionResponse, ResumeSessionRequest,
    SelectedPermissionOutcome, SessionNotification, SessionUpdate, SetSessionModeRequest, SetSessionTitleRequest,
};
use agent_client_protocol::{AcpAgent, AcpAgentConfig, Agent, JsonRpcRequest};
use serde_json::{Value, json};

type Shared<T> = Arc<Mutex<Vec<T>>>;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (script, command) = match args.split_first() {
        Some((script, rest)) if rest.first().map(String::as_str) == Some("--") && rest.len() > 1 => {
            (script.clone(), rest[1..].to_vec())
        }
        _ => fail("usage: acp-sdk-client SCRIPT -- AGENT [ARGS…]"),
    };
    let script: Value = serde_json::from_str(&script).unwrap_or_else(|err| fail(&format!("the script: {err}")));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|err| fail(&format!("a runtime: {err}")));
    match runtime.block_on(drive(script, command)) {
        Ok(transcript) => println!("{transcript}"),
        Err(err) => fail(&format!("the session failed: {err:?}")),
    }
}

fn fail(why: &str) -> ! {
    eprintln!("acp-sdk-client: {why}");
    std::process::exit(1)
}

async fn drive(script: Value, command: Vec<String>) -> Result<Value, agent_client_protocol::Error> {
    let config = AcpAgentConfig::new(&command[0]).args(&command[1..]);
    let updates: Shared<SessionNotification> = Arc::default();
    let permissions: Shared<Value> = Arc::default();
    let (sink, asked) = (Arc::clone(&updates), Arc::clone(&permissions));
    agent_client_protocol::Client
        .v1()
        .on_receive_notification(
            async move |notification: SessionNotification, _cx| {
                sink.lock().expect("the update list").push(notification);
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .on_receive_request(
            async move |request: RequestPermissionRequest, responder, _cx| {
                let chosen = request
                    .options
                    .iter()
                    .find(|option| option.kind == PermissionOptionKind::AllowOnce)
                    .or(request.options.first())
                    .map(|option| option.option_id.clone());
                asked.lock().expect("the permission list").push(to_json(&request));
                let outcome = match chosen {
                    Some(id) => RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(id)),
                    None => RequestPermissionOutcome::Cancelled,
                };
                responder.respond(RequestPermissionResponse::new(outcome))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .connect_with(AcpAgent::new(config), async move |connection: ConnectionTo<Agent>| {
            let init: InitializeRequest = parse(&script["initialize"])?;
            let initialized = connection.send_request(init).block_task().await?;
            let mut session = String::new();
            let mut steps = Vec::new();
            for step in script["steps"].as_array().cloned().unwrap_or_default() {
                let step = substitute(step, &session);
                let (name, body) = step
                    .as_object()
                    .and_then(|object| object.iter().find(|(key, _)| *key != "cancel_subagent"))
                    .map(|(key, value)| (key.clone(), value.clone()))
                    .ok_or_else(|| invalid(&format!("a step names no method: {step}")))?;
                let response = match name.as_str() {
                    "new" => send::<NewSessionRequest>(&connection, &body).await?,
                    "load" => send::<LoadSessionRequest>(&connection, &body).await?,
                    "resume" => send::<ResumeSessionRequest>(&connection, &body).await?,
                    "fork" => send::<ForkSessionRequest>(&connection, &body).await?,
                    "list" => send::<ListSessionsRequest>(&connection, &body).await?,
                    "close" => send::<CloseSessionRequest>(&connection, &body).await?,
                    "set_mode" => send::<SetSessionModeRequest>(&connection, &body).await?,
                    "set_title" => send::<SetSessionTitleRequest>(&connection, &body).await?,
                    "archive" => send::<ArchiveSessionRequest>(&connection, &body).await?,
                    "cancel" => {
                        connection.send_notification(parse::<CancelNotification>(&body)?)?;
                        Value::Null
                    }
                    "prompt" if step["cancel_subagent"] == true => {
                        let prompt = send::<PromptRequest>(&connection, &body);
                        let (response, ()) = tokio::join!(prompt, cancel_first_subagent(&connection, &updates));
                        response?
                    }
                    "prompt" => send::<PromptRequest>(&connection, &body).await?,
                    other => return Err(invalid(&format!("no such step: {other}"))),
                };
                if let Some(id) = response["sessionId"].as_str() {
                    session = id.to_owned();
                } else if let Some(id) = body["sessionId"].as_str().filter(|_| name == "load" || name == "resume") {
                    session = id.to_owned();
                }
                let seen: Vec<Value> =
                    updates.lock().expect("the update list").drain(..).map(|n| to_json(&n)).collect();
                steps.push(json!({"step": name, "response": response, "updates": seen}));
            }
            let asked = std::mem::take(&mut *permissions.lock().expect("the permission list"));
            Ok(json!({"initialize": to_json(&initialized), "steps": steps, "permissions": asked}))
        })
        .await
}

/// Sends `body` as the SDK's request type `R` and gives back its typed response as JSON.
async fn send<R: JsonRpcRequest + serde::de::DeserializeOwned>(
    connection: &ConnectionTo<Agent>,
    body: &Value,
) -> Result<Value, agent_client_protocol::Error>
where
    R::Response: serde::Serialize,
{
    let request: R = parse(body)?;
    Ok(to_json(&connection.send_request(request).block_task().await?))
}

/// Waits (up to a minute) for a sub-agent to be announced, then cancels it by its own session id.
async fn cancel_first_subagent(connection: &ConnectionTo<Agent>, updates: &Shared<SessionNotification>) {
    for _ in 0..6000 {
        let child = updates.lock().expect("the update list").iter().find_map(|n| match &n.update {
            SessionUpdate::SubagentUpdate(update) => Some(update.session_id.clone()),
            _ => None,
        });
        if let Some(child) = child {
            if let Err(err) = connection.send_notification(CancelNotification::new(child)) {
                eprintln!("acp-sdk-client: cancelling the sub-agent: {err:?}");
            }
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    eprintln!("acp-sdk-client: no sub-agent was announced");
}

fn parse<T: serde::de::DeserializeOwned>(value: &Value) -> Result<T, agent_client_protocol::Error> {
    serde_json::from_value(value.clone()).map_err(|err| invalid(&format!("{err}: {value}")))
}

fn invalid(why: &str) -> agent_client_protocol::Error {
    agent_client_protocol::Error::invalid_params().data(why.to_owned())
}

fn to_json(value: &impl serde::Serialize) -> Value {
    serde_json::to_value(value).unwrap_or_else(|err| json!({"unserializable": err.to_string()}))
}

/// `step` with every string `"$session"` replaced by `session`.
fn substitute(step: Value, session: &str) -> Value {
    match step {
        Value::String(text) if text == "$session" => Value::String(session.to_owned()),
        Value::Array(items) => Value::Array(items.into_iter().map(|item| substitute(item, session)).collect()),
        Value::Object(map) => {
            Value::Object(map.into_iter().map(|(key, value)| (key, substitute(value, session))).collect())
        }
        other => other,
    }
}
