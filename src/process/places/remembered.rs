//! The guarded places of a workspace found before, kept in cairn's data directory (which no
//! command sees) and added to every later walk of the same roots. The walk reads a bounded
//! number of entries, and a command decides how many lie in its way: one that makes 20,000
//! files leaves the next walk short of the `.env` files and repositories it found before.
//! What a walk found stays found, as long as it is still there as it was: a place that is gone,
//! or that a link now leads elsewhere, is dropped (the walk judges what took its place). A
//! secret a link led the walk to (inside the roots or out) is kept with that link, and only
//! while the link still leads there: one a command planted and took away leaves no cover.

use std::io::Write as _;
use std::path::{Path, PathBuf};

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
            "l" => {
                // `target\tmet`: the target, and the path (a link, or a path through one) it was met by.
                let Some((target, met)) = path.to_str().and_then(|text| text.split_once('\t')) else { continue };
                let (target, met) = (PathBuf::from(target), PathBuf::from(met));
                if target.is_absolute() && std::fs::canonicalize(&met).is_ok_and(|real| real == target) {
                    known.linked.push((met, target));
                }
            }
            _ => {}
        }
    }
    known
}

/// Keeps what `places` holds inside `roots` for the next walk (written aside, then renamed).
pub fn keep(dir: &Path, roots: &[PathBuf], places: &Places) -> std::io::Result<()> {
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
    let linked = places.linked.iter().filter(|(met, target)| storable(&met) && storable(&target));
    kept.extend(linked.map(|(met, target)| format!("l\t{}\t{}\n", target.display(), met.display())));
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
        keep(&kept, &roots, &places).unwrap();
        std::fs::remove_dir(root.join("gone")).unwrap();
        std::fs::remove_dir(root.join("moved")).unwrap();
        std::os::unix::fs::symlink("/usr", root.join("moved")).unwrap();
        let known = load(&kept, &roots);
        assert_eq!(known.hidden, [root.join("app/server/.env.production")], "what lies inside the roots");
        assert_eq!(known.linked, [(root.join(".env.shared"), away)], "and where links that still lead there led");
        assert_eq!(known.read_only, [root.join("libs/core/.git/hooks")], "what went, or a link replaced, is dropped");
        assert_eq!(load(&kept, &[root.join("app")]), Known::default(), "other roots, another file");
    }
}
