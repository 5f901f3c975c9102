//! The rejected programs as found before the command starts, and how a file the command runs
//! is known for one of them. Each program's files are looked for on the `PATH`, in the usual
//! system directories and where a program keeps its helpers (`libexec/git-core`), and kept
//! open with what identifies them: device and inode, size, GNU build id. A program rejected
//! whole also has its other names by hard link listed, to be covered; a program with
//! subcommand rules has its dashed helpers (`git-lfs` for `git lfs`) and, for git, the
//! commands it knows, which its misspelling check needs.

use std::collections::HashSet;
use std::fs::File;
use std::os::unix::ffi::OsStringExt as _;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::file;
use super::git;

/// One rejected program and its files.
pub struct Program {
    pub name: String,
    /// The subcommands rejected; an empty one rejects the program whatever its arguments.
    pub subcommands: Vec<Vec<String>>,
    pub files: Vec<Original>,
    /// Programs that run one subcommand of it (`git-lfs`), each with the subcommand.
    pub dashed: Vec<(String, Original)>,
    /// The other names of its files by hard link, in the directories searched.
    pub links: Vec<PathBuf>,
    /// For git: the commands it knows besides its builtins (its `git-*` helpers).
    pub commands: Option<HashSet<String>>,
}

/// A file of a rejected program, as found before the command started.
pub struct Original {
    pub path: PathBuf,
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub file: File,
    pub build_id: Option<Vec<u8>>,
    /// An ELF file with no `PT_INTERP`: one the kernel can start as another's interpreter.
    pub standalone: bool,
    /// Its `PT_INTERP`, the dynamic loader it names.
    pub loader: Option<PathBuf>,
}

/// A file a command runs, read once for every program it is compared with.
pub struct Candidate<'a> {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub file: Option<&'a File>,
    pub build_id: Option<&'a [u8]>,
}

/// How a candidate was known for a program.
#[derive(Clone, Debug)]
pub enum Known {
    /// It is one of the program's files, a copy, or the same build.
    File(&'static str),
    /// It bears the program's name.
    Name,
    /// It runs this subcommand of the program (`git-lfs`, or a file so named).
    Dashed(String),
}

impl Program {
    /// The program `name` with `subcommand` rejected, its files found in `dirs` (the `PATH`
    /// and the system directories) and at `given` when the rule names a path.
    pub fn find(name: String, given: &str, subcommand: Vec<String>, dirs: &[PathBuf]) -> Self {
        let mut candidates: Vec<PathBuf> = dirs.iter().map(|dir| dir.join(&name)).collect();
        if given.starts_with('/') {
            candidates.push(PathBuf::from(given));
        }
        let files = originals(candidates, &[]);
        let mut program =
            Program { name, subcommands: Vec::new(), files, dashed: Vec::new(), links: Vec::new(), commands: None };
        if program.name == "git" {
            let mut commands = HashSet::new();
            for dir in program.helper_dirs() {
                let Ok(entries) = std::fs::read_dir(dir) else { continue };
                for entry in entries.flatten() {
                    if let Some(command) = entry.file_name().to_str().and_then(|n| n.strip_prefix("git-")) {
                        commands.insert(command.to_owned());
                    }
                }
            }
            program.commands = Some(commands);
        }
        program.add(subcommand, dirs);
        program
    }

    /// Adds a rejected subcommand (an empty one: the whole program).
    pub fn add(&mut self, subcommand: Vec<String>, dirs: &[PathBuf]) {
        if subcommand.is_empty() && !self.subcommands.iter().any(Vec::is_empty) {
            for original in &self.files {
                for link in file::other_links(&original.path, &self.name, dirs) {
                    if !self.links.contains(&link) {
                        self.links.push(link);
                    }
                }
            }
        }
        if let Some(first) = subcommand.first()
            && !self.dashed.iter().any(|(sub, _)| sub == first)
        {
            let dashed = format!("{}-{first}", self.name);
            let mut places: Vec<PathBuf> = dirs.to_vec();
            places.extend(self.helper_dirs());
            let candidates = places.iter().map(|dir| dir.join(&dashed)).collect();
            // A dashed name that is the program itself (git's hard links `git-push`) runs what
            // its `argv[0]` says, and is judged as the program.
            let found = originals(candidates, &self.files);
            let own: Vec<&[u8]> = self.files.iter().filter_map(|f| f.build_id.as_deref()).collect();
            for original in found {
                if !original.build_id.as_deref().is_some_and(|id| own.contains(&id)) {
                    self.dashed.push((first.clone(), original));
                }
            }
        }
        self.subcommands.push(subcommand);
    }

    /// Whether it is rejected whatever its arguments.
    pub fn whole(&self) -> bool {
        self.subcommands.iter().any(Vec::is_empty)
    }

    /// Where the program keeps its helpers: `../lib/<name>-core` and `../libexec/<name>-core`
    /// beside each of its files, and `$GIT_EXEC_PATH` for git.
    fn helper_dirs(&self) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = Vec::new();
        for original in &self.files {
            let Some(prefix) = original.path.parent().and_then(Path::parent) else { continue };
            for lib in ["lib", "libexec"] {
                let dir = prefix.join(lib).join(format!("{}-core", self.name));
                if dir.is_dir() && !dirs.contains(&dir) {
                    dirs.push(dir);
                }
            }
        }
        if self.name == "git"
            && let Some(dir) = std::env::var_os("GIT_EXEC_PATH")
        {
            dirs.push(PathBuf::from(dir));
        }
        dirs
    }

    /// How `candidate` is known for this program by what the file is (one of its files, a
    /// copy, the same build, one of its dashed helpers), if it is.
    pub fn knows_file(&self, candidate: &Candidate<'_>) -> Option<Known> {
        let same = |original: &Original| -> Option<&'static str> {
            if (original.dev, original.ino) == (candidate.dev, candidate.ino) {
                return Some("");
            }
            if original.build_id.is_some() && original.build_id.as_deref() == candidate.build_id {
                return Some("the same build");
            }
            let copy = original.size == candidate.size
                && candidate.file.is_some_and(|file| file::same_content(&original.file, file));
            copy.then_some("a copy")
        };
        if let Some(how) = self.files.iter().find_map(same) {
            return Some(Known::File(how));
        }
        let (sub, _) = self.dashed.iter().find(|(_, original)| same(original).is_some())?;
        Some(Known::Dashed(sub.clone()))
    }

    /// How a file is known for this program by `names` (the name the exec gave it and the one
    /// it bears where it was found), if it is: the program's name, or its name and a dash.
    pub fn knows_name(&self, names: [&str; 2]) -> Option<Known> {
        if names.contains(&self.name.as_str()) {
            return Some(Known::Name);
        }
        let dashed = names.iter().find_map(|name| name.strip_prefix(&self.name)?.strip_prefix('-'));
        dashed.filter(|sub| !sub.is_empty()).map(|sub| Known::Dashed(sub.to_owned()))
    }

    /// The rule that rejects this program given `words` (its arguments after its name), and
    /// why when it is not plain; `command_exists` says whether git has an external command so
    /// named.
    pub fn rejects(&self, words: &[String], command_exists: &dyn Fn(&str) -> bool) -> Option<(String, String)> {
        let rule = |words: &[String]| {
            let mut rule = vec![self.name.clone()];
            rule.extend(words.iter().cloned());
            rule.join(" ")
        };
        let args = || words.iter().map(String::as_str);
        if let Some(found) =
            self.subcommands.iter().find(|sub| sub.is_empty() || crate::permissions::names_subcommand(args(), sub))
        {
            return Some((rule(found), String::new()));
        }
        let commands = self.commands.as_ref()?;
        let (at, word) = git::command_word(words)?;
        if git::is_builtin(word) || commands.contains(word) {
            return None;
        }
        for sub in self.subcommands.iter().filter(|sub| sub.first().is_some_and(|first| git::similar(word, first))) {
            let mut corrected = words.to_vec();
            corrected[at].clone_from(&sub[0]);
            let args = corrected.iter().map(String::as_str);
            if crate::permissions::names_subcommand(args, sub) && !command_exists(word) {
                let why =
                    format!("git takes the unknown command `{word}` for `{}` when it corrects misspellings", sub[0]);
                return Some((rule(sub), why));
            }
        }
        None
    }
}

/// The regular files at `candidates` (symlinks followed), each once and none of `known`.
fn originals(candidates: Vec<PathBuf>, known: &[Original]) -> Vec<Original> {
    let mut files: Vec<Original> = Vec::new();
    for candidate in candidates {
        let Ok(real) = std::fs::canonicalize(&candidate) else { continue };
        let Ok(meta) = std::fs::metadata(&real) else { continue };
        let id = (meta.dev(), meta.ino());
        if !meta.is_file() || files.iter().chain(known).any(|f| (f.dev, f.ino) == id) {
            continue;
        }
        let Ok(file) = File::open(&real) else { continue };
        let head = file::head(&file);
        let loader = file::elf_interpreter(&file, &head);
        files.push(Original {
            path: real,
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.len(),
            build_id: file::build_id(&file, &head),
            standalone: file::is_elf(&head) && loader.is_none(),
            loader: loader.map(|path| PathBuf::from(std::ffi::OsString::from_vec(path))),
            file,
        });
    }
    files
}
