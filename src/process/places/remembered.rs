//! The guarded places of a workspace found before, kept in cairn's data directory (which no
//! command sees) and added to every later walk of the same roots. The walk reads a bounded
//! number of entries, and a command decides how many lie in its way: one that makes 20,000
//! files leaves the next walk short of the `.env` files and repositories it found before.
//! What a walk found stays found, as long as it is still there as it was: a place that is gone,
//! or that a link now leads elsewhere, is dropped (the walk judges what took its place). A
//! secret a link led the walk to (inside the roots or out) is kept with that link, and only
//! while the link still leads there: one a command planted and took away leaves no cover. But
//! a link that is the user's — older than cairn's start when a walk first met it, which no
//! command can fake: a link's change time cannot be set back, and renaming it moves it — keeps
//! its secret covered for as long as the secret stands, wherever the link goes: otherwise a
//! command renaming `.env -> /srv/app/shared.env` would let the next one read the file by its
//! own path. A walk that found less than there is (read-only, or crowded past what a namespace
//! takes) keeps nothing else, but still keeps the user's links it met. Walks of the same roots
//! that end together write the file one at a time, each keeping the user's links another kept.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::Places;

/// At most this many places are kept for one set of roots.
const MOST: usize = 10_000;

/// Places found before, as the file keeps them.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Known {
    pub hidden: Vec<PathBuf>,
    pub read_only: Vec<PathBuf>,
    /// Secrets a link led a walk to: the path it met, and the target, while it still leads
    /// there.
    pub linked: Vec<(PathBuf, PathBuf)>,
    /// Secrets a link of the user's led a walk to: the path it met, and the target, while the
    /// target stands.
    pub lasting: Vec<(PathBuf, PathBuf)>,
}

/// The file kept for `roots` in `dir`: named by a digest of the roots.
fn file(dir: &Path, roots: &[PathBuf]) -> PathBuf {
    let joined: Vec<u8> =
        roots.iter().flat_map(|root| root.as_os_str().as_encoded_bytes().iter().copied().chain([0])).collect();
    dir.join(crate::digest::hex(&crate::digest::sha256(&joined).as_ref()[..8]))
}

/// What was found before for `roots` and is still there as it was, inside them.
pub fn load(dir: &Path, roots: &[PathBuf]) -> Known {
    let Ok(text) = read(&file(dir, roots)) else { return Known::default() };
    let standing = |path: &PathBuf| {
        roots.iter().any(|root| path.starts_with(root) && path != root)
            && std::fs::canonicalize(path).is_ok_and(|real| real == *path)
    };
    let mut known = Known::default();
    for line in text.lines().take(MOST) {
        let (kind, path) = match line.split_once('\t') {
            Some((kind, path)) => (kind, PathBuf::from(path)),
            None => continue,
        };
        match kind {
            "h" if standing(&path) => known.hidden.push(path),
            "r" if standing(&path) => known.read_only.push(path),
            "l" | "L" => {
                // `target\tmet`: the target, and the path (a link, or a path through one) it was met by.
                let Some((target, met)) = path.to_str().and_then(|text| text.split_once('\t')) else { continue };
                let (target, met) = (PathBuf::from(target), PathBuf::from(met));
                if !target.is_absolute() {
                    continue;
                }
                if kind == "L" && stands(&target) {
                    known.lasting.push((met, target));
                } else if std::fs::canonicalize(&met).is_ok_and(|real| real == target) {
                    known.linked.push((met, target));
                }
            }
            _ => {}
        }
    }
    known
}

/// What to add to a refusal for too many places when some of them are covers kept for the
/// user's links that no longer lead there (a command can plant thousands of links under one
/// cairn, which the next takes for the user's, and remove them after): the file they are kept
/// in, which removing lets go of them.
pub fn gone_links(dir: &Path, roots: &[PathBuf], places: &Places) -> Option<String> {
    let gone = places
        .lasting
        .iter()
        .filter(|(met, target)| !std::fs::canonicalize(met).is_ok_and(|real| real == *target))
        .count();
    (gone > 0).then(|| {
        format!(
            ". {gone} of them are files that links older than cairn's start led to, links gone or \
             moved since: cairn keeps such files covered while they stand, as the user's. If those \
             links were not the user's, the user can remove {} (cairn then forgets every place it \
             remembered for this workspace, and finds them again)",
            file(dir, roots).display()
        )
    })
}

/// Keeps what `places` holds inside `roots` for the next walk (written aside, then renamed);
/// `started`: cairn's start, before which a link is the user's. A walk that found less than
/// there is (`whole` false: a read-only walk looks for no read-only places, and one whose places
/// gave way to their directories must not leave a flood's covers behind) only adds the user's
/// links it met: a secret one leads to stays covered however the walk went.
pub fn remember(
    dir: &Path,
    roots: &[PathBuf],
    places: &Places,
    started: Option<SystemTime>,
    whole: bool,
) -> std::io::Result<()> {
    let at = file(dir, roots);
    std::fs::create_dir_all(dir)?;
    // Walks of the same roots end together (two sessions, a job beside a command): one at a
    // time, each adds to what the file holds as it writes, so none drops a user's link another
    // kept since this walk loaded the file.
    let _lock = lock(&dir.join(".lock"))?;
    // What was kept but cannot be read cannot be added to: it stays as it is.
    let before = read(&at)?;
    let text = if whole {
        let mut kept = found(roots, places);
        kept.extend(links(roots, places, started));
        // Those another walk kept since this one loaded the file: the others this walk's
        // load already found standing.
        let known: std::collections::HashSet<&str> = kept.iter().map(|line| line.trim_end()).collect();
        let theirs: Vec<String> = before
            .lines()
            .filter(|line| line.starts_with("L\t") && !known.contains(line))
            .filter(|line| users_target(line).is_some_and(stands))
            .map(|line| format!("{line}\n"))
            .collect();
        kept.extend(theirs);
        arrange(&before, kept)
    } else {
        let kept: std::collections::HashSet<&str> = before.lines().collect();
        let users = links(roots, places, started).into_iter().filter(|line| line.starts_with("L\t"));
        let new = users.filter(|line| !kept.contains(line.trim_end())).collect::<Vec<_>>();
        arrange(&before, before.lines().map(|line| format!("{line}\n")).chain(new).collect())
    };
    if before == text {
        return Ok(());
    }
    crate::aside::replace(&at, text.as_bytes()).map(drop)
}

/// The text of the file at `at`, empty when there is none; bytes that are not UTF-8 make
/// lines no path matches.
fn read(at: &Path) -> std::io::Result<String> {
    match std::fs::read(at) {
        Ok(bytes) => Ok(String::from_utf8_lossy(&bytes).into_owned()),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(err) => Err(err),
    }
}

/// The lock at `at`, held until dropped: waited for at most two seconds (a walk that cannot
/// have it keeps nothing, as one that cannot write).
fn lock(at: &Path) -> std::io::Result<std::fs::File> {
    let file = crate::process::peers::lock_file(at)?;
    match crate::process::peers::wait_for(|| file.try_lock(), std::time::Duration::from_secs(2)) {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => {
            Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "another walk holds the places file"))
        }
        Err(std::fs::TryLockError::Error(err)) => Err(err),
    }
}

/// The file's text of `lines`, at most [`MOST`]: the user's links `before` kept first, in the
/// order it kept them, then the places, then new links of the user's; one line for each
/// secret a user's link leads to (one is all its cover needs). A user's link is met before a
/// command can plant any, and once cairn restarts, links a command planted count as the user's:
/// by the thousand and named to sort first, they must not push out a link or a place kept
/// before them.
fn arrange(before: &str, lines: Vec<String>) -> String {
    let kept: std::collections::HashMap<&str, usize> =
        before.lines().enumerate().map(|(at, line)| (line, at)).collect();
    let (mut users, rest): (Vec<String>, Vec<String>) = lines.into_iter().partition(|line| line.starts_with("L\t"));
    users.sort_by_key(|line| kept.get(line.trim_end()).copied().unwrap_or(usize::MAX));
    let mut covered = std::collections::HashSet::new();
    let users: Vec<String> =
        users.into_iter().filter(|line| covered.insert(users_target(line).map(Path::to_owned))).collect();
    let (old, new): (Vec<String>, Vec<String>) = users.into_iter().partition(|line| kept.contains_key(line.trim_end()));
    old.into_iter().chain(rest).chain(new).take(MOST).collect()
}

/// Whether `target`, a secret a user's link led to, is still there under that name.
fn stands(target: &Path) -> bool {
    target.is_absolute() && std::fs::canonicalize(target).is_ok_and(|real| real == target)
}

/// The target of a user's link's line.
fn users_target(line: &str) -> Option<&Path> {
    line.strip_prefix("L\t")?.split('\t').next().map(Path::new)
}

/// Whether `path` can be a line's field.
fn storable(path: &&PathBuf) -> bool {
    path.to_str().is_some_and(|text| !text.contains(['\n', '\t']))
}

/// The lines of the places `places` holds inside `roots`, links' targets left to [`links`].
fn found(roots: &[PathBuf], places: &Places) -> Vec<String> {
    let inside = |path: &&PathBuf| roots.iter().any(|root| path.starts_with(root) && *path != root);
    // A target a link led to is kept with the link, not alone.
    let by_link: std::collections::HashSet<&PathBuf> = places.linked.iter().map(|(_, target)| target).collect();
    let hidden = places.hidden.iter().filter(|path| !by_link.contains(path)).map(|path| ("h", path));
    let lines = hidden.chain(places.read_only.iter().map(|path| ("r", path)));
    lines
        .filter(|(_, path)| inside(path) && storable(path))
        .map(|(kind, path)| format!("{kind}\t{}\n", path.display()))
        .collect()
}

/// The lines of the links `places` met: `L` for the user's, `l` for the others.
fn links(roots: &[PathBuf], places: &Places, started: Option<SystemTime>) -> Vec<String> {
    let users = |met: &Path| started.is_some_and(|started| users_link(met, roots, started));
    let mut links: Vec<(&PathBuf, &PathBuf, bool)> =
        places
            .lasting
            .iter()
            .map(|(met, target)| (met, target, true))
            .chain(places.linked.iter().map(|(met, target)| {
                (met, target, places.lasting.contains(&(met.clone(), target.clone())) || users(met))
            }))
            .collect();
    // The user's first: a link met both ways is kept as theirs.
    links.sort_by_key(|(met, target, lasting)| (!*lasting, *met, *target));
    links.dedup_by(|(met, target, _), (kept_met, kept_target, _)| met == kept_met && target == kept_target);
    let linked = links.into_iter().filter(|(met, target, _)| storable(met) && storable(target));
    linked
        .map(|(met, target, lasting)| {
            format!("{}\t{}\t{}\n", if lasting { "L" } else { "l" }, target.display(), met.display())
        })
        .collect()
}

/// Whether the link `met` is (or goes through, inside `roots`) is the user's: changed last
/// before `started`. The nearest link on the way decides.
pub(super) fn users_link(met: &Path, roots: &[PathBuf], started: SystemTime) -> bool {
    let inside = |path: &Path| roots.iter().any(|root| path.starts_with(root) && path != root);
    for path in met.ancestors().take_while(|path| inside(path)) {
        let Ok(meta) = std::fs::symlink_metadata(path) else { return false };
        if meta.file_type().is_symlink() {
            let changed = SystemTime::UNIX_EPOCH
                + std::time::Duration::new(
                    u64::try_from(meta.ctime()).unwrap_or(0),
                    u32::try_from(meta.ctime_nsec()).unwrap_or(0),
                );
            return changed < started;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_was_found_stays_found_while_it_stands_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let (root, kept) = (std::fs::canonicalize(dir.path()).unwrap().join("work"), dir.path().join("places"));
        let roots = [root.clone()];
        for made in ["app/server", "libs/core/.git/hooks", "gone", "moved"] {
            std::fs::create_dir_all(root.join(made)).unwrap();
        }
        std::fs::write(root.join("app/server/.env.production"), "DB_PASSWORD=1").unwrap();
        let away = std::fs::canonicalize(dir.path()).unwrap().join("private/app.env");
        std::fs::create_dir_all(away.parent().unwrap()).unwrap();
        std::fs::write(&away, "API_KEY=1").unwrap();
        std::os::unix::fs::symlink(&away, root.join(".env.shared")).unwrap();
        let places = Places {
            hidden: vec![root.join("app/server/.env.production"), PathBuf::from("/home/u/.ssh"), away.clone()],
            linked: vec![(root.join(".env.shared"), away.clone()), (root.join(".env.gone"), away.clone())],
            read_only: vec![root.join("libs/core/.git/hooks"), root.join("gone"), root.join("moved")],
            ..Places::default()
        };
        remember(&kept, &roots, &places, None, true).unwrap();
        std::fs::remove_dir(root.join("gone")).unwrap();
        std::fs::remove_dir(root.join("moved")).unwrap();
        std::os::unix::fs::symlink("/usr", root.join("moved")).unwrap();
        let known = load(&kept, &roots);
        assert_eq!(known.hidden, [root.join("app/server/.env.production")], "what lies inside the roots");
        assert_eq!(known.linked, [(root.join(".env.shared"), away)], "and where links that still lead there led");
        assert_eq!(known.read_only, [root.join("libs/core/.git/hooks")], "what went, or a link replaced, is dropped");
        assert_eq!(load(&kept, &[root.join("app")]), Known::default(), "other roots, another file");
    }

    /// A link of the user's (older than cairn's start) keeps its secret covered once it is
    /// renamed or gone; one a command made (newer) covers only while it stands.
    #[test]
    fn the_users_link_keeps_its_secret_covered_wherever_it_goes() {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let (root, kept) = (base.join("work"), base.join("places"));
        std::fs::create_dir_all(&root).unwrap();
        let away = base.join("srv/shared.env");
        std::fs::create_dir_all(away.parent().unwrap()).unwrap();
        std::fs::write(&away, "DB_PASSWORD=1").unwrap();
        let link = root.join(".env");
        std::os::unix::fs::symlink(&away, &link).unwrap();
        let roots = [root.clone()];
        let places =
            Places { hidden: vec![away.clone()], linked: vec![(link.clone(), away.clone())], ..Places::default() };
        let later = SystemTime::now() + std::time::Duration::from_secs(5);
        for (started, lasting) in [(SystemTime::UNIX_EPOCH, false), (later, true)] {
            std::fs::remove_file(&link).ok();
            std::os::unix::fs::symlink(&away, &link).unwrap();
            remember(&kept, &roots, &places, Some(started), true).unwrap();
            std::fs::rename(&link, root.join("renamed")).unwrap();
            let known = load(&kept, &roots);
            assert!(known.linked.is_empty(), "the link no longer leads there under its name");
            let expected = if lasting { vec![(link.clone(), away.clone())] } else { Vec::new() };
            assert_eq!(known.lasting, expected, "lasting: {lasting}");
            std::fs::remove_file(root.join("renamed")).unwrap();
        }
        // Kept again from what was loaded, the link gone: still the user's while the file stands.
        let again = Places { lasting: vec![(link.clone(), away.clone())], ..Places::default() };
        remember(&kept, &roots, &again, Some(SystemTime::UNIX_EPOCH), true).unwrap();
        assert_eq!(load(&kept, &roots).lasting, [(link, away.clone())]);
        std::fs::remove_file(&away).unwrap();
        assert_eq!(load(&kept, &roots), Known::default(), "a secret that is gone needs no cover");
    }

    /// A walk that found less than there is adds the user's links it met, and nothing else:
    /// what was kept before stays, and a command's link is not kept from it.
    #[test]
    fn a_walk_not_whole_adds_the_users_links_only() {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let (root, kept) = (base.join("work"), base.join("places"));
        std::fs::create_dir_all(root.join("hooks")).unwrap();
        std::fs::write(root.join(".env.local"), "A=1").unwrap();
        let (theirs, ours) = (base.join("srv/shared.env"), base.join("tmp/planted.env"));
        for target in [&theirs, &ours] {
            std::fs::create_dir_all(target.parent().unwrap()).unwrap();
            std::fs::write(target, "SECRET=1").unwrap();
        }
        // The first link is the user's, the second a command's: cairn started between them (a
        // file's times come from a clock that ticks every few milliseconds).
        std::os::unix::fs::symlink(&theirs, root.join(".env")).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(30));
        let started = SystemTime::now();
        std::thread::sleep(std::time::Duration::from_millis(30));
        std::os::unix::fs::symlink(&ours, root.join(".env.planted")).unwrap();
        let roots = [root.clone()];
        let before = Places { read_only: vec![root.join("hooks")], ..Places::default() };
        remember(&kept, &roots, &before, None, true).unwrap();
        let crowded = Places {
            hidden: vec![root.join(".env.local"), theirs.clone(), ours.clone()],
            linked: vec![(root.join(".env"), theirs.clone()), (root.join(".env.planted"), ours)],
            ..Places::default()
        };
        assert!(
            users_link(&root.join(".env"), &roots, started) && !users_link(&root.join(".env.planted"), &roots, started)
        );
        remember(&kept, &roots, &crowded, Some(started), false).unwrap();
        std::fs::remove_file(root.join(".env")).unwrap();
        let known = load(&kept, &roots);
        assert_eq!(known.read_only, [root.join("hooks")], "what was kept stays");
        assert!(known.hidden.is_empty(), "this walk's places are not kept");
        assert_eq!(known.lasting, [(root.join(".env"), theirs)], "the user's link is");
        assert!(known.linked.is_empty(), "a command's link is not: {:?}", known.linked);
    }

    /// Once cairn restarts, links a command planted count as the user's. By the thousand and
    /// named to sort first, they must not push out a link or a place the file kept before them,
    /// and one secret needs one line however many links lead to it.
    #[test]
    fn what_was_kept_before_stays_ahead_of_a_flood_of_links() {
        let before = "r\t/w/hooks\nL\t/srv/app.env\t/w/.env\n";
        let mut lines: Vec<String> = (0..MOST + 5).map(|n| format!("L\t/tmp/planted-{n:05}\t/w/.a{n:05}\n")).collect();
        lines.push("L\t/srv/app.env\t/w/config/.env\n".to_owned());
        lines.push("L\t/srv/app.env\t/w/.env\n".to_owned());
        lines.push("r\t/w/hooks\n".to_owned());
        let text = arrange(before, lines);
        let kept: Vec<&str> = text.lines().collect();
        assert_eq!(kept.len(), MOST);
        assert_eq!(kept[..2], ["L\t/srv/app.env\t/w/.env", "r\t/w/hooks"], "what was kept comes first");
        assert_eq!(kept.iter().filter(|line| line.contains("/srv/app.env")).count(), 1, "one line for one secret");
        assert_eq!(kept[2], "L\t/tmp/planted-00000\t/w/.a00000", "new links after, in the order they came");
    }

    /// Two walks of the same roots: the second loaded the file before the first kept a user's
    /// link in it, and keeps that link when it writes (while its secret stands).
    #[test]
    fn a_walk_keeps_the_users_links_another_kept_since_it_loaded() {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let (root, kept) = (base.join("work"), base.join("places"));
        std::fs::create_dir_all(root.join("hooks")).unwrap();
        let (secret, gone) = (base.join("srv/shared.env"), base.join("srv/gone.env"));
        std::fs::create_dir_all(secret.parent().unwrap()).unwrap();
        std::fs::write(&secret, "SECRET=1").unwrap();
        let roots = [root.clone()];
        let first = Places {
            lasting: vec![(root.join(".env"), secret.clone()), (root.join(".old"), gone)],
            ..Places::default()
        };
        remember(&kept, &roots, &first, None, false).unwrap();
        let second = Places { read_only: vec![root.join("hooks")], ..Places::default() };
        remember(&kept, &roots, &second, None, true).unwrap();
        let text = std::fs::read_to_string(file(&kept, &roots)).unwrap();
        assert!(!text.contains("gone.env"), "a secret that is gone needs no cover: {text}");
        let known = load(&kept, &roots);
        assert_eq!(known.lasting, [(root.join(".env"), secret)]);
        assert_eq!(known.read_only, [root.join("hooks")]);
    }

    /// A refusal for too many places names the file that keeps covers for links gone since.
    #[test]
    fn covers_kept_for_links_gone_are_named_with_their_file() {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let (root, kept) = (base.join("work"), base.join("places"));
        std::fs::create_dir_all(&root).unwrap();
        let secret = base.join("srv.env");
        std::fs::write(&secret, "A=1").unwrap();
        std::os::unix::fs::symlink(&secret, root.join(".env")).unwrap();
        let roots = [root.clone()];
        let standing = Places { lasting: vec![(root.join(".env"), secret.clone())], ..Places::default() };
        assert_eq!(gone_links(&kept, &roots, &standing), None, "the link still leads there");
        let gone = Places { lasting: vec![(root.join(".env.gone"), secret)], ..Places::default() };
        let said = gone_links(&kept, &roots, &gone).unwrap();
        assert!(said.contains("1 of them") && said.contains(&file(&kept, &roots).display().to_string()), "{said}");
    }

    /// A walk that cannot have the lock (another holds it past two seconds) keeps nothing and
    /// says so; the file stays as it was.
    #[test]
    fn a_walk_that_cannot_have_the_lock_keeps_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let (root, kept) = (base.join("work"), base.join("places"));
        std::fs::create_dir_all(root.join("hooks")).unwrap();
        std::fs::create_dir_all(&kept).unwrap();
        let roots = [root.clone()];
        let held = std::fs::File::create(kept.join(".lock")).unwrap();
        held.lock().unwrap();
        let places = Places { read_only: vec![root.join("hooks")], ..Places::default() };
        let err = remember(&kept, &roots, &places, None, true).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
        assert!(!file(&kept, &roots).exists());
        drop(held);
        remember(&kept, &roots, &places, None, true).unwrap();
        assert_eq!(load(&kept, &roots).read_only, [root.join("hooks")]);
    }
}
