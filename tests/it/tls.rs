//! HTTPS to the model: certificates are checked against the roots the platform trusts (here
//! `SSL_CERT_FILE`, as on a system whose store holds a company's CA), read at the first handshake
//! rather than at start-up, and a server no trusted root vouches for is refused with a message
//! that says so.
//!
//! `fixtures/tls` holds a test CA, a certificate it signed for 127.0.0.1 (with its key, which
//! protects nothing) and a second CA that signed nothing here; they expire in 2126.

use std::path::PathBuf;
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::support::{Reply, TestEnv};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/it/fixtures/tls").join(name)
}

/// Serves TLS on 127.0.0.1 with the fixtures' server certificate and passes each connection's
/// plain bytes on to `upstream` (the mock model server); returns its `https://` base URL.
async fn tls_front(upstream: &str) -> String {
    let certs = CertificateDer::pem_file_iter(fixture("server.pem")).unwrap().collect::<Result<Vec<_>, _>>().unwrap();
    let key = PrivateKeyDer::from_pem_file(fixture("server.key")).unwrap();
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let mut config = tokio_rustls::rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let upstream = upstream.trim_start_matches("http://").split('/').next().unwrap().to_owned();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let (acceptor, upstream) = (acceptor.clone(), upstream.clone());
            tokio::spawn(async move {
                // A handshake the client refuses ends here; that is what one test wants.
                let Ok(mut tls) = acceptor.accept(socket).await else { return };
                let Ok(mut plain) = TcpStream::connect(&upstream).await else { return };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
            });
        }
    });
    format!("https://{address}/v1")
}

#[tokio::test]
async fn a_model_server_whose_certificate_a_trusted_root_signed_is_reached_over_https() {
    let mut env = TestEnv::new().await;
    let url = tls_front(&env.mock.url).await;
    env.set_env("OPENAI_BASE_URL", &url);
    env.set_env("SSL_CERT_FILE", fixture("ca.pem").to_str().unwrap());
    env.mock.push(Reply::text(&["Over ", "TLS."]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let id = agent.prompt(&session, "hello").await;
    let (response, notifications) = agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}\n{}", agent.stderr());
    let text: String = notifications
        .iter()
        .filter(|n| n["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
        .map(|n| n["params"]["update"]["content"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, "Over TLS.");
}

#[tokio::test]
async fn a_model_server_no_trusted_root_vouches_for_is_refused_and_the_error_says_so() {
    let mut env = TestEnv::new().await;
    let url = tls_front(&env.mock.url).await;
    env.set_env("OPENAI_BASE_URL", &url);
    env.set_env("SSL_CERT_FILE", fixture("other-ca.pem").to_str().unwrap());
    env.mock.push(Reply::text(&["never sent"]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let id = agent.prompt(&session, "hello").await;
    let (response, _) = agent.response(id).await;
    let message = response["error"].to_string();
    assert!(message.contains(&url) && message.contains("not trust") && message.contains("SSL_CERT_FILE"), "{response}");
    assert!(env.mock.requests().is_empty(), "nothing reached the model");
}
