//! Plan mode attacked: a model told to plan that tries to change something anyway, by a write
//! hidden in a reader's line, a program that writes behind an innocent name, a shell or an
//! interpreter, a tool of another program, or a rule the user remembered in another mode. Each
//! must be refused (never asked: the user is reviewing a plan, not approving calls), saying
//! that the session is planning.

use crate::permissions::fake::bash;
use crate::permissions::*;

/// The requests of `lines` that plan mode does not refuse with its planning message, under
/// `rules`.
fn not_refused(lines: &[&str], rules: &[Rule]) -> Vec<String> {
    lines
        .iter()
        .filter_map(|line| match decide(&bash(line), Mode::Plan, rules) {
            Decision::Deny(why) if why.contains("plan mode") && why.contains("`exit_plan`") => None,
            other => Some(format!("{line}: {other:?}")),
        })
        .collect()
}

#[test]
fn lines_that_may_write_are_refused_however_they_hide_it() {
    let found = not_refused(
        &[
            "echo x > f",
            "echo x >> f",
            "cat a > b",
            "ls 2> errors.log",
            "bash -c 'echo > f'",
            "sh -c 'rm -rf src'",
            "eval 'rm x'",
            "cat x | tee f",
            "tee f < x",
            "sed -i s/a/b/ f",
            "sed -n 1p f",
            "find . -exec rm {} +",
            "find . -delete",
            "find . -fprint out",
            "git commit -am x",
            "git push",
            "git checkout -- .",
            "git -c core.pager=sh log",
            "git stash",
            "sort -o f f",
            "rg --pre ./x foo",
            "cat $(touch f)",
            "cat `touch f`",
            "x=$(rm f); cat a",
            "rm -rf /",
            "touch f",
            "mkdir d",
            "cp a b",
            "mv a b",
            "ln -s /etc x",
            "python3 -c 'open(\"f\",\"w\")'",
            "node -e 'require(\"fs\").writeFileSync(\"f\",\"\")'",
            "perl -pi -e s/a/b/ f",
            "cargo build",
            "make",
            "npm install",
            "xargs rm < list",
            "env rm f",
            "nohup rm f",
            "timeout 1 rm f",
            "command rm f",
            "exec rm f",
            "(rm f)",
            "{ rm f; }",
            "if true; then rm f; fi",
            "cat <(rm f)",
            "curl -o f https://example.com",
            "dd if=a of=b",
            "truncate -s 0 f",
            "chmod +x f",
        ],
        &[],
    );
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn a_remembered_allow_does_not_lift_plan_mode() {
    let allowed = [
        Rule::new(Permission::Bash, "cargo build", Action::Allow, Scope::Session),
        Rule::new(Permission::Bash, "=make deploy", Action::Allow, Scope::Project),
        Rule::new(Permission::Bash, "git commit", Action::Allow, Scope::Session),
    ];
    let found = not_refused(&["cargo build", "make deploy", "git commit -m x"], &allowed);
    assert!(found.is_empty(), "{found:#?}");
    let edits = [Rule::new(Permission::Edit, "**", Action::Allow, Scope::Project)];
    let place = crate::workspace::Place::Inside { relative: "src/lib.rs".into() };
    let edit = PermissionRequest {
        permission: Permission::Edit,
        target: "/w/src/lib.rs".into(),
        subject: Subject::Path { place },
    };
    assert!(matches!(decide(&edit, Mode::Plan, &edits), Decision::Deny(why) if why.contains("plan mode")));
    let tools = [Rule::new(Permission::Tool, "mcp__github__*", Action::Allow, Scope::Session)];
    let writes = PermissionRequest::for_tool("mcp__github__create_issue", "the MCP server `github`", false);
    assert!(matches!(decide(&writes, Mode::Plan, &tools), Decision::Deny(why) if why.contains("plan mode")));
}

#[test]
fn readers_are_judged_as_in_ask_mode_and_rejections_still_hold() {
    for line in ["cat src/lib.rs", "git log --oneline", "ls -la && git status", "grep -rn fn src", "cat /etc/hosts"] {
        assert_eq!(decide(&bash(line), Mode::Plan, &[]), decide(&bash(line), Mode::Ask, &[]), "{line}");
        assert!(matches!(decide(&bash(line), Mode::Plan, &[]), Decision::Ask(_)), "{line} asks as in ask mode");
    }
    let allowed = [Rule::new(Permission::Bash, "git log", Action::Allow, Scope::Session)];
    assert_eq!(decide(&bash("git log --oneline"), Mode::Plan, &allowed), Decision::Allow);
    let rejected = [Rule::new(Permission::Bash, "cat", Action::Deny, Scope::Session)];
    assert!(matches!(decide(&bash("cat x"), Mode::Plan, &rejected), Decision::Deny(why) if why.contains("remembered")));
}

#[test]
fn leaving_plan_mode_asks_in_plan_mode_only_and_no_rule_touches_it() {
    let leave = PermissionRequest::for_plan("exit_plan");
    assert!(matches!(decide(&leave, Mode::Plan, &[]), Decision::Ask(_)));
    for mode in [Mode::Ask, Mode::AcceptEdits, Mode::ReadOnly, Mode::Bypass] {
        let Decision::Deny(why) = decide(&leave, mode, &[]) else { panic!("{mode:?} refuses it") };
        assert!(why.contains("only leaves plan mode") && why.contains(mode.id()), "{why}");
    }
    let rules = [
        Rule::new(Permission::Tool, "*", Action::Deny, Scope::Session),
        Rule::new(Permission::Tool, "exit_plan", Action::Allow, Scope::Session),
    ];
    assert!(matches!(decide(&leave, Mode::Plan, &rules), Decision::Ask(_)), "neither rule applies");
    assert_eq!(rule_for(&leave, Action::Allow, Scope::Session, &[]), None, "no \"always\" to offer");
    assert_eq!(rule_for(&leave, Action::Deny, Scope::Session, &[]), None);
}
