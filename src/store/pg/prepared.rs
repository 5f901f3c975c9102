//! The statements a connection runs on every batch or round, prepared once per connection.
//!
//! A statement given as text is prepared anew at every run: a round trip to parse and describe
//! it, then another to run it, and PostgreSQL parses and plans it each time. The writer's
//! per-batch statements (the fence, the streamed text, the event log's rows, the batch's
//! stamp, the wake-up) and the follower's read are instead prepared the first time a
//! connection runs them and kept with that connection ([`Prepared`]): one round trip each
//! after that, and no parsing. A connection made again starts with an empty set, as the
//! server forgets a connection's statements with it.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use tokio_postgres::{GenericClient, Statement};

/// One connection's prepared statements, by their text. Owned by whoever owns the connection
/// (the writer task, the follower task), and replaced with it.
#[derive(Default)]
pub struct Prepared {
    statements: Mutex<HashMap<&'static str, Statement>>,
}

impl Prepared {
    /// `sql` prepared on `client`'s connection: the first time it is asked for, by preparing
    /// it; after that, the statement kept. `client` must be (a transaction of) the connection
    /// this set belongs to.
    pub async fn get(
        &self,
        client: &impl GenericClient,
        sql: &'static str,
    ) -> Result<Statement, tokio_postgres::Error> {
        if let Some(statement) = self.statements.lock().unwrap_or_else(PoisonError::into_inner).get(sql) {
            return Ok(statement.clone());
        }
        let statement = client.prepare(sql).await?;
        self.statements.lock().unwrap_or_else(PoisonError::into_inner).insert(sql, statement.clone());
        Ok(statement)
    }
}
