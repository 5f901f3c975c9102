//! Durability: what the editor was shown survives `kill -9`, two processes share one database,
//! a database we cannot trust is refused without being touched, and what is stored is readable
//! by its owner only.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::mock_llm::Long;
use crate::support::{Agent, Editor, Reply, TestEnv, text_of, updates};

async fn replayed_text(agent: &mut Agent, env: &TestEnv, session: &str) -> (String, Vec<Value>) {
    let id = agent.request("session/load", json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": []})).await;
    let (response, replay) = agent.response(id).await;
    assert!(response.get("result").is_some(), "{response}");
    let replay: Vec<Value> = updates(&replay, session).into_iter().cloned().collect();
    (text_of(&replay.iter().collect::<Vec<_>>(), "agent_message_chunk"), replay)
}

#[tokio::test]
async fn kill_9_mid_stream_loses_nothing_the_editor_was_shown() {
    let env = TestEnv::new().await;
    for round in 0..6 {
        env.mock.push(Reply::endless(Duration::from_millis(1)));
        let mut agent = env.ready().await;
        let session = agent.new_session(&env.cwd()).await;
        agent.prompt(&session, "stream").await;
        let mut shown = String::new();
        // Kill at a different point each round, including right after the first chunk.
        let wanted = round * 37;
        for _ in 0..=wanted {
            shown.push_str(&agent.next_chunk().await);
        }
        agent.kill9().await;
        // Whatever was already on the pipe was shown too.
        while let Some(message) = agent.try_recv(Duration::from_millis(50)).await {
            shown.push_str(message["params"]["update"]["content"]["text"].as_str().unwrap_or_default());
        }

        let mut agent = env.ready().await;
        let (replayed, replay) = replayed_text(&mut agent, &env, &session).await;
        assert!(replayed.starts_with(&shown), "round {round}: replayed {replayed:?} lacks {shown:?}");
        assert_eq!(replay[0]["sessionUpdate"], "user_message_chunk");
        assert_eq!(replay[0]["content"]["text"], "stream");
        agent.close_stdin();
        agent.wait_exit().await;
    }
}

#[tokio::test]
async fn kill_9_mid_way_through_a_long_answer_loads_its_text_so_far_whole() {
    // Many batches of appended pieces; the client's pace keeps cairn within a few MB of it, so
    // the answer is cut off mid-way.
    let env = TestEnv::new().await;
    let answer = Long { chunks: 20_000, size: 1_000, thought_every: None };
    env.mock.push(Reply::long(answer));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    agent.prompt(&session, "a long answer").await;
    let mut shown = String::new();
    for _ in 0..2_500 {
        shown.push_str(&agent.next_chunk().await);
    }
    agent.kill9().await;
    while let Some(message) = agent.try_recv(Duration::from_millis(50)).await {
        shown.push_str(message["params"]["update"]["content"]["text"].as_str().unwrap_or_default());
    }

    let mut agent = env.ready().await;
    let (replayed, _) = replayed_text(&mut agent, &env, &session).await;
    assert!(replayed.starts_with(&shown), "replayed {} bytes, shown {}", replayed.len(), shown.len());
    assert!(answer.text().starts_with(&replayed), "no chunk lost, repeated or out of order");
    assert!(replayed.len() < answer.text().len(), "cut off mid-way");
    agent.close_stdin();
    agent.wait_exit().await;
}

#[tokio::test]
async fn a_session_cut_off_by_a_crash_carries_on() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::endless(Duration::from_millis(2)));
    env.mock.push(Reply::text(&["fresh start"]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    agent.prompt(&session, "first").await;
    for _ in 0..5 {
        agent.recv().await;
    }
    agent.kill9().await;

    let mut agent = env.ready().await;
    let (before, _) = replayed_text(&mut agent, &env, &session).await;
    let id = agent.prompt(&session, "second").await;
    let (response, _) = agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    let sent = &env.mock.requests()[1]["messages"];
    assert!(sent[2]["content"].as_str().unwrap().starts_with(before.as_str()));
    assert_eq!(sent[3]["content"], "second");
}

#[tokio::test]
async fn two_processes_share_one_database() {
    let env = TestEnv::new().await;
    for _ in 0..20 {
        env.mock.push(Reply::text_with_delay(&["a", "b", "c"], Duration::from_millis(2)));
    }
    let mut first = env.ready().await;
    let mut second = env.ready().await;
    let a = first.new_session(&env.cwd()).await;
    let b = second.new_session(&env.cwd()).await;
    let mut pending = Vec::new();
    for _ in 0..5 {
        pending.push((first.prompt(&a, "from one").await, second.prompt(&b, "from two").await));
    }
    for (x, y) in pending {
        assert_eq!(first.response(x).await.0["result"]["stopReason"], "end_turn");
        assert_eq!(second.response(y).await.0["result"]["stopReason"], "end_turn");
    }
    let listed = first.call("session/list", json!({})).await;
    let mut ids: Vec<&str> =
        listed["sessions"].as_array().unwrap().iter().map(|s| s["sessionId"].as_str().unwrap()).collect();
    ids.sort();
    let mut expected = vec![a.as_str(), b.as_str()];
    expected.sort();
    assert_eq!(ids, expected);
    let (text, _) = replayed_text(&mut first, &env, &b).await;
    assert_eq!(text, "abc".repeat(5), "the first process reads what the second wrote");
}

#[tokio::test]
async fn a_database_from_a_newer_cairn_is_refused_untouched() {
    let env = TestEnv::new().await;
    std::fs::create_dir_all(env.home()).unwrap();
    {
        let conn = rusqlite::Connection::open(env.database()).unwrap();
        conn.execute_batch("CREATE TABLE future (x); PRAGMA user_version = 99;").unwrap();
    }
    let before = std::fs::read(env.database()).unwrap();
    let mut agent = env.ready().await;
    let error = agent.call_err("session/new", json!({"cwd": env.cwd(), "mcpServers": []})).await;
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("schema version 99") && message.contains("upgrade cairn"), "{message}");
    assert_eq!(agent.call_err("session/list", json!({})).await["message"], message);
    agent.close_stdin();
    agent.wait_exit().await;
    assert!(std::fs::read(env.database()).unwrap() == before, "the file is left as it was");
}

#[tokio::test]
async fn a_corrupt_database_is_refused_untouched() {
    let env = TestEnv::new().await;
    std::fs::create_dir_all(env.home()).unwrap();
    let garbage: Vec<u8> = (0..8192u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(env.database(), &garbage).unwrap();
    let mut agent = env.ready().await;
    let error = agent.call_err("session/new", json!({"cwd": env.cwd(), "mcpServers": []})).await;
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("corrupt") && message.contains("move it aside"), "{message}");
    agent.close_stdin();
    agent.wait_exit().await;
    assert!(std::fs::read(env.database()).unwrap() == garbage, "never reset");
}

#[tokio::test]
async fn someone_elses_sqlite_database_is_refused_untouched() {
    let env = TestEnv::new().await;
    std::fs::create_dir_all(env.home()).unwrap();
    {
        let conn = rusqlite::Connection::open(env.database()).unwrap();
        conn.execute_batch("CREATE TABLE sessions (something_else TEXT);").unwrap();
    }
    let before = std::fs::read(env.database()).unwrap();
    let mut agent = env.ready().await;
    let error = agent.call_err("session/new", json!({"cwd": env.cwd(), "mcpServers": []})).await;
    assert!(error["message"].as_str().unwrap().contains("no cairn schema version"), "{error}");
    agent.close_stdin();
    agent.wait_exit().await;
    assert!(std::fs::read(env.database()).unwrap() == before, "the file is left as it was");
}

#[tokio::test]
async fn the_data_directory_database_and_log_are_private_whatever_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    let env = TestEnv::new().await;
    env.mock.push(Reply::text(&["private"]));
    let log = env.dir.path().join("cairn.log");
    let mut command = env.command_with_umask("000");
    command.arg("--log-file").arg(&log);
    let mut agent = Agent::spawn(command, Editor::default()).await;
    agent.initialize().await;
    let session = agent.new_session(&env.cwd()).await;
    let id = agent.prompt(&session, "remember this").await;
    agent.response(id).await;
    let mode = |path: &std::path::Path| {
        std::fs::metadata(path)
            .map(|m| m.permissions().mode() & 0o777)
            .map_err(|e| format!("{}: {e}", path.display()))
            .unwrap()
    };
    assert_eq!(mode(&env.home()), 0o700, "the data directory cairn created");
    for file in ["cairn.db", "cairn.db-wal", "cairn.db-shm"] {
        assert_eq!(mode(&env.home().join(file)), 0o600, "{file}");
    }
    assert_eq!(mode(&log), 0o600, "the log file");
}
