//! stdin and stdout as clients hand them over: pipes (Zed, Neovim, Python), socket pairs (Node,
//! so acpx and the VS Code family), a file. Each carries a whole turn, and cairn, which reads and
//! writes pipes and sockets without blocking, leaves their shared descriptions blocking again
//! when it exits, as it found them.

use std::os::fd::{AsRawFd, OwnedFd};
use std::process::Stdio;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};

use crate::support::{PATIENCE, Reply, TestEnv};

/// Whether `fd` of this process has `O_NONBLOCK`, as `/proc` shows its open file description.
fn non_blocking(fd: &impl AsRawFd) -> bool {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd())).unwrap();
    let flags = info.lines().find_map(|line| line.strip_prefix("flags:")).unwrap().trim();
    u32::from_str_radix(flags, 8).unwrap() & 0o4000 != 0
}

/// Drives one turn over `input`/`output` (cairn's stdin and stdout seen from the client): the
/// text the model streamed, and the prompt's stop reason.
async fn one_turn(
    env: &TestEnv,
    mut input: impl AsyncWrite + Unpin,
    output: impl AsyncRead + Unpin,
) -> (String, Value) {
    let mut lines = BufReader::new(output).lines();
    let mut text = String::new();
    let requests = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": env.cwd(), "mcpServers": []}}),
    ];
    let mut session = Value::Null;
    for request in requests {
        input.write_all(format!("{request}\n").as_bytes()).await.unwrap();
        loop {
            let line = tokio::time::timeout(PATIENCE, lines.next_line()).await.unwrap().unwrap().unwrap();
            let message: Value = serde_json::from_str(&line).unwrap();
            if message["id"] == request["id"] {
                session = message["result"]["sessionId"].clone();
                break;
            }
        }
    }
    let prompt = json!({"jsonrpc": "2.0", "id": 3, "method": "session/prompt",
        "params": {"sessionId": session, "prompt": [{"type": "text", "text": "hi"}]}});
    input.write_all(format!("{prompt}\n").as_bytes()).await.unwrap();
    loop {
        let line = tokio::time::timeout(PATIENCE, lines.next_line()).await.unwrap().unwrap().unwrap();
        let message: Value = serde_json::from_str(&line).unwrap();
        if message["params"]["update"]["sessionUpdate"] == "agent_message_chunk" {
            text.push_str(message["params"]["update"]["content"]["text"].as_str().unwrap());
        }
        if message["id"] == 3 {
            return (text, message["result"]["stopReason"].clone());
        }
    }
}

#[tokio::test]
async fn a_socket_pair_as_node_gives_it_carries_a_turn_and_is_left_blocking() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::text(&["Over ", "a socket."]));
    let (ours_in, theirs_in) = std::os::unix::net::UnixStream::pair().unwrap();
    let (ours_out, theirs_out) = std::os::unix::net::UnixStream::pair().unwrap();
    // Copies of cairn's ends: the same open file descriptions, whose flags cairn changes.
    let (watch_in, watch_out) = (theirs_in.try_clone().unwrap(), theirs_out.try_clone().unwrap());
    let mut child = env
        .command()
        .stdin(Stdio::from(OwnedFd::from(theirs_in)))
        .stdout(Stdio::from(OwnedFd::from(theirs_out)))
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    for ours in [&ours_in, &ours_out] {
        ours.set_nonblocking(true).unwrap();
    }
    let input = tokio::net::UnixStream::from_std(ours_in).unwrap();
    let output = tokio::net::UnixStream::from_std(ours_out).unwrap();
    let (text, stop) = one_turn(&env, input, output).await;
    assert_eq!((text.as_str(), stop), ("Over a socket.", json!("end_turn")));
    assert!(child.wait().await.unwrap().success());
    assert!(!non_blocking(&watch_in) && !non_blocking(&watch_out), "cairn left its stdio non-blocking");
}

#[tokio::test]
async fn pipes_carry_a_turn_and_are_left_blocking() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::text(&["Through ", "pipes."]));
    let (theirs_in, ours_in) = std::io::pipe().unwrap();
    let (ours_out, theirs_out) = std::io::pipe().unwrap();
    let (watch_in, watch_out) = (theirs_in.try_clone().unwrap(), theirs_out.try_clone().unwrap());
    let mut child = env
        .command()
        .stdin(Stdio::from(theirs_in))
        .stdout(Stdio::from(theirs_out))
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let input = tokio::net::unix::pipe::Sender::from_owned_fd(OwnedFd::from(ours_in)).unwrap();
    let output = tokio::net::unix::pipe::Receiver::from_owned_fd(OwnedFd::from(ours_out)).unwrap();
    let (text, stop) = one_turn(&env, input, output).await;
    assert_eq!((text.as_str(), stop), ("Through pipes.", json!("end_turn")));
    assert!(child.wait().await.unwrap().success());
    assert!(!non_blocking(&watch_in) && !non_blocking(&watch_out), "cairn left its stdio non-blocking");
}

#[tokio::test]
async fn requests_read_from_a_file_are_answered() {
    let env = TestEnv::new().await;
    let requests = env.dir.path().join("requests.jsonl");
    std::fs::write(
        &requests,
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":1}}\n",
    )
    .unwrap();
    let output =
        env.command().stdin(std::fs::File::open(&requests).unwrap()).stderr(Stdio::null()).output().await.unwrap();
    assert!(output.status.success());
    let answer: Value = serde_json::from_slice(output.stdout.split(|b| *b == b'\n').next().unwrap()).unwrap();
    assert_eq!(answer["result"]["protocolVersion"], 1, "{answer}");
}
