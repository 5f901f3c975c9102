//! What a language server's messages say, as cairn reads them: one LSP diagnostic as a line of
//! the result ([`diagnostic`]: errors and warnings only), a document's `languageId` by its
//! extension ([`language`]), and a published URI as cairn names that document ([`same_uri`]).

use serde_json::Value;

use crate::tools::diagnostics::parse::{Diagnostic, Severity};

/// An LSP diagnostic as the result lists it: errors and warnings only (a missing severity is
/// an error), the source and code as its code, its start (from 1) as line and column, the
/// first line of its message.
pub fn diagnostic(value: &Value) -> Option<Diagnostic> {
    let severity = match value["severity"].as_u64() {
        None | Some(1) => Severity::Error,
        Some(2) => Severity::Warning,
        Some(_) => return None,
    };
    let code = match &value["code"] {
        Value::String(code) => Some(code.clone()),
        Value::Number(code) => Some(code.to_string()),
        _ => None,
    };
    let code = match (value["source"].as_str().filter(|source| !source.is_empty()), code) {
        (Some(source), Some(code)) => Some(format!("{source} {code}")),
        (Some(source), None) => Some(source.to_owned()),
        (None, code) => code,
    };
    // The first line says it; the rest is detail (rustc's label, pyright's reasons).
    let message = value["message"].as_str()?.lines().map(str::trim).find(|line| !line.is_empty())?;
    let start = &value["range"]["start"];
    let at = |key: &str| u32::try_from(start[key].as_u64().unwrap_or(0)).unwrap_or(u32::MAX).saturating_add(1);
    Some(Diagnostic {
        path: String::new(),
        line: at("line"),
        column: Some(at("character")),
        severity,
        code,
        message: crate::tools::diagnostics::cut(message, crate::tools::diagnostics::run::MOST_LINE).to_owned(),
    })
}

/// The `languageId` of a document, by its extension.
pub fn language(uri: &str) -> &str {
    let extension = uri.rsplit_once('.').map_or("", |(_, extension)| extension);
    match extension {
        "rs" => "rust",
        "ts" | "mts" | "cts" => "typescript",
        "tsx" => "typescriptreact",
        "js" | "mjs" | "cjs" => "javascript",
        "jsx" => "javascriptreact",
        "py" => "python",
        "go" => "go",
        other if !other.contains('/') => other,
        _ => "plaintext",
    }
}

/// A published document's URI as cairn sends it: a server may escape a path otherwise.
pub fn same_uri(uri: &str) -> String {
    url::Url::parse(uri)
        .ok()
        .and_then(|parsed| parsed.to_file_path().ok())
        .map_or_else(|| uri.to_owned(), |path| super::uri(&path))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn errors_and_warnings_are_kept_with_their_source_and_code_hints_are_not() {
        let value = json!({"range": {"start": {"line": 2, "character": 4}}, "severity": 1, "source": "rustc",
            "code": "E0308", "message": "mismatched types\n expected `u32`"});
        let found = diagnostic(&value).unwrap();
        assert_eq!((found.line, found.column), (3, Some(5)));
        assert_eq!(found.code.as_deref(), Some("rustc E0308"));
        assert_eq!(found.message, "mismatched types", "its first line");
        let numbered = diagnostic(&json!({"severity": 2, "code": 2322, "message": "x"})).unwrap();
        assert_eq!((numbered.severity, numbered.code.as_deref()), (Severity::Warning, Some("2322")));
        assert!(diagnostic(&json!({"severity": 3, "message": "info"})).is_none());
        assert!(diagnostic(&json!({"severity": 4, "message": "hint"})).is_none());
        assert!(diagnostic(&json!({"severity": 1})).is_none(), "no message");
        assert!(diagnostic(&json!({"severity": 1, "message": " \n "})).is_none(), "a blank one");
        assert_eq!(diagnostic(&json!({"message": "m"})).unwrap().severity, Severity::Error);
    }

    #[test]
    fn a_published_uri_escaped_otherwise_is_the_same_document() {
        let sent = super::super::uri(std::path::Path::new("/w/it's a:b.rs"));
        assert_eq!(same_uri("file:///w/it%27s%20a%3Ab.rs"), sent);
        assert_eq!(same_uri(&sent), sent);
        assert_eq!(same_uri("untitled:1"), "untitled:1");
    }

    #[test]
    fn a_document_s_language_is_named_by_its_extension() {
        assert_eq!(language("file:///w/src/lib.rs"), "rust");
        assert_eq!(language("file:///w/a.tsx"), "typescriptreact");
        assert_eq!(language("file:///w/a.txt"), "txt");
        assert_eq!(language("file:///w.d/Makefile"), "plaintext");
    }
}
