//! The shell reader as a table: what each line runs, word by word, and which lines it refuses.

use super::*;

/// The commands of a line as `program arg …` strings (dynamic words as `<$>`, globs as `<*pattern>`),
/// nested ones prefixed with `^`.
fn commands(line: &str) -> Vec<String> {
    let script = parse(line).unwrap_or_else(|err| panic!("{line:?} should parse: {err}"));
    script
        .commands
        .iter()
        .map(|command| {
            let words: Vec<String> = command.assignments.iter().chain(&command.words).map(shown).collect();
            let redirects: Vec<String> = command
                .redirects
                .iter()
                .map(|r| format!("{}{}", r.op, r.target.as_ref().map(shown).unwrap_or_default()))
                .collect();
            let text = words.into_iter().chain(redirects).collect::<Vec<_>>().join(" ");
            if command.nested { format!("^{text}") } else { text }
        })
        .collect()
}

fn shown(word: &Word) -> String {
    match &word.kind {
        WordKind::Literal => word.text.clone(),
        WordKind::Glob(pattern) => format!("<*{pattern}>"),
        WordKind::Dynamic => "<$>".to_owned(),
    }
}

#[test]
fn quotes_and_escapes_are_removed_the_way_bash_removes_them() {
    let cases: &[(&str, &[&str])] = &[
        ("cat README.md", &["cat README.md"]),
        ("  ls   -la  ", &["ls -la"]),
        ("'rm' -rf x", &["rm -rf x"]),
        ("\"rm\" x", &["rm x"]),
        ("\\rm x", &["rm x"]),
        ("r\"m\" x", &["rm x"]),
        ("r''m x", &["rm x"]),
        ("$'\\x72m' x", &["rm x"]),
        ("$'\\162\\155' x", &["rm x"]),
        ("$'r\\u006d' x", &["rm x"]),
        ("echo 'a b' \"c d\" e\\ f", &["echo a b c d e f"]),
        ("echo \"a \\\"b\\\" \\$c \\d\"", &["echo a \"b\" $c \\d"]),
        ("echo \"$'x'\"", &["echo $'x'"]),
        ("ec\\\nho hi", &["echo hi"]),
        ("echo a # rm -rf /", &["echo a"]),
        ("# nothing at all", &[]),
        ("echo a#b", &["echo a#b"]),
    ];
    for (line, expected) in cases {
        assert_eq!(commands(line), *expected, "{line}");
    }
}

#[test]
fn lists_pipelines_and_redirections_split_into_commands() {
    let cases: &[(&str, &[&str])] = &[
        ("a; b && c || d | e |& f & g", &["a", "b", "c", "d", "e", "f", "g"]),
        ("a\nb\n\nc", &["a", "b", "c"]),
        ("cargo test 2>&1 | tail -20", &["cargo test >&", "tail -20"]),
        ("cat < in > out >> log 2> err &> all", &["cat <in >out >>log >err &>all"]),
        ("ls >/dev/null 2>&1", &["ls >/dev/null >&"]),
        ("echo x >&2", &["echo x >&"]),
        ("exec 3>&-", &["exec >&"]),
        ("cat <<< 'text'", &["cat <<<"]),
        ("cat <<EOF\nhello $(rm -rf x)\nEOF\necho after", &["cat <<", "^rm -rf x", "echo after"]),
        ("cat <<'EOF'\nhello $(rm -rf x)\nEOF", &["cat <<"]),
        ("cat <<-EOF\n\tbody\n\tEOF\nls", &["cat <<-", "ls"]),
        ("FOO=1 BAR=2 env", &["FOO=1 BAR=2 env"]),
        ("a=(1 2 3) ls", &["a= ls"]),
        ("echo FOO=1", &["echo FOO=1"]),
    ];
    for (line, expected) in cases {
        assert_eq!(commands(line), *expected, "{line}");
    }
}

#[test]
fn substitutions_and_nested_commands_are_read_too() {
    let cases: &[(&str, &[&str])] = &[
        ("echo $(rm -rf x)", &["^rm -rf x", "echo <$>"]),
        ("echo \"$(rm -rf x)\"", &["^rm -rf x", "echo <$>"]),
        ("echo `rm -rf x`", &["^rm -rf x", "echo <$>"]),
        ("echo `echo \\`rm x\\``", &["^rm x", "^echo <$>", "echo <$>"]),
        ("diff <(cat a) >(tee b)", &["^cat a", "^tee b", "diff <$> <$>"]),
        ("(cd sub && rm x)", &["^cd sub", "^rm x"]),
        ("{ rm x; }", &["rm x"]),
        ("echo $((1 + $(rm x)))", &["^rm x", "echo <$>"]),
        ("echo ${x:-$(rm y)}", &["^rm y", "echo <$>"]),
        ("$CMD x", &["<$> x"]),
        ("echo $HOME ~/x ~ {a,b} {1..3} a{b,c}d", &["echo <$> <$> <$> <$> <$> <$>"]),
        ("find . -exec rm {} \\;", &["find . -exec rm {} ;"]),
        ("ls *.rs 'quoted*' src/?.rs [ab].txt", &["ls <**.rs> quoted* <*src/?.rs> <*[ab].txt>"]),
        ("ls x\\*y*", &["ls <*x\\*y*>"]),
    ];
    for (line, expected) in cases {
        assert_eq!(commands(line), *expected, "{line}");
    }
}

#[test]
fn control_structures_are_compound_and_their_commands_are_found() {
    let cases: &[(&str, &[&str])] = &[
        ("if rm x; then ls; else cat y; fi", &["rm x", "ls", "cat y"]),
        // The loop assigns its variable each round.
        ("for f in $(ls); do rm \"$f\"; done", &["f=", "^ls", "rm <$>"]),
        ("select PATH in /tmp; do zz; done", &["PATH=", "zz"]),
        // `coproc NAME` only before a compound command; NAME is assigned.
        ("coproc evil { rm x; }", &["evil=", "rm x"]),
        ("coproc evil (rm x)", &["evil=", "^rm x"]),
        ("coproc rm x", &["rm x"]),
        ("coproc { rm x; }", &["rm x"]),
        ("for ((i=0; i<3; i++)); do echo $i; done", &["echo <$>"]),
        ("while true; do sleep 1; done", &["true", "sleep 1"]),
        ("case $x in a|b) rm a;; (c) ls;; *) echo no;; esac", &["^rm a", "^ls", "^echo no"]),
        ("case x in\n  a) rm a ;;\nesac; ls", &["^rm a", "ls"]),
        ("f() { rm x; }; f", &["rm x", "f"]),
        ("function g { rm x; }", &["rm x"]),
        ("[[ -f a && $(rm x) ]] && ls", &["^rm x", "ls"]),
        ("(( x > 1 )) && ls", &["ls"]),
        ("! rm x", &["rm x"]),
        ("time rm x", &["rm x"]),
        ("time -p rm x", &["rm x"]),
    ];
    for (line, expected) in cases {
        let script = parse(line).unwrap();
        assert!(script.compound, "{line} is compound");
        assert_eq!(commands(line), *expected, "{line}");
    }
    for plain in ["ls -la", "a | b && c; d &", "cat <<EOF\nx\nEOF", "echo $(date)"] {
        assert!(!parse(plain).unwrap().compound, "{plain} is not compound");
    }
}

#[test]
fn lines_bash_would_refuse_are_refused_with_where() {
    let cases = [
        ("echo 'unterminated", "single quote"),
        ("echo \"unterminated", "double quote"),
        ("echo $(rm x", "never closed"),
        ("echo `rm x", "backquote"),
        ("echo ${x", "`${`"),
        ("ls )", "unexpected `)`"),
        ("(ls", "never closed"),
        ("ls >", "no target"),
        ("ls > ;", "no target"),
        ("echo foo(bar)", "unexpected `(`"),
        ("case x in a) ls", "esac"),
        ("[[ -f a", "`[[`"),
        ("ls ;; ls", "`;;`"),
        ("$'\\x72", "never closed"),
    ];
    for (line, why) in cases {
        let err = parse(line).unwrap_err();
        assert!(err.to_string().contains(why), "{line}: {err}");
    }
}

#[test]
fn assignments_are_told_apart_from_arguments() {
    for yes in ["A=1", "_x=", "a_1+=2", "arr[3]=x"] {
        assert!(is_assignment(yes), "{yes}");
    }
    for no in ["=1", "1a=2", "a-b=3", "ls", "--opt=1", "a[1=2"] {
        assert!(!is_assignment(no), "{no}");
    }
}

#[test]
fn a_long_or_deep_line_is_read_in_linear_time() {
    let long = "echo x; ".repeat(20_000);
    assert_eq!(parse(&long).unwrap().commands.len(), 20_000);
    let deep = |n: usize| format!("{}ls{}", "$(".repeat(n), ")".repeat(n));
    assert_eq!(parse(&deep(50)).unwrap().commands.len(), 51, "50 computed commands and `ls`");
    assert!(parse(&deep(100_000)).unwrap_err().why.contains("nested too deeply"));
}
