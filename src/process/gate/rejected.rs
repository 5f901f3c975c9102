//! What a gate refuses: the rules' words, the program files found for them (`program.rs`),
//! the dynamic loaders those files name, and whether one of them can be started as another
//! file's ELF interpreter. Rules are added — the command's at its start, then those of the
//! session's rules file a lasting process follows (`follow.rs`) — and never dropped: a rule
//! the user revokes holds for a running process until it ends.

use std::fs::File;
use std::os::unix::fs::MetadataExt as _;
use std::path::PathBuf;

use super::file;
use super::program::Program;

/// Where a rejected program is looked for besides the command's `PATH`.
const SYSTEM_DIRS: &[&str] = &["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"];

/// The programs a gate refuses.
#[derive(Default)]
pub(super) struct Rejected {
    /// The rules judged, each as its words.
    rules: Vec<Vec<String>>,
    pub programs: Vec<Program>,
    /// The dynamic loaders the rejected programs name, by identity and build id: run by hand
    /// (`ld.so PROGRAM`) they start the program they are given.
    pub loaders: Vec<Loader>,
    /// Whether a rejected program is an ELF file with no interpreter of its own, which the
    /// kernel can start as another file's `PT_INTERP`.
    pub standalone: bool,
}

/// A dynamic loader, by device and inode and by build id.
pub(super) struct Loader {
    pub id: (u64, u64),
    pub build_id: Option<Vec<u8>>,
}

impl Rejected {
    /// Adds the programs of the rules in `rejected` not judged yet, their files looked for in
    /// `dirs` (the command's `PATH`) and the system's directories; whether any was new.
    pub fn add(&mut self, rejected: &[Vec<String>], dirs: &[PathBuf]) -> bool {
        let mut searched = dirs.to_vec();
        searched.extend(SYSTEM_DIRS.iter().map(PathBuf::from));
        let mut added = false;
        for words in rejected {
            let Some(first) = words.first() else { continue };
            if self.rules.contains(words) {
                continue;
            }
            self.rules.push(words.clone());
            added = true;
            let name = first.rsplit('/').next().unwrap_or(first).to_owned();
            let subcommand = words[1..].to_vec();
            match self.programs.iter_mut().find(|p| p.name == name) {
                Some(known) => known.add(subcommand, &searched),
                None => self.programs.push(Program::find(name, first, subcommand, &searched)),
            }
        }
        if added {
            self.find_loaders();
        }
        added
    }

    fn find_loaders(&mut self) {
        let programs = &self.programs;
        let files = || programs.iter().flat_map(|p| p.files.iter().chain(p.dashed.iter().map(|(_, f)| f)));
        self.standalone = files().any(|f| f.standalone);
        self.loaders.clear();
        for path in files().filter_map(|f| f.loader.as_ref()) {
            let Ok(loader) = File::open(path) else { continue };
            let Ok(meta) = loader.metadata() else { continue };
            let id = (meta.dev(), meta.ino());
            if !self.loaders.iter().any(|known| known.id == id) {
                self.loaders.push(Loader { id, build_id: file::build_id(&loader, &file::head(&loader)) });
            }
        }
    }
}
