//! Opening judged targets as a hostile workspace would attack them: a directory or the file
//! itself swapped for a symlink after the judgment, a directory planted where a write creates
//! one, `..` in a target, a symlink swapped in a loop during 300 writes, and the walk used where
//! the kernel has no `openat2`.

use std::os::unix::fs::symlink;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::*;
use crate::tools::fs::save_local;

/// A workspace `ws` (its real path, the root) and a directory `outside` holding `secret.txt`.
struct Scene {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    outside: PathBuf,
}

impl Scene {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let real = std::fs::canonicalize(dir.path()).unwrap();
        let (ws, outside) = (real.join("ws"), real.join("outside"));
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret.txt"), "secret\n").unwrap();
        Self { _dir: dir, ws, outside }
    }

    fn roots(&self) -> Vec<PathBuf> {
        vec![self.ws.clone()]
    }

    /// What `outside` holds, name and text.
    fn outside(&self) -> Vec<(String, String)> {
        let mut found: Vec<(String, String)> = std::fs::read_dir(&self.outside)
            .unwrap()
            .map(|entry| {
                let path = entry.unwrap().path();
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                (path.file_name().unwrap().to_string_lossy().into_owned(), text)
            })
            .collect();
        found.sort();
        found
    }
}

fn fixed() -> io::Result<String> {
    Ok("0123456789abcdef".to_owned())
}

fn untouched() -> Vec<(String, String)> {
    vec![("secret.txt".to_owned(), "secret\n".to_owned())]
}

#[test]
fn a_directory_swapped_for_a_symlink_after_the_judgment_is_not_followed() {
    let scene = Scene::new();
    std::fs::create_dir(scene.ws.join("d")).unwrap();
    std::fs::write(scene.ws.join("d/f.txt"), "inside\n").unwrap();
    // Judged: ws/d/f.txt, inside. Then d becomes a link out.
    let target = scene.ws.join("d/f.txt");
    std::fs::rename(scene.ws.join("d"), scene.ws.join("d.old")).unwrap();
    symlink(&scene.outside, scene.ws.join("d")).unwrap();
    std::fs::write(scene.outside.join("f.txt"), "outside\n").unwrap();
    let written = save_local(&scene.roots(), &target, b"new\n", &mut fixed).unwrap_err();
    assert!(written.to_string().contains("has a symlink on its way now: it changed since it was judged"), "{written}");
    let read = open_read(&scene.roots(), &target).unwrap_err();
    assert!(read.to_string().contains("has a symlink on its way now"), "{read}");
    assert_eq!(std::fs::read_to_string(scene.outside.join("f.txt")).unwrap(), "outside\n");
    assert_eq!(scene.outside().len(), 2, "no temporary file left outside");
}

#[test]
fn a_symlink_planted_at_the_file_itself_is_refused_and_left_alone() {
    let scene = Scene::new();
    let target = scene.ws.join("notes.txt");
    symlink(scene.outside.join("secret.txt"), &target).unwrap();
    let written = save_local(&scene.roots(), &target, b"new\n", &mut fixed).unwrap_err();
    assert!(written.to_string().contains("notes.txt has a symlink on its way now"), "{written}");
    assert!(open_read(&scene.roots(), &target).is_err());
    assert_eq!(scene.outside(), untouched());
    assert_eq!(std::fs::read_link(&target).unwrap(), scene.outside.join("secret.txt"));
    let names: Vec<_> = std::fs::read_dir(&scene.ws).unwrap().map(|entry| entry.unwrap().file_name()).collect();
    assert_eq!(names, ["notes.txt"], "no temporary file is left behind");
}

#[test]
fn directories_a_write_creates_are_made_beneath_the_root_and_a_dangling_link_among_them_is_refused() {
    let scene = Scene::new();
    let fresh = scene.ws.join("a/b/c.txt");
    save_local(&scene.roots(), &fresh, b"made\n", &mut fixed).unwrap();
    assert_eq!(std::fs::read_to_string(&fresh).unwrap(), "made\n");
    // Judged while `sub` did not exist (a new file inside); then `sub` is planted as a dangling
    // link to a place outside that a write would create.
    let target = scene.ws.join("sub/new.txt");
    symlink(scene.outside.join("made-by-cairn"), scene.ws.join("sub")).unwrap();
    let written = save_local(&scene.roots(), &target, b"x\n", &mut fixed).unwrap_err();
    assert!(written.to_string().contains("has a symlink on its way now"), "{written}");
    assert_eq!(scene.outside(), untouched(), "nothing created through the dangling link");
}

#[test]
fn a_target_with_dotdot_is_not_a_final_target() {
    let scene = Scene::new();
    let sneaky = scene.ws.join("../outside/secret.txt");
    let written = save_local(&scene.roots(), &sneaky, b"x\n", &mut fixed).unwrap_err();
    assert!(written.to_string().contains("holds `..` or `.`; cairn opens only final targets"), "{written}");
    assert!(open_read(&scene.roots(), &sneaky).is_err());
    assert_eq!(scene.outside(), untouched());
}

#[test]
fn a_target_outside_every_root_is_opened_from_the_root_of_the_disk_without_links() {
    let scene = Scene::new();
    // The user agreed to a write outside: it lands at the judged target.
    let agreed = scene.outside.join("agreed.txt");
    save_local(&scene.roots(), &agreed, b"yes\n", &mut fixed).unwrap();
    assert_eq!(std::fs::read_to_string(&agreed).unwrap(), "yes\n");
    // Had `outside` become a link since, it would not be followed.
    let elsewhere = scene.ws.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let moved = scene.outside.with_file_name("outside.old");
    std::fs::rename(&scene.outside, &moved).unwrap();
    symlink(&elsewhere, &scene.outside).unwrap();
    assert!(save_local(&scene.roots(), &agreed, b"again\n", &mut fixed).is_err());
    assert!(std::fs::read_dir(&elsewhere).unwrap().next().is_none(), "nothing written through the link");
}

/// A symlink at `ws/link` swapped in a loop between a file inside and the secret outside, while
/// the file it led to when judged is written 300 times: nothing ever lands outside.
#[test]
fn a_symlink_swapped_in_a_loop_during_300_writes_never_sends_one_outside() {
    let scene = Scene::new();
    std::fs::create_dir(scene.ws.join("d")).unwrap();
    let inside = scene.ws.join("d/f.txt");
    std::fs::write(&inside, "0\n").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let (ws, outside, stop) = (scene.ws.clone(), scene.outside.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let (real, link, swap) = (ws.join("d.real"), ws.join("d.link"), ws.join("d"));
            symlink(&outside, &link).unwrap();
            let mut swaps = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // `d` is the real directory, then the link out, then the directory again.
                let _ = std::fs::rename(&swap, &real);
                let _ = std::fs::rename(&link, &swap);
                let _ = std::fs::rename(&swap, &link);
                let _ = std::fs::rename(&real, &swap);
                swaps += 1;
            }
            swaps
        })
    };
    let (mut landed, mut refused) = (0, 0);
    for round in 0..300 {
        match save_local(&scene.roots(), &inside, format!("{round}\n").as_bytes(), &mut crate::tools::fs::random_suffix)
        {
            Ok(()) => landed += 1,
            Err(_) => refused += 1,
        }
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    assert!(swaps > 0);
    // How many land depends on the timing; none lands outside.
    assert_eq!(scene.outside(), untouched(), "{landed} written, {refused} refused: none outside");
}

#[test]
fn without_openat2_the_walk_refuses_a_symlink_at_every_step() {
    let scene = Scene::new();
    std::fs::create_dir(scene.ws.join("d")).unwrap();
    std::fs::write(scene.ws.join("d/f.txt"), "inside\n").unwrap();
    symlink(&scene.outside, scene.ws.join("out")).unwrap();
    symlink(scene.outside.join("secret.txt"), scene.ws.join("d/link.txt")).unwrap();
    let root = File::options().read(true).custom_flags(libc::O_PATH | libc::O_DIRECTORY).open(&scene.ws).unwrap();
    let read = libc::O_RDONLY | libc::O_CLOEXEC;
    let mut file = File::from(walk(root.as_fd(), Path::new("d/f.txt"), read, 0).unwrap());
    let mut text = String::new();
    io::Read::read_to_string(&mut file, &mut text).unwrap();
    assert_eq!(text, "inside\n");
    for (path, flags) in [
        ("out/secret.txt", read),
        ("d/link.txt", read),
        ("d/link.txt", libc::O_PATH | libc::O_CLOEXEC),
        ("out", libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC),
    ] {
        let refused = walk(root.as_fd(), Path::new(path), flags, 0).unwrap_err();
        assert_eq!(refused.raw_os_error(), Some(libc::ELOOP), "{path}: {refused}");
    }
}

/// What the supervisor's sweep takes away, as a process of the command still running beside it
/// would attack it: a link swapped in for a directory on the way (the sweep deleted files of
/// the directory it led to), links inside the tree removed (their targets left), and a file to
/// read that is a link or too large.
#[test]
fn removing_a_tree_follows_no_link_on_the_way_or_inside_it() {
    let scene = Scene::new();
    let roots = [scene.ws.clone()];
    let tree = scene.ws.join("n/.git/hooks");
    std::fs::create_dir_all(tree.join("deep")).unwrap();
    std::fs::write(tree.join("deep/pre-commit"), "x").unwrap();
    symlink(&scene.outside, tree.join("deep/out")).unwrap();
    symlink(scene.outside.join("secret.txt"), tree.join("file-link")).unwrap();
    Parent::existing(&roots, &tree).unwrap().remove_tree().unwrap();
    assert!(std::fs::symlink_metadata(&tree).is_err(), "the tree went");
    assert!(scene.outside.join("secret.txt").exists(), "what its links led to stayed");

    // `.git` swapped for a link to the outside directory, which holds a file of the name.
    std::fs::remove_dir_all(scene.ws.join("n/.git")).unwrap();
    std::fs::create_dir_all(scene.outside.join("hooks")).unwrap();
    std::fs::write(scene.outside.join("hooks/keep"), "keep").unwrap();
    symlink(&scene.outside, scene.ws.join("n/.git")).unwrap();
    let refused = Parent::existing(&roots, &scene.ws.join("n/.git/hooks/keep"));
    assert!(refused.is_err_and(|err| err.to_string().contains("symlink")));
    assert!(scene.outside.join("hooks/keep").exists());

    let config = scene.ws.join("config");
    std::fs::write(&config, "0123456789").unwrap();
    let parent = Parent::existing(&roots, &config).unwrap();
    assert_eq!(parent.read(10).unwrap().as_deref(), Some(&b"0123456789"[..]));
    assert_eq!(parent.read(9).unwrap(), None, "larger than asked");
    std::fs::remove_file(&config).unwrap();
    symlink(scene.outside.join("secret.txt"), &config).unwrap();
    assert!(parent.read(100).is_err(), "a link is not read through");
    parent.remove_tree().unwrap();
    assert!(std::fs::symlink_metadata(&config).is_err() && scene.outside.join("secret.txt").exists());
}
