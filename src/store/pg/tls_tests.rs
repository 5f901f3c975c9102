//! Specs of `sslmode` and `sslrootcert` against the fixture's two servers: one with `ssl=on` and
//! the test certificate (signed by `ca.pem` for 127.0.0.1), one without TLS.

use super::fixture::{self, tls_file};
use super::{PgError, PgTarget, migrate};

/// The fixture's URL with `query` added (it has none of its own).
fn with(url: &str, query: &str) -> String {
    format!("{url}?{query}")
}

fn root(name: &str) -> String {
    tls_file(name).display().to_string()
}

/// Whether the connection `target` opens is in TLS, as the server sees it.
async fn encrypted(target: &PgTarget) -> bool {
    let client = target.connect().await.unwrap_or_else(|err| panic!("{err}"));
    client.query_one("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()", &[]).await.unwrap().get(0)
}

#[tokio::test]
async fn verify_full_with_the_authority_that_signed_the_servers_certificate_connects_in_tls_and_works() {
    let url = with(&fixture::tls_database().await, &format!("sslmode=verify-full&sslrootcert={}", root("ca.pem")));
    let target = PgTarget::parse(&url).unwrap();
    assert!(encrypted(&target).await);
    let mut client = target.connect().await.unwrap();
    migrate::to_latest(&mut client, &target).await.unwrap();
    let sessions: i64 = client.query_one("SELECT count(*) FROM sessions", &[]).await.unwrap().get(0);
    assert_eq!(sessions, 0);
}

#[tokio::test]
async fn verify_full_with_another_authority_is_refused_naming_the_database_and_the_fix_but_not_the_password() {
    let url = fixture::tls_database().await.replacen("postgres@", "postgres:s3cret@", 1);
    let url = with(&url, &format!("sslmode=verify-full&sslrootcert={}", root("other-ca.pem")));
    let target = PgTarget::parse(&url).unwrap();
    let err = target.connect().await.err().unwrap();
    assert!(matches!(err, PgError::Tls { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("127.0.0.1") && text.contains("certificate was refused"), "{text}");
    assert!(text.contains("sslrootcert") && text.contains("verify-full"), "the fix: {text}");
    assert!(!text.contains("s3cret"), "{text}");
}

#[tokio::test]
async fn verify_ca_checks_the_chain_as_verify_full_does() {
    let url = fixture::tls_database().await;
    let good = PgTarget::parse(&with(&url, &format!("sslmode=verify-ca&sslrootcert={}", root("ca.pem")))).unwrap();
    assert!(encrypted(&good).await);
    let bad = PgTarget::parse(&with(&url, &format!("sslmode=verify-ca&sslrootcert={}", root("other-ca.pem")))).unwrap();
    assert!(matches!(bad.connect().await, Err(PgError::Tls { .. })));
}

#[tokio::test]
async fn require_against_a_server_without_tls_is_refused_saying_how_to_turn_it_on() {
    let target = PgTarget::parse(&with(&fixture::database().await, "sslmode=require")).unwrap();
    let err = target.connect().await.err().unwrap();
    assert!(matches!(err, PgError::Tls { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("127.0.0.1") && text.contains("does not accept TLS"), "{text}");
    assert!(text.contains("ssl on") && text.contains("sslmode=require"), "{text}");
}

#[tokio::test]
async fn require_encrypts_without_checking_the_certificate_as_libpq_does() {
    let target = PgTarget::parse(&with(&fixture::tls_database().await, "sslmode=require")).unwrap();
    assert!(encrypted(&target).await);
}

#[tokio::test]
async fn prefer_the_default_takes_tls_when_offered_and_falls_back_to_plain_when_not() {
    let offered = PgTarget::parse(&fixture::tls_database().await).unwrap();
    assert!(encrypted(&offered).await, "TLS when the server offers it");
    let plain = PgTarget::parse(&with(&fixture::database().await, "sslmode=prefer")).unwrap();
    assert!(!encrypted(&plain).await, "plain when it does not");
}

#[tokio::test]
async fn disable_never_negotiates_tls_even_with_a_server_that_offers_it() {
    let target = PgTarget::parse(&with(&fixture::tls_database().await, "sslmode=disable")).unwrap();
    assert!(!encrypted(&target).await);
}

#[test]
fn an_unreadable_sslrootcert_is_refused_when_the_url_is_read_naming_the_file_and_the_fix() {
    let missing = tls_file("missing.pem");
    let url =
        format!("postgres://cairn:s3cret@db.internal/cairn?sslmode=verify-full&sslrootcert={}", missing.display());
    let err = PgTarget::parse(&url).err().unwrap();
    let text = err.to_string();
    assert!(matches!(err, PgError::Tls { .. }), "{err:?}");
    assert!(text.contains("db.internal") && text.contains("missing.pem") && text.contains("PEM file"), "{text}");
    assert!(!text.contains("s3cret"), "{text}");
    let not_pem = format!("postgres://u@db/c?sslmode=verify-ca&sslrootcert={}", tls_file("../lsp_stub.py").display());
    let text = PgTarget::parse(&not_pem).err().unwrap().to_string();
    assert!(text.contains("no usable certificate"), "{text}");
}

#[test]
fn an_unknown_sslmode_is_a_malformed_url() {
    let err = PgTarget::parse("postgres://u@db/c?sslmode=verify").err().unwrap();
    assert!(matches!(err, PgError::BadUrl(_)), "{err:?}");
}
