//! Hooks in Claude Code's format: each event fired with the same JSON on stdin and read by the
//! same exit-code and JSON contract (allow, deny, ask, context, a blocked prompt or stop), a
//! hook's deny holding in bypass mode and its allow never reaching past the workspace or a
//! protected place, hooks that crash, print garbage or hang reported and never holding the
//! turn, and a project's hooks run only once the user trusts that content of the file.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Agent, Editor, Reply, TestEnv, text_of, user_texts};
use crate::tools::{set_mode, tool_results, turn};

/// Writes the hook script `name` (outside the workspace) and gives the command running it.
fn hook(env: &TestEnv, name: &str, body: &str) -> String {
    let dir = env.dir.path().join("scripts");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{name}.sh"));
    std::fs::write(&path, body).unwrap();
    format!("sh {}", path.display())
}

/// The JSON inputs a hook script logged with [`LOG`] to `name` in the workspace.
fn logged(env: &TestEnv, name: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(env.workspace().join(name)).unwrap_or_default();
    text.lines().filter(|line| !line.trim().is_empty()).map(|line| serde_json::from_str(line).unwrap()).collect()
}

/// The start of a script that keeps its input in `$LOGFILE` (in the workspace) and in `$input`.
const LOG: &str = "input=$(cat)\nprintf '%s\\n' \"$input\" >> \"$CLAUDE_PROJECT_DIR/$LOGFILE\"\n";

fn bash(id: &str, command: &str) -> (String, String, Value) {
    (id.to_owned(), "bash".to_owned(), json!({"command": command}))
}

fn script(env: &TestEnv, calls: &[(String, String, Value)]) {
    let calls: Vec<(&str, &str, Value)> = calls.iter().map(|(i, n, a)| (i.as_str(), n.as_str(), a.clone())).collect();
    env.mock.push(Reply::tool_calls(&calls)).push(Reply::text(&["done"]));
}

/// The ids of the tool calls the user was asked about.
fn asked(agent: &Agent) -> Vec<String> {
    let asked = agent.editor.requests("session/request_permission");
    asked.iter().map(|r| r["params"]["toolCall"]["toolCallId"].as_str().unwrap().to_owned()).collect()
}

/// The text the turn showed (stored notices included, for a client without notices).
fn shown(updates: &[Value]) -> String {
    text_of(&updates.iter().collect::<Vec<_>>(), "agent_message_chunk")
}

fn result_of(env: &TestEnv, request: usize, id: &str) -> String {
    let results = tool_results(env, request);
    let result = results.iter().find(|r| r["tool_call_id"] == id).unwrap_or_else(|| panic!("no result for {id}"));
    result["content"].as_str().unwrap().to_owned()
}

/// The PreToolUse script of the tests: it answers by what the command says.
fn pre_tool_use(env: &TestEnv) -> String {
    let body = format!(
        "LOGFILE=pre.jsonl\n{LOG}case \"$input\" in\n\
         *'rm '*) echo 'no rm here' >&2; exit 2;;\n\
         *'touch asked'*) echo '{{\"hookSpecificOutput\": {{\"hookEventName\": \"PreToolUse\", \"permissionDecision\": \"ask\", \"permissionDecisionReason\": \"the hook wants a look\"}}}}';;\n\
         *'touch made'*) echo '{{\"hookSpecificOutput\": {{\"hookEventName\": \"PreToolUse\", \"permissionDecision\": \"allow\"}}}}';;\n\
         *crash*) echo boom >&2; exit 1;;\n\
         *garbage*) echo 'not json at all';;\n\
         *hang*) sleep 30;;\n\
         esac\nexit 0\n"
    );
    hook(env, "pre", &body)
}

fn config(timeout: u64, tables: &[(&str, &str, &str)]) -> String {
    let mut text = format!("[limits]\nconsecutive_errors = 0\n\n[hooks]\ntimeout_secs = {timeout}\n");
    for (event, matcher, command) in tables {
        text.push_str(&format!(
            "\n[[hooks.{event}]]\nmatcher = {matcher:?}\nhooks = [{{ type = \"command\", command = {command:?} }}]\n"
        ));
    }
    text
}

#[tokio::test]
async fn pre_tool_use_allows_denies_asks_and_a_broken_hook_decides_nothing() {
    let env = TestEnv::new().await;
    let notify = hook(&env, "notify", &format!("LOGFILE=notified.jsonl\n{LOG}"));
    env.write_config(&config(1, &[("PreToolUse", "Bash", &pre_tool_use(&env)), ("Notification", "", &notify)]));
    std::fs::write(env.workspace().join("victim"), "x").unwrap();
    let editor = Editor::default();
    editor.answer(&["reject_once", "allow_once", "allow_once", "allow_once"]);
    let mut agent = env.ready_with(editor).await;
    let session = agent.new_session(&env.cwd()).await;
    let calls = ["touch made", "rm victim", "touch asked", "ls crash", "ls garbage", "ls hang"];
    let calls: Vec<_> = calls.iter().enumerate().map(|(i, line)| bash(&format!("c{i}"), line)).collect();
    script(&env, &calls);
    let started = Instant::now();
    let (response, updates) = turn(&mut agent, &session, "go").await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    assert!(started.elapsed() < Duration::from_secs(12), "the hanging hook held the turn: {:?}", started.elapsed());

    // Commands ask in this mode unless a hook allows them: the broken hooks left the questions.
    let questions = asked(&agent);
    assert_eq!(questions, ["c2", "c3", "c4", "c5"], "the allow lifted the question, the ask asked, the deny refused");
    assert!(env.workspace().join("made").exists());
    assert!(env.workspace().join("victim").exists());
    assert!(result_of(&env, 1, "c1").contains("a hook denied it: no rm here"));
    assert!(result_of(&env, 1, "c2").starts_with("The user denied"));
    for (id, said) in [("c3", "crash"), ("c4", "garbage"), ("c5", "hang")] {
        assert!(result_of(&env, 1, id).contains(said), "{id} ran once the user allowed it");
    }
    let shown = shown(&updates);
    assert!(shown.contains("failed with exit status 1: boom"), "{shown}");
    assert!(shown.contains("printed what is not a JSON object; ignored: not json at all"), "{shown}");
    assert!(shown.contains("did not finish within 1 s and was killed"), "{shown}");

    let inputs = logged(&env, "pre.jsonl");
    assert_eq!(inputs.len(), 6);
    let first = &inputs[0];
    assert_eq!(first["hook_event_name"], "PreToolUse");
    assert_eq!((first["tool_name"].as_str(), first["cairn_tool_name"].as_str()), (Some("Bash"), Some("bash")));
    assert_eq!(first["tool_input"]["command"], "touch made");
    assert_eq!(first["tool_use_id"], "c0");
    assert_eq!(first["cwd"], env.cwd());
    assert_eq!(first["session_id"], session);
    assert_eq!(first["permission_mode"], "default");
    let notified = logged(&env, "notified.jsonl");
    assert_eq!(notified.len(), 4, "one notification per question");
    assert_eq!(notified[0]["notification_type"], "permission_prompt");
}

#[tokio::test]
async fn a_hooks_deny_holds_in_bypass_mode_and_its_ask_asks_there() {
    let env = TestEnv::new().await;
    env.write_config(&config(5, &[("PreToolUse", "Bash|Write", &pre_tool_use(&env))]));
    std::fs::write(env.workspace().join("victim"), "x").unwrap();
    let editor = Editor::default();
    editor.answer(&["allow_once"]);
    let mut agent = env.ready_with(editor).await;
    let session = agent.new_session(&env.cwd()).await;
    set_mode(&mut agent, &session, "bypass").await;
    script(&env, &[bash("c1", "rm victim"), bash("c2", "touch asked")]);
    turn(&mut agent, &session, "go").await;
    assert!(env.workspace().join("victim").exists(), "denied in bypass mode");
    assert!(result_of(&env, 1, "c1").contains("no rm here"));
    assert_eq!(asked(&agent), ["c2"]);
    assert!(env.workspace().join("asked").exists());
    assert_eq!(logged(&env, "pre.jsonl")[0]["permission_mode"], "bypassPermissions");
}

#[tokio::test]
async fn a_hooks_allow_never_reaches_outside_the_workspace_or_into_a_protected_place() {
    let env = TestEnv::new().await;
    let allow = hook(&env, "allow", "cat >/dev/null\necho '{\"decision\": \"approve\"}'\n");
    env.write_config(&config(5, &[("PreToolUse", "Write|Edit", &allow)]));
    std::fs::create_dir_all(env.workspace().join(".git")).unwrap();
    let editor = Editor::default();
    editor.answer(&["reject_once", "reject_once"]);
    let mut agent = env.ready_with(editor).await;
    let session = agent.new_session(&env.cwd()).await;
    let write = |id: &str, path: &str| (id.to_owned(), "write".to_owned(), json!({"path": path, "content": "x\n"}));
    script(&env, &[write("c1", "inside.txt"), write("c2", "../outside.txt"), write("c3", ".git/config")]);
    turn(&mut agent, &session, "go").await;
    assert_eq!(asked(&agent), ["c2", "c3"]);
    assert!(env.workspace().join("inside.txt").exists());
    assert!(!env.dir.path().join("outside.txt").exists());
    assert!(!env.workspace().join(".git/config").exists());
}

#[tokio::test]
async fn post_tool_use_feedback_and_context_reach_the_model_with_the_result() {
    let env = TestEnv::new().await;
    let lint = hook(&env, "lint", "cat >/dev/null\necho 'lint failed: line 3' >&2\nexit 2\n");
    let said = "echo '{\"hookSpecificOutput\": {\"additionalContext\": \"style guide: tabs\"}}'\n";
    let context = hook(&env, "context", &format!("LOGFILE=post.jsonl\n{LOG}{said}"));
    let crash = hook(&env, "crash", "cat >/dev/null\nexit 7\n");
    env.write_config(&config(
        5,
        &[("PostToolUse", "Bash", &lint), ("PostToolUse", "*", &context), ("PostToolUse", "", &crash)],
    ));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    set_mode(&mut agent, &session, "bypass").await;
    script(&env, &[bash("c1", "echo hello")]);
    let (_, updates) = turn(&mut agent, &session, "go").await;
    let result = result_of(&env, 1, "c1");
    assert!(result.contains("hello"), "{result}");
    assert!(result.contains("[PostToolUse hook] lint failed: line 3\nstyle guide: tabs"), "{result}");
    assert!(shown(&updates).contains("failed with exit status 7"));
    let post = &logged(&env, "post.jsonl")[0];
    assert_eq!(post["hook_event_name"], "PostToolUse");
    assert!(post["tool_response"]["output"].as_str().unwrap().contains("hello"));
    assert_eq!(post["tool_response"]["is_error"], false);
}

#[tokio::test]
async fn session_start_and_prompt_hooks_add_context_and_a_prompt_hook_blocks_a_prompt() {
    let env = TestEnv::new().await;
    let start = hook(&env, "start", &format!("LOGFILE=start.jsonl\n{LOG}echo 'the sprint ends Friday'\n"));
    let prompt = hook(
        &env,
        "prompt",
        &format!(
            "LOGFILE=prompt.jsonl\n{LOG}case \"$input\" in\n*secret*) echo 'no secrets in prompts' >&2; exit 2;;\n\
             *stop*) echo '{{\"continue\": false, \"stopReason\": \"enough for today\"}}';;\n\
             *) echo '{{\"hookSpecificOutput\": {{\"additionalContext\": \"the user prefers short answers\"}}}}';;\nesac\n"
        ),
    );
    env.write_config(&config(5, &[("SessionStart", "startup", &start), ("UserPromptSubmit", "", &prompt)]));
    env.mock.push(Reply::text(&["one"])).push(Reply::text(&["two"]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    turn(&mut agent, &session, "hello").await;
    let first = user_texts(&env.mock.requests()[0]).join("\n");
    assert!(first.contains("[SessionStart hook] the sprint ends Friday"), "{first}");
    assert!(first.contains("[UserPromptSubmit hook] the user prefers short answers"), "{first}");

    let (response, updates) = turn(&mut agent, &session, "my secret is 42").await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    assert!(shown(&updates).contains("blocked this prompt; the model was not asked: no secrets in prompts"));
    let (_, updates) = turn(&mut agent, &session, "please stop").await;
    assert!(shown(&updates).contains("stopped the turn: enough for today"));
    assert_eq!(env.mock.requests().len(), 1, "neither blocked prompt reached the model");

    turn(&mut agent, &session, "again").await;
    let again = user_texts(&env.mock.requests()[1]).join("\n");
    assert!(!again.contains("sprint ends"), "SessionStart fires once: {again}");
    assert_eq!(logged(&env, "start.jsonl")[0]["source"], "startup");
    assert_eq!(logged(&env, "prompt.jsonl")[0]["prompt"], "hello");
}

#[tokio::test]
async fn a_stop_hook_sends_the_model_on_once_and_a_hanging_one_does_not_hold_the_turn() {
    let env = TestEnv::new().await;
    let stop = hook(
        &env,
        "stop",
        &format!(
            "LOGFILE=stop.jsonl\n{LOG}case \"$input\" in\n*'\"stop_hook_active\":true'*) exit 0;;\n\
             *) echo '{{\"decision\": \"block\", \"reason\": \"run the tests first\"}}';;\nesac\n"
        ),
    );
    env.write_config(&config(5, &[("Stop", "", &stop)]));
    env.mock.push(Reply::text(&["done"])).push(Reply::text(&["tests pass"]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let (response, _) = turn(&mut agent, &session, "fix it").await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    assert_eq!(env.mock.requests().len(), 2);
    let second = user_texts(&env.mock.requests()[1]).join("\n");
    assert!(second.contains("[Stop hook] The turn is not over: run the tests first"), "{second}");
    let inputs = logged(&env, "stop.jsonl");
    assert_eq!(
        (inputs[0]["stop_hook_active"].as_bool(), inputs[1]["stop_hook_active"].as_bool()),
        (Some(false), Some(true))
    );

    env.write_config(&config(1, &[("Stop", "", &hook(&env, "hang", "sleep 30\n"))]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    env.mock.push(Reply::text(&["done"]));
    let started = Instant::now();
    let (response, updates) = turn(&mut agent, &session, "again").await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    assert!(started.elapsed() < Duration::from_secs(8), "{:?}", started.elapsed());
    assert!(shown(&updates).contains("did not finish within 1 s"));
}

/// The project's `.claude/settings.json`, with a PreToolUse hook on Bash appending `word`.
fn project_hooks(env: &TestEnv, word: &str) -> PathBuf {
    let dir = env.workspace().join(".claude");
    std::fs::create_dir_all(&dir).unwrap();
    let command = format!("echo {word} >> \"$CLAUDE_PROJECT_DIR/project-ran\"");
    let settings =
        json!({"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": command}]}]}});
    let path = dir.join("settings.json");
    std::fs::write(&path, settings.to_string()).unwrap();
    path
}

fn ran(env: &TestEnv) -> Vec<String> {
    let text = std::fs::read_to_string(env.workspace().join("project-ran")).unwrap_or_default();
    text.lines().map(str::to_owned).collect()
}

#[tokio::test]
async fn a_projects_hooks_run_once_trusted_and_an_edit_asks_again() {
    let env = TestEnv::new().await;
    let path = project_hooks(&env, "first");
    let editor = Editor::default();
    editor.answer(&["trust", "refuse"]);
    let mut agent = env.ready_with(editor).await;
    let session = agent.new_session(&env.cwd()).await;
    set_mode(&mut agent, &session, "bypass").await;
    script(&env, &[bash("c1", "echo one")]);
    turn(&mut agent, &session, "go").await;
    let questions = agent.editor.requests("session/request_permission");
    assert_eq!(questions.len(), 1);
    let question = &questions[0]["params"]["toolCall"];
    assert!(question["toolCallId"].as_str().unwrap().starts_with("hooks-"));
    assert!(question["title"].as_str().unwrap().contains(&path.display().to_string()), "{question}");
    let hash = cairn::hooks::trust::hash(&std::fs::read(&path).unwrap());
    assert!(question.to_string().contains(&hash), "the question names the content's hash: {question}");
    assert_eq!(ran(&env), ["first"]);

    // Another session, the same content: trusted, not asked again.
    let other = agent.new_session(&env.cwd()).await;
    set_mode(&mut agent, &other, "bypass").await;
    script(&env, &[bash("c2", "echo two")]);
    turn(&mut agent, &other, "go").await;
    assert_eq!(agent.editor.requests("session/request_permission").len(), 1);
    assert_eq!(ran(&env), ["first", "first"]);

    // An edited file asks again; refused, it runs nothing, and is not asked about again.
    project_hooks(&env, "edited");
    script(&env, &[bash("c3", "echo three")]);
    let (_, updates) = turn(&mut agent, &session, "go").await;
    assert_eq!(agent.editor.requests("session/request_permission").len(), 2);
    assert!(shown(&updates).contains("you chose not to trust this version of the file"));
    script(&env, &[bash("c4", "echo four")]);
    turn(&mut agent, &session, "go").await;
    assert_eq!(agent.editor.requests("session/request_permission").len(), 2);
    assert_eq!(ran(&env), ["first", "first"]);
    assert!(result_of(&env, 7, "c4").contains("four"), "the call itself ran");

    let (_, updates) = turn(&mut agent, &session, "/hooks").await;
    let listed = shown(&updates);
    assert!(listed.contains(&format!("{} (refused: its hooks do not run", path.display())), "{listed}");
    assert!(listed.contains("PreToolUse [Bash]: echo edited"), "{listed}");
}

#[tokio::test]
async fn a_project_hooks_file_that_is_a_symlink_runs_nothing() {
    let env = TestEnv::new().await;
    let real = env.dir.path().join("planted.json");
    let command = "touch \"$CLAUDE_PROJECT_DIR/pwned\"";
    let settings = json!({"hooks": {"PreToolUse": [{"hooks": [{"type": "command", "command": command}]}]}});
    std::fs::write(&real, settings.to_string()).unwrap();
    std::fs::create_dir_all(env.workspace().join(".claude")).unwrap();
    std::os::unix::fs::symlink(&real, env.workspace().join(".claude/settings.json")).unwrap();
    let editor = Editor::default();
    editor.answer(&["trust"]);
    let mut agent = env.ready_with(editor).await;
    let session = agent.new_session(&env.cwd()).await;
    set_mode(&mut agent, &session, "bypass").await;
    script(&env, &[bash("c1", "echo one")]);
    let (_, updates) = turn(&mut agent, &session, "go").await;
    assert!(agent.editor.requests("session/request_permission").is_empty());
    assert!(!env.workspace().join("pwned").exists());
    assert!(shown(&updates).contains("is a symbolic link"), "{}", shown(&updates));
}

#[tokio::test]
async fn a_pre_compact_hook_blocks_a_manual_compaction() {
    let env = TestEnv::new().await;
    let body = format!(
        "LOGFILE=compact.jsonl\n{LOG}case \"$input\" in\n*'keep it all'*) echo 'not now' >&2; exit 2;;\nesac\n"
    );
    env.write_config(&config(5, &[("PreCompact", "manual", &hook(&env, "compact", &body))]));
    env.mock.push(Reply::text(&["a1"])).push(Reply::text(&["the summary"]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    turn(&mut agent, &session, "one").await;
    let (response, updates) = turn(&mut agent, &session, "/compact keep it all").await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    assert!(shown(&updates).contains("A PreCompact hook blocked the compaction: not now"), "{}", shown(&updates));
    assert_eq!(env.mock.requests().len(), 1, "no summary was asked for");
    let (_, updates) = turn(&mut agent, &session, "/compact").await;
    assert!(shown(&updates).starts_with("Compacted the conversation"), "{}", shown(&updates));
    let inputs = logged(&env, "compact.jsonl");
    assert_eq!(
        (inputs[0]["trigger"].as_str(), inputs[0]["custom_instructions"].as_str()),
        (Some("manual"), Some("keep it all"))
    );
}

#[tokio::test]
async fn the_official_client_is_asked_about_a_projects_hooks_and_their_deny_holds_in_bypass() {
    let env = TestEnv::new().await;
    let dir = env.workspace().join(".claude");
    std::fs::create_dir_all(&dir).unwrap();
    let deny = json!({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
        "permissionDecisionReason": "the project forbids rm"}});
    let command = format!("grep -q '\"rm ' && echo '{deny}' || true");
    let settings =
        json!({"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": command}]}]}});
    std::fs::write(dir.join("settings.json"), settings.to_string()).unwrap();
    std::fs::write(env.workspace().join("victim"), "x").unwrap();
    env.mock.push(Reply::tool_calls(&[("c1", "bash", json!({"command": "rm victim"}))])).push(Reply::text(&["done"]));
    let script = json!({"initialize": {"protocolVersion": 1, "clientCapabilities": {}}, "steps": [
        {"new": {"cwd": env.cwd(), "mcpServers": []}},
        {"set_mode": {"sessionId": "$session", "modeId": "bypass"}},
        {"prompt": {"sessionId": "$session", "prompt": [{"type": "text", "text": "clean up"}]}},
    ]});
    let transcript = crate::support::sdk::run(&env, &script, &["acp"]).await;
    assert_eq!(transcript["steps"][2]["response"]["stopReason"], "end_turn");
    let asked = transcript["permissions"].as_array().unwrap();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert!(asked[0]["toolCall"]["title"].as_str().unwrap().contains("settings.json"));
    assert!(env.workspace().join("victim").exists());
    assert!(result_of(&env, 1, "c1").contains("the project forbids rm"));
}

#[tokio::test]
async fn a_sub_agents_tool_calls_fire_the_sessions_hooks() {
    let env = TestEnv::new().await;
    env.write_config(&config(5, &[("PreToolUse", "Bash", &pre_tool_use(&env))]));
    std::fs::write(env.workspace().join("victim"), "x").unwrap();
    env.mock.push(crate::subagents::calls(&[crate::subagents::task("t1", "clean", "CHILD: remove the victim")]));
    env.mock.push(Reply::text(&["The child could not."]));
    env.mock.route("CHILD", Reply::tool_calls(&[("k1", "bash", json!({"command": "rm victim"}))]));
    env.mock.route("CHILD", Reply::text(&["A hook refused it."]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    set_mode(&mut agent, &session, "bypass").await;
    let (response, _) = turn(&mut agent, &session, "PARENT: clean up").await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    assert!(env.workspace().join("victim").exists(), "the sub-agent's call was denied");
    let child = env.mock.requests_with("CHILD");
    let refused = child[1]["messages"].as_array().unwrap().iter().find(|m| m["role"] == "tool").unwrap();
    assert!(refused["content"].as_str().unwrap().contains("no rm here"), "{refused}");
}
