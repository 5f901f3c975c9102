//! Front matter: the `key: value` lines between two `---` lines that open a Markdown file of a
//! named agent (`agents`), a skill (`skill`) or a custom command (`session::custom`). One reader
//! for all of them, deliberately small: a value is one line (quotes around it dropped), or, when
//! the line after `key:` is empty, the `- item` lines that follow (a list). Comments (`#`) and
//! blank lines are skipped; any other line is an error naming its line number.

/// One value of the front matter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Field {
    /// `key: value`, unquoted.
    Text(String),
    /// `key:` followed by `- item` lines, each unquoted.
    List(Vec<String>),
}

impl Field {
    /// The value as one line of text (a list's items joined by `, `).
    pub fn text(&self) -> String {
        match self {
            Field::Text(text) => text.clone(),
            Field::List(items) => items.join(", "),
        }
    }
}

/// A file split into its front matter and what follows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FrontMatter {
    /// In the file's order; a key given twice keeps both (the first is read).
    pub fields: Vec<(String, Field)>,
    /// The text after the closing `---` line.
    pub body: String,
}

impl FrontMatter {
    /// The first value of `key`, when it is there.
    pub fn get(&self, key: &str) -> Option<&Field> {
        self.fields.iter().find(|(k, _)| k == key).map(|(_, field)| field)
    }

    /// The first value of `key` as one line of text, when it is there and not empty.
    pub fn text(&self, key: &str) -> Option<String> {
        self.get(key).map(Field::text).filter(|text| !text.is_empty())
    }
}

/// Reads a file that must open with front matter.
pub fn parse(text: &str) -> Result<FrontMatter, String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text).replace("\r\n", "\n");
    let rest = text.strip_prefix("---\n").ok_or("it does not start with front matter (a `---` line)")?;
    let (front, body) = match rest.find("\n---") {
        Some(end) => {
            let after = &rest[end + 4..];
            (&rest[..end], after.split_once('\n').map_or("", |(_, body)| body))
        }
        // `---` then `---` at once: empty front matter.
        None if rest.starts_with("---") => ("", rest[3..].split_once('\n').map_or("", |(_, body)| body)),
        None => return Err("its front matter has no closing `---` line".to_owned()),
    };
    let mut fields: Vec<(String, Field)> = Vec::new();
    let mut in_list = false;
    for (number, line) in front.lines().enumerate() {
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        if let Some(item) = line.trim_start().strip_prefix("- ")
            && in_list
            && let Some((_, Field::List(items))) = fields.last_mut()
        {
            items.push(unquote(item.trim()).trim().to_owned());
            continue;
        }
        in_list = false;
        let Some((key, value)) = line.split_once(':') else {
            return Err(format!("line {} of its front matter is not `key: value`", number + 2));
        };
        let value = unquote(value.trim());
        let field = if value.is_empty() {
            in_list = true;
            Field::List(Vec::new())
        } else {
            Field::Text(value.to_owned())
        };
        fields.push((key.trim().to_owned(), field));
    }
    Ok(FrontMatter { fields, body: body.to_owned() })
}

/// Reads a file whose front matter is optional: without a first `---` line it is all body.
pub fn parse_optional(text: &str) -> Result<FrontMatter, String> {
    let bare = text.strip_prefix('\u{feff}').unwrap_or(text);
    if bare.starts_with("---\n") || bare.starts_with("---\r\n") {
        parse(bare)
    } else {
        Ok(FrontMatter { fields: Vec::new(), body: bare.replace("\r\n", "\n") })
    }
}

/// `"x"` and `'x'` are `x`.
pub fn unquote(value: &str) -> &str {
    for quote in ['"', '\''] {
        if let Some(inner) = value.strip_prefix(quote).and_then(|v| v.strip_suffix(quote)) {
            return inner;
        }
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_lists_and_the_body() {
        let front =
            parse("---\nname: a\ndescription: \"quoted: yes\"\ntools:\n  - read\n  - 'glob'\n# note\n---\nBody\n")
                .unwrap();
        assert_eq!(front.text("name").as_deref(), Some("a"));
        assert_eq!(front.text("description").as_deref(), Some("quoted: yes"));
        assert_eq!(front.get("tools"), Some(&Field::List(vec!["read".into(), "glob".into()])));
        assert_eq!(front.body, "Body\n");
        assert_eq!(parse("---\n---\nonly body").unwrap().body, "only body");
    }

    #[test]
    fn optional_front_matter_and_errors() {
        assert_eq!(parse_optional("just text $ARGUMENTS").unwrap().body, "just text $ARGUMENTS");
        assert_eq!(parse_optional("---\ndescription: d\n---\nx").unwrap().text("description").as_deref(), Some("d"));
        assert!(parse("no").unwrap_err().contains("front matter"));
        assert!(parse("---\na: b\n").unwrap_err().contains("closing"));
        assert!(parse("---\na: b\nwords\n---\n").unwrap_err().contains("line 3"));
    }
}
