//! Skills found, loaded, and kept inside their directories.

use std::os::unix::fs::symlink;

use super::*;

fn skill(root: &Path, name: &str, text: &str) -> PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("SKILL.md"), text).unwrap();
    dir
}

#[test]
fn skills_are_found_nearest_first_and_loaded_with_their_files() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let ours = project.path().join(".agents/skills");
    let dir = skill(&ours, "release", "---\nname: release\ndescription: Cut a release\n---\nRun the checklist.\n");
    std::fs::create_dir_all(dir.join("scripts")).unwrap();
    std::fs::write(dir.join("scripts/tag.sh"), "git tag").unwrap();
    skill(&home.path().join(".claude/skills"), "release", "---\nname: release\ndescription: the user's\n---\n");
    skill(&home.path().join(".claude/skills"), "notes", "# Notes\nWrite release notes.\n");
    let found = discover(project.path(), Some(home.path()), None);
    let names: Vec<(&str, &str)> = found.iter().map(|s| (s.name.as_str(), s.description.as_str())).collect();
    assert_eq!(names, [("release", "Cut a release"), ("notes", "Write release notes.")]);
    let loaded = load(&found[0]).unwrap();
    assert_eq!(loaded.body.trim(), "Run the checklist.");
    assert_eq!(loaded.files, ["scripts/tag.sh"]);
    let text = loaded.render("release");
    assert!(text.contains("Run the checklist.") && text.contains("- scripts/tag.sh"), "{text}");
}

#[test]
fn a_skill_leading_out_of_its_directory_is_refused() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("id_rsa"), "-----BEGIN OPENSSH PRIVATE KEY-----").unwrap();
    let secret_dir = outside.path().join("secret");
    std::fs::create_dir_all(&secret_dir).unwrap();
    std::fs::write(secret_dir.join("SKILL.md"), "---\nname: secret\ndescription: d\n---\nkey").unwrap();
    let project = tempfile::tempdir().unwrap();
    let root = project.path().join(".claude/skills");
    std::fs::create_dir_all(&root).unwrap();
    // A skill directory that is a link out of the skills directory.
    symlink(&secret_dir, root.join("linked")).unwrap();
    // A SKILL.md that is a link to a key.
    let keyed = root.join("keyed");
    std::fs::create_dir_all(&keyed).unwrap();
    symlink(outside.path().join("id_rsa"), keyed.join("SKILL.md")).unwrap();
    // A file beside a good SKILL.md that links out is not listed.
    let good = skill(&root, "good", "---\nname: good\ndescription: fine\n---\nok");
    symlink(outside.path().join("id_rsa"), good.join("key")).unwrap();
    std::fs::write(good.join("notes.md"), "n").unwrap();

    let found = discover(project.path(), None, None);
    let names: Vec<&str> = found.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["good"], "the escaping skills are skipped");
    assert_eq!(load(&found[0]).unwrap().files, ["notes.md"]);
    for (name, dir) in [("linked", root.join("linked")), ("keyed", keyed)] {
        let planted = SkillInfo { name: name.into(), description: String::new(), dir, root: root.clone() };
        let err = load(&planted).unwrap_err();
        assert!(err.contains("outside") && err.contains("inside its own directory"), "{name}: {err}");
    }
    let dotted =
        SkillInfo { name: "x".into(), description: String::new(), dir: root.join("good/../../.."), root: root.clone() };
    assert!(load(&dotted).unwrap_err().contains("outside"));
}

#[test]
fn odd_names_and_huge_files_are_bounded() {
    let project = tempfile::tempdir().unwrap();
    let root = project.path().join(".agents/skills");
    skill(&root, "bad", "---\nname: \"rm -rf\"\ndescription: d\n---\n");
    let big = format!("---\nname: big\ndescription: d\n---\n{}", "x".repeat(MAX_SKILL_FILE as usize * 2));
    skill(&root, "big", &big);
    let found = discover(project.path(), None, None);
    assert_eq!(found.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["big"]);
    let loaded = load(&found[0]).unwrap();
    assert!(loaded.cut && loaded.body.len() < MAX_SKILL_FILE as usize);
}
