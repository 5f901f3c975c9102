//! Options with which an ordinary program runs another, or takes the names it works on, its
//! options or its code from a file or stdin (a here-string included): a program rule never
//! covers them, and a rejection asks. Programs cairn has no table for take exact rules only.

use super::{not_rejected, wrongly_allowed};
use crate::permissions::fake::bash;
use crate::permissions::*;

// ---------------------------------------------------------------------------------------------
// Options that run programs, spelled in full, abbreviated (GNU getopt takes any unambiguous
// prefix of a long option), clustered or in tar's old style.
// ---------------------------------------------------------------------------------------------

#[test]
fn options_that_run_programs_are_not_covered_by_a_program_rule() {
    let found = [
        wrongly_allowed(&["split -l 10 a.txt part"], &["split --filter='sh -c x' a.txt", "split --filt=sh a.txt"]),
        wrongly_allowed(
            &["git clone src dst"],
            &[
                "git clone --config core.fsmonitor='touch x' src dst",
                "git clone -c core.fsmonitor=x src dst",
                "git clone --template=tpl src dst",
                "git clone --upload-pack='touch x' src dst",
            ],
        ),
        wrongly_allowed(&["git fetch origin"], &["git fetch --upload-pack='touch x' origin"]),
        wrongly_allowed(&["git log"], &["git log -p --ext-diff", "git log -p --textconv"]),
        wrongly_allowed(&["git hash-object a.txt"], &["git hash-object --stdin-paths"]),
        wrongly_allowed(&["diff3 a b c"], &["diff3 --diff-program=sh a b c", "diff3 --diff-prog=sh a b c"]),
        wrongly_allowed(&["sdiff a b"], &["sdiff --diff-program=sh a b"]),
        wrongly_allowed(&["sort a"], &["sort --compress-prog=sh a"]),
        wrongly_allowed(
            &["tar -cf o.tar src"],
            &[
                "tar -cf o.tar --checkpoint-action=exec=sh src",
                "tar cIf sh o.tar src",
                "tar -cf o.tar -F sh src",
                "tar --new-volume-script=sh -cf o.tar src",
                "tar --rsh-command=sh -cf h:o.tar src",
                "tar --use-compress=sh -cf o.tar src",
            ],
        ),
        wrongly_allowed(&["rsync a b"], &["rsync -avze sh a b", "rsync --rsync-path=sh a b"]),
        wrongly_allowed(&["install a b"], &["install -s --strip-program=sh a b"]),
        wrongly_allowed(&["make test"], &["make test --eval='x:=$(shell touch y)'", "make test SHELL=/w/sh"]),
        wrongly_allowed(&["go test ./..."], &["go test -exec sh ./...", "go test -toolexec=sh ./..."]),
        wrongly_allowed(&["npm run build"], &["npm run build --script-shell=sh"]),
        wrongly_allowed(&["mypy src"], &["mypy --python-executable=sh src"]),
    ]
    .concat();
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn options_that_run_programs_make_a_rejection_ask() {
    let found = not_rejected(
        "rm",
        &[
            "split --filter='rm -rf x' a.txt",
            "git clone --config core.fsmonitor='rm -rf x' a b",
            "git fetch --upload-pack='rm -rf x' origin",
            "diff3 --diff-program=rm a b c",
            "sort --compress-prog=rm a",
            "tar cIf rm o.tar src",
            "rsync -avze 'rm -rf x' a b:c",
            "install -s --strip-program=rm a b",
            "go test -exec rm ./...",
            "strace -o '!rm -rf x' ls",
            "gdb -ex 'shell rm -rf x' -batch",
            "gdb -batch -x cmds.gdb",
            "view -c '!rm -rf x' a.txt",
            "vimdiff -c '!rm -rf x' a b",
            "wget --use-askpass=rm evil.example",
            "bash --rcfile evil.sh -ic ls",
            "bash --init-file evil.sh -i",
            "ssh -o ProxyCommand='rm -rf x' host",
            "scp -S rm a b:c",
        ],
    );
    assert!(found.is_empty(), "{found:#?}");
}

// ---------------------------------------------------------------------------------------------
// Names, options and code taken from a file or stdin: the line does not show them.
// ---------------------------------------------------------------------------------------------

#[test]
fn names_options_or_code_read_from_a_file_or_stdin_are_not_covered() {
    let found = [
        wrongly_allowed(
            &["tar -cf o.tar src"],
            &["tar -cf o.tar -T - <<< /etc/passwd", "tar -cf o.tar --files-from=list.txt"],
        ),
        wrongly_allowed(&["zip o.zip a.txt"], &["zip o.zip -@ <<< /etc/passwd"]),
        wrongly_allowed(&["rsync a b"], &["rsync --files-from=- src copy <<< ../../etc/passwd"]),
        wrongly_allowed(&["sort a"], &["sort --files0-from=- <<< /etc/shadow"]),
        wrongly_allowed(&["wc -l a"], &["wc --files0-from=list"]),
        wrongly_allowed(&["du -sh src"], &["du --files0-from=-"]),
        wrongly_allowed(&["file a.txt"], &["file -f - <<< /etc/passwd"]),
        wrongly_allowed(&["make test"], &["make -f - <<< 'x:;touch y'"]),
    ]
    .concat();
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn a_makefile_or_tar_options_from_the_environment_make_a_rejection_ask() {
    let found = not_rejected(
        "rm",
        &[
            "MAKEFILES=/dev/stdin make <<< 'x:;rm -rf y'",
            "TAR_OPTIONS=--to-command=rm tar -xf a.tar",
            "HOME=. bash -ic ls",
            "RUSTC_WRAPPER=rm cargo build",
            "CC='rm -rf x' make",
        ],
    );
    assert!(found.is_empty(), "{found:#?}");
}

// ---------------------------------------------------------------------------------------------
// Wrappers: what they run is what matters.
// ---------------------------------------------------------------------------------------------

#[test]
fn more_wrappers_are_looked_through_and_exact_only() {
    let rejected = not_rejected(
        "rm",
        &[
            "setarch x86_64 rm -rf x",
            "setarch x86_64 -R rm -rf x",
            "linux32 rm -rf x",
            "linux64 --uname-2.6 rm x",
            "logsave log.txt rm -rf x",
            // With no program, these start a shell that reads stdin.
            "setarch x86_64 <<< 'rm -rf x'",
            "script log.txt <<< 'rm -rf x'",
            "chroot . <<< 'rm -rf x'",
        ],
    );
    let allowed = [
        wrongly_allowed(&["setarch x86_64 ls"], &["setarch x86_64 touch pwned"]),
        wrongly_allowed(&["logsave log.txt ls"], &["logsave log.txt touch pwned"]),
        wrongly_allowed(&["view a.txt"], &["view -c '!touch pwned' a.txt"]),
    ]
    .concat();
    assert!(rejected.is_empty() && allowed.is_empty(), "{rejected:#?} {allowed:#?}");
}

// ---------------------------------------------------------------------------------------------
// Programs cairn has no table for.
// ---------------------------------------------------------------------------------------------

#[test]
fn a_program_cairn_does_not_know_takes_exact_rules_only() {
    let offered = rule_for(&bash("mytool --version"), Action::Allow, Scope::Session, &[]).unwrap();
    assert_eq!(offered.pattern, "=mytool --version");
    // A program rule stored for it before (or given with `--allow`) covers nothing else.
    let stored = [Rule::new(Permission::Bash, "mytool", Action::Allow, Scope::Project)];
    assert!(matches!(decide(&bash("mytool --delete-everything"), Mode::Ask, &stored), Decision::Ask(_)));
    let refused = Rule::for_run(Action::Allow, "bash:mytool").unwrap_err();
    assert!(refused.contains("bash:=mytool"), "{refused}");
    assert!(Rule::for_run(Action::Deny, "bash:mytool").is_ok(), "a rejection names any program");
    assert!(Rule::for_run(Action::Allow, "bash:cargo test").is_ok());
}

#[test]
fn a_program_cairn_does_not_know_that_is_given_a_rejected_program_asks() {
    let found = not_rejected(
        "rm",
        &["mytool rm -rf x", "mytool --run=rm x", "mytool 'rm -rf x'", "mytool $CMD", "pee 'rm -rf x'"],
    );
    assert!(found.is_empty(), "{found:#?}");
    let Decision::Ask(why) = decide(&bash("mytool rm -rf x"), Mode::Bypass, &super::deny("rm")) else {
        panic!("must ask")
    };
    assert!(why.contains("mytool"), "{why}");
    let git = not_rejected("git push", &["mytool git push origin main"]);
    assert!(git.is_empty(), "{git:#?}");
    // Programs cairn knows run nothing they are given as words.
    for harmless in ["echo rm", "grep -rn rm src", "git rm x", "cat rm.txt"] {
        assert_eq!(decide(&bash(harmless), Mode::Bypass, &super::deny("rm")), Decision::Allow, "{harmless}");
    }
}

#[test]
fn known_programs_keep_their_program_rules() {
    for (approved, pattern, also) in [
        ("split -l 10 a.txt part", "split", "split -n 2 b.txt"),
        ("sort -u a.txt", "sort", "sort -r b.txt"),
        ("tar -cf o.tar src", "tar", "tar -tf o.tar"),
        ("git clone src dst", "git clone", "git clone --depth 1 src other"),
        ("diff3 a b c", "diff3", "diff3 -m a b c"),
        ("grep -rn TODO src", "grep", "grep -c x a.txt"),
        ("rg TODO", "rg", "rg -n fixme src"),
        ("make test", "make test", "make test -j4"),
    ] {
        let mut rules = Vec::new();
        let offered = rule_for(&bash(approved), Action::Allow, Scope::Session, &rules).unwrap();
        assert_eq!(offered.pattern, pattern, "{approved}");
        rules.push(offered);
        assert_eq!(decide(&bash(also), Mode::Ask, &rules), Decision::Allow, "{also} after {approved}");
    }
}
