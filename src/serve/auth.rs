//! Who is asking: the bearer tokens of `cairn serve --auth`. A token's secret is `cairn_` and
//! the unpadded base64url of 32 random bytes; only its SHA-256 is stored (`store::tokens`), and
//! [`grant`] finds the token by that hash, so no secret is ever compared byte by byte (a
//! lookup by hash is no timing oracle on the secret). The secret travels only in an
//! `Authorization: Bearer` header, never a URL: a query is not read.
//!
//! With `--auth`, every request to `/acp` is checked before anything else touches state, on
//! the store as it is now, so a token revoked by `cairn serve token revoke` is refused from the
//! next request on (and its open connections are closed at their next heartbeat). A refusal is
//! 401 with `WWW-Authenticate: Bearer` and one line saying what to do, whatever was wrong
//! (missing, malformed, two headers, unknown or revoked): the log says which, never the secret.
//! Without `--auth` (a loopback address or a Unix socket) every request must show the server's
//! own secret instead (`secret`), the same way and with the same answer when it does not, and
//! the connection acts for the local user.

use std::sync::Arc;

use base64::Engine as _;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Response, StatusCode};
use ring::rand::SecureRandom as _;

use super::Server;
use super::upgrade::{Body, text};
use crate::session::Principal;
use crate::store::{Store, StoreError, TokenCheck, Write};

/// What every secret starts with, so that one found in a file or a log is recognizable.
const PREFIX: &str = "cairn_";
/// Random bytes in a secret.
const SECRET_BYTES: usize = 32;
/// The length of a secret's text: the prefix and 43 base64url characters.
const SECRET_LEN: usize = PREFIX.len() + (SECRET_BYTES * 4).div_ceil(3);

/// What the server checks tokens with (`--auth`).
pub(super) struct Auth {
    check: TokenCheck,
}

impl Auth {
    /// The check of `store`'s tokens; refused when none is live, since nobody could connect.
    pub(super) fn open(store: &Store) -> Result<Self, String> {
        let check = store.token_check().map_err(|err| err.to_string())?;
        match check.any_live() {
            Ok(true) => Ok(Self { check }),
            Ok(false) => Err("cairn serve --auth: no token to check clients with; make one with \
                 `cairn serve token create --principal NAME` and give its secret to the client \
                 (CAIRN_SERVE_TOKEN for `cairn acp --server`)"
                .to_owned()),
            Err(err) => Err(err.to_string()),
        }
    }

    /// Whether the token hashing to `hash` is still good (not revoked, not gone). A store that
    /// cannot be read keeps what it had.
    fn still_good(&self, hash: &[u8; 32]) -> bool {
        match self.check.find(hash) {
            Ok(found) => found.is_some_and(|token| token.revoked_at.is_none()),
            Err(err) => {
                tracing::warn!(%err, "cannot check a connection's token again");
                true
            }
        }
    }
}

/// What a request must show to be let in.
#[derive(Clone)]
pub(super) enum Gate {
    /// A live token of the store's (`--auth`).
    Tokens(Arc<Auth>),
    /// The server's own secret, by its hash (without `--auth`).
    Secret([u8; 32]),
}

impl Gate {
    /// The gate of a server using `data_dir`: tokens with `auth`, else the secret kept there
    /// (made now if there is none).
    pub(super) fn open(store: &Store, auth: bool, data_dir: &std::path::Path) -> Result<Self, String> {
        match auth {
            true => Ok(Self::Tokens(Arc::new(Auth::open(store)?))),
            false => Ok(Self::Secret(hash(&super::secret::take(data_dir)?))),
        }
    }
}

/// A request let in: whom it acts for and, with `--auth`, the token it carried (by hash).
pub(super) struct Grant {
    pub principal: Principal,
    token: Option<(Arc<Auth>, [u8; 32])>,
}

impl Grant {
    /// Whether the token it was let in with is still good: always, without `--auth`. One
    /// indexed read.
    pub(super) fn still_good(&self) -> bool {
        self.token.as_ref().is_none_or(|(auth, hash)| auth.still_good(hash))
    }
}

/// Whom a request to `/acp` acts for, with the token's hash to check it again later; or the
/// answer refusing it (401, or 500 when the tokens cannot be read). Called before anything that
/// touches state.
pub(super) fn grant(server: &Server, headers: &HeaderMap) -> Result<Grant, Box<Response<Body>>> {
    let shown = bearer(headers);
    let auth = match &server.gate {
        Gate::Tokens(auth) => auth,
        Gate::Secret(expected) => {
            return match shown.map(hash) {
                Ok(hash) if hash == *expected => Ok(Grant { principal: Principal::Local, token: None }),
                Ok(_) => {
                    tracing::info!("refused a request: it did not show this server's secret");
                    Err(Box::new(unauthorized(LOCAL_REFUSED)))
                }
                Err(why) => {
                    tracing::info!("refused a request: {why}");
                    Err(Box::new(unauthorized(LOCAL_REFUSED)))
                }
            };
        }
    };
    let secret = match shown {
        Ok(secret) => secret,
        Err(why) => {
            tracing::info!("refused a request: {why}");
            return Err(Box::new(unauthorized(TOKEN_REFUSED)));
        }
    };
    let hash = hash(secret);
    match auth.check.find(&hash) {
        Ok(Some(token)) if token.revoked_at.is_none() => {
            tracing::debug!(token = %token.id, principal = %token.principal, "a request was let in");
            Ok(Grant { principal: Principal::Named(token.principal.into()), token: Some((Arc::clone(auth), hash)) })
        }
        Ok(Some(token)) => {
            tracing::info!(token = %token.id, "refused a request: its token was revoked");
            Err(Box::new(unauthorized(TOKEN_REFUSED)))
        }
        Ok(None) => {
            tracing::info!("refused a request: its token is not one of this server's");
            Err(Box::new(unauthorized(TOKEN_REFUSED)))
        }
        Err(err) => {
            tracing::warn!(%err, "cannot check a request's token");
            let why = format!("cairn serve cannot check tokens: {err}");
            Err(Box::new(text(StatusCode::INTERNAL_SERVER_ERROR, &why)))
        }
    }
}

/// The secret of the one `Authorization: Bearer` header, shaped as a secret is; or why not.
fn bearer(headers: &HeaderMap) -> Result<&str, &'static str> {
    let mut all = headers.get_all(header::AUTHORIZATION).iter();
    let (Some(value), None) = (all.next(), all.next()) else {
        return Err(if headers.contains_key(header::AUTHORIZATION) {
            "more than one Authorization header"
        } else {
            "no Authorization header"
        });
    };
    let value = value.to_str().map_err(|_| "an Authorization header that is not visible ASCII")?;
    let (scheme, secret) = value.split_once(' ').ok_or("an Authorization header with no scheme")?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err("an Authorization header of another scheme than Bearer");
    }
    if !shaped(secret) {
        return Err("a bearer token that is not shaped as cairn's");
    }
    Ok(secret)
}

/// Whether `secret` is shaped as the secrets cairn makes.
pub(super) fn shaped(secret: &str) -> bool {
    secret.len() == SECRET_LEN
        && secret.starts_with(PREFIX)
        && secret[PREFIX.len()..].bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// What a client refused by a server with `--auth` is told.
const TOKEN_REFUSED: &str = "cairn serve --auth needs a valid token: send `Authorization: Bearer SECRET` with a secret \
     from `cairn serve token create` on the server (for `cairn acp --server`, set CAIRN_SERVE_TOKEN)";
/// What a client refused by a server without `--auth` is told.
const LOCAL_REFUSED: &str = "cairn serve needs its own secret: send `Authorization: Bearer SECRET` with the \
     secret in the file serve-secret the server named when it started (`cairn acp --server` sends it by itself)";

fn unauthorized(why: &str) -> Response<Body> {
    let mut response = text(StatusCode::UNAUTHORIZED, why);
    response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

/// The SHA-256 of a secret, as stored.
fn hash(secret: &str) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, secret.as_bytes());
    let mut hash = [0u8; 32];
    hash.copy_from_slice(digest.as_ref());
    hash
}

/// A token just made: its public id, and the secret shown once.
pub struct Created {
    pub id: String,
    pub secret: String,
}

/// Why a token could not be made or revoked.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error(
        "--principal `{0}`: give a name of 1 to 64 letters, digits, `.`, `_`, `-` or `@` (such as alice or ci-bot)"
    )]
    BadPrincipal(String),
    #[error("the system gave no random bytes for a secret; try again")]
    NoRandom,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A new secret: the prefix and 256 random bits.
pub(super) fn new_secret() -> Result<String, TokenError> {
    let mut bytes = [0u8; SECRET_BYTES];
    ring::rand::SystemRandom::new().fill(&mut bytes).map_err(|_| TokenError::NoRandom)?;
    Ok(format!("{PREFIX}{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)))
}

/// Makes and stores a token for `principal`.
pub async fn create(store: &Store, principal: &str) -> Result<Created, TokenError> {
    let valid = (1..=64).contains(&principal.len())
        && principal.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'@'));
    if !valid {
        return Err(TokenError::BadPrincipal(principal.to_owned()));
    }
    let secret = new_secret()?;
    let id = crate::ids::new_id("tok");
    store.commit(Write::AddToken { id: id.clone(), principal: principal.to_owned(), hash: hash(&secret) }).await?;
    Ok(Created { id, secret })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(values: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(header::AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        }
        headers
    }

    #[test]
    fn only_one_bearer_header_holding_a_secret_shaped_as_cairns_is_read() {
        let secret = format!("{PREFIX}{}", "A".repeat(43));
        assert_eq!(SECRET_LEN, secret.len());
        assert_eq!(bearer(&with(&[&format!("Bearer {secret}")])), Ok(secret.as_str()));
        assert_eq!(bearer(&with(&[&format!("bearer {secret}")])), Ok(secret.as_str()));
        for refused in [
            String::new(),
            "Bearer".to_owned(),
            "Bearer ".to_owned(),
            format!("Bearer  {secret}"),
            format!("Bearer {secret} "),
            format!("Bearer {secret}x"),
            format!("Basic {secret}"),
            format!("Bearer {}", &secret[1..]),
            format!("Bearer {PREFIX}{}", "+".repeat(43)),
            format!("Bearer {}", "A".repeat(100_000)),
        ] {
            assert!(bearer(&with(&[&refused])).is_err(), "{refused:?}");
        }
        assert!(bearer(&HeaderMap::new()).is_err());
        let two = with(&[&format!("Bearer {secret}"), &format!("Bearer {secret}")]);
        assert_eq!(bearer(&two), Err("more than one Authorization header"));
    }

    #[test]
    fn a_secret_hashes_to_sha256() {
        let expected = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
        let hex: String = hash("").iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, expected);
    }
}
