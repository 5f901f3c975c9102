//! `cairn serve` without `--auth`: every request shows the server's own secret, kept in the data
//! directory where other users cannot read it and the sandboxed commands of its own sessions
//! never see it, so neither can use the server (a command connecting back to the loopback port
//! would otherwise read every conversation and open a session rooted anywhere).

use std::os::unix::fs::PermissionsExt as _;

use serde_json::json;

use super::auth::raw;
use crate::support::served::{Server, secret_for, try_connect_with};
use crate::support::streamable::{http_client, http_url};
use crate::support::{Reply, TestEnv};
use crate::tools::tool_results;

#[tokio::test]
async fn without_auth_every_request_shows_the_servers_secret_kept_private_in_the_data_directory() {
    let env = TestEnv::new().await;
    let mut server = Server::start(&env).await;
    let kept = env.home().join("serve-secret");
    assert!(server.stderr().contains(&format!("the secret kept in {}", kept.display())), "{}", server.stderr());
    assert_eq!(std::fs::metadata(&kept).unwrap().permissions().mode() & 0o777, 0o600);
    let secret = secret_for(&server.url).unwrap();

    let (status, answer) = raw(&server, "/acp", &[]).await;
    assert_eq!(status, 401, "{answer}");
    assert!(answer.contains("serve-secret") && answer.contains("www-authenticate: Bearer"), "{answer}");
    let wrong = format!("cairn_{}", "A".repeat(43));
    for refused in [String::new(), wrong.clone(), format!("{secret}x")] {
        assert!(try_connect_with(&server.url, Some(&refused)).await.is_err(), "{refused:?}");
    }
    let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}});
    let url = http_url(&server.url);
    let bare = http_client().post(&url).json(&initialize).send().await.unwrap();
    assert_eq!(bare.status(), 401);
    let wrong_one = http_client().post(&url).bearer_auth(&wrong).json(&initialize).send().await.unwrap();
    assert_eq!(wrong_one.status(), 401);
    assert!(!server.stderr().contains(&secret), "the secret is never logged");

    let mut client = try_connect_with(&server.url, Some(&secret)).await.unwrap();
    assert_eq!(client.initialize().await["protocolVersion"], 1);
    drop(client);

    // A server started beside it shares it; once none runs, the next start makes a new one,
    // so a secret caught while no server ran (by a program listening on the port) is no use.
    let mut beside = Server::start(&env).await;
    assert_eq!(secret_for(&beside.url).as_deref(), Some(secret.as_str()));
    assert!(beside.terminate().await.success());
    assert!(server.terminate().await.success());
    let again = Server::start(&env).await;
    let fresh = secret_for(&again.url).unwrap();
    assert_ne!(fresh, secret);
    assert_eq!(std::fs::read_to_string(&kept).unwrap().trim(), fresh);
    assert!(try_connect_with(&again.url, Some(&secret)).await.is_err(), "the old secret is refused");
    assert!(again.client().await.call("session/list", json!({})).await["sessions"].is_array());
}

/// The break this closes: a command of a served session connected back to the server on its
/// loopback port and read every session (and could open one rooted anywhere, with an MCP
/// server run there). Now it cannot read the secret, and without it the server answers 401.
#[tokio::test]
async fn a_command_of_a_served_session_can_neither_read_the_secret_nor_use_the_server() {
    if std::process::Command::new("python3").arg("-V").output().is_err() {
        println!("skipped: no python3 to connect with");
        return;
    }
    let env = TestEnv::new().await;
    let server = Server::start(&env).await;
    let kept = env.home().join("serve-secret");
    let script = format!(
        r#"import urllib.request, urllib.error
try:
    print("secret:", open("{kept}").read().strip() or "empty")
except OSError as e:
    print("secret: unreadable", e.strerror)
body = b'{{"jsonrpc":"2.0","id":0,"method":"session/list","params":{{}}}}'
request = urllib.request.Request("{url}", data=body, headers={{"Content-Type": "application/json"}})
try:
    print("server:", urllib.request.urlopen(request, timeout=10).status)
except urllib.error.HTTPError as e:
    print("server:", e.code)
except OSError as e:
    print("server: unreachable", e)
"#,
        kept = kept.display(),
        url = http_url(&server.url),
    );
    std::fs::write(env.workspace().join("reach.py"), script).unwrap();
    env.mock.push(Reply::tool_calls(&[("c1", "bash", json!({"command": "python3 reach.py 2>&1"}))]));
    env.mock.push(Reply::text(&["done"]));
    let mut client = server.client().await;
    let session = client.new_session(&env.cwd()).await;
    client.call("session/set_mode", json!({"sessionId": session, "modeId": "bypass"})).await;
    let id = client.prompt(&session, "reach the server").await;
    let (answer, _) = client.response(id).await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");

    let output = tool_results(&env, 1)[0]["content"].as_str().unwrap().to_owned();
    let secret = secret_for(&server.url).unwrap();
    assert!(!output.contains(&secret), "{output}");
    assert!(output.contains("secret: unreadable") || output.contains("secret: empty"), "{output}");
    assert!(output.contains("server: 401"), "{output}");
}

/// The bridge shows the secret only where a running server of its data directory said it
/// listens: a program listening on another loopback port (or the port of a server that is
/// restarting) catches nothing, while a server runs whose secret it would be.
#[tokio::test]
async fn the_bridge_shows_the_secret_only_where_a_running_server_listens() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let env = TestEnv::new().await;
    let server = Server::start(&env).await;
    let secret = secret_for(&server.url).unwrap();
    let catcher = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}/acp", catcher.local_addr().unwrap());
    let caught = tokio::spawn(async move {
        let (mut stream, _) = catcher.accept().await.unwrap();
        let mut request = vec![0u8; 8192];
        let read = stream.read(&mut request).await.unwrap();
        let _ = stream.write_all(b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\n\r\n").await;
        String::from_utf8_lossy(&request[..read]).into_owned()
    });
    let mut bridge = env.command();
    bridge.args(["acp", "--server", &url]).stdin(std::process::Stdio::null()).kill_on_drop(true);
    let _ = tokio::time::timeout(std::time::Duration::from_secs(30), bridge.output()).await;
    let request = tokio::time::timeout(std::time::Duration::from_secs(10), caught).await.unwrap().unwrap();
    assert!(request.contains("GET /acp"), "{request}");
    assert!(!request.contains(&secret) && !request.to_ascii_lowercase().contains("authorization"), "{request}");

    // Where the server does listen, the bridge shows it and is let in.
    let mut through = env.command();
    through.args(["acp", "--server", &server.url]).stdin(std::process::Stdio::null());
    let output = tokio::time::timeout(std::time::Duration::from_secs(30), through.output()).await.unwrap().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success() && !stderr.contains("401") && !stderr.contains("serving here"), "{stderr}");
}

/// With a runtime directory, the secret is kept there, which the commands of every cairn find
/// covered: a cairn given another data directory (`CAIRN_HOME`) hides only its own, and its
/// commands read a secret kept in the server's.
#[tokio::test]
async fn a_command_of_a_cairn_with_another_data_directory_cannot_read_the_secret_either() {
    use std::os::unix::fs::DirBuilderExt as _;
    let mut env = TestEnv::new().await;
    let run = env.dir.path().join("run");
    std::fs::DirBuilder::new().mode(0o700).create(&run).unwrap();
    env.set_env("XDG_RUNTIME_DIR", run.to_str().unwrap());
    let server = Server::start(&env).await;
    let secret = secret_for(&server.url).unwrap();
    let said = server.stderr();
    let kept = said.split("the secret kept in ").nth(1).unwrap().split(" as `").next().unwrap().to_owned();
    assert!(kept.starts_with(run.to_str().unwrap()), "{said}");

    env.set_env("CAIRN_HOME", env.dir.path().join("another-home").to_str().unwrap());
    env.mock.push(Reply::tool_calls(&[("c1", "bash", json!({"command": format!("cat {kept} 2>&1; true")}))]));
    env.mock.push(Reply::text(&["done"]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    crate::tools::set_mode(&mut agent, &session, "bypass").await;
    let before = env.mock.requests().len();
    let (response, _) = crate::tools::turn(&mut agent, &session, "read it").await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    let output = tool_results(&env, before + 1)[0]["content"].as_str().unwrap().to_owned();
    assert!(!output.contains(&secret) && output.contains("No such file"), "{output}");
}
