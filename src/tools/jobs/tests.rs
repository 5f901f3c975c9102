//! Unit tests of background jobs through the tools, with local processes started directly (no
//! supervisor): start, read since the last read, wait for a pattern, input, the cap, kill, and
//! the ids of one session's jobs.

use std::time::{Duration, Instant};

use serde_json::json;

use super::{JobSettings, JobState, Jobs};
use crate::tools::{Registry, ToolContext, ToolError, ToolOutcome};

fn context(dir: &std::path::Path, settings: JobSettings) -> ToolContext {
    ToolContext { jobs: Jobs::start(settings), ..crate::tools::tests::context(dir) }
}

async fn call(ctx: &ToolContext, name: &str, input: serde_json::Value) -> Result<ToolOutcome, ToolError> {
    Registry::builtin().parse(name, &input.to_string())?.run(ctx).await
}

async fn start(ctx: &ToolContext, command: &str) -> u32 {
    let started = call(ctx, "bash", json!({"command": command, "background": true})).await.unwrap();
    let id = started.output.strip_prefix("Started job ").and_then(|rest| rest.split(';').next()).unwrap();
    id.parse().unwrap()
}

async fn output(ctx: &ToolContext, job: u32, wait: u64, pattern: Option<&str>) -> String {
    let mut args = json!({"job": job, "wait_secs": wait});
    if let Some(pattern) = pattern {
        args["pattern"] = json!(pattern);
    }
    call(ctx, "job_output", args).await.unwrap().output
}

#[tokio::test]
async fn a_job_answers_at_once_and_each_read_gives_what_came_since_the_last() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = context(dir.path(), JobSettings::default());
    let began = Instant::now();
    let job = start(&ctx, "echo one; sleep 0.3; echo two; sleep 30").await;
    assert!(began.elapsed() < Duration::from_secs(2), "the call does not wait for the command");
    assert_eq!(job, 1);
    let first = output(&ctx, job, 5, Some("one")).await;
    assert_eq!(first, "one\n[job 1: running]");
    let second = output(&ctx, job, 5, Some("two")).await;
    assert_eq!(second, "two\n[job 1: running]");
    assert_eq!(output(&ctx, job, 0, None).await, "[no new output]\n[job 1: running]");
    let killed = call(&ctx, "job_kill", json!({"job": job})).await.unwrap().output;
    assert!(killed.ends_with("[job 1: killed]"), "{killed}");
    assert_eq!(ctx.jobs.list()[0].state, JobState::Ended(super::Ending::Killed));
}

#[tokio::test]
async fn a_finished_jobs_output_and_status_stay_readable() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = context(dir.path(), JobSettings::default());
    let job = start(&ctx, "echo done; exit 3").await;
    let read = output(&ctx, job, 5, Some("never printed")).await;
    assert_eq!(read, "done\n[job 1: exited with status 3]", "the end stops the wait");
    assert_eq!(output(&ctx, job, 0, None).await, "[no new output]\n[job 1: exited with status 3]");
}

#[tokio::test]
async fn input_reaches_the_jobs_stdin_and_eof_closes_it() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = context(dir.path(), JobSettings::default());
    let job = start(&ctx, "while read line; do echo \"got $line\"; done; echo closed").await;
    call(&ctx, "job_input", json!({"job": job, "text": "hello\n"})).await.unwrap();
    assert_eq!(output(&ctx, job, 5, Some("got hello")).await, "got hello\n[job 1: running]");
    call(&ctx, "job_input", json!({"job": job, "text": "", "eof": true})).await.unwrap();
    assert_eq!(output(&ctx, job, 5, Some("closed")).await.lines().next(), Some("closed"));
}

#[tokio::test]
async fn a_flood_is_kept_to_the_cap_and_the_drop_is_told() {
    let dir = tempfile::tempdir().unwrap();
    let settings = JobSettings { max: 2, output_bytes: 4096 };
    let ctx = context(dir.path(), settings);
    let job = start(&ctx, "yes flood | head -c 10000000; sleep 30").await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let read = output(&ctx, job, 0, None).await;
    assert!(read.starts_with('['), "{}", &read[..200.min(read.len())]);
    assert!(read.contains("were dropped before this read"), "{}", &read[..200]);
    assert!(read.len() < 4096 + 400, "a read returns at most the cap: {}", read.len());
}

#[tokio::test]
async fn the_cap_refuses_one_more_job_until_one_ends() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = context(dir.path(), JobSettings { max: 2, output_bytes: 4096 });
    start(&ctx, "sleep 30").await;
    let second = start(&ctx, "sleep 30").await;
    let refused = call(&ctx, "bash", json!({"command": "sleep 30", "background": true})).await.unwrap_err();
    assert!(refused.to_string().contains("2 jobs of this session are running"), "{refused}");
    call(&ctx, "job_kill", json!({"job": second})).await.unwrap();
    assert_eq!(start(&ctx, "sleep 30").await, 3);
    ctx.jobs.close().await;
    assert!(ctx.jobs.list().is_empty());
}

#[tokio::test]
async fn an_id_not_of_this_sessions_jobs_is_not_found() {
    let dir = tempfile::tempdir().unwrap();
    let (mine, theirs) = (context(dir.path(), JobSettings::default()), context(dir.path(), JobSettings::default()));
    let job = start(&theirs, "echo secret; sleep 30").await;
    for tool in ["job_output", "job_kill"] {
        let err = call(&mine, tool, json!({"job": job})).await.unwrap_err();
        assert!(err.to_string().starts_with("there is no job 1 in this session (it has none)"), "{err}");
    }
    assert_eq!(theirs.jobs.list()[0].state, JobState::Running);
    let none = crate::tools::tests::context(dir.path());
    let off = call(&none, "bash", json!({"command": "true", "background": true})).await.unwrap_err();
    assert!(off.to_string().contains("[jobs] max = 0"), "{off}");
}
