//! What cairn runs and reads by itself for a session, in a project a command may have prepared:
//! the system prompt's `git status` and its instruction files. Both ran or read outside the
//! sandbox: a `git` planted on `PATH` in the project (a virtualenv's `bin` the user activated)
//! and a clean filter in a repository a command made above the workspace ran as the user, and
//! `AGENTS.md` made a link to a key sent the key to the model.

use std::path::Path;

use super::{outside, sh};
use crate::support::{Reply, TestEnv};
use crate::tools::turn;

/// One turn of a new session in `cwd`; the system prompt the model was sent.
async fn prompt_in(env: &TestEnv, cwd: &Path) -> String {
    env.mock.push(Reply::text(&["hello"]));
    let mut agent = env.ready().await;
    let session = agent.new_session(cwd.to_str().unwrap()).await;
    let (response, _) = turn(&mut agent, &session, "hi").await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    agent.close_stdin();
    agent.wait_exit().await;
    env.mock.requests().last().map(ToString::to_string).unwrap_or_default()
}

#[tokio::test]
async fn a_filter_of_a_repository_a_command_made_above_the_workspace_runs_in_the_sandbox() {
    let env = TestEnv::new().await;
    let marker = outside("own-filter");
    let ran = marker.path().join("ran");
    // A scratch project with no repository of its own, in a directory commands may write: a
    // command made one above it, with a filter, and left a tracked file's times changed.
    let (scratch, project) = (env.workspace().join("scratch"), env.workspace().join("scratch/project"));
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("main.py"), "print(1)\n").unwrap();
    let filter = format!("echo ran >> {}; cat", ran.display());
    sh(
        &scratch,
        &format!(
            "git init -q . && git config filter.x.clean '{filter}' && echo 'project/main.py filter=x' > .gitattributes \
             && git -c filter.x.clean=cat add . && git -c filter.x.clean=cat -c user.name=u -c user.email=u@x commit -qm i \
             && touch -d 2020-01-01 project/main.py"
        ),
    );
    assert!(!ran.exists(), "the set-up ran the filter");
    let prompt = prompt_in(&env, &project).await;
    assert!(prompt.contains("changed file"), "git's status reached the prompt: {prompt}");
    assert!(!ran.exists(), "the filter ran outside the sandbox: it wrote {}", ran.display());
}

#[tokio::test]
async fn a_git_planted_on_path_in_the_project_runs_in_the_sandbox() {
    let mut env = TestEnv::new().await;
    let marker = outside("own-git");
    let ran = marker.path().join("ran");
    let ws = env.workspace();
    sh(&ws, "git init -q .");
    // The user started cairn with the project's virtualenv active; a command wrote its `git`.
    let bin = ws.join(".venv/bin");
    std::fs::create_dir_all(&bin).unwrap();
    let real = super::sh_out(Path::new("/"), "command -v git");
    let planted = format!("#!/bin/sh\necho ran >> {}\nexec {} \"$@\"\n", ran.display(), real.trim());
    std::fs::write(bin.join("git"), planted).unwrap();
    std::fs::set_permissions(bin.join("git"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    env.set_env("PATH", &path);
    let prompt = prompt_in(&env, &ws).await;
    assert!(prompt.contains("changed file"), "git's status reached the prompt: {prompt}");
    assert!(!ran.exists(), "the planted git ran outside the sandbox: it wrote {}", ran.display());
}

#[tokio::test]
async fn instruction_files_a_command_linked_to_secrets_are_not_sent_to_the_model() {
    let env = TestEnv::new().await;
    let ws = env.workspace();
    sh(&ws, "git init -q .");
    let keys = outside("own-keys");
    std::fs::write(keys.path().join("id_ed25519"), "-----BEGIN OPENSSH PRIVATE KEY-----\n").unwrap();
    std::fs::write(ws.join(".env"), "API_TOKEN=hunter2\n").unwrap();
    std::os::unix::fs::symlink(keys.path().join("id_ed25519"), ws.join("AGENTS.md")).unwrap();
    std::os::unix::fs::symlink(".env", ws.join("CLAUDE.md")).unwrap();
    let prompt = prompt_in(&env, &ws).await;
    assert!(!prompt.contains("PRIVATE KEY") && !prompt.contains("hunter2"), "{prompt}");
}
