//! Background jobs as a spec: `bash` with `background: true` answers at once with a job id,
//! the job outlives its turn, `job_output`, `job_input` and `job_kill` reach it in later turns,
//! `/jobs` and `/status` show it; and the attacks: an id of another session, a flood, a job
//! that closes its stdout, a `setsid` daemon (gone at the session's close, at cairn's exit, at
//! cairn's `kill -9`, checked by pid), a finished job's output, the cap, and a job in an
//! editor's terminal.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Agent, Editor, Reply, TestEnv, alive, running_with, status_kib, text_of, updates};
use crate::tools::{call, set_mode, tool_results, turn};

/// Runs one turn in which the model makes `calls` one after another, then ends; what each call
/// returned to the model, in order, and the turn's updates.
async fn calls(agent: &mut Agent, env: &TestEnv, session: &str, calls: &[(&str, Value)]) -> (Vec<String>, Vec<Value>) {
    let before = env.mock.requests().len();
    for (n, (name, args)) in calls.iter().enumerate() {
        env.mock.push(Reply::tool_calls(&[(&format!("c{before}-{n}"), name, args.clone())]));
    }
    env.mock.push(Reply::text(&["ok"]));
    let (response, updates) = turn(agent, session, "go").await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let results = (0..calls.len())
        .map(|n| {
            let results = tool_results(env, before + n + 1);
            results.last().unwrap()["content"].as_str().unwrap().to_owned()
        })
        .collect();
    (results, updates)
}

/// A bypass session of a new agent whose client is `editor`.
async fn session(env: &TestEnv, editor: Editor) -> (Agent, String) {
    let mut agent = env.ready_with(editor).await;
    let session = agent.new_session(&env.cwd()).await;
    set_mode(&mut agent, &session, "bypass").await;
    (agent, session)
}

fn background(command: &str) -> (&'static str, Value) {
    ("bash", json!({"command": command, "background": true}))
}

/// The pids (as seen from here) of the sleeps with these arguments, once all of them run.
async fn sleeps(args: &[&str]) -> Vec<String> {
    let started = Instant::now();
    loop {
        let running: Vec<String> = args.iter().flat_map(|arg| running_with(&["sleep", arg])).collect();
        if running.len() == args.len() {
            return running;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "the job's processes did not start: {running:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The pids among `pids` still alive after up to `within`.
async fn left_after(pids: &[String], within: Duration) -> Vec<String> {
    let since = Instant::now();
    while pids.iter().any(|pid| alive(pid)) && since.elapsed() < within {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    pids.iter().filter(|pid| alive(pid)).cloned().collect()
}

/// A job with a background child, a `setsid` daemon that double-forks away, and a foreground
/// program, whose sleeps are told apart by `tag`.
fn daemonizing(tag: u32) -> (String, [String; 3]) {
    let args = [format!("{tag}.1"), format!("{tag}.2"), format!("{tag}.3")];
    let command = format!("sleep {} & (setsid sleep {} &) ; exec sleep {}", args[0], args[1], args[2]);
    (command, args)
}

#[tokio::test]
async fn a_job_answers_at_once_outlives_its_turn_and_is_read_listed_and_killed_later() {
    let env = TestEnv::new().await;
    let (mut agent, session) = session(&env, Editor::default()).await;
    let (told, shown) =
        calls(&mut agent, &env, &session, &[background("echo ready; sleep 0.5; echo later; sleep 300")]).await;
    assert!(told[0].starts_with("Started job 1;"), "{}", told[0]);
    let card = call(&shown, "c0-0");
    assert!(
        card.iter().any(|u| u["title"] == "Run `echo ready; sleep 0.5; echo later; sleep 300` in the background"),
        "{card:?}"
    );

    let read = json!({"job": 1, "wait_secs": 10, "pattern": "later"});
    let (told, _) = calls(&mut agent, &env, &session, &[("job_output", read)]).await;
    assert_eq!(told[0], "ready\nlater\n[job 1: running]", "the job outlived the turn that started it");

    let listed = agent.prompt(&session, "/jobs").await;
    let (_, notifications) = agent.response(listed).await;
    let said = text_of(&updates(&notifications, &session), "agent_message_chunk");
    assert!(
        said.contains("1. running, pid ") && said.contains("`echo ready; sleep 0.5; echo later; sleep 300`"),
        "{said}"
    );
    let status = agent.prompt(&session, "/status").await;
    let (_, notifications) = agent.response(status).await;
    let said = text_of(&updates(&notifications, &session), "agent_message_chunk");
    assert!(said.contains("Jobs: 1 running of at most 8, 0 ended"), "{said}");

    let (told, _) = calls(&mut agent, &env, &session, &[("job_kill", json!({"job": 1}))]).await;
    assert_eq!(told[0], "[no new output]\n[job 1: killed]");
}

#[tokio::test]
async fn a_finished_jobs_output_and_exit_status_are_read_after_its_end() {
    let env = TestEnv::new().await;
    let (mut agent, session) = session(&env, Editor::default()).await;
    calls(&mut agent, &env, &session, &[background("echo last words; exit 4")]).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (told, _) = calls(&mut agent, &env, &session, &[("job_output", json!({"job": 1}))]).await;
    assert_eq!(told[0], "last words\n[job 1: exited with status 4]");
    let (told, _) = calls(&mut agent, &env, &session, &[("job_input", json!({"job": 1, "text": "more\n"}))]).await;
    assert!(told[0].contains("job 1's input is closed (it exited with status 4)"), "{}", told[0]);
}

#[tokio::test]
async fn input_reaches_the_job_and_asks_each_time_whatever_it_says() {
    let env = TestEnv::new().await;
    let editor = Editor::default();
    // Ask mode: the start and each input ask, the harmless-looking ones too.
    editor.answer(&["allow_once", "allow_once", "reject_once", "reject_once"]);
    let mut agent = env.ready_with(editor).await;
    let session = agent.new_session(&env.cwd()).await;
    let script = "while read -r line; do echo \"got $line\"; done";
    let (told, _) = calls(
        &mut agent,
        &env,
        &session,
        &[
            background(script),
            ("job_input", json!({"job": 1, "text": "echo hello\n"})),
            ("job_input", json!({"job": 1, "text": "rm -rf ~\n"})),
            // An Enter is input too: to a `[Y/n]` prompt it is a yes.
            ("job_input", json!({"job": 1, "text": "\n"})),
            ("job_output", json!({"job": 1, "wait_secs": 10, "pattern": "got"})),
        ],
    )
    .await;
    assert_eq!(told[1], "Wrote 11 bytes to job 1.");
    assert!(told[2].starts_with("The user denied this tool call."), "{}", told[2]);
    assert!(told[3].starts_with("The user denied this tool call."), "{}", told[3]);
    assert_eq!(told[4], "got echo hello\n[job 1: running]");
    let asked = agent.editor.requests("session/request_permission");
    let titles: Vec<&str> = asked.iter().map(|r| r["params"]["toolCall"]["title"].as_str().unwrap_or("")).collect();
    assert_eq!(titles.len(), 4, "{titles:?}");
    assert!(titles[0].ends_with("in the background") && titles[2] == "Write `rm -rf ~` to job 1", "{titles:?}");
}

#[tokio::test]
async fn a_job_id_of_another_session_reaches_nothing() {
    let env = TestEnv::new().await;
    let (mut agent, theirs) = session(&env, Editor::default()).await;
    calls(&mut agent, &env, &theirs, &[background("echo their secret; exec sleep 73.1")]).await;
    let pid = sleeps(&["73.1"]).await;
    let mine = agent.new_session(&env.cwd()).await;
    set_mode(&mut agent, &mine, "bypass").await;
    let (told, _) = calls(
        &mut agent,
        &env,
        &mine,
        &[
            ("job_output", json!({"job": 1})),
            ("job_input", json!({"job": 1, "text": "x\n"})),
            ("job_kill", json!({"job": 1})),
        ],
    )
    .await;
    for told in &told {
        assert!(told.starts_with("there is no job 1 in this session (it has none)"), "{told}");
    }
    assert!(alive(&pid[0]), "the other session's job still runs");
}

#[tokio::test]
async fn a_flooding_job_keeps_cairns_memory_bounded_and_says_what_it_dropped() {
    let env = TestEnv::new().await;
    let (mut agent, session) = session(&env, Editor::default()).await;
    let pid = agent.child.id().unwrap();
    let before = status_kib(pid, "VmRSS:").unwrap();
    calls(&mut agent, &env, &session, &[background("yes 'a flood of output'")]).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = status_kib(pid, "VmRSS:").unwrap();
    let (told, _) = calls(&mut agent, &env, &session, &[("job_output", json!({"job": 1}))]).await;
    assert!(told[0].starts_with('[') && told[0].contains("were dropped before this read"), "{}", &told[0][..300]);
    assert!(told[0].len() < 64 * 1024 + 1024, "a read returns at most [jobs] output_bytes: {}", told[0].len());
    assert!(after < before + 40 * 1024, "cairn's memory grew from {before} KiB to {after} KiB");
    calls(&mut agent, &env, &session, &[("job_kill", json!({"job": 1}))]).await;
}

#[tokio::test]
async fn a_job_that_closes_its_stdout_still_runs_and_is_still_killed() {
    let env = TestEnv::new().await;
    let (mut agent, session) = session(&env, Editor::default()).await;
    calls(&mut agent, &env, &session, &[background("echo bye; exec >&- 2>&-; exec sleep 74.1")]).await;
    let pid = sleeps(&["74.1"]).await;
    let read = json!({"job": 1, "wait_secs": 1, "pattern": "never"});
    let (told, _) = calls(&mut agent, &env, &session, &[("job_output", read)]).await;
    assert_eq!(told[0], "bye\n[job 1: running]");
    let (told, _) = calls(&mut agent, &env, &session, &[("job_kill", json!({"job": 1}))]).await;
    assert!(told[0].ends_with("[job 1: killed]"), "{}", told[0]);
    assert!(left_after(&pid, Duration::from_millis(1)).await.is_empty(), "gone when job_kill answers");
}

#[tokio::test]
async fn closing_the_session_kills_its_jobs_and_their_daemons_before_it_answers() {
    let env = TestEnv::new().await;
    let (mut agent, session) = session(&env, Editor::default()).await;
    let (command, args) = daemonizing(75);
    calls(&mut agent, &env, &session, &[background(&command), background("exec sleep 75.4")]).await;
    let pids = sleeps(&[&args[0], &args[1], &args[2], "75.4"]).await;
    agent.call("session/close", json!({"sessionId": session})).await;
    let left = left_after(&pids, Duration::from_millis(1)).await;
    assert!(left.is_empty(), "every process of every job is gone when the close is answered; alive: {left:?}");
}

#[tokio::test]
async fn cairns_exit_kills_every_job_and_their_daemons() {
    let env = TestEnv::new().await;
    let (mut agent, session) = session(&env, Editor::default()).await;
    let (command, args) = daemonizing(76);
    calls(&mut agent, &env, &session, &[background(&command)]).await;
    let pids = sleeps(&[&args[0], &args[1], &args[2]]).await;
    agent.close_stdin();
    agent.wait_exit().await;
    let left = left_after(&pids, Duration::from_secs(2)).await;
    assert!(left.is_empty(), "alive after cairn exited: {left:?}");
}

#[tokio::test]
async fn kill_9_of_cairn_kills_every_job_and_their_daemons() {
    let env = TestEnv::new().await;
    let (mut agent, session) = session(&env, Editor::default()).await;
    let (command, args) = daemonizing(77);
    calls(&mut agent, &env, &session, &[background(&command)]).await;
    let pids = sleeps(&[&args[0], &args[1], &args[2]]).await;
    agent.kill9().await;
    let left = left_after(&pids, Duration::from_secs(3)).await;
    assert!(left.is_empty(), "alive after cairn's kill -9: {left:?}");
}

#[tokio::test]
async fn at_most_jobs_max_run_and_an_ended_one_makes_room() {
    let env = TestEnv::new().await;
    env.write_config("[jobs]\nmax = 2\n");
    let (mut agent, session) = session(&env, Editor::default()).await;
    let (told, _) = calls(
        &mut agent,
        &env,
        &session,
        &[
            background("sleep 300"),
            background("sleep 300"),
            background("sleep 300"),
            ("job_kill", json!({"job": 2})),
            background("sleep 300"),
        ],
    )
    .await;
    assert!(told[2].starts_with("2 jobs of this session are running, the most `[jobs] max` allows"), "{}", told[2]);
    assert!(told[4].starts_with("Started job 3;"), "{}", told[4]);
}

#[tokio::test]
async fn a_job_in_an_editor_terminal_is_shown_there_and_read_and_killed_the_same_way() {
    let env = TestEnv::new().await;
    let (mut agent, session) = session(&env, Editor::with_terminal()).await;
    let (told, updates) = calls(
        &mut agent,
        &env,
        &session,
        &[
            background("echo in the terminal; sleep 300"),
            ("job_output", json!({"job": 1, "wait_secs": 10, "pattern": "terminal"})),
            ("job_input", json!({"job": 1, "text": "x\n"})),
            ("job_kill", json!({"job": 1})),
        ],
    )
    .await;
    let created = agent.editor.requests("terminal/create");
    assert_eq!(created.len(), 1);
    let shown =
        updates.iter().any(|u| u["content"].as_array().is_some_and(|c| c.iter().any(|c| c["type"] == "terminal")));
    assert!(shown, "the job's card shows its terminal");
    assert_eq!(told[1], "in the terminal\n[job 1: running]");
    assert!(told[2].contains("runs in the editor's terminal, which takes no input"), "{}", told[2]);
    assert!(told[3].ends_with("[job 1: killed]"), "{}", told[3]);
    let methods = agent.editor.methods();
    assert!(
        methods.contains(&"terminal/kill".to_owned()) && methods.contains(&"terminal/release".to_owned()),
        "{methods:?}"
    );
}

#[tokio::test]
async fn a_sub_agents_jobs_are_its_own_and_die_when_it_ends() {
    let env = TestEnv::new().await;
    let task = json!({"description": "serve", "prompt": "CHILD-J: start a server"});
    env.mock.push(Reply::tool_calls(&[("t1", "task", task)]));
    env.mock.push(Reply::tool_calls(&[("p1", "job_output", json!({"job": 1}))]));
    env.mock.push(Reply::text(&["done"]));
    env.mock.route(
        "CHILD-J",
        Reply::tool_calls(&[("k1", "bash", json!({"command": "exec sleep 78.1", "background": true}))]),
    );
    env.mock.route(
        "CHILD-J",
        Reply::tool_calls(&[("k2", "job_output", json!({"job": 1, "wait_secs": 1, "pattern": "x"}))]),
    );
    env.mock.route("CHILD-J", Reply::text(&["started"]));
    let (mut agent, session) = session(&env, Editor::default()).await;
    let (response, _) = turn(&mut agent, &session, "PARENT: go").await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    let child = env.mock.requests_with("CHILD-J");
    let child_read = child[2]["messages"].as_array().unwrap().iter().rev().find(|m| m["role"] == "tool").unwrap();
    assert_eq!(child_read["content"], "[no new output]\n[job 1: running]", "the child reads its own job");
    let parent = env.mock.requests_with("PARENT");
    let told = parent[2]["messages"].as_array().unwrap().iter().rev().find(|m| m["role"] == "tool").unwrap();
    let told = told["content"].as_str().unwrap();
    assert!(told.starts_with("there is no job 1 in this session (it has none)"), "{told}");
    assert!(running_with(&["sleep", "78.1"]).is_empty(), "the child's job died when the child ended");
}

#[tokio::test]
async fn kill_9_of_cairn_ends_a_job_in_an_editor_terminal_too() {
    let env = TestEnv::new().await;
    let (mut agent, session) = session(&env, Editor::with_terminal()).await;
    let (command, args) = daemonizing(79);
    calls(&mut agent, &env, &session, &[background(&command)]).await;
    assert_eq!(agent.editor.requests("terminal/create").len(), 1, "the job runs in the editor's terminal");
    let pids = sleeps(&[&args[0], &args[1], &args[2]]).await;
    // The editor keeps its terminal; only cairn is gone. Its supervisor watches cairn's process.
    agent.kill9().await;
    let left = left_after(&pids, Duration::from_secs(3)).await;
    assert!(left.is_empty(), "alive after cairn's kill -9: {left:?}");
}

#[tokio::test]
async fn nothing_is_written_to_a_job_while_planning_or_in_read_only_mode() {
    let env = TestEnv::new().await;
    let (mut agent, session) = session(&env, Editor::default()).await;
    let script = "while read -r line; do echo \"got $line\"; done";
    calls(&mut agent, &env, &session, &[background(script)]).await;
    for mode in ["plan", "read-only"] {
        set_mode(&mut agent, &session, mode).await;
        let (told, _) = calls(
            &mut agent,
            &env,
            &session,
            &[
                ("job_input", json!({"job": 1, "text": "\n"})),
                ("job_input", json!({"job": 1, "text": "y", "eof": true})),
            ],
        )
        .await;
        for result in &told {
            assert!(result.starts_with("Permission denied"), "{mode}: {result}");
        }
    }
    set_mode(&mut agent, &session, "bypass").await;
    let (told, _) = calls(&mut agent, &env, &session, &[("job_output", json!({"job": 1}))]).await;
    assert_eq!(told[0], "[no new output]\n[job 1: running]", "nothing reached the job");
}

/// A job is the model's command, run in the background: the guarded places it makes that did
/// not exist (cargo's configuration, which names a program every `cargo build` of the user's
/// runs, an editor's tasks) are taken away once it ends, as a command's are.
#[tokio::test]
async fn what_a_job_plants_among_the_guarded_places_is_taken_away_when_it_ends() {
    if !crate::support::kernel_keeps_it() {
        return;
    }
    let env = TestEnv::new().await;
    let ws = env.workspace();
    let (mut agent, session) = session(&env, Editor::default()).await;
    let plant = "echo planted > planted.txt; mkdir -p .cargo .vscode; \
                 printf '[build]\\nrustc-wrapper = \"/tmp/evil\"\\n' > .cargo/config.toml; echo '{}' > .vscode/tasks.json";
    let (results, _) = calls(&mut agent, &env, &session, &[background(plant)]).await;
    assert!(results[0].starts_with("Started job 1"), "{}", results[0]);
    let started = Instant::now();
    while (!ws.join("planted.txt").exists() || ws.join(".cargo/config.toml").exists() || ws.join(".vscode").exists())
        && started.elapsed() < Duration::from_secs(20)
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ws.join("planted.txt").exists(), "the job ran");
    assert!(!ws.join(".cargo/config.toml").exists(), "cargo's configuration the job made stayed");
    assert!(!ws.join(".vscode/tasks.json").exists(), "the editor's tasks the job made stayed");
}

/// A job lives across turns, and a program the user rejects while it runs is refused to it
/// too: the job waits, the user answers "Always reject" to an `rm` of the model's, then the
/// job's own `rm` is refused at exec and what it would have removed stays.
#[tokio::test]
async fn a_program_the_user_rejects_while_a_job_runs_is_refused_to_the_job() {
    if !crate::support::kernel_keeps_it() {
        return;
    }
    let env = TestEnv::new().await;
    let ws = env.workspace();
    std::fs::write(ws.join("victim"), "keep me").unwrap();
    std::fs::write(ws.join("decoy"), "keep me too").unwrap();
    let editor = Editor::default();
    editor.answer(&["allow_once", "reject_always"]);
    let mut agent = env.ready_with(editor).await;
    let session = agent.new_session(&env.cwd()).await;
    let job = "while [ ! -e go ]; do sleep 0.05; done; rm victim 2>&1; echo \"rm ended $?\"";
    let (told, _) =
        calls(&mut agent, &env, &session, &[background(job), ("bash", json!({"command": "rm decoy"}))]).await;
    assert!(told[0].starts_with("Started job 1"), "{}", told[0]);
    assert!(told[1].starts_with("The user denied this tool call."), "{}", told[1]);
    std::fs::write(ws.join("go"), "").unwrap();
    let (told, _) =
        calls(&mut agent, &env, &session, &[("job_output", json!({"job": 1, "wait_secs": 20, "pattern": "rm ended"}))])
            .await;
    assert!(told[0].contains("refused to run `rm`"), "{}", told[0]);
    assert!(ws.join("victim").exists(), "the job removed what the rule protects: {}", told[0]);
    assert!(ws.join("decoy").exists());
}

/// A sub-agent's "Always reject" reaches the job its parent started, and stays there when the
/// parent's turn ends: the parent's own rules never held it, and the rules file is added to,
/// never rewritten from them.
#[tokio::test]
async fn a_program_rejected_in_a_sub_agent_is_refused_to_the_parents_job_after_the_turn() {
    if !crate::support::kernel_keeps_it() {
        return;
    }
    let env = TestEnv::new().await;
    let ws = env.workspace();
    std::fs::write(ws.join("victim"), "keep me").unwrap();
    std::fs::write(ws.join("decoy"), "keep me too").unwrap();
    let job = "while [ ! -e go ]; do sleep 0.05; done; rm victim 2>&1; echo \"rm ended $?\"";
    let task = json!({"description": "tidy", "prompt": "CHILD-RM: tidy up"});
    env.mock
        .push(Reply::tool_calls(&[("j1", "bash", background(job).1)]))
        .push(Reply::tool_calls(&[("t1", "task", task)]))
        .push(Reply::text(&["ok"]));
    env.mock.route("CHILD-RM", Reply::tool_calls(&[("k1", "bash", json!({"command": "rm decoy"}))]));
    env.mock.route("CHILD-RM", Reply::text(&["refused"]));
    let editor = Editor::default();
    editor.answer(&["allow_once", "reject_always"]);
    let mut agent = env.ready_with(editor).await;
    let session = agent.new_session(&env.cwd()).await;
    let (response, _) = turn(&mut agent, &session, "go").await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert_eq!(agent.editor.requests("session/request_permission").len(), 2, "the job and the child's rm asked");
    assert!(ws.join("decoy").exists());

    std::fs::write(ws.join("go"), "").unwrap();
    let (told, _) =
        calls(&mut agent, &env, &session, &[("job_output", json!({"job": 1, "wait_secs": 20, "pattern": "rm ended"}))])
            .await;
    assert!(told[0].contains("refused to run `rm`"), "{}", told[0]);
    assert!(ws.join("victim").exists(), "the job removed what the child's rule protects: {}", told[0]);
}

/// A rule kept for every session in the project reaches the other sessions open in the same
/// cairn: one session rejects `rm` and keeps the rule for the project; the `rm` the other's
/// job, started before, runs next is refused at once (no turn of its session between), and so
/// is that session's next command `rm`, unasked.
#[tokio::test]
async fn a_rule_kept_for_the_project_reaches_the_other_open_sessions_and_their_jobs() {
    if !crate::support::kernel_keeps_it() {
        return;
    }
    let env = TestEnv::new().await;
    let ws = env.workspace();
    for name in ["victim", "decoy", "other"] {
        std::fs::write(ws.join(name), "keep me").unwrap();
    }
    let editor = Editor::default();
    editor.answer(&["allow_once", "reject_always"]);
    let mut agent = env.ready_with(editor).await;
    let (first, second) = (agent.new_session(&env.cwd()).await, agent.new_session(&env.cwd()).await);
    let job = "while [ ! -e go ]; do sleep 0.05; done; rm victim 2>&1; echo \"rm ended $?\" > ended";
    let (told, _) = calls(&mut agent, &env, &first, &[background(job)]).await;
    assert!(told[0].starts_with("Started job 1"), "{}", told[0]);
    let (told, _) = calls(&mut agent, &env, &second, &[("bash", json!({"command": "rm decoy"}))]).await;
    assert!(told[0].starts_with("The user denied this tool call."), "{}", told[0]);
    let id = agent.prompt(&second, "/permissions project 1").await;
    let (response, notifications) = agent.response(id).await;
    let kept = text_of(&updates(&notifications, &second), "agent_message_chunk");
    assert!(kept.contains("Kept rule 1 (reject"), "{response} {kept}");

    std::fs::write(ws.join("go"), "").unwrap();
    let started = Instant::now();
    while !ws.join("ended").exists() && started.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let ended = std::fs::read_to_string(ws.join("ended")).unwrap_or_default();
    assert!(ws.join("victim").exists(), "the first session's job removed what the project's rule protects: {ended}");
    assert!(ended.starts_with("rm ended") && !ended.contains("ended 0"), "{ended}");
    let (told, _) = calls(&mut agent, &env, &first, &[("bash", json!({"command": "rm other"}))]).await;
    assert!(told[0].contains("a remembered rule rejects"), "{}", told[0]);
    assert_eq!(agent.editor.requests("session/request_permission").len(), 2, "the job and the first rm asked");
    for name in ["victim", "decoy", "other"] {
        assert!(ws.join(name).exists(), "{name} was removed");
    }
}
