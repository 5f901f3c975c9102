//! The TLS parameters of a PostgreSQL URL, read as libpq reads them: `sslmode` (`disable`,
//! `prefer` when left out, `require`, `verify-ca`, `verify-full`) and `sslrootcert` (a PEM file
//! of the authorities to trust, or `system`). tokio-postgres knows only the first three modes and
//! no `sslrootcert`, so [`split`] takes both out of the URL, or out of a `key=value` string, and
//! hands back the rest for it to parse. A leaf: the `[store]` config check and the store's
//! PostgreSQL backend both read URLs through it.

use std::path::PathBuf;

/// How much TLS a connection asks for, as libpq's `sslmode` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SslMode {
    /// Never TLS.
    Disable,
    /// TLS when the server offers it, else plain; the certificate is not checked.
    Prefer,
    /// TLS or no connection; the certificate is not checked (unless `sslrootcert` is given, when
    /// it is checked as with `VerifyCa`, as libpq does).
    Require,
    /// TLS with a certificate a trusted authority signed, for whatever host.
    VerifyCa,
    /// TLS with a certificate a trusted authority signed for the host the URL names.
    VerifyFull,
}

impl SslMode {
    /// The name the URL uses.
    pub fn name(self) -> &'static str {
        match self {
            Self::Disable => "disable",
            Self::Prefer => "prefer",
            Self::Require => "require",
            Self::VerifyCa => "verify-ca",
            Self::VerifyFull => "verify-full",
        }
    }
}

/// A URL with its TLS parameters taken out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PgUrl {
    /// The URL or `key=value` string without `sslmode` and `sslrootcert`, for tokio-postgres.
    pub rest: String,
    pub ssl_mode: SslMode,
    /// `sslrootcert`: the PEM file of the authorities to trust; `None` for the system's roots
    /// (left out, or `system`).
    pub root_cert: Option<PathBuf>,
}

/// Takes `sslmode` and `sslrootcert` out of `url`; an `sslmode` libpq does not know is an error
/// saying which it knows.
pub fn split(url: &str) -> Result<PgUrl, String> {
    let trimmed = url.trim();
    let pairs = if trimmed.starts_with("postgres://") || trimmed.starts_with("postgresql://") {
        url_pairs(trimmed)
    } else {
        key_value_pairs(trimmed)?
    };
    let mut rest = String::with_capacity(trimmed.len());
    let mut ssl_mode = None;
    let mut root_cert = None;
    let mut kept_from = 0;
    for pair in &pairs {
        match pair.key.as_str() {
            "sslmode" => ssl_mode = Some(mode(&pair.value)?),
            "sslrootcert" => root_cert = Some(pair.value.clone()),
            _ => continue,
        }
        rest.push_str(&trimmed[kept_from..pair.start]);
        kept_from = pair.end;
    }
    rest.push_str(&trimmed[kept_from..]);
    let rest = tidy(rest);
    let root_cert = root_cert.filter(|path| path != "system" && !path.is_empty()).map(PathBuf::from);
    let ssl_mode = match ssl_mode {
        // libpq checks the chain under `require` when it is given authorities to check it with.
        Some(SslMode::Require) if root_cert.is_some() => SslMode::VerifyCa,
        Some(mode) => mode,
        None => SslMode::Prefer,
    };
    Ok(PgUrl { rest, ssl_mode, root_cert })
}

fn mode(value: &str) -> Result<SslMode, String> {
    match value {
        "disable" => Ok(SslMode::Disable),
        "prefer" => Ok(SslMode::Prefer),
        "require" => Ok(SslMode::Require),
        "verify-ca" => Ok(SslMode::VerifyCa),
        "verify-full" => Ok(SslMode::VerifyFull),
        other => Err(format!(
            "sslmode={other} is not a mode; use disable, prefer, require, verify-ca or verify-full (verify-full across a network)"
        )),
    }
}

/// One parameter: its decoded key and value, and the bytes it spans (with the separator that
/// goes with it) in the text.
struct Pair {
    key: String,
    value: String,
    start: usize,
    end: usize,
}

/// A URL's query parameters. Each one's span takes the `&` before it, but the first one's not
/// the `?`; [`tidy`] mends a query left starting with `&`, or empty.
fn url_pairs(url: &str) -> Vec<Pair> {
    let Some(query) = url.find('?') else { return Vec::new() };
    let mut pairs = Vec::new();
    // Where the previous parameter ended: at the `&` before this one.
    let mut at = None;
    for piece in url[query + 1..].split('&') {
        let start = at.unwrap_or(query + 1);
        let end = at.map_or(query + 1, |amp| amp + 1) + piece.len();
        let (key, value) = piece.split_once('=').unwrap_or((piece, ""));
        pairs.push(Pair { key: percent_decoded(key), value: percent_decoded(value), start, end });
        at = Some(end);
    }
    pairs
}

/// A query whose first parameter was taken out starts with `&`, one that lost all of them ends
/// with `?`.
fn tidy(mut rest: String) -> String {
    if let Some(query) = rest.find('?') {
        if rest[query + 1..].starts_with('&') {
            rest.remove(query + 1);
        }
        if rest.ends_with('?') {
            rest.pop();
        }
    }
    rest
}

fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |at: usize| bytes.get(at).and_then(|byte| char::from(*byte).to_digit(16));
        match (bytes[i], hex(i + 1), hex(i + 2)) {
            (b'%', Some(high), Some(low)) => {
                out.push(u8::try_from(high * 16 + low).unwrap_or(b'?'));
                i += 3;
            }
            (byte, _, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A `key=value` string's parameters, as libpq reads them: blanks between pairs and around `=`,
/// a value in single quotes or bare up to the next blank, `\` escaping the next character.
fn key_value_pairs(text: &str) -> Result<Vec<Pair>, String> {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let byte = |index: usize| chars.get(index).map_or(text.len(), |(at, _)| *at);
    let blank = |index: usize| chars.get(index).is_some_and(|(_, c)| c.is_whitespace());
    let mut pairs = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        while blank(i) {
            i += 1;
        }
        if i >= chars.len() {
            break;
        }
        let start = i;
        let mut key = String::new();
        while let Some((_, c)) = chars.get(i).filter(|(_, c)| *c != '=' && !c.is_whitespace()) {
            key.push(*c);
            i += 1;
        }
        while blank(i) {
            i += 1;
        }
        if chars.get(i).map(|(_, c)| *c) != Some('=') {
            return Err(format!("`{key}` has no `=` after it; write key=value pairs"));
        }
        i += 1;
        while blank(i) {
            i += 1;
        }
        let mut value = String::new();
        if chars.get(i).map(|(_, c)| *c) == Some('\'') {
            i += 1;
            loop {
                match chars.get(i).map(|(_, c)| *c) {
                    None => return Err(format!("the value of `{key}` has no closing quote")),
                    Some('\'') => break,
                    Some('\\') => {
                        if let Some((_, c)) = chars.get(i + 1) {
                            value.push(*c);
                        }
                        i += 2;
                    }
                    Some(c) => {
                        value.push(c);
                        i += 1;
                    }
                }
            }
            i += 1;
        } else {
            while let Some((_, c)) = chars.get(i).filter(|(_, c)| !c.is_whitespace()) {
                if *c == '\\' {
                    if let Some((_, next)) = chars.get(i + 1) {
                        value.push(*next);
                    }
                    i += 2;
                } else {
                    value.push(*c);
                    i += 1;
                }
            }
        }
        pairs.push(Pair { key, value, start: byte(start), end: byte(i).min(text.len()) });
    }
    Ok(pairs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split_ok(url: &str) -> PgUrl {
        split(url).unwrap_or_else(|err| panic!("{url}: {err}"))
    }

    #[test]
    fn a_url_without_tls_parameters_is_left_whole_and_prefers_tls_as_libpq_does() {
        let url = "postgres://cairn:s3cret@db:5432/cairn?connect_timeout=5";
        assert_eq!(split_ok(url), PgUrl { rest: url.into(), ssl_mode: SslMode::Prefer, root_cert: None });
    }

    #[test]
    fn sslmode_and_sslrootcert_are_taken_out_of_a_url_wherever_they_stand() {
        let parsed = split_ok("postgres://u@db/c?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem");
        assert_eq!(parsed.rest, "postgres://u@db/c");
        assert_eq!(parsed.ssl_mode, SslMode::VerifyFull);
        assert_eq!(parsed.root_cert, Some(PathBuf::from("/etc/ca.pem")));
        let parsed = split_ok("postgres://u@db/c?connect_timeout=5&sslmode=verify-ca&application_name=x");
        assert_eq!(parsed.rest, "postgres://u@db/c?connect_timeout=5&application_name=x");
        assert_eq!(parsed.ssl_mode, SslMode::VerifyCa);
        assert_eq!(split_ok("postgres://u@db/c?sslmode=disable&port=6000").rest, "postgres://u@db/c?port=6000");
    }

    #[test]
    fn sslmode_and_sslrootcert_are_taken_out_of_a_key_value_string_quoted_or_not() {
        let parsed = split_ok("host=db sslmode = verify-full sslrootcert='/my certs/ca\\'s.pem' dbname=cairn");
        assert_eq!(parsed.rest, "host=db   dbname=cairn");
        assert!(parsed.rest.parse::<tokio_postgres::Config>().is_ok(), "the rest is for tokio-postgres");
        assert_eq!(parsed.ssl_mode, SslMode::VerifyFull);
        assert_eq!(parsed.root_cert, Some(PathBuf::from("/my certs/ca's.pem")));
        assert!(split("host=db sslmode='unclosed").is_err());
    }

    #[test]
    fn require_with_a_root_certificate_checks_the_chain_and_system_means_the_systems_roots() {
        assert_eq!(split_ok("postgres://u@db/c?sslmode=require&sslrootcert=/ca.pem").ssl_mode, SslMode::VerifyCa);
        assert_eq!(split_ok("postgres://u@db/c?sslmode=require").ssl_mode, SslMode::Require);
        let system = split_ok("postgres://u@db/c?sslmode=verify-full&sslrootcert=system");
        assert_eq!((system.ssl_mode, system.root_cert), (SslMode::VerifyFull, None));
    }

    #[test]
    fn an_unknown_sslmode_is_refused_listing_the_known_ones() {
        let err = split("postgres://u:s3cret@db/c?sslmode=verify").unwrap_err();
        assert!(err.contains("verify-full") && !err.contains("s3cret"), "{err}");
    }
}
