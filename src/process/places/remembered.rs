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
//! own path.

use std::io::Write as _;
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
    let Ok(text) = std::fs::read_to_string(file(dir, roots)) else { return Known::default() };
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
                if kind == "L" && std::fs::canonicalize(&target).is_ok_and(|real| real == target) {
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

/// Keeps what `places` holds inside `roots` for the next walk (written aside, then renamed);
/// `started`: cairn's start, before which a link is the user's.
pub fn keep(dir: &Path, roots: &[PathBuf], places: &Places, started: Option<SystemTime>) -> std::io::Result<()> {
    let inside = |path: &&PathBuf| roots.iter().any(|root| path.starts_with(root) && *path != root);
    let storable = |path: &&PathBuf| path.to_str().is_some_and(|text| !text.contains(['\n', '\t']));
    let mut text = String::new();
    // A target a link led to is kept with the link, not alone.
    let by_link: std::collections::HashSet<&PathBuf> = places.linked.iter().map(|(_, target)| target).collect();
    let hidden = places.hidden.iter().filter(|path| !by_link.contains(path)).map(|path| ("h", path));
    let lines = hidden.chain(places.read_only.iter().map(|path| ("r", path)));
    let mut kept: Vec<String> = lines
        .filter(|(_, path)| inside(path) && storable(path))
        .map(|(kind, path)| format!("{kind}\t{}\n", path.display()))
        .collect();
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
    kept.extend(linked.map(|(met, target, lasting)| {
        format!("{}\t{}\t{}\n", if lasting { "L" } else { "l" }, target.display(), met.display())
    }));
    for line in kept.iter().take(MOST) {
        text.push_str(line);
    }
    let at = file(dir, roots);
    if std::fs::read_to_string(&at).is_ok_and(|kept| kept == text) {
        return Ok(());
    }
    std::fs::create_dir_all(dir)?;
    let partial = dir.join(format!(".partial-{}", std::process::id()));
    let mut out = std::fs::File::create(&partial)?;
    out.write_all(text.as_bytes())?;
    std::fs::rename(&partial, at)
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
        keep(&kept, &roots, &places, None).unwrap();
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
            keep(&kept, &roots, &places, Some(started)).unwrap();
            std::fs::rename(&link, root.join("renamed")).unwrap();
            let known = load(&kept, &roots);
            assert!(known.linked.is_empty(), "the link no longer leads there under its name");
            let expected = if lasting { vec![(link.clone(), away.clone())] } else { Vec::new() };
            assert_eq!(known.lasting, expected, "lasting: {lasting}");
            std::fs::remove_file(root.join("renamed")).unwrap();
        }
        // Kept again from what was loaded, the link gone: still the user's while the file stands.
        let again = Places { lasting: vec![(link.clone(), away.clone())], ..Places::default() };
        keep(&kept, &roots, &again, Some(SystemTime::UNIX_EPOCH)).unwrap();
        assert_eq!(load(&kept, &roots).lasting, [(link, away.clone())]);
        std::fs::remove_file(&away).unwrap();
        assert_eq!(load(&kept, &roots), Known::default(), "a secret that is gone needs no cover");
    }
}
