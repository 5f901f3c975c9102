//! The specs of what an edit introduced: the multiset comparison that survives line shifts,
//! the bounded section the result gets, and the time an edit is given for its checks.

use super::*;
use crate::config::Checks;

fn found(line: u32, severity: Severity, code: Option<&str>, message: &str) -> Diagnostic {
    Diagnostic {
        path: "src/a.rs".into(),
        line,
        column: Some(1),
        severity,
        code: code.map(str::to_owned),
        message: message.into(),
    }
}

fn checker() -> Checker {
    Checker {
        glob: "**/*.rs".into(),
        matcher: globset::Glob::new("**/*.rs").map(|glob| glob.compile_matcher()).unwrap(),
        command: "cargo check".into(),
        timeout: Duration::from_secs(30),
    }
}

#[test]
fn an_old_error_moved_down_by_the_edit_is_not_new() {
    let old = [found(3, Severity::Error, Some("E0308"), "mismatched types")];
    let new = vec![found(9, Severity::Error, Some("E0308"), "mismatched types")];
    assert_eq!(introduced(&old, new), None);
}

#[test]
fn the_same_message_once_more_is_new_once() {
    let old = [found(3, Severity::Error, None, "x")];
    let new = vec![found(3, Severity::Error, None, "x"), found(7, Severity::Error, None, "x")];
    assert_eq!(introduced(&old, new).unwrap().len(), 1);
}

#[test]
fn severity_and_code_tell_diagnostics_apart() {
    let old = [found(3, Severity::Warning, None, "x"), found(4, Severity::Error, Some("E1"), "y")];
    let new = vec![found(3, Severity::Error, None, "x"), found(4, Severity::Error, Some("E2"), "y")];
    assert_eq!(introduced(&old, new).unwrap().len(), 2);
}

#[test]
fn the_section_counts_lists_errors_first_and_is_bounded() {
    let fresh = introduced(
        &[],
        vec![found(2, Severity::Warning, None, "unused"), found(5, Severity::Error, Some("E0308"), "mismatched types")],
    )
    .unwrap();
    assert_eq!(
        section(&checker().command, "src/a.rs", &fresh),
        "The edit introduced 1 error and 1 warning in src/a.rs (`cargo check`):\n\
         src/a.rs:5:1: error[E0308]: mismatched types\nsrc/a.rs:2:1: warning: unused"
    );

    let many: Vec<Diagnostic> = (1..=50).map(|line| found(line, Severity::Error, None, "boom")).collect();
    let text = section(&checker().command, "src/a.rs", &many);
    assert!(text.starts_with("The edit introduced 50 errors in src/a.rs"));
    assert_eq!(text.lines().count(), 1 + MOST_SHOWN + 1);
    assert!(text.ends_with("… and 30 more."), "{text}");

    let long: Vec<Diagnostic> = (1..=5).map(|line| found(line, Severity::Error, None, &"é".repeat(1500))).collect();
    let text = section(&checker().command, "src/a.rs", &long);
    let listed = text.lines().skip(1).filter(|line| line.starts_with("src/a.rs")).collect::<Vec<_>>();
    assert!(listed.iter().map(|line| line.len() + 1).sum::<usize>() <= MOST_BYTES, "{}", text.len());
    assert_eq!(listed.len(), 1);
    assert!(text.ends_with("… and 4 more."), "{text}");
}

#[test]
fn only_edits_get_time_for_checks() {
    let dir = tempfile::tempdir().unwrap();
    let checks = Checks { after_edit: vec![checker()] };
    let ctx = ToolContext { checks: std::sync::Arc::new(checks), ..crate::tools::tests::context(dir.path()) };
    assert_eq!(allowance(&ctx, Access::Write), Duration::from_secs(60), "no language server here");
    assert_eq!(allowance(&ctx, Access::Execute), Duration::ZERO);
    let ctx = crate::tools::tests::context(dir.path());
    assert_eq!(allowance(&ctx, Access::Write), Duration::ZERO);
}
