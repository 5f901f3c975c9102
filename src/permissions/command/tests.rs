//! What lines run, wrappers looked through, and which commands stay exact-only, as tables.

use super::*;
use crate::permissions::shell::Command;

fn programs(line: &str) -> Vec<String> {
    let script = shell::parse(line).unwrap_or_else(|err| panic!("{line}: {err}"));
    runs(&script).into_iter().map(|run| run.program.unwrap_or_else(|| "?".to_owned())).collect()
}

fn first(line: &str) -> Command {
    shell::parse(line).unwrap().commands.remove(0)
}

#[test]
fn a_program_is_found_however_it_is_spelled_or_wrapped() {
    let cases: &[(&str, &[&str])] = &[
        ("rm -rf build", &["rm"]),
        ("/bin/rm x", &["rm", "?"]),
        ("./node_modules/.bin/rm x", &["rm", "?"]),
        ("\\rm x", &["rm"]),
        ("'rm' x", &["rm"]),
        ("\"rm\" x", &["rm"]),
        ("$'\\x72m' x", &["rm"]),
        ("command rm x", &["command", "rm"]),
        ("command -p rm x", &["command", "rm"]),
        ("exec rm x", &["exec", "rm"]),
        ("builtin rm", &["builtin", "rm"]),
        ("nohup rm x", &["nohup", "rm"]),
        ("env rm x", &["env", "rm"]),
        ("env -i FOO=1 BAR=2 rm x", &["env", "rm"]),
        ("env -u HOME rm x", &["env", "rm"]),
        ("env -S 'rm -rf x'", &["env", "rm"]),
        ("xargs rm", &["xargs", "rm"]),
        ("xargs -0 -n 1 rm", &["xargs", "rm"]),
        ("xargs -I{} rm {}", &["xargs", "?", "rm"]),
        ("sudo rm x", &["sudo", "rm"]),
        ("sudo -u root -E rm x", &["sudo", "rm"]),
        ("nice -n 10 rm x", &["nice", "rm"]),
        ("nice -10 rm x", &["nice", "rm"]),
        ("timeout 5 rm x", &["timeout", "rm"]),
        ("timeout -s KILL 5s rm x", &["timeout", "rm"]),
        ("time rm x", &["rm"]),
        ("stdbuf -oL rm x", &["stdbuf", "rm"]),
        ("bash -c 'rm -rf x'", &["bash", "rm"]),
        ("sh -c \"ls; rm x\"", &["sh", "ls", "rm"]),
        ("bash -lc 'cd x && rm y'", &["bash", "cd", "rm"]),
        ("bash -o pipefail -c 'rm x'", &["bash", "rm"]),
        ("bash script.sh", &["bash", "?"]),
        ("eval rm x", &["eval", "rm"]),
        ("eval 'rm x; ls'", &["eval", "rm", "ls"]),
        ("find . -name '*.o' -exec rm {} \\;", &["find", "rm"]),
        ("find . -execdir rm {} + -ok ls \\;", &["find", "rm", "ls"]),
        ("su -c 'rm x' root", &["su", "rm"]),
        ("watch -n 1 rm x", &["watch", "rm"]),
        ("env bash -c 'sudo rm x'", &["env", "bash", "sudo", "rm"]),
        ("ls | xargs rm", &["ls", "xargs", "rm"]),
        ("echo $(rm x)", &["rm", "echo"]),
        ("$CMD x", &["?"]),
        ("bash -c \"$X\"", &["bash", "?"]),
        ("env $X rm", &["env", "?"]),
        ("/bin/r? x", &["?"]),
        ("{rm,-rf} x", &["?"]),
    ];
    for (line, expected) in cases {
        assert_eq!(programs(line), *expected, "{line}");
    }
}

#[test]
fn unknown_options_of_a_wrapper_make_every_later_word_a_candidate() {
    let found = programs("ionice --weird value rm x");
    assert!(found.contains(&"rm".to_owned()), "{found:?}");
    let found = programs("parallel rm ::: a b");
    assert!(found.contains(&"rm".to_owned()), "{found:?}");
}

#[test]
fn runaway_wrapping_is_cut_short_as_unknown() {
    let mut deep = "rm x".to_owned();
    for _ in 0..12 {
        deep = format!("bash -c '{}'", deep.replace('\'', "'\\''"));
    }
    let found = programs(&deep);
    assert_eq!(found.last().map(String::as_str), Some("?"), "{found:?}");
    assert!(found.iter().take(MAX_DEPTH + 1).all(|p| p == "bash"), "{found:?}");
    let many = "parallel ".repeat(40) + "rm";
    let found = programs(&many);
    assert!(found.len() <= MAX_RUNS + 2, "{}", found.len());
    assert!(found.contains(&"?".to_owned()) || found.contains(&"rm".to_owned()));
}

#[test]
fn wrappers_interpreters_and_runner_options_are_exact_only() {
    let exact = [
        "bash build.sh",
        "sh -c 'ls'",
        "env FOO=1 ls",
        "env ls",
        "xargs ls",
        "sudo ls",
        "nohup ls",
        "timeout 5 ls",
        "nice ls",
        "python -c 'print(1)'",
        "python3.12 script.py",
        "node -e 'x'",
        "awk '{print $1}' f",
        "sed -n 1p f",
        "perl -e 1",
        "find . -exec ls {} ;",
        "find . -delete",
        "find . -name x -fprint /tmp/y",
        "git -c core.pager=sh log",
        "git -ccore.pager=sh log",
        "git config core.hooksPath x",
        "git clone -u evil x",
        "git rebase -x 'rm x' main",
        "tar --to-command=sh -xf a.tar",
        "tar -I zstd -xf a.tar",
        "rsync -e ssh a b",
        "cargo --config build.rustc-wrapper=x test",
        "cargo install ripgrep",
        "npm exec evil",
        "npm install -g x",
        "pip install x",
        "make -f other.mk",
        "make CC=evil",
        "FOO=1 ls",
        "./run.sh",
        "/usr/bin/cat x",
        "$X",
        "cd ..",
        "export PATH=.",
        "kill 1",
        "ssh host ls",
    ];
    for line in exact {
        assert!(exact_only(&first(line)).is_some(), "{line} must be exact-only");
    }
    for line in [
        "cat README.md",
        "ls -la",
        "cargo test --lib",
        "git status",
        "git add -u",
        "make test",
        "npm test",
        "rm -rf build",
    ] {
        assert_eq!(exact_only(&first(line)), None, "{line}");
    }
}

#[test]
fn a_program_rule_remembers_the_program_and_its_subcommand() {
    let cases = [
        ("cat README.md", "cat"),
        ("ls -la /tmp", "ls"),
        ("grep foo src", "grep"),
        ("cargo test --lib", "cargo test"),
        ("cargo +nightly test", "(exact)"),
        ("git status", "git status"),
        ("git --no-pager log", "(exact)"),
        ("make", "(exact)"),
        ("npm run build -- --watch", "npm run build"),
        ("npm test", "npm test"),
        ("make test", "make test"),
        ("'cat' x", "cat"),
    ];
    for (line, words) in cases {
        let remembered = rule_words(&first(line)).map_or_else(|| "(exact)".to_owned(), |w| w.join(" "));
        assert_eq!(remembered, words, "{line}");
    }
}
