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

#[test]
fn options_are_read_as_the_program_reads_them() {
    use options::Does::{Beyond, Reads, Runs};
    let runs = |line: &str| {
        let words: Vec<&str> = line.split_whitespace().collect();
        options::findings(words[0], &words[1..]).into_iter().map(|(does, _)| does).collect::<Vec<_>>()
    };
    // Abbreviated long options, clusters, tar's old style, `=` values.
    for (line, does) in [
        ("sort --compress-prog=sh a", Runs),
        ("sort --comp=sh a", Runs),
        ("rsync -avze ssh a b", Runs),
        ("tar cIf sh o.tar src", Runs),
        ("tar -cf h:o.tar src", Runs),
        ("rsync a host:b", Runs),
        ("rg -uu x", options::Does::Descends),
        ("find . -files0-from list", Reads),
        ("go test -exec=sh ./...", Runs),
        ("go test --toolexec sh ./...", Runs),
        ("go env -w GOFLAGS=-x", Beyond),
        ("cargo test --config x", Runs),
        ("npm run build --script-shell=sh", Runs),
        ("git -c core.pager=sh log", Runs),
        ("git clone --conf core.x=y a b", Runs),
        ("git push", Beyond),
    ] {
        assert!(runs(line).contains(&does), "{line}: {:?}", runs(line));
    }
    // Options mean what they mean where they stand: `git commit -c` reuses a message, `git log
    // -c` shows combined diffs; `--force-local` makes tar's `h:o.tar` a file.
    for line in
        ["git commit -c HEAD", "git log -c", "tar --force-local -cf h:o.tar src", "sort -u a", "git -C x status"]
    {
        assert!(!runs(line).contains(&Runs), "{line}: {:?}", runs(line));
    }
}

#[test]
fn grep_and_rg_search_the_working_directory_when_given_nothing_to_search() {
    for (line, cwd) in [
        ("grep -r KEY", true),
        ("grep -rn KEY src", false),
        ("grep -r -m 5 KEY", true),
        ("grep -rne KEY", true),
        ("grep -r -e KEY src", false),
        ("grep -r --include '*.rs' KEY", true),
        ("rg --hidden KEY", true),
        ("rg -g '*.rs' KEY src", false),
        ("rg -e KEY -e OTHER", true),
    ] {
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(options::searches_cwd(words[0], &words[1..]), cwd, "{line}");
    }
}

#[test]
fn unknown_programs_are_read_for_the_programs_they_may_run() {
    // Guesses carry the program that was given them; known programs run nothing they are given.
    let script = shell::parse("mytool --run=rm git push 'ls -la'").unwrap();
    let guessed: Vec<(Option<String>, Option<String>)> =
        runs(&script).into_iter().skip(1).map(|run| (run.program, run.through)).collect();
    let by = Some("mytool".to_owned());
    assert!(guessed.contains(&(Some("rm".into()), by.clone())), "{guessed:?}");
    assert!(guessed.contains(&(Some("git".into()), by.clone())), "{guessed:?}");
    assert!(guessed.contains(&(Some("ls".into()), by)), "{guessed:?}");
    assert_eq!(programs("echo rm -rf x"), ["echo"]);
    assert_eq!(programs("git rm x"), ["git"]);
}
