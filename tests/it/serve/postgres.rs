//! `cairn serve` keeping sessions in PostgreSQL (`--store`, `[store] url`): a database that is
//! not there, or a URL that cannot be read, ends the server at once with an error that names
//! the database, never its password.

use crate::support::TestEnv;

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
