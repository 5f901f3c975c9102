//! `cairn serve` keeping sessions in PostgreSQL (`--store`, `[store] url`): a database that is
//! not there, or a URL that cannot be read, ends the server at once with an error that names
//! the database, never its password; `cairn doctor` checks the database without changing it.
//! The database is the private server the test process starts (`fixture`).

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
