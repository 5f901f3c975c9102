//! Tidy checks: the conventions and boundaries of ARCHITECTURE.md, enforced on every test run.

use std::path::{Path, PathBuf};

const MAX_LINES: usize = 600;

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn source(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap()
}

#[test]
fn every_file_opens_with_a_module_doc_and_stays_short() {
    let mut problems = Vec::new();
    for dir in ["src", "tests", "benches"] {
        for file in rust_files(&root().join(dir)) {
            let text = source(&file);
            if !text.starts_with("//!") {
                problems.push(format!("{} does not open with a `//!` paragraph", file.display()));
            }
            let lines = text.lines().count();
            if lines > MAX_LINES {
                problems.push(format!(
                    "{} has {lines} lines (limit {MAX_LINES}); split it along a real seam",
                    file.display()
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_layers_keep_to_their_boundaries() {
    let mut problems = Vec::new();
    for file in rust_files(&root().join("src")) {
        let relative = file.strip_prefix(root().join("src")).unwrap().to_string_lossy().into_owned();
        let text = source(&file);
        let in_acp = relative.starts_with("acp/");
        let in_store = relative.starts_with("store/");
        if !in_acp && text.contains("agent_client_protocol") {
            problems.push(format!("{relative} uses ACP wire types; only acp/ may"));
        }
        if !in_store && text.contains("rusqlite") {
            problems.push(format!("{relative} uses rusqlite; only store/ may"));
        }
        for keyword in ["SELECT ", "INSERT INTO", "UPDATE sessions", "DELETE FROM"] {
            if !in_store && text.contains(keyword) {
                problems.push(format!("{relative} contains SQL (`{keyword}`); only store/ may"));
            }
        }
        let writes_stdout = text.contains("io::stdout()") || text.contains("tokio::io::stdout");
        let headless = ["exec.rs", "acp/stdio.rs", "acp/headless.rs", "inspect/mod.rs", "doctor.rs", "serve/tokens.rs"];
        if writes_stdout && !headless.contains(&relative.as_str()) {
            problems.push(format!(
                "{relative} writes stdout; stdout is the protocol (acp::rpc, opened by acp::stdio) or the headless output (exec, acp::headless, inspect, doctor, serve token)"
            ));
        }
        if relative.starts_with("permissions/") || relative == "workspace.rs" {
            for forbidden in ["crate::tools", "crate::agent", "crate::acp", "crate::store", "crate::session"] {
                if text.contains(forbidden) {
                    problems.push(format!("{relative} imports {forbidden}; the policy and paths stay leaves"));
                }
            }
        }
        if relative.starts_with("tools/") {
            for forbidden in ["crate::agent", "crate::acp", "crate::store", "crate::session"] {
                if text.contains(forbidden) {
                    problems.push(format!("{relative} imports {forbidden}; tools reach sessions only through traits"));
                }
            }
        }
        if relative.starts_with("mcp/") {
            for forbidden in ["crate::tools", "crate::agent", "crate::acp", "crate::store", "crate::session"] {
                if text.contains(forbidden) {
                    problems.push(format!(
                        "{relative} imports {forbidden}; MCP clients get the editor's servers converted and serve tools/"
                    ));
                }
            }
        }
        if relative.starts_with("agent/") || relative.starts_with("llm/") {
            for forbidden in ["crate::acp", "crate::store", "crate::session"] {
                if text.contains(forbidden) {
                    problems.push(format!("{relative} imports {forbidden}; the turn and providers stay below it"));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn ci_runs_exactly_the_test_command_of_the_readme() {
    let readme = source(&root().join("README.md"));
    let ci = source(&root().join(".ci/run"));
    let command = ci.lines().map(str::trim).rfind(|line| !line.is_empty() && !line.starts_with('#')).unwrap();
    assert!(readme.contains(&format!("\n{command}\n")), "the README's test command is `{command}`, as .ci/run runs it");
}

/// TLS needs the crypto provider `net::client_builder` installs: a client built elsewhere would
/// fail at its first connection attempt on a machine the tests never see.
#[test]
fn every_http_client_is_built_through_net() {
    for file in rust_files(&root().join("src")) {
        if file.ends_with("src/net.rs") {
            continue;
        }
        let text = source(&file);
        assert!(!text.contains("Client::builder()"), "{} builds an HTTP client outside net.rs", file.display());
    }
}

#[test]
fn no_file_keeps_a_merge_conflict() {
    let mut files = rust_files(&root().join("src"));
    files.extend(rust_files(&root().join("tests")));
    files.extend(rust_files(&root().join("benches")));
    for name in ["README.md", "ARCHITECTURE.md", "BENCHMARKS.md", "Cargo.toml"] {
        files.push(root().join(name));
    }
    for dir in ["schema", "schema/pg"] {
        for entry in std::fs::read_dir(root().join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.is_file() {
                files.push(path);
            }
        }
    }
    for file in files {
        let text = source(&file);
        let marked = text
            .lines()
            .any(|line| line.starts_with("<<<<<<< ") || line.starts_with(">>>>>>> ") || line.trim_end() == "=======");
        assert!(!marked, "{} holds a merge conflict marker", file.display());
    }
}

/// The code map names every source file and directory, and names nothing that is gone: a
/// newcomer reading ARCHITECTURE.md finds each module where it says, and each module is there.
#[test]
fn the_code_map_and_the_source_tree_agree() {
    let doc = source(&root().join("ARCHITECTURE.md"));
    let start = doc.find("## Code map").expect("ARCHITECTURE.md has a `## Code map` section");
    let map = &doc[start..doc[start..].find("\n## ").map_or(doc.len(), |end| start + end)];
    let mentions = |name: &str| map.contains(&format!("`{name}")) || map.contains(&format!("/{name}`"));
    let mut problems = Vec::new();
    let src = root().join("src");
    let mut dirs = std::collections::BTreeSet::new();
    for file in rust_files(&src) {
        let relative = file.strip_prefix(&src).unwrap();
        let in_tests = relative.components().any(|part| part.as_os_str() == "tests");
        let name = relative.file_name().unwrap().to_string_lossy().into_owned();
        // A module that is a directory (`x/mod.rs`) is named as `x/`; the children of a module
        // that is a file (`x.rs` with `x/y.rs`) are named one by one.
        if name == "mod.rs" && !in_tests {
            dirs.insert(relative.parent().unwrap().to_path_buf());
        }
        if in_tests || name.ends_with("_tests.rs") || ["mod.rs", "tests.rs", "lib.rs"].contains(&name.as_str()) {
            continue;
        }
        if !mentions(&name) && !mentions(&relative.to_string_lossy()) {
            problems.push(format!("src/{} is not in ARCHITECTURE.md's code map", relative.display()));
        }
    }
    for dir in dirs {
        let leaf = dir.file_name().unwrap().to_string_lossy();
        if !mentions(&format!("{leaf}/")) {
            problems.push(format!("the directory src/{}/ is not in ARCHITECTURE.md's code map", dir.display()));
        }
    }
    let mut names = std::collections::BTreeSet::new();
    for dir in ["src", "tests", "benches", "examples"] {
        for file in rust_files(&root().join(dir)) {
            names.insert(file.file_name().unwrap().to_string_lossy().into_owned());
        }
    }
    for quoted in map.split('`').skip(1).step_by(2) {
        let Some(file) = quoted.strip_suffix(".rs") else { continue };
        let name = format!("{}.rs", file.rsplit('/').next().unwrap());
        if !names.contains(&name) {
            problems.push(format!("ARCHITECTURE.md's code map names `{quoted}`, which does not exist"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// A file's text without its comment lines (docs mention modules they do not import).
fn code_lines(text: &str) -> String {
    text.lines().filter(|line| !line.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n")
}

/// The first words of the paths of a `crate::{…}` group (`a` and `b` in `{a::x, b::{y, z}}`).
fn group_heads(group: &str) -> Vec<String> {
    let (mut heads, mut depth, mut at_start) = (Vec::new(), 0, true);
    let mut word = String::new();
    for c in group.chars() {
        if c.is_alphanumeric() || c == '_' {
            if at_start && depth == 0 {
                word.push(c);
            }
            continue;
        }
        if !word.is_empty() {
            heads.push(std::mem::take(&mut word));
            at_start = false;
        }
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => at_start = true,
            _ => {}
        }
    }
    heads.extend((!word.is_empty()).then_some(word));
    heads
}

/// Which top-level modules each top-level module names (`crate::x`, `crate::{x, y}`).
fn top_level_imports() -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
    let src = root().join("src");
    let top = |relative: &Path| {
        let first = relative.components().next().unwrap().as_os_str().to_string_lossy().into_owned();
        first.strip_suffix(".rs").map(str::to_owned).unwrap_or(first)
    };
    let files: Vec<PathBuf> = rust_files(&src);
    let modules: std::collections::BTreeSet<String> = files
        .iter()
        .map(|file| top(file.strip_prefix(&src).unwrap()))
        .filter(|module| module != "lib" && module != "main")
        .collect();
    let mut imports: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
        modules.iter().map(|module| (module.clone(), Default::default())).collect();
    for file in &files {
        let from = top(file.strip_prefix(&src).unwrap());
        let Some(edges) = imports.get_mut(&from) else { continue };
        let code = code_lines(&source(file));
        for (at, _) in code.match_indices("crate::") {
            let rest = &code[at + "crate::".len()..];
            let named = match rest.strip_prefix('{') {
                Some(group) => group_heads(group),
                None => vec![rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect()],
            };
            edges.extend(named.into_iter().filter(|name| *name != from && modules.contains(name)));
        }
    }
    imports
}

/// The top-level modules form layers: none imports, through others, one that imports it. A
/// number that two modules must agree on lives in a leaf both import (`images.rs`).
#[test]
fn no_top_level_modules_import_each_other() {
    let imports = top_level_imports();
    assert!(imports["tools"].contains("permissions"), "the reading of imports finds them: {imports:?}");
    // Depth-first from every module; a module met again on the current path closes a cycle.
    fn visit<'a>(
        module: &'a str,
        imports: &'a std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
        path: &mut Vec<&'a str>,
        done: &mut std::collections::BTreeSet<&'a str>,
    ) -> Option<String> {
        if let Some(at) = path.iter().position(|on| *on == module) {
            return Some([&path[at..], &[module]].concat().join(" -> "));
        }
        if !done.insert(module) {
            return None;
        }
        path.push(module);
        let cycle = imports[module].iter().find_map(|next| visit(next, imports, path, done));
        path.pop();
        cycle
    }
    let mut done = std::collections::BTreeSet::new();
    for module in imports.keys() {
        if let Some(cycle) = visit(module, &imports, &mut Vec::new(), &mut done) {
            panic!("top-level modules import each other: {cycle}; move what both need into a leaf");
        }
    }
}

/// `process/`'s module doc names every function of `process/` that holds an `unsafe` block
/// (with its file), so the list of what makes each sound stays whole.
#[test]
fn the_process_doc_names_every_unsafe_block_of_process() {
    let dir = root().join("src/process");
    let doc: String =
        source(&dir.join("mod.rs")).lines().take_while(|line| line.starts_with("//!")).collect::<Vec<_>>().join("\n");
    let named: std::collections::BTreeSet<&str> =
        doc.split('`').skip(1).step_by(2).map(|span| span.rsplit("::").next().unwrap()).collect();
    let mut problems = Vec::new();
    for file in rust_files(&dir) {
        let relative = file.strip_prefix(&dir).unwrap().to_string_lossy().into_owned();
        let mut function = None;
        let mut holding = Vec::new();
        for line in code_lines(&source(&file)).lines() {
            if line.trim_start().starts_with("mod tests") {
                break;
            }
            if let Some(at) = line.find("fn ").filter(|at| *at == 0 || !line.as_bytes()[at - 1].is_ascii_alphanumeric())
            {
                let name: String = line[at + 3..].chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                function = Some(name);
            }
            if (line.contains("unsafe {") || line.contains("unsafe fn ")) && !holding.contains(&function) {
                holding.push(function.clone());
            }
        }
        if !holding.is_empty() && !named.contains(relative.as_str()) {
            problems.push(format!("{relative} holds `unsafe` and is not named"));
        }
        for function in holding {
            let function = function.unwrap_or_default();
            if !named.contains(function.as_str()) {
                problems.push(format!("`{function}` in {relative} holds `unsafe` and is not named"));
            }
        }
    }
    assert!(problems.is_empty(), "process/mod.rs's doc:\n{}", problems.join("\n"));
}
