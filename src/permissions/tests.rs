//! The permission policy as a table of cases.

use super::*;

fn edit(inside: bool) -> PermissionRequest {
    PermissionRequest {
        permission: Permission::Edit,
        target: "/w/src/lib.rs".into(),
        relative: inside.then(|| "src/lib.rs".into()),
        inside,
    }
}

fn read(inside: bool) -> PermissionRequest {
    PermissionRequest { permission: Permission::Read, ..edit(inside) }
}

fn bash(command: &str) -> PermissionRequest {
    PermissionRequest::for_command(command)
}

fn rule(permission: Permission, pattern: &str, action: Action) -> Rule {
    Rule { permission, pattern: pattern.into(), action, source: Scope::Session }
}

#[test]
fn modes_decide_what_rules_do_not() {
    let cases = [
        (read(true), Mode::ReadOnly, Decision::Allow),
        (read(false), Mode::Ask, Decision::Ask),
        (read(false), Mode::Bypass, Decision::Allow),
        (edit(true), Mode::Ask, Decision::Ask),
        (edit(true), Mode::AcceptEdits, Decision::Allow),
        (edit(false), Mode::AcceptEdits, Decision::Ask),
        (edit(true), Mode::Bypass, Decision::Allow),
        (bash("ls"), Mode::AcceptEdits, Decision::Ask),
        (bash("ls"), Mode::Bypass, Decision::Allow),
    ];
    for (request, mode, expected) in cases {
        assert_eq!(decide(&request, mode, &[]), expected, "{request:?} in {mode:?}");
    }
    assert!(matches!(decide(&edit(true), Mode::ReadOnly, &[]), Decision::Deny(why) if why.contains("read-only")));
    assert!(matches!(decide(&bash("ls"), Mode::ReadOnly, &[]), Decision::Deny(_)));
}

#[test]
fn remembered_rules_allow_inside_and_deny_anywhere() {
    let allow_edits = [rule(Permission::Edit, "**", Action::Allow)];
    assert_eq!(decide(&edit(true), Mode::Ask, &allow_edits), Decision::Allow);
    assert_eq!(decide(&edit(false), Mode::Ask, &allow_edits), Decision::Ask, "outside the workspace always asks");
    let only_docs = [rule(Permission::Edit, "docs/**", Action::Allow)];
    assert_eq!(decide(&edit(true), Mode::Ask, &only_docs), Decision::Ask);
    let deny = [rule(Permission::Edit, "src/**", Action::Deny)];
    assert!(matches!(decide(&edit(true), Mode::Bypass, &deny), Decision::Deny(_)), "deny beats every mode");
}

#[test]
fn shell_rules_match_a_prefix_of_a_plain_command_only() {
    let allow = [rule(Permission::Bash, "cargo test", Action::Allow)];
    assert_eq!(decide(&bash("cargo test --lib"), Mode::Ask, &allow), Decision::Allow);
    assert_eq!(decide(&bash("cargo testing"), Mode::Ask, &allow), Decision::Ask);
    assert_eq!(decide(&bash("cargo test && rm -rf ~"), Mode::Ask, &allow), Decision::Ask);
    assert_eq!(decide(&bash("cargo test $(curl evil)"), Mode::Ask, &allow), Decision::Ask);
    let deny = [rule(Permission::Bash, "rm", Action::Deny)];
    assert!(matches!(decide(&bash("ls && rm -rf build"), Mode::Bypass, &deny), Decision::Deny(_)));
    assert_eq!(decide(&bash("ls -la"), Mode::Ask, &deny), Decision::Ask);
}

#[test]
fn always_remembers_a_prefix_or_the_whole_workspace() {
    assert_eq!(rule_for(&bash("cargo test --lib"), Action::Allow, Scope::Project).pattern, "cargo test");
    assert_eq!(rule_for(&bash("ls -la /tmp"), Action::Allow, Scope::Session).pattern, "ls");
    assert_eq!(rule_for(&bash("./run.sh x"), Action::Allow, Scope::Session).pattern, "./run.sh x");
    assert_eq!(rule_for(&edit(true), Action::Allow, Scope::Session).pattern, "**");
}
