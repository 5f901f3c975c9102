//! The ACP Registry entry in `editors/registry/`, held to the registry's own rules (`rules`, read
//! from the registry's build script and schema), offline. The entry passes them while claiming
//! only the build cairn ships, and every rule is shown to fail a copy of the entry broken for it,
//! so a check that cannot fail shows up here.

mod rules;

use std::path::Path;

use serde_json::{Value, json};

/// The one platform cairn ships a build for, and that build's archive.
const SHIPPED: &str = "linux-x86_64";
const ARCHIVE: &str = "cairn-x86_64-unknown-linux-gnu.tar.gz";

/// The entry's two files, as a copy to break.
struct Entry {
    manifest: String,
    icon: Option<String>,
}

impl Entry {
    fn ours() -> Self {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("editors/registry");
        let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap();
        Self { manifest: read("agent.json"), icon: Some(read("icon.svg")) }
    }

    fn json(&mut self, edit: impl FnOnce(&mut Value)) {
        let mut manifest: Value = serde_json::from_str(&self.manifest).unwrap();
        edit(&mut manifest);
        self.manifest = serde_json::to_string_pretty(&manifest).unwrap();
    }

    /// Edits the shipped platform's target.
    fn target(&mut self, edit: impl FnOnce(&mut serde_json::Map<String, Value>)) {
        self.json(|manifest| edit(manifest["distribution"]["binary"][SHIPPED].as_object_mut().unwrap()));
    }

    fn archive(&mut self, archive: &str) {
        self.target(|target| {
            target.insert("archive".into(), archive.into());
        });
    }

    fn icon_replace(&mut self, from: &str, to: &str) {
        let icon = self.icon.as_mut().unwrap();
        assert!(icon.contains(from), "the icon has no {from:?} to replace:\n{icon}");
        *icon = icon.replacen(from, to, 1);
    }

    /// The registry's verdict, with the entry laid out as in the registry's repository: a
    /// directory named after the id.
    fn verdict(&self) -> rules::Verdict {
        let registry = tempfile::tempdir().unwrap();
        let dir = registry.path().join("cairn");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("agent.json"), &self.manifest).unwrap();
        if let Some(icon) = &self.icon {
            std::fs::write(dir.join("icon.svg"), icon).unwrap();
        }
        rules::check(&dir)
    }
}

#[test]
fn the_entry_passes_the_registry_rules_claiming_only_what_cairn_ships() {
    let mut files: Vec<String> = std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("editors/registry"))
        .unwrap()
        .map(|file| file.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(files, ["agent.json", "icon.svg"], "the registry takes these two files of an entry");

    let entry = Entry::ours();
    let verdict = entry.verdict();
    assert!(verdict.errors.is_empty(), "the registry's build would refuse the entry:\n{}", verdict.errors.join("\n"));
    // Its build prints this and goes on: cairn ships no darwin or windows build.
    assert_eq!(verdict.warnings, ["no binary build for darwin, windows"]);

    let manifest: Value = serde_json::from_str(&entry.manifest).unwrap();
    let platforms: Vec<&String> = manifest["distribution"]["binary"].as_object().unwrap().keys().collect();
    assert_eq!(platforms, [SHIPPED], "the entry claims a build cairn does not ship");
    assert_eq!(manifest["version"], env!("CARGO_PKG_VERSION"), "the entry names this version");
    // A GitHub release URL with the version in it, so the registry's version check reads it.
    let repository = manifest["repository"].as_str().unwrap();
    assert!(repository.starts_with("https://github.com/"), "{repository}");
    let archive = format!("{repository}/releases/download/v{}/{ARCHIVE}", env!("CARGO_PKG_VERSION"));
    assert_eq!(manifest["distribution"]["binary"][SHIPPED]["archive"], archive.as_str());

    // The warning names just what is missing.
    let mut everywhere = Entry::ours();
    everywhere.json(|manifest| {
        let binary = manifest["distribution"]["binary"].as_object_mut().unwrap();
        let target = binary[SHIPPED].clone();
        binary.insert("darwin-aarch64".into(), target.clone());
        binary.insert("windows-x86_64".into(), target);
    });
    let verdict = everywhere.verdict();
    assert!(verdict.errors.is_empty() && verdict.warnings.is_empty(), "{verdict:?}");
}

/// One way to break the entry, and what the registry's rules must say about it.
type Break = (&'static str, fn(&mut Entry), &'static str);

const BROKEN_MANIFESTS: &[Break] = &[
    ("not JSON", |e| e.manifest = "{\"id\": \"cairn\",".into(), "agent.json is not JSON"),
    ("no name", |e| e.json(|m| drop(m.as_object_mut().unwrap().remove("name"))), "`name` is required"),
    ("an id in capitals", |e| e.json(|m| m["id"] = json!("Cairn")), "schema: `id` \"Cairn\""),
    ("an id not the directory's", |e| e.json(|m| m["id"] = json!("cairn-agent")), "not the directory's name"),
    ("a two-part version", |e| e.json(|m| m["version"] = json!("0.1")), "does not start with N.N.N"),
    ("a pre-release version", |e| e.json(|m| m["version"] = json!("0.1.0-rc.1")), "is not N.N.N"),
    ("an unknown kind", |e| e.json(|m| m["distribution"]["docker"] = json!({})), "is not a distribution kind"),
    ("an npx package", |e| e.json(|m| m["distribution"]["npx"] = json!({"package": "cairn"})), "`npx` distribution"),
    (
        "an unknown platform",
        |e| {
            e.json(|m| {
                let binary = m["distribution"]["binary"].as_object_mut().unwrap();
                let target = binary.remove(SHIPPED).unwrap();
                binary.insert("linux-riscv64".into(), target);
            });
        },
        "`distribution.binary.linux-riscv64` is not a platform",
    ),
    ("no cmd", |e| e.target(|t| drop(t.remove("cmd"))), "`distribution.binary.linux-x86_64.cmd` is required"),
    (
        "an unknown target field",
        |e| e.target(|t| drop(t.insert("command".into(), json!("cairn")))),
        "not a known field",
    ),
    ("a short sha256", |e| e.target(|t| drop(t.insert("sha256".into(), json!("abc123")))), "not 64 hex digits"),
    ("args not strings", |e| e.target(|t| drop(t.insert("args".into(), json!([1])))), "not a list of strings"),
    ("a bare archive name", |e| e.archive(ARCHIVE), "is not a public https URL"),
    ("an http archive", |e| e.archive(&format!("http://example.com/{ARCHIVE}")), "scheme \"http\""),
    ("an archive on this machine", |e| e.archive(&format!("https://localhost/{ARCHIVE}")), "host localhost"),
    ("a private address", |e| e.archive(&format!("https://10.0.0.1/{ARCHIVE}")), "address 10.0.0.1"),
    (
        "an archive of another version",
        |e| e.archive(&format!("https://github.com/cairn-agent/cairn/releases/download/v0.2/{ARCHIVE}")),
        "names version 0.2.0, the entry 0.1.0",
    ),
    (
        "the latest archive",
        |e| e.archive(&format!("https://github.com/cairn-agent/cairn/releases/latest/download/{ARCHIVE}")),
        "names `/latest/`",
    ),
    ("an installer", |e| e.archive("https://example.com/cairn_0.1.0_amd64.deb"), "`.deb` installer"),
];

const BROKEN_ICONS: &[Break] = &[
    ("no icon", |e| e.icon = None, "icon.svg is required"),
    ("not XML", |e| e.icon_replace("</svg>", ""), "not well-formed XML"),
    ("a root other than svg", |e| e.icon = Some("<div fill=\"currentColor\"/>".into()), "root is <div>"),
    ("a comment", |e| e.icon_replace("<ellipse", "<!-- the base --><ellipse"), "has a comment"),
    (
        "a hard-coded fill",
        |e| e.icon_replace("fill=\"currentColor\"", "fill=\"#1e1e1e\""),
        "of its own: fill=\"#1e1e1e\"",
    ),
    ("a stroke in a style", |e| e.icon_replace("<ellipse", "<ellipse style=\"stroke: red\""), "style=\"stroke: red\""),
    (
        "a style sheet",
        |e| e.icon_replace("<ellipse", "<style>.s { fill:#000 }</style><ellipse"),
        "fill: #000 in a <style>",
    ),
    ("no currentColor", |e| e.icon_replace("fill=\"currentColor\"", "fill=\"none\""), "never uses currentColor"),
    (
        "24 by 24",
        |e| e.icon_replace("width=\"16\" height=\"16\" viewBox=\"0 0 16 16\"", "width=\"24\" height=\"24\""),
        "is 24×24, not 16×16",
    ),
    ("not square", |e| e.icon_replace("height=\"16\"", "height=\"32\""), "not square: 16×32"),
    (
        "no size at all",
        |e| e.icon_replace(" width=\"16\" height=\"16\" viewBox=\"0 0 16 16\"", ""),
        "neither width and height nor a viewBox",
    ),
];

#[test]
fn every_rule_fails_a_copy_of_the_entry_broken_for_it() {
    assert!(Entry::ours().verdict().errors.is_empty(), "the entry itself must pass first");
    let mut missed = Vec::new();
    for (what, break_it, expected) in BROKEN_MANIFESTS.iter().chain(BROKEN_ICONS) {
        let mut entry = Entry::ours();
        break_it(&mut entry);
        let verdict = entry.verdict();
        if !verdict.errors.iter().any(|error| error.contains(expected)) {
            missed.push(format!("{what}: no error says {expected:?}; the errors: {:?}", verdict.errors));
        }
    }
    assert!(missed.is_empty(), "the rules let broken entries through:\n{}", missed.join("\n"));
}
