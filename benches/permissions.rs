//! The cost of a permission decision: `cargo bench --bench permissions`.
//!
//! A session that has remembered 1,000 rules (command rules, exact lines, path globs, a share
//! of rejections) decides about typical requests: a command its rules cover, one they do not,
//! a wrapped command that a rejection must catch, and an edit. Printed: the median and p90 of
//! `decide` per request kind, then what gathering a command's facts costs (parsing the line,
//! following its paths on disk), which happens once per call before deciding, and what judging
//! an edit's path costs in a plain directory and in a repository whose configuration names a
//! hooks path and an include (read on every judgement).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout, clippy::print_stderr)]

use std::time::{Duration, Instant};

use cairn::permissions::{Action, Mode, Permission, PermissionRequest, Rule, Scope, decide};
use cairn::workspace::Workspace;

/// 1,000 rules: programs, subcommands, exact lines and path globs, one in five a rejection.
fn rules() -> Vec<Rule> {
    (0..1_000)
        .map(|n| {
            let (permission, pattern) = match n % 4 {
                0 => (Permission::Bash, format!("tool{n}")),
                1 => (Permission::Bash, format!("tool{n} sub{n}")),
                2 => (Permission::Bash, format!("=tool{n} --flag {n} | tail -{n}")),
                _ => (Permission::Edit, format!("src/module{n}/**/*.rs")),
            };
            let action = if n % 5 == 0 { Action::Deny } else { Action::Allow };
            Rule::new(permission, &pattern, action, Scope::Project)
        })
        .collect()
}

fn measure(name: &str, rules: &[Rule], request: &PermissionRequest, mode: Mode) {
    let mut samples: Vec<Duration> = (0..2_000)
        .map(|_| {
            let started = Instant::now();
            std::hint::black_box(decide(request, mode, rules));
            started.elapsed()
        })
        .collect();
    samples.sort();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize];
    println!("| {name} | {:.1} µs | {:.1} µs | {:?} |", micros(at(0.5)), micros(at(0.9)), decide(request, mode, rules));
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("src/module3")).unwrap();
    let workspace = Workspace::new(dir.path(), &[]);
    let mut rules = rules();
    rules.push(Rule::new(Permission::Bash, "cargo test", Action::Allow, Scope::Session));
    rules.push(Rule::new(Permission::Bash, "rm", Action::Deny, Scope::Session));
    let covered = PermissionRequest::for_command("cargo test --lib 2>&1", &workspace);
    let uncovered = PermissionRequest::for_command("cargo build --release | tail -20", &workspace);
    let wrapped = PermissionRequest::for_command("find . -name '*.o' -exec rm {} \\;", &workspace);
    let edit = PermissionRequest::for_path(Permission::Edit, &workspace, &dir.path().join("src/module3/a/b.rs"));
    // The first decision reads (compiles) every pattern; rules keep them for later decisions.
    let started = Instant::now();
    decide(&edit, Mode::Ask, &rules);
    decide(&covered, Mode::Ask, &rules);
    let first = started.elapsed();
    for _ in 0..200 {
        decide(&covered, Mode::Ask, &rules);
    }
    println!("| decision with {} remembered rules | median | p90 | verdict |", rules.len());
    println!("|---|---|---|---|");
    measure("command a rule covers (`cargo test --lib 2>&1`)", &rules, &covered, Mode::Ask);
    measure("command no rule covers (`cargo build --release | tail -20`)", &rules, &uncovered, Mode::Ask);
    measure("wrapped rejection (`find … -exec rm`), bypass", &rules, &wrapped, Mode::Bypass);
    measure("edit under `src/module3/**/*.rs`", &rules, &edit, Mode::Ask);
    println!(
        "| first decisions of a session (an edit and a command: every pattern read once) | {:.0} µs | — | — |",
        micros(first)
    );

    let lines = ["cargo test --lib 2>&1", "grep -rn TODO src | head -20", "bash -c 'ls; rm -rf build'"];
    println!();
    println!("| gathering the facts of a line (parse + paths on disk) | median |");
    println!("|---|---|");
    for line in lines {
        let mut samples: Vec<Duration> = (0..2_000)
            .map(|_| {
                let started = Instant::now();
                std::hint::black_box(PermissionRequest::for_command(line, &workspace));
                started.elapsed()
            })
            .collect();
        samples.sort();
        println!("| `{line}` | {:.1} µs |", micros(samples[samples.len() / 2]));
    }

    let repository = tempfile::tempdir().unwrap();
    let git = repository.path().join(".git");
    std::fs::create_dir_all(git.join("hooks")).unwrap();
    std::fs::create_dir_all(repository.path().join("src/module3/a")).unwrap();
    std::fs::write(git.join("config"), "[core]\n\thooksPath = .githooks\n[include]\n\tpath = ../.gitconfig.local\n")
        .unwrap();
    std::fs::write(repository.path().join(".gitconfig.local"), "[user]\n\tname = x\n").unwrap();
    let in_repository = Workspace::new(repository.path(), &[]);
    println!();
    println!("| judging an edit's path (`src/module3/a/b.rs`) | median |");
    println!("|---|---|");
    for (name, workspace, root) in [
        ("plain directory", &workspace, dir.path()),
        ("repository with core.hooksPath and an include", &in_repository, repository.path()),
    ] {
        let path = root.join("src/module3/a/b.rs");
        let mut samples: Vec<Duration> = (0..2_000)
            .map(|_| {
                let started = Instant::now();
                std::hint::black_box(PermissionRequest::for_path(Permission::Edit, workspace, &path));
                started.elapsed()
            })
            .collect();
        samples.sort();
        println!("| {name} | {:.1} µs |", micros(samples[samples.len() / 2]));
    }
}
