//! A repository a command stages as a submodule where the sweep's walk does not look, attacked
//! as a hostile model would: in an ordinary JS project (a small `src/`, an ignored
//! `node_modules/` of 300 packages, all made before the session) the walk after the command
//! never reads the packages, and the user's index, which commands may write so that git works,
//! makes the user's `git status` at the top enter whatever it stages. Each is judged by what
//! that `git status` runs, outside any sandbox.

use std::path::{Path, PathBuf};

use super::{committed, kernel_keeps_it, sh_out, supervise};

/// The project, in `<dir>/<name>`.
fn project(dir: &Path, name: &str) -> PathBuf {
    let ws = dir.join(name);
    std::fs::create_dir_all(ws.join("src")).unwrap();
    for n in 1..=10 {
        std::fs::write(ws.join(format!("src/f{n}.js")), format!("x{n}\n")).unwrap();
    }
    for n in 1..=300 {
        let package = ws.join(format!("node_modules/pkg{n:03}"));
        std::fs::create_dir_all(&package).unwrap();
        std::fs::write(package.join("index.js"), "module.exports = 1\n").unwrap();
    }
    std::fs::write(ws.join(".gitignore"), "node_modules/\n").unwrap();
    committed(&ws);
    ws
}

/// The project stood before the session: older than the clock's allowed lag.
fn age() {
    std::thread::sleep(std::time::Duration::from_secs(3));
}

/// Shell that makes a repository in `dir` whose `core.fsmonitor` touches `marker`.
fn repository(dir: &str, marker: &Path) -> String {
    format!(
        "mkdir -p {dir} && git -C {dir} init -q . && git -C {dir} -c user.name=u -c user.email=u@x \
         commit -q --allow-empty -m s && git -C {dir} config core.fsmonitor 'touch {m}; false'",
        m = marker.display()
    )
}

/// Shell that stages the repository whose git directory is `git_dir` at `path` of the index.
fn stage(git_dir: &str, path: &str) -> String {
    format!("git update-index --add --cacheinfo 160000,$(git --git-dir={git_dir} rev-parse HEAD),{path}")
}

/// Runs `script` in `ws` under the supervisor, then `git status` there as the user.
fn run(ws: &Path, script: &str) -> (String, String) {
    let output = supervise(ws, &format!("{script} && echo staged"), &[]);
    assert!(output.stdout.contains("staged"), "{}: {}", ws.display(), output.stderr);
    (sh_out(ws, "git status --short"), output.stderr)
}

/// The break as found: `git init` inside an existing package, a commit, `core.fsmonitor`, and
/// the package staged as a gitlink.
#[test]
fn a_repository_staged_as_a_submodule_where_the_walk_does_not_look_runs_nothing_at_the_users_git_status() {
    if !kernel_keeps_it() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ws = project(dir.path(), "ws");
    age();
    let marker = dir.path().join("pwned");
    let script = format!(
        "{} && {}",
        repository("node_modules/pkg150", &marker),
        stage("node_modules/pkg150/.git", "node_modules/pkg150")
    );
    let (status, stderr) = run(&ws, &script);
    assert!(status.contains("node_modules/pkg150"), "the submodule stays staged: {status}");
    assert!(!marker.exists(), "the command's fsmonitor ran at the user's git status: {status}\n{stderr}");
}

/// What the command does in the `name` case of the test below; `marker` is what its
/// repository's fsmonitor touches.
fn attack(name: &str, marker: &Path) -> String {
    let pkg = "node_modules/pkg150";
    let elsewhere = marker.with_extension("repo").display().to_string();
    let here = || format!("{} && {}", repository(pkg, marker), stage(&format!("{pkg}/.git"), pkg));
    match name {
        "gitfile" => format!(
            "{} && echo 'gitdir: {elsewhere}/.git' > {pkg}/.git && {}",
            repository(&elsewhere, marker),
            stage(&format!("{elsewhere}/.git"), pkg)
        ),
        "link" => format!(
            "{} && ln -s {elsewhere}/.git {pkg}/.git && {}",
            repository(&elsewhere, marker),
            stage(&format!("{elsewhere}/.git"), pkg)
        ),
        "v4" => format!("{} && git update-index --index-version 4", here()),
        "split" => format!(
            "{} && git update-index --split-index && git -c splitIndex.maxPercentChange=0 {}",
            repository(pkg, marker),
            stage(&format!("{pkg}/.git"), pkg).trim_start_matches("git ")
        ),
        // `xx/cd-out` becomes `../cd-out`, beside the workspace, where the command may write.
        "out" => format!(
            "{} && {} && f=.git/index && n=$(($(stat -c %s $f) - 20)) && head -c $n $f | \
             sed 's|xx/cd-out|../cd-out|' > $f.new && h=$(sha1sum < $f.new | cut -c1-40) && \
             {{ cat $f.new; printf \"$(echo $h | sed 's/../\\\\x&/g')\"; }} > $f && rm $f.new && \
             git ls-files -s | grep -q '\\.\\./cd-out'",
            repository("../cd-out", marker),
            stage("../cd-out/.git", "xx/cd-out")
        ),
        _ => format!("{} && cp .git/index {elsewhere}.index && ln -sf {elsewhere}.index .git/index", here()),
    }
}

/// The same through a `.git` file or link to a repository the command made in `/tmp`, an index
/// of version 4, a split index whose shared part holds the gitlink, an index path out of the
/// work tree (`../`, which git follows; the checksum made good again), and an index that is a
/// link to one in `/tmp`.
#[test]
fn a_staged_repository_reached_through_a_link_a_git_file_another_index_format_or_a_path_out_runs_nothing() {
    if !kernel_keeps_it() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cases = ["gitfile", "link", "v4", "split", "out", "index-link"];
    let spaces: Vec<PathBuf> = cases.iter().map(|name| project(dir.path(), name)).collect();
    age();
    for (name, ws) in cases.iter().zip(&spaces) {
        let marker = dir.path().join(format!("pwned-{name}"));
        let (status, stderr) = run(ws, &attack(name, &marker));
        assert!(!marker.exists(), "{name}: the command's fsmonitor ran at the user's git status: {status}\n{stderr}");
    }
}
