//! The cap on guarded places on a real disk: a flood of secrets gives way to the directory
//! holding it, places each alone in deep directories give way level by level, a root is never
//! covered, and a root holding more than the cap stays above it (the command is then refused).

use std::fs;
use std::path::Path;

use super::*;

fn touch(path: &Path) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, "x").unwrap();
}

fn nothing_named() -> Names {
    Names::default()
}

#[test]
fn thousands_of_secrets_a_command_made_give_way_to_their_directories() {
    let dir = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(dir.path()).unwrap();
    let made = MAX_GUARDED + 500;
    for i in 0..made {
        touch(&root.join(format!("flood/d{i}/.env")));
    }
    touch(&root.join("app/.env"));
    let places = find(std::slice::from_ref(&root), &[], &nothing_named(), true, &Home::default());
    assert!(places.hidden.len() + places.read_only.len() <= MAX_GUARDED, "{}", places.hidden.len());
    let covered = |path: &Path| path.ancestors().any(|dir| places.hidden.iter().any(|hidden| hidden == dir));
    for i in 0..made {
        assert!(covered(&root.join(format!("flood/d{i}/.env"))), "d{i}/.env is not covered");
    }
    assert!(places.hidden.contains(&root.join("flood")), "the directory holding them is covered");
    assert!(places.hidden.contains(&root.join("app/.env")), "a secret elsewhere stays covered alone");
    assert!(!covered(&root), "the root itself is never covered");
}

#[test]
fn a_root_that_itself_holds_more_secrets_than_the_cap_stays_above_it() {
    let dir = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(dir.path()).unwrap();
    for i in 0..=MAX_GUARDED {
        touch(&root.join(format!(".env.{i}")));
    }
    let places = find(std::slice::from_ref(&root), &[], &nothing_named(), true, &Home::default());
    assert_eq!(places.hidden.len(), MAX_GUARDED + 1, "every one is still covered");
}

/// The eighth pass's B7: with roots nested, the directory holding the most was a root or held
/// one, and its cover took a workspace away.
#[test]
fn a_flood_never_has_a_root_or_a_directory_holding_one_covered() {
    let dir = tempfile::tempdir().unwrap();
    let outer = fs::canonicalize(dir.path()).unwrap();
    let inner = outer.join("pkg/b");
    for i in 0..MAX_GUARDED + 100 {
        touch(&inner.join(format!("flood/d{i}/.env")));
    }
    let places = find(&[outer.clone(), inner.clone()], &[], &nothing_named(), true, &Home::default());
    assert!(places.fitted);
    assert!(places.hidden.contains(&inner.join("flood")), "{:?}", &places.hidden[..3]);
    for kept in [&outer, &outer.join("pkg"), &inner] {
        assert!(!places.hidden.contains(kept), "{} was covered", kept.display());
    }
}

/// The ninth pass's B3: 1,001 `.env` files each alone at `dN/b/c/` took 4,008 mounts with the
/// directories above them, and every command was refused, the places being under the cap.
#[test]
fn secrets_each_alone_deep_in_their_directories_give_way_until_the_mounts_fit() {
    let dir = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(dir.path()).unwrap();
    for i in 0..MAX_MOUNTS / 4 + 1 {
        touch(&root.join(format!("d{i}/b/c/.env")));
    }
    let places = find(std::slice::from_ref(&root), &[], &nothing_named(), true, &Home::default());
    assert!(places.fitted);
    assert!(places.check_count().is_ok(), "{}", places.anchors.len());
    let covered = |path: &Path| path.ancestors().any(|dir| places.hidden.iter().any(|hidden| hidden == dir));
    for i in 0..MAX_MOUNTS / 4 + 1 {
        assert!(covered(&root.join(format!("d{i}/b/c/.env"))), "d{i}/b/c/.env is not covered");
    }
}

/// The tenth pass's B5: directories holding 40, 39, … 3 secrets and 1,100 holding two each;
/// taking only the directories holding the most, one count a round, the 32 rounds ran out and
/// every command was refused.
#[test]
fn a_ladder_of_directories_holding_ever_fewer_secrets_fits_in_a_few_rounds() {
    let dir = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(dir.path()).unwrap();
    for held in 3..=40 {
        for i in 0..held {
            touch(&root.join(format!("ladder{held}/.env.{i}")));
        }
    }
    for i in 0..1_100 {
        touch(&root.join(format!("d{i}/b/.env")));
        touch(&root.join(format!("d{i}/b/.env.local")));
    }
    let places = find(std::slice::from_ref(&root), &[], &nothing_named(), true, &Home::default());
    assert!(places.fitted);
    assert!(places.check_count().is_ok(), "{} places", places.hidden.len());
    let covered = |path: &Path| path.ancestors().any(|dir| places.hidden.iter().any(|hidden| hidden == dir));
    assert!(covered(&root.join("ladder3/.env.0")) && covered(&root.join("d1099/b/.env.local")));
}

/// Thousands of links a command made to files outside the roots, each in a directory of its
/// own, give way past the limits instead of refusing every later command: the command could
/// read those files by their own paths. The same links of the user's (older than cairn) keep
/// their covers, and the command is refused as before, naming what to do.
#[test]
fn links_a_command_made_to_thousands_of_outside_files_give_way_past_the_limits() {
    let dir = tempfile::tempdir().unwrap();
    let base = fs::canonicalize(dir.path()).unwrap();
    let root = base.join("work");
    touch(&root.join("app/.env"));
    let made = MAX_MOUNTS / 2 + 100;
    for i in 0..made {
        let target = base.join(format!("out/d{i}/secret.env"));
        touch(&target);
        std::os::unix::fs::symlink(&target, root.join(format!(".env.{i}"))).unwrap();
    }
    let kept = base.join("out/d0/secret.env");
    let find = |started| {
        let roots = std::slice::from_ref(&root);
        find_knowing(
            roots,
            std::slice::from_ref(&kept),
            &nothing_named(),
            true,
            &Home::default(),
            remembered::Known::default(),
            Some(started),
        )
    };
    let after = find(std::time::SystemTime::UNIX_EPOCH);
    assert!(after.check_count().is_ok(), "{:?}", after.check_count());
    let covered = |path: &Path| path.ancestors().any(|dir| after.hidden.iter().any(|hidden| hidden == dir));
    assert!(covered(&root.join("app/.env")), "the workspace's own secrets stay covered");
    assert!(after.hidden.contains(&kept), "what the policy hides stays hidden");
    assert!(!after.hidden.contains(&base.join("out/d1/secret.env")));
    assert!(after.fitted, "what is left is not remembered");
    let before = find(std::time::SystemTime::now() + std::time::Duration::from_secs(60));
    assert!(before.hidden.contains(&base.join("out/d1/secret.env")), "the user's links keep their covers");
    assert!(before.check_count().is_err());
}
