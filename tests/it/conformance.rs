//! Conformance with a client from another language: the official Python ACP SDK
//! (`agent-client-protocol` on PyPI, pinned in `tests/conformance/requirements.txt`, installed by
//! `support::python` on first use) runs `tests/conformance/client.py`, which spawns the built
//! `cairn` through the SDK's own process transport and typed API. Its editor serves `fs/*`,
//! answers permission questions and a `question` tool's elicitation form; every update it receives is parsed by the SDK's models, so a
//! shape the SDK does not accept shows up as an error it logged. The script prints what it saw;
//! this test says what that must be.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::python::{acp_sdk, python};
use crate::support::{Reply, TestEnv, text_of};
use crate::tools::{call, tool_results};

/// A hang guard for the whole script (each of its steps has its own, shorter one).
const SCRIPT_PATIENCE: Duration = Duration::from_secs(300);

/// The text the Python editor holds unsaved for `notes.md`; the disk holds something else.
const BUFFER: &str = "held in the Python editor's buffer\n";

fn updates(summary: &Value, part: &str) -> Vec<Value> {
    summary[part]["updates"].as_array().unwrap_or_else(|| panic!("no {part} updates in {summary}")).clone()
}

fn agent_text(updates: &[Value]) -> String {
    text_of(&updates.iter().collect::<Vec<_>>(), "agent_message_chunk")
}

/// Runs the Python client against cairn in `env` and returns its summary.
async fn run_python_client(env: &TestEnv) -> Value {
    let sdk =
        tokio::task::spawn_blocking(acp_sdk).await.unwrap_or_else(|err| std::panic::resume_unwind(err.into_panic()));
    let notes = env.workspace().join("notes.md");
    let config = json!({
        "cairn": env!("CARGO_BIN_EXE_cairn"),
        "workspace": env.cwd(),
        "env": env.agent_env().into_iter().map(|(name, value)| (name, Value::from(value))).collect::<serde_json::Map<_, _>>(),
        "buffers": {notes.to_string_lossy(): BUFFER},
    });
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/conformance/client.py");
    let mut command = python(&sdk);
    command.arg(script).arg(config.to_string()).current_dir(env.workspace()).kill_on_drop(true);
    let output = tokio::time::timeout(SCRIPT_PATIENCE, command.output())
        .await
        .unwrap_or_else(|_| panic!("the Python client did not finish within {SCRIPT_PATIENCE:?}"))
        .expect("run python3");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the Python client failed ({}); its stderr, with cairn's:\n{stderr}",
        output.status
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|err| {
        panic!(
            "the Python client's summary is not JSON ({err}):\n{}\nstderr:\n{stderr}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

#[tokio::test]
async fn the_python_sdk_drives_a_tool_turn_a_load_and_a_cancel() {
    let env = TestEnv::new().await;
    std::fs::write(env.workspace().join("notes.md"), "on the disk\n").unwrap();
    env.mock
        .push(Reply::tool_calls(&[
            ("c1", "read", json!({"path": "notes.md"})),
            ("c2", "write", json!({"path": "out.txt", "content": "written through the SDK\n"})),
            ("c3", "todo", json!({"items": [{"content": "Read the notes", "status": "completed"}]})),
        ]))
        .push(Reply::text(&["Read ", "and written."]))
        .push(Reply::tool_calls(&[(
            "q1",
            "question",
            json!({"question": "Which database?", "options": [{"label": "SQLite"}, {"label": "Postgres"}]}),
        )]))
        .push(Reply::text(&["Postgres it is."]))
        .push(Reply::endless(Duration::from_millis(10)));

    let summary = run_python_client(&env).await;
    assert_eq!(summary["sdkErrors"], json!([]), "the SDK parsed every message cairn sent");

    let init = &summary["initialize"];
    assert_eq!(init["protocolVersion"], 1);
    assert_eq!(init["agentCapabilities"]["loadSession"], true);

    // The tool turn: the read went through the editor (its buffer, not the disk), the write asked
    // once and went through the editor too, and the turn ended with the model's text.
    let prompt = &summary["prompt"];
    assert_eq!(prompt["stopReason"], "end_turn");
    let notes = env.workspace().join("notes.md").to_string_lossy().into_owned();
    let out = env.workspace().join("out.txt");
    assert_eq!(prompt["reads"], json!([notes]));
    assert_eq!(prompt["writes"], json!([out.to_string_lossy()]));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "written through the SDK\n");
    let asked = prompt["permissions"].as_array().unwrap();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0]["toolCallId"], "c2");
    assert!(asked[0]["kinds"].as_array().unwrap().contains(&json!("reject_once")), "{asked:?}");
    let results = tool_results(&env, 1);
    assert!(results[0]["content"].as_str().unwrap().contains(BUFFER.trim_end()), "{results:?}");

    let live = updates(&summary, "prompt");
    assert_eq!(agent_text(&live), "Read and written.");
    // The client advertised `plan` (ACP 1.20): the checklist comes as a `plan_update` it parsed.
    let plan = live.iter().find(|u| u["sessionUpdate"] == "plan_update").expect("a plan_update");
    assert_eq!(plan["plan"]["planId"], "todo");
    assert_eq!(plan["plan"]["entries"][0]["content"], "Read the notes");
    assert!(live.iter().all(|u| u["sessionUpdate"] != "plan"), "no legacy plan for this client");
    for (id, kind) in [("c1", "read"), ("c2", "edit")] {
        let seen = call(&live, id);
        assert_eq!(seen.first().map(|u| &u["sessionUpdate"]), Some(&json!("tool_call")), "{live:?}");
        assert_eq!(seen[0]["kind"], kind);
        assert_eq!(seen.last().unwrap()["status"], "completed", "{seen:?}");
    }

    // The question came as an elicitation form on its call's card, which the SDK parsed, and
    // its answer reached the model.
    let question = &summary["question"];
    assert_eq!(question["stopReason"], "end_turn");
    let forms = question["forms"].as_array().unwrap();
    assert_eq!(forms.len(), 1, "{question}");
    assert_eq!(forms[0]["message"], "Which database?");
    assert_eq!(forms[0]["toolCallId"], "q1");
    let answered = tool_results(&env, 3).into_iter().find(|result| result["tool_call_id"] == "q1").unwrap();
    assert_eq!(answered["content"], "The user answered: Postgres");
    assert_eq!(agent_text(&updates(&summary, "question")), "Postgres it is.");

    // session/load in a second process replays the prompts, the calls and the answers.
    let replayed = updates(&summary, "load");
    let user = text_of(&replayed.iter().collect::<Vec<_>>(), "user_message_chunk");
    assert_eq!(user, "Read notes.md, then write out.txtAsk me which database to use");
    assert_eq!(agent_text(&replayed), "Read and written.Postgres it is.");
    for id in ["c1", "c2"] {
        let seen = call(&replayed, id);
        assert_eq!(seen.first().map(|u| &u["sessionUpdate"]), Some(&json!("tool_call")), "{replayed:?}");
        assert_eq!(seen.last().unwrap()["status"], "completed", "{seen:?}");
    }

    // A prompt cancelled while the model streams ends `cancelled`, after what had streamed.
    let cancelled = &summary["cancelled"];
    assert_eq!(cancelled["stopReason"], "cancelled");
    assert!(agent_text(&updates(&summary, "cancelled")).starts_with("tick 0 "), "{cancelled}");
}
