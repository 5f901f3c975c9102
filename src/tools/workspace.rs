//! Paths as the tools see them: resolved against the session's working directory, and judged
//! inside or outside the workspace with symlinks resolved, so a link cannot smuggle a write out.

use std::path::{Component, Path, PathBuf};

/// The session's roots: its `cwd` and any additional directories.
#[derive(Clone, Debug)]
pub struct Workspace {
    cwd: PathBuf,
    /// The roots with symlinks resolved, for containment checks.
    real_roots: Vec<PathBuf>,
}

impl Workspace {
    pub fn new(cwd: &Path, additional: &[PathBuf]) -> Self {
        let cwd = normalize(cwd);
        let real_roots = std::iter::once(&cwd).chain(additional).map(|root| real_path(&normalize(root))).collect();
        Self { cwd, real_roots }
    }

    pub fn cwd(&self) -> &Path {
        &self.cwd
    }

    /// The roots with symlinks resolved (where a sandboxed command may write).
    pub fn roots(&self) -> &[PathBuf] {
        &self.real_roots
    }

    /// `path` made absolute (relative paths start at `cwd`) with `.` and `..` resolved.
    pub fn resolve(&self, path: &str) -> PathBuf {
        let path = Path::new(path);
        if path.is_absolute() { normalize(path) } else { normalize(&self.cwd.join(path)) }
    }

    /// Whether `path` (absolute) lies inside a root once every symlink on it is followed.
    pub fn contains(&self, path: &Path) -> bool {
        let real = real_path(path);
        self.real_roots.iter().any(|root| real.starts_with(root))
    }

    /// `path` relative to `cwd` when it is inside, else as it is.
    pub fn display(&self, path: &Path) -> String {
        match path.strip_prefix(&self.cwd) {
            Ok(relative) if relative.as_os_str().is_empty() => ".".to_owned(),
            Ok(relative) => relative.display().to_string(),
            Err(_) => path.display().to_string(),
        }
    }
}

/// Resolves `.` and `..` without touching the disk.
pub fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            Component::Prefix(_) | Component::RootDir | Component::Normal(_) => out.push(component),
        }
    }
    out
}

/// The path with symlinks resolved as far as it exists; the missing rest is appended as is.
fn real_path(path: &Path) -> PathBuf {
    let mut existing = path.to_path_buf();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = std::fs::canonicalize(&existing) {
            return rest.iter().rev().fold(real, |acc: PathBuf, part| acc.join(part));
        }
        match (existing.file_name().map(ToOwned::to_owned), existing.parent().map(Path::to_path_buf)) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                existing = parent;
            }
            _ => return path.to_path_buf(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_resolve_against_cwd_and_dot_dot_cannot_hide() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("project");
        std::fs::create_dir_all(root.join("src")).unwrap();
        let workspace = Workspace::new(&root, &[]);
        assert_eq!(workspace.resolve("src/../src/lib.rs"), root.join("src/lib.rs"));
        assert!(workspace.contains(&workspace.resolve("src/new/file.rs")), "a file yet to be created");
        assert!(!workspace.contains(&workspace.resolve("../outside.txt")));
        assert_eq!(workspace.display(&root.join("src/lib.rs")), "src/lib.rs");
    }

    #[test]
    fn a_symlink_pointing_out_is_outside() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("project");
        let secret = dir.path().join("secret");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&secret).unwrap();
        std::os::unix::fs::symlink(&secret, root.join("link")).unwrap();
        let workspace = Workspace::new(&root, &[]);
        assert!(!workspace.contains(&workspace.resolve("link/passwords.txt")));
        let extra = Workspace::new(&root, std::slice::from_ref(&secret));
        assert!(extra.contains(&extra.resolve("link/passwords.txt")), "unless its target is a root too");
    }
}
