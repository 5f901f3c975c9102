//! `cairn serve token …`: the bearer tokens a `cairn serve --auth` lets in, from the command
//! line. `create` stores a new token for a principal and prints its secret, once, alone on
//! stdout (so a script can keep it: `CAIRN_SERVE_TOKEN=$(cairn serve token create …)`), with
//! what to do with it on stderr; `list` prints the tokens (never a secret, nor its hash);
//! `revoke` stamps one revoked, which a running server sees from the next request on. With
//! `exec` and `inspect`, this is code that writes stdout: only in these commands.

use std::io::Write as _;

use super::auth::{self, TokenError};
use crate::ids::iso8601;
use crate::store::{Store, Write};
use crate::visible;

/// The `cairn serve token` subcommands.
#[derive(clap::Subcommand)]
pub enum TokenCommand {
    /// Make a token for a principal and print its secret (shown this once; only its hash is
    /// kept). Sessions created with it belong to the principal.
    Create {
        /// Who connects with it: 1 to 64 letters, digits, `.`, `_`, `-` or `@`.
        #[arg(long)]
        principal: String,
    },
    /// List the tokens: id, principal, when made, when revoked.
    List,
    /// Revoke a token (by the id `list` shows); a running server refuses it from the next
    /// request on and closes its connections at their next heartbeat.
    Revoke {
        /// The token's id (`tok_…`).
        id: String,
    },
}

/// Runs one `cairn serve token` command on `store`, then closes it.
pub async fn run(store: Store, command: TokenCommand) -> Result<(), TokenError> {
    let done = match command {
        TokenCommand::Create { principal } => create(&store, &principal).await,
        TokenCommand::List => list(&store).await,
        TokenCommand::Revoke { id } => revoke(&store, &id).await,
    };
    store.shutdown().await;
    done
}

async fn create(store: &Store, principal: &str) -> Result<(), TokenError> {
    let created = auth::create(store, principal).await?;
    let _ = writeln!(
        std::io::stderr().lock(),
        "Made token {} for {principal}. Its secret, below, is shown this once: give it to the client as \
         `Authorization: Bearer SECRET` (for `cairn acp --server`, as CAIRN_SERVE_TOKEN), and serve with \
         `cairn serve --auth`.",
        created.id
    );
    let _ = writeln!(std::io::stdout().lock(), "{}", created.secret);
    Ok(())
}

async fn list(store: &Store) -> Result<(), TokenError> {
    let tokens = store.tokens().await?;
    let mut out = format!("{:<30}  {:<24}  {:<24}  {}\n", "ID", "PRINCIPAL", "CREATED", "REVOKED");
    for token in &tokens {
        let revoked = token.revoked_at.and_then(iso8601).unwrap_or_else(|| "-".to_owned());
        let (id, principal) = (visible::line(&token.id), visible::line(&token.principal));
        out.push_str(&format!(
            "{id:<30}  {principal:<24}  {:<24}  {revoked}\n",
            iso8601(token.created_at).unwrap_or_default()
        ));
    }
    let _ = std::io::stdout().lock().write_all(out.as_bytes());
    Ok(())
}

async fn revoke(store: &Store, id: &str) -> Result<(), TokenError> {
    store.commit(Write::RevokeToken { id: id.to_owned() }).await?;
    let _ = writeln!(
        std::io::stderr().lock(),
        "Revoked {}; a running cairn serve refuses it from the next request on.",
        visible::line(id)
    );
    Ok(())
}
