//! Programs that descend into directories reach what no argument names: a secret (`.env*`,
//! what `[sandbox] hidden` hides) below them, or, when they follow links, a place outside the
//! workspace. And a line whose first command creates links or moves files cannot be judged on
//! the tree as it was before.
//! In the fake workspace `.` holds `.env`, `conf` holds a link out, `huge` too many entries.

use super::paths::disk;
use super::wrongly_allowed;
use crate::permissions::fake::bash;
use crate::permissions::*;

#[test]
fn a_recursive_reader_that_reaches_a_secret_asks_naming_it() {
    let found = [
        wrongly_allowed(
            &["grep -rn TODO src"],
            &["grep -r KEY .", "grep -rn KEY", "grep -r -m 5 KEY", "grep -Rn KEY conf"],
        ),
        wrongly_allowed(&["rg TODO src"], &["rg --hidden KEY", "rg -uu KEY .", "rg -L KEY conf"]),
        wrongly_allowed(&["tar -cf o.tar src"], &["tar -cf o.tar .", "tar -chf o.tar conf", "tar cf o.tar ."]),
        wrongly_allowed(&["zip -r o.zip src"], &["zip -r o.zip .", "zip -r o.zip conf"]),
        wrongly_allowed(&["cp -r src copy"], &["cp -r . copy", "cp -a . copy", "cp -rL conf copy"]),
        wrongly_allowed(&["rsync -a src copy"], &["rsync -a . copy", "rsync -aL conf copy"]),
        wrongly_allowed(&["diff -r src other"], &["diff -r . other", "diff -r conf other"]),
        wrongly_allowed(&["grep -rn TODO src"], &["grep -r KEY huge"]),
    ]
    .concat();
    assert!(found.is_empty(), "{found:#?}");
    let rules = [Rule::new(Permission::Bash, "grep", Action::Allow, Scope::Session)];
    let Decision::Ask(why) = decide(&bash("grep -r KEY ."), Mode::Ask, &rules) else { panic!() };
    assert!(why.contains("`.env`") && why.contains("protected"), "{why}");
    let Decision::Ask(why) = decide(&bash("grep -R KEY conf"), Mode::Ask, &rules) else { panic!() };
    assert!(why.contains("`conf/out` is outside"), "{why}");
    // What stays clear of secrets and links out is still covered.
    for covered in ["grep -rn TODO src", "grep -r KEY conf", "grep -n KEY a.txt", "grep KEY ."] {
        assert_eq!(decide(&bash(covered), Mode::Ask, &rules), Decision::Allow, "{covered}");
    }
    // Wrapped, too; and no rule is offered for a line that reaches a secret, as for `cat .env`.
    let wrapped = "bash -c 'grep -r KEY .'";
    assert_eq!(rule_for(&bash(wrapped), Action::Allow, Scope::Session, &rules), None);
    let exact = [Rule::new(Permission::Bash, &format!("={wrapped}"), Action::Allow, Scope::Session)];
    assert!(matches!(decide(&bash(wrapped), Mode::Ask, &exact), Decision::Ask(_)));
    let rg = [Rule::new(Permission::Bash, "rg", Action::Allow, Scope::Session)];
    // ripgrep skips hidden files such as `.env` unless told otherwise.
    assert_eq!(decide(&bash("rg KEY"), Mode::Ask, &rg), Decision::Allow);
}

#[test]
fn a_line_that_creates_links_or_moves_files_is_not_judged_on_the_tree_before_it() {
    // `x` does not exist when the line is judged; the archive, the commit or the link makes it.
    let found = wrongly_allowed(
        &["tar -xf a.tar", "unzip a.zip", "git checkout main", "ln -s a.txt b.txt", "cp a b", "mv a b", "cat a.txt"],
        &[
            "tar -xf a.tar && cat x/passwd",
            "unzip a.zip; cat x/passwd",
            "git checkout evil && cat x/passwd",
            "ln -s a.txt x && cat x/passwd",
            "cp -P l x && cat x/passwd",
            "mv a x; cat x/passwd",
            "cat x/passwd | tar -xf a.tar",
        ],
    );
    assert!(found.is_empty(), "{found:#?}");
    let rules = [
        Rule::new(Permission::Bash, "tar", Action::Allow, Scope::Session),
        Rule::new(Permission::Bash, "cat", Action::Allow, Scope::Session),
    ];
    let Decision::Ask(why) = decide(&bash("tar -xf a.tar && cat x/passwd"), Mode::Ask, &rules) else { panic!() };
    assert!(why.contains("`tar`"), "{why}");
    // Alone, each is judged as before; an exact rule can still be remembered for the line.
    assert_eq!(decide(&bash("tar -xf a.tar"), Mode::Ask, &rules), Decision::Allow);
    let offered = rule_for(&bash("tar -xf a.tar && cat x/y"), Action::Allow, Scope::Session, &rules).unwrap();
    assert_eq!(offered.pattern, "=tar -xf a.tar && cat x/y");
    // Copying a file makes no link: a line that does so is judged as before.
    let copies = [
        Rule::new(Permission::Bash, "mkdir", Action::Allow, Scope::Session),
        Rule::new(Permission::Bash, "cp", Action::Allow, Scope::Session),
    ];
    assert_eq!(decide(&bash("mkdir -p out && cp a.txt out/"), Mode::Ask, &copies), Decision::Allow);
}

#[test]
fn on_disk_a_recursive_reader_finds_secrets_and_links_out_below_it() {
    let (dir, root, workspace) = disk();
    std::fs::create_dir_all(root.join("src/deep")).unwrap();
    std::fs::write(root.join("src/deep/.env.local"), "KEY=1").unwrap();
    std::fs::create_dir_all(root.join("docs")).unwrap();
    std::os::unix::fs::symlink(dir.path().join("secret"), root.join("docs/out")).unwrap();
    std::fs::write(root.join("docs/a.md"), "a").unwrap();
    let rules = [
        Rule::new(Permission::Bash, "grep", Action::Allow, Scope::Session),
        Rule::new(Permission::Bash, "zip", Action::Allow, Scope::Session),
    ];
    let decide_on_disk = |line: &str| decide(&PermissionRequest::for_command(line, &workspace), Mode::Ask, &rules);
    let Decision::Ask(why) = decide_on_disk("grep -r KEY src") else { panic!("grep -r src must ask") };
    assert!(why.contains("src/deep/.env.local"), "{why}");
    let Decision::Ask(why) = decide_on_disk("grep -R KEY docs") else { panic!("grep -R docs must ask") };
    assert!(why.contains("docs/out") && why.contains("outside"), "{why}");
    // zip follows links unless told to store them (`-y`).
    assert!(matches!(decide_on_disk("zip -r o.zip docs"), Decision::Ask(_)));
    assert_eq!(decide_on_disk("zip -ry o.zip docs"), Decision::Allow);
    assert_eq!(decide_on_disk("grep -r KEY docs"), Decision::Allow, "grep -r does not follow links below");
}

/// What `[sandbox] hidden` hides is a secret to a line's paths as to the file tools: named
/// (any case, through a link) or reached below a directory the program descends into.
#[test]
fn on_disk_a_line_reaching_what_the_sandbox_hides_asks_naming_it() {
    let (_dir, root, workspace) = disk();
    let workspace = workspace.hiding(&[], &["secrets/**".to_owned(), "*.pem".to_owned()], &[]);
    std::fs::create_dir_all(root.join("secrets")).unwrap();
    std::fs::create_dir_all(root.join("src/tls")).unwrap();
    std::fs::write(root.join("secrets/prod.yaml"), "db: hunter2").unwrap();
    std::fs::write(root.join("src/tls/server.PEM"), "KEY").unwrap();
    std::os::unix::fs::symlink("secrets/prod.yaml", root.join("notes.txt")).unwrap();
    let rules = [
        Rule::new(Permission::Bash, "grep", Action::Allow, Scope::Session),
        Rule::new(Permission::Bash, "cat", Action::Allow, Scope::Session),
    ];
    let decide_on_disk = |line: &str| decide(&PermissionRequest::for_command(line, &workspace), Mode::Ask, &rules);
    for (line, named) in [
        ("grep -r KEY src", "src/tls/server.PEM"),
        ("grep -r db .", "secrets/prod.yaml"),
        ("cat notes.txt", "notes.txt"),
        ("cat SECRETS/prod.yaml", "SECRETS/prod.yaml"),
    ] {
        let Decision::Ask(why) = decide_on_disk(line) else { panic!("{line} must ask") };
        assert!(why.contains(named) && why.contains("protected"), "{line}: {why}");
    }
    assert_eq!(decide_on_disk("cat a.txt"), Decision::Allow);
}
