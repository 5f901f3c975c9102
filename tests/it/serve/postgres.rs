//! `cairn serve` keeping sessions in PostgreSQL (`--store`, `[store] url`): a database that is
//! not there, a URL that cannot be read, or TLS that cannot be had as `sslmode` asks, ends the
//! server at once with an error that names the database, never its password, and the fix;
//! `cairn doctor` checks the database without changing it. The database is the private server
//! the test process starts (`fixture`; `tls_database` on one with `ssl=on`).

#[path = "../../../src/store/pg/fixture.rs"]
#[allow(dead_code)]
pub(crate) mod fixture;

use std::process::Stdio;

use crate::support::TestEnv;

async fn doctor(env: &TestEnv) -> (Option<i32>, String) {
    let mut command = env.command();
    command.arg("doctor").stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let output = command.spawn().unwrap().wait_with_output().await.unwrap();
    (output.status.code(), String::from_utf8(output.stdout).unwrap())
}

#[tokio::test]
async fn doctor_checks_the_shared_store_and_leaves_it_as_it_was() {
    let env = TestEnv::new().await;
    let url = fixture::database().await;
    env.write_config(&format!("[store]\nurl = \"{url}\"\n"));
    let (status, stdout) = doctor(&env).await;
    let shown = url.strip_prefix("postgres://").unwrap();
    assert!(stdout.contains(&format!("ok    shared store: PostgreSQL at {shown} (0 sessions")), "{stdout}");
    assert!(stdout.contains("ok    shared schema: version 0 (the next `cairn serve` to start upgrades it"), "{stdout}");
    assert!(stdout.contains("ok    leases: 0 turns running"), "{stdout}");
    assert_eq!(status, Some(0), "{stdout}");
    let (_, again) = doctor(&env).await;
    assert!(again.contains("shared schema: version 0"), "the check migrated nothing: {again}");

    env.write_config("[store]\nurl = \"postgres://cairn:hunter2-secret@127.0.0.1:1/gone\"\n");
    let (status, stdout) = doctor(&env).await;
    assert_eq!(status, Some(1), "{stdout}");
    assert!(stdout.contains("fail  shared store: cannot connect to PostgreSQL at cairn@127.0.0.1:1/gone"), "{stdout}");
    assert!(!stdout.contains("hunter2"), "{stdout}");
}

#[tokio::test]
async fn a_database_that_does_not_answer_ends_the_server_naming_it_without_its_password() {
    let env = TestEnv::new().await;
    // Nothing listens on port 1.
    let url = "postgres://cairn:hunter2-secret@127.0.0.1:1/sessions";
    let output = env.command().args(["serve", "--listen", "127.0.0.1:0", "--store", url]).output().await.unwrap();
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("cairn@127.0.0.1:1/sessions") && stderr.contains("cannot connect"), "{stderr}");
    assert!(!stderr.contains("hunter2"), "the password was shown: {stderr}");
    assert!(output.stdout.is_empty(), "stdout carries only the protocol");
}

#[tokio::test]
async fn a_store_url_that_cannot_be_read_is_refused_naming_the_key_without_its_password() {
    let env = TestEnv::new().await;
    env.write_config("[store]\nurl = \"postgres://cairn:hunter2-secret@db:notaport/sessions\"\n");
    let output = env.command().args(["serve", "--listen", "127.0.0.1:0"]).output().await.unwrap();
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("[store] url") && stderr.contains("postgres://user:password@host"), "{stderr}");
    assert!(!stderr.contains("hunter2"), "the password was shown: {stderr}");

    // The flag is checked the same way.
    let env = TestEnv::new().await;
    let output = env
        .command()
        .args(["serve", "--listen", "127.0.0.1:0", "--store", "postgres://cairn:hunter2-secret@db:notaport/x"])
        .output()
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("PostgreSQL URL is malformed"), "{stderr}");
    assert!(!stderr.contains("hunter2"), "the password was shown: {stderr}");
}

/// `cairn serve --store URL`'s exit code and stderr; it is expected to end at start.
async fn serve_refused(url: &str) -> (Option<i32>, String) {
    let env = TestEnv::new().await;
    let output = env.command().args(["serve", "--listen", "127.0.0.1:0", "--store", url]).output().await.unwrap();
    assert!(output.stdout.is_empty(), "stdout carries only the protocol");
    (output.status.code(), String::from_utf8_lossy(&output.stderr).into_owned())
}

#[tokio::test]
async fn a_database_whose_certificate_no_trusted_authority_signed_ends_the_server_naming_it_and_the_fix() {
    let url = fixture::tls_database().await.replacen("postgres@", "postgres:hunter2-secret@", 1);
    let other = fixture::tls_file("other-ca.pem");
    let (status, stderr) = serve_refused(&format!("{url}?sslmode=verify-full&sslrootcert={}", other.display())).await;
    assert_eq!(status, Some(1), "{stderr}");
    assert!(stderr.contains("postgres@127.0.0.1:") && stderr.contains("certificate was refused"), "{stderr}");
    assert!(stderr.contains("give sslrootcert the PEM file"), "the fix: {stderr}");
    assert!(!stderr.contains("hunter2"), "the password was shown: {stderr}");
}

#[tokio::test]
async fn sslmode_require_against_a_database_without_tls_ends_the_server_saying_how_to_turn_it_on() {
    let url = fixture::database().await;
    let (status, stderr) = serve_refused(&format!("{url}?sslmode=require")).await;
    assert_eq!(status, Some(1), "{stderr}");
    assert!(stderr.contains("postgres@127.0.0.1:") && stderr.contains("does not accept TLS"), "{stderr}");
    assert!(stderr.contains("turn ssl on"), "the fix: {stderr}");
}

#[tokio::test]
async fn an_sslrootcert_that_cannot_be_read_ends_the_server_before_it_connects() {
    let url =
        "postgres://cairn:hunter2-secret@127.0.0.1:1/sessions?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem";
    let (status, stderr) = serve_refused(url).await;
    assert_eq!(status, Some(1), "{stderr}");
    assert!(stderr.contains("cairn@127.0.0.1:1/sessions") && stderr.contains("/nonexistent/ca.pem"), "{stderr}");
    assert!(stderr.contains("readable PEM file") && !stderr.contains("cannot connect"), "{stderr}");
    assert!(!stderr.contains("hunter2"), "the password was shown: {stderr}");
}

#[tokio::test]
async fn an_event_log_kept_less_than_a_minute_is_refused_naming_the_key() {
    let env = TestEnv::new().await;
    env.write_config("[store]\nevents_kept_secs = 5\n");
    let output = env.command().args(["serve", "--listen", "127.0.0.1:0"]).output().await.unwrap();
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("[store] events_kept_secs") && stderr.contains("from 60"), "{stderr}");
}
