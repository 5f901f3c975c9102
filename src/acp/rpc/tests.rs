//! Unit tests of the peer over in-memory pipes: both directions at once, strays, long lines, and
//! the gate a bulk producer waits at while the client does not read.

use std::time::Duration;

use futures::FutureExt;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream};

use super::*;

/// A handler whose `ask` request asks the client a question and answers with the reply.
struct Asker {
    peer: Peer,
}

impl Handler for Asker {
    fn request(&self, method: &str, params: Value) -> Result<BoxFuture<'static, Result<Value, Error>>, Error> {
        let peer = self.peer.clone();
        match method {
            "ask" => Ok(async move { peer.request("client/question", &params).await }.boxed()),
            "announce" => Ok(async move {
                // Something running beside the request that may only speak after its answer.
                let announced = peer.after_response();
                let beside = peer.clone();
                tokio::spawn(async move {
                    let _ = announced.await;
                    beside.notify("announced/later", &json!({}));
                });
                tokio::time::sleep(Duration::from_millis(50)).await;
                Ok(json!("the answer"))
            }
            .boxed()),
            "boom" => panic!("a handler bug"),
            "boom-later" => Ok(async move {
                tokio::task::yield_now().await;
                panic!("{}", String::from("a bug in a future"))
            }
            .boxed()),
            "wait" => Ok(async move {
                tokio::time::sleep(Duration::from_secs(60)).await;
                Ok(Value::Null)
            }
            .boxed()),
            // Says so when its future is dropped, as a prompt's tells its session to stop.
            "hold" => {
                let held = Held(peer);
                Ok(async move {
                    let _held = held;
                    std::future::pending::<()>().await;
                    Ok(Value::Null)
                }
                .boxed())
            }
            _ => Err(error(ErrorCode::MethodNotFound, method.to_owned())),
        }
    }

    fn notification(&self, _method: &str, _params: Value) {}

    fn shutdown(&self) -> BoxFuture<'static, ()> {
        async {}.boxed()
    }
}

/// Tells the client when dropped.
struct Held(Peer);

impl Drop for Held {
    fn drop(&mut self) {
        self.0.notify("held/dropped", &json!({}));
    }
}

struct Client {
    to_agent: DuplexStream,
    from_agent: tokio::io::Lines<BufReader<DuplexStream>>,
}

impl Client {
    async fn send(&mut self, message: Value) {
        self.to_agent.write_all(format!("{message}\n").as_bytes()).await.unwrap();
    }

    async fn recv(&mut self) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(5), self.from_agent.next_line()).await.unwrap().unwrap();
        serde_json::from_str(&line.unwrap()).unwrap()
    }
}

fn start() -> (Client, tokio::task::JoinHandle<()>) {
    let (to_agent, agent_in) = tokio::io::duplex(1 << 16);
    let (agent_out, from_agent) = tokio::io::duplex(1 << 16);
    let served = tokio::spawn(serve(agent_in, agent_out, |peer| Asker { peer }));
    (Client { to_agent, from_agent: BufReader::new(from_agent).lines() }, served)
}

/// [`start`], with the peer itself, for a test that sends on its own.
async fn start_with_peer() -> (Client, Peer) {
    let (to_agent, agent_in) = tokio::io::duplex(1 << 16);
    let (agent_out, from_agent) = tokio::io::duplex(1 << 16);
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(serve(agent_in, agent_out, move |peer| {
        let _ = tx.send(peer.clone());
        Asker { peer }
    }));
    let peer = rx.await.unwrap();
    (Client { to_agent, from_agent: BufReader::new(from_agent).lines() }, peer)
}

/// Queues numbered 64 KiB notifications until well past the high mark (more than the pipe and the
/// writer's buffer can take), and returns how many.
fn flood(peer: &Peer) -> usize {
    let piece = "x".repeat(64 * 1024);
    let count = (HIGH_WATER + 512 * 1024) / piece.len() + 1;
    for seq in 0..count {
        peer.notify("bulk/piece", &json!({"seq": seq, "text": piece}));
    }
    count
}

#[tokio::test]
async fn a_bulk_producer_waits_while_the_client_does_not_read_and_goes_on_once_it_does() {
    let (mut client, peer) = start_with_peer().await;
    assert!(peer.writable().now_or_never().is_some(), "with nothing queued there is room");
    let count = flood(&peer);
    let mut writable = Box::pin(peer.writable());
    assert!(writable.as_mut().now_or_never().is_none(), "past the high mark a bulk producer waits");
    // Answers are queued, never held: this one follows the bulk.
    client.send(json!({"jsonrpc": "2.0", "id": 1, "method": "announce"})).await;

    for seq in 0..count {
        let piece = client.recv().await;
        assert_eq!(piece["params"]["seq"], seq, "pieces arrive whole and in order");
    }
    assert_eq!(client.recv().await, json!({"jsonrpc": "2.0", "id": 1, "result": "the answer"}));
    tokio::time::timeout(Duration::from_secs(5), writable).await.expect("the drained queue lets the producer go");
    assert!(peer.writable().now_or_never().is_some());
}

#[tokio::test]
async fn a_broken_stdout_opens_the_gate_for_good() {
    let (client, peer) = start_with_peer().await;
    flood(&peer);
    let mut writable = Box::pin(peer.writable());
    assert!(writable.as_mut().now_or_never().is_none());
    // The client goes away without reading: the writer's next write fails.
    drop(client.from_agent);
    tokio::time::timeout(Duration::from_secs(5), writable).await.expect("nobody waits for a client that is gone");
    flood(&peer);
    assert!(peer.writable().now_or_never().is_some(), "and nobody waits later either");
}

#[tokio::test]
async fn the_agent_asks_the_client_while_the_clients_request_is_pending() {
    let (mut client, _) = start();
    client.send(json!({"jsonrpc": "2.0", "id": "outer", "method": "ask", "params": {"q": 1}})).await;
    let question = client.recv().await;
    assert_eq!(question["method"], "client/question");
    assert_eq!(question["params"], json!({"q": 1}));
    // A stray answer first: ignored, and the real one still lands.
    client.send(json!({"jsonrpc": "2.0", "id": 12345, "result": "stray"})).await;
    client.send(json!({"jsonrpc": "2.0", "id": question["id"], "result": {"a": 2}})).await;
    assert_eq!(client.recv().await, json!({"jsonrpc": "2.0", "id": "outer", "result": {"a": 2}}));
}

#[tokio::test]
async fn a_client_error_answer_reaches_the_waiting_request() {
    let (mut client, _) = start();
    client.send(json!({"jsonrpc": "2.0", "id": 1, "method": "ask", "params": {}})).await;
    let question = client.recv().await;
    client.send(json!({"jsonrpc": "2.0", "id": question["id"], "error": {"code": -32000, "message": "nope"}})).await;
    assert_eq!(client.recv().await, json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32000, "message": "nope"}}));
}

#[tokio::test]
async fn cancelling_a_request_whose_future_asks_the_client_cancels_that_question_too() {
    let (mut client, _) = start();
    client.send(json!({"jsonrpc": "2.0", "id": 7, "method": "ask", "params": {}})).await;
    let question = client.recv().await;
    client.send(json!({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 7}})).await;
    let mut seen = [client.recv().await, client.recv().await];
    seen.sort_by_key(|m| m.get("method").is_some());
    assert_eq!(seen[0]["id"], 7);
    assert_eq!(seen[0]["error"]["code"], -32800);
    assert_eq!(
        seen[1],
        json!({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": question["id"]}})
    );
}

#[tokio::test]
async fn a_cancelled_request_is_answered_once_its_future_let_go() {
    let (mut client, _) = start();
    client.send(json!({"jsonrpc": "2.0", "id": 9, "method": "hold", "params": {}})).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    client.send(json!({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 9}})).await;
    assert_eq!(client.recv().await["method"], "held/dropped", "what the request held is let go first");
    let answer = client.recv().await;
    assert_eq!((answer["id"].clone(), answer["error"]["code"].clone()), (json!(9), json!(-32800)), "{answer}");
}

#[tokio::test]
async fn end_of_input_answers_what_is_pending_and_returns() {
    let (mut client, served) = start();
    client.send(json!({"jsonrpc": "2.0", "id": 1, "method": "ask", "params": {}})).await;
    let _question = client.recv().await;
    client.to_agent.shutdown().await.unwrap();
    let answer = client.recv().await;
    assert_eq!(answer["id"], 1);
    assert!(answer["error"]["data"].as_str().unwrap().contains("disconnected"), "{answer}");
    tokio::time::timeout(Duration::from_secs(2), served).await.unwrap().unwrap();
}

#[tokio::test]
async fn lines_over_the_limit_are_skipped_whole() {
    let input = b"short\nthis line is far too long\nok\nlast".to_vec();
    let mut reader = BufReader::with_capacity(4, &input[..]);
    let mut line = Vec::new();
    let mut seen = Vec::new();
    loop {
        match read_line(&mut reader, &mut line, 10).await.unwrap() {
            Line::Complete => seen.push(String::from_utf8(line.clone()).unwrap()),
            Line::TooLong => seen.push("<too long>".to_owned()),
            Line::Eof => break,
        }
    }
    assert_eq!(seen, ["short", "<too long>", "ok", "last"]);
}

#[tokio::test]
async fn what_waits_for_a_response_is_sent_after_it() {
    let (mut client, _) = start();
    client.send(json!({"jsonrpc": "2.0", "id": 7, "method": "announce"})).await;
    assert_eq!(client.recv().await, json!({"jsonrpc": "2.0", "id": 7, "result": "the answer"}));
    assert_eq!(client.recv().await["method"], "announced/later");
}

#[tokio::test]
async fn a_request_reusing_the_id_of_one_still_running_is_refused_and_not_run() {
    let (mut client, _) = start();
    client.send(json!({"jsonrpc": "2.0", "id": 9, "method": "wait"})).await;
    client.send(json!({"jsonrpc": "2.0", "id": 9, "method": "announce"})).await;
    let refused = client.recv().await;
    assert_eq!(refused["id"], 9);
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap().contains("already used"), "{refused}");
    // Not run: had it run, its notification would follow its answer. The same id as a string is
    // another id.
    client.send(json!({"jsonrpc": "2.0", "id": "9", "method": "announce"})).await;
    assert_eq!(client.recv().await, json!({"jsonrpc": "2.0", "id": "9", "result": "the answer"}));
    assert_eq!(client.recv().await["method"], "announced/later");
}

#[tokio::test]
async fn a_handler_that_panics_is_answered_and_the_peer_goes_on() {
    let (mut client, _) = start();
    for (id, method, what) in [(1, "boom", "a handler bug"), (2, "boom-later", "a bug in a future")] {
        client.send(json!({"jsonrpc": "2.0", "id": id, "method": method})).await;
        let answer = client.recv().await;
        assert_eq!(answer["id"], id);
        assert_eq!(answer["error"]["code"], -32603, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(method) && message.contains(what) && message.contains("bug"), "{message}");
    }
    client.send(json!({"jsonrpc": "2.0", "id": 3, "method": "announce"})).await;
    assert_eq!(client.recv().await["result"], "the answer");
}

#[tokio::test]
async fn ids_come_back_exactly_as_they_were_written() {
    let (mut client, _) = start();
    // Numbers a parse would change come back as written; a string comes back as the same string.
    for id in ["18446744073709551616", "-9223372036854775809", "1.50", "1e3", "\"x\"", "7"] {
        let line = format!(r#"{{"jsonrpc": "2.0", "id": {id}, "method": "announce"}}"#);
        client.to_agent.write_all(format!("{line}\n").as_bytes()).await.unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(5), client.from_agent.next_line())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert!(answer.contains(&format!(r#""id":{id}"#)), "{id}: {answer}");
        assert_eq!(client.recv().await["method"], "announced/later");
    }
}

#[tokio::test]
async fn a_client_with_the_most_requests_running_has_the_next_refused_until_one_ends() {
    let (mut client, _) = start();
    for id in 0..MOST_IN_FLIGHT {
        client.send(json!({"jsonrpc": "2.0", "id": id, "method": "wait"})).await;
    }
    client.send(json!({"jsonrpc": "2.0", "id": "over", "method": "announce"})).await;
    let refused = client.recv().await;
    assert_eq!(refused["id"], "over", "{refused}");
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("1024 requests") && message.contains("wait for their answers"), "{message}");

    client.send(json!({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 0}})).await;
    assert_eq!(client.recv().await["id"], 0, "the cancelled request is answered");
    client.send(json!({"jsonrpc": "2.0", "id": "room", "method": "announce"})).await;
    assert_eq!(client.recv().await, json!({"jsonrpc": "2.0", "id": "room", "result": "the answer"}));
}
