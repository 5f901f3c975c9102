//! The shell's own state as a way around a rule: variables that change what a name runs, set
//! by builtins rather than by `NAME=value`; assignments that `env` reads differently from bash;
//! `coproc`, a NUL in `$'…'`; redirections that write.

use super::{not_rejected, wrongly_allowed};
use crate::permissions::fake::bash;
use crate::permissions::*;

// ---------------------------------------------------------------------------------------------
// Builtins that set variables (each line checked against bash 5.2: `zz` runs `/tmp/zz`).
// ---------------------------------------------------------------------------------------------

#[test]
fn builtins_that_set_what_a_name_runs_make_a_rejection_ask() {
    let found = not_rejected(
        "rm",
        &[
            "printf -v PATH %s /tmp; zz -rf x",
            "read PATH <<< /tmp; zz -rf x",
            "read -r BASH_ENV <<< x.sh; bash -c :",
            "mapfile -t PATH <<< /tmp; zz -rf x",
            "readarray -t PATH <<< /tmp; zz -rf x",
            "getopts a PATH -a; zz",
            "wait -p PATH; zz",
            "unset PATH; zz -rf x",
            "declare -n r=PATH; r=/tmp; zz -rf x",
            "local -n r=PATH",
            "export IFS=/",
            "readonly LD_PRELOAD=./x.so",
            "let PATH=1; zz",
            "for PATH in /tmp; do zz -rf x; done",
            "select PATH in /tmp; do zz; done",
            "coproc PATH { :; }; zz -rf x",
        ],
    );
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn builtins_that_set_variables_are_not_covered_by_a_program_rule() {
    // A `printf` or `read` rule must not cover setting `PATH` for the commands after it.
    let found = [
        wrongly_allowed(&["printf '%s\\n' a", "ls"], &["printf -v PATH %s /w/bin; ls", "printf -vPATH x"]),
        wrongly_allowed(&["read -r x <<< a", "ls"], &["read -r PATH <<< /w/bin; ls"]),
        wrongly_allowed(&["wait", "ls"], &["wait -p PATH; ls"]),
    ]
    .concat();
    assert!(found.is_empty(), "{found:#?}");
}

// ---------------------------------------------------------------------------------------------
// Words read as bash and env read them.
// ---------------------------------------------------------------------------------------------

#[test]
fn env_takes_any_word_with_an_equals_sign_as_an_assignment() {
    // GNU env sets `X%` (and even an empty name) and runs the next word.
    let found = not_rejected("rm", &["env X%=1 rm -rf x", "env =1 rm x", "env 'a b=1' rm x", "env -i X.Y=1 rm x"]);
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn a_nul_in_an_ansi_c_quote_ends_its_text_as_in_bash() {
    // bash: `$'rm\0x'` is `rm`, `$'r\0x'm` is `rm`.
    let found = not_rejected(
        "rm",
        &["$'rm\\0x' -rf y", "$'r\\0x'm -rf y", "$'rm\\x00x' -rf y", "$'rm\\u0000' x", "$'rm\\c@' x"],
    );
    assert!(found.is_empty(), "{found:#?}");
    let allowed = wrongly_allowed(&["cat README.md"], &["cat $'/etc/passwd\\0x'"]);
    assert!(allowed.is_empty(), "{allowed:#?}");
}

#[test]
fn a_named_coproc_runs_its_compound_command() {
    // `coproc NAME { …; }`: NAME is a name, not the program.
    let found = not_rejected(
        "rm",
        &["coproc evil { rm -rf x; }", "coproc evil (rm -rf x)", "coproc evil while rm -rf x; do :; done"],
    );
    assert!(found.is_empty(), "{found:#?}");
}

// ---------------------------------------------------------------------------------------------
// Redirections.
// ---------------------------------------------------------------------------------------------

#[test]
fn every_redirection_that_opens_a_file_for_writing_is_a_write() {
    let rules = vec![Rule::new(Permission::Bash, "echo", Action::Allow, Scope::Session)];
    for line in [
        "echo x >&notes.txt",
        "echo x >& notes.txt",
        "echo x &>notes.txt",
        "echo x &>>notes.txt",
        "echo x >|notes.txt",
        "echo x <>notes.txt",
        "echo x 3<>notes.txt",
        ">notes.txt echo x",
    ] {
        match decide(&bash(line), Mode::Ask, &rules) {
            Decision::Ask(why) => assert!(why.contains("writes `notes.txt`"), "{line}: {why}"),
            other => panic!("{line}: {other:?}"),
        }
        assert_eq!(decide(&bash(line), Mode::AcceptEdits, &rules), Decision::Allow, "{line} inside");
    }
    for copy in ["echo x >&2", "echo x 2>&1", "echo x >&-", "echo x 1>&2-"] {
        assert_eq!(decide(&bash(copy), Mode::Ask, &rules), Decision::Allow, "{copy} copies a descriptor");
    }
}

#[test]
fn a_quoted_value_does_not_stop_an_assignment() {
    // bash: `CC='rm -rf x' make` assigns `CC` and runs `make`; only the name must be unquoted.
    let found = not_rejected("rm", &["CC='rm -rf x' make", "PATH=\"/tmp\" zz -rf x", "BASH_ENV='x.sh' bash -c :"]);
    assert!(found.is_empty(), "{found:#?}");
    let request = bash("'CC'=x make");
    let Subject::Command(facts) = &request.subject else { panic!() };
    let script = facts.script.as_ref().unwrap();
    assert!(script.commands[0].assignments.is_empty(), "a quoted name is a word: bash runs `CC=x`");
}
