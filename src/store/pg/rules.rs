//! Project rules on PostgreSQL (`permission_rules`), as the SQLite store keeps them: remembered
//! once per project, read back oldest first, and a row this version cannot read standing in as
//! an unreadable rule (never guessed: it may have been a rejection) until revoked.

use tokio_postgres::GenericClient;

use crate::permissions::{Action, Permission, Rule, Scope, Unreadable};

type Result<T> = std::result::Result<T, tokio_postgres::Error>;

pub async fn add(client: &impl GenericClient, project: &str, rule: &Rule, at: i64) -> Result<()> {
    client
        .execute(
            "INSERT INTO permission_rules (project, permission, pattern, action, created_at) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (project, permission, pattern, action) DO NOTHING",
            &[&project, &rule.permission.as_str(), &rule.pattern, &rule.action.as_str(), &at],
        )
        .await?;
    Ok(())
}

/// The rules of `project`, oldest first.
pub async fn of_project(client: &impl GenericClient, project: &str) -> Result<Vec<Rule>> {
    let rows = client
        .query(
            "SELECT id, permission, pattern, action FROM permission_rules WHERE project = $1 ORDER BY id",
            &[&project],
        )
        .await?;
    Ok(rows.iter().map(project_rule).collect())
}

/// Every project's rules, `(project, rule)`, oldest first.
pub async fn all(client: &impl GenericClient) -> Result<Vec<(String, Rule)>> {
    let rows =
        client.query("SELECT id, permission, pattern, action, project FROM permission_rules ORDER BY id", &[]).await?;
    Ok(rows.iter().map(|row| (row.get(4), project_rule(row))).collect())
}

/// A rule from a row of `id, permission, pattern, action`.
fn project_rule(row: &tokio_postgres::Row) -> Rule {
    let (id, permission, pattern, action): (i64, &str, &str, &str) = (row.get(0), row.get(1), row.get(2), row.get(3));
    match (Permission::parse(permission), Action::parse(action)) {
        (Some(permission), Some(action)) => Rule::new(permission, pattern, action, Scope::Project),
        _ => Rule::unreadable(&format!("{permission:?} {pattern} {action:?}"), Unreadable::ProjectRow(id)),
    }
}

/// Forgets a project rule: the row a stand-in stands for, or the row that says what `rule` says.
pub async fn remove(client: &impl GenericClient, project: &str, rule: &Rule) -> Result<()> {
    match rule.stands_for() {
        Some(Unreadable::ProjectRow(id)) => {
            client.execute("DELETE FROM permission_rules WHERE project = $1 AND id = $2", &[&project, &id]).await?;
        }
        Some(Unreadable::SessionEntry) | None => {
            client
                .execute(
                    "DELETE FROM permission_rules WHERE project = $1 AND permission = $2 AND pattern = $3 AND action = $4",
                    &[&project, &rule.permission.as_str(), &rule.pattern, &rule.action.as_str()],
                )
                .await?;
        }
    }
    Ok(())
}
