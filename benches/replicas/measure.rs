//! What the replicas bench measures besides its clients: PostgreSQL's CPU time and a replica's
//! memory from `/proc`, and the statements that took PostgreSQL's time (`pg_stat_statements`).

use std::collections::HashMap;
use std::time::Duration;

/// User and system CPU time of our PostgreSQL's processes (those descended from this process),
/// by kind: what their titles say (`checkpointer`, `autovacuum worker`, …), every connection's
/// backend as `backends`, and the postmaster with what it collected from the processes that
/// ended (autovacuum workers mostly) as `postmaster and ended`.
pub fn postgres_cpu() -> HashMap<String, Duration> {
    let me = std::process::id();
    let mut parents = HashMap::new();
    let mut stats = HashMap::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        let Some((head, rest)) = stat.rsplit_once(')') else { continue };
        let fields: Vec<u64> = rest.split_whitespace().map(|f| f.parse().unwrap_or(0)).collect();
        parents.insert(pid, fields.get(1).copied().unwrap_or(0) as u32);
        stats.insert(pid, (head.ends_with("(postgres"), fields));
    }
    let descends = |mut pid: u32| {
        while pid > 1 {
            pid = parents.get(&pid).copied().unwrap_or(0);
            if pid == me {
                return true;
            }
        }
        false
    };
    let mut kinds: HashMap<String, Duration> = HashMap::new();
    for (pid, (_, fields)) in stats.iter().filter(|(pid, (postgres, _))| *postgres && descends(**pid)) {
        let ticks: u64 = fields.get(11..15).map_or(0, |t| t.iter().sum());
        *kinds.entry(kind(*pid)).or_default() += Duration::from_millis(ticks * 10);
    }
    kinds
}

/// What a PostgreSQL process is, from the title it sets itself (`postgres: checkpointer`,
/// `postgres: user db 127.0.0.1(5432) idle`).
fn kind(pid: u32) -> String {
    let title = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let title = String::from_utf8_lossy(&title).replace('\0', " ");
    match title.trim().strip_prefix("postgres: ") {
        None => "postmaster and ended".to_owned(),
        Some(rest) => {
            let known = ["checkpointer", "background writer", "walwriter", "autovacuum launcher", "autovacuum worker"];
            known.iter().find(|k| rest.starts_with(*k)).map_or_else(|| "backends".to_owned(), |k| (*k).to_owned())
        }
    }
}

/// Prints PostgreSQL's CPU from `before` to `after` over `wall`: in all, by kind of process, and
/// per 1,000 of the `committed` chunks.
pub fn postgres_print(
    wall: Duration,
    before: &HashMap<String, Duration>,
    after: &HashMap<String, Duration>,
    committed: usize,
) {
    // The total from the sums: a process that ended meanwhile moved its time to the postmaster's
    // (its time before `before` with it, so the kinds' own differences may not add up to it).
    let total = |kinds: &HashMap<String, Duration>| kinds.values().sum::<Duration>();
    let cpu = total(after).saturating_sub(total(before));
    let mut kinds: Vec<(&String, Duration)> = after
        .iter()
        .map(|(kind, cpu)| (kind, cpu.saturating_sub(before.get(kind).copied().unwrap_or_default())))
        .collect();
    kinds.sort_by_key(|(_, cpu)| std::cmp::Reverse(*cpu));
    let cores = |cpu: Duration| cpu.as_secs_f64() / wall.as_secs_f64();
    println!("| PostgreSQL CPU over the {:.1} s of streaming | {:.2} cores |", wall.as_secs_f64(), cores(cpu));
    let by_kind: Vec<String> = kinds.iter().map(|(kind, cpu)| format!("{kind} {:.2}", cores(*cpu))).collect();
    println!("| of which, by process | {} |", by_kind.join(", "));
    println!(
        "| PostgreSQL CPU-seconds per 1,000 chunks committed ({committed} committed) | {:.3} s |",
        cpu.as_secs_f64() * 1000.0 / committed.max(1) as f64
    );
}

pub fn vm_kib(pid: u32, field: &str) -> u64 {
    super::support::status_kib(pid, field).unwrap_or(0)
}

/// With `CAIRN_REPLICAS_STATEMENTS` set (and the server started with `pg_stat_statements`
/// loaded, `CAIRN_PG_OPTIONS="-c shared_preload_libraries=pg_stat_statements"`), a connection
/// whose statistics were just reset, for [`statements_print`] after the streaming.
pub async fn statements_reset(url: &str) -> Option<tokio_postgres::Client> {
    std::env::var_os("CAIRN_REPLICAS_STATEMENTS")?;
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    client.batch_execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements").await.unwrap();
    client.batch_execute("SELECT pg_stat_statements_reset()").await.unwrap();
    Some(client)
}

/// The statements that took the most of PostgreSQL's time over the streaming: calls, total and
/// mean time, their share of the `wall` time as cores, and what they did that a busy machine does
/// not change: buffers read (hit or not), buffers dirtied and WAL records written.
pub async fn statements_print(client: &tokio_postgres::Client, wall: Duration, chunks: usize, prompts: usize) {
    let rows = client
        .query(
            "SELECT calls, total_exec_time, rows, regexp_replace(query, '\\s+', ' ', 'g'),
                    shared_blks_hit + shared_blks_read, shared_blks_dirtied, wal_records
             FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 25",
            &[],
        )
        .await
        .unwrap();
    let all = client
        .query_one(
            "SELECT coalesce(sum(calls), 0)::bigint, coalesce(sum(total_exec_time), 0) FROM pg_stat_statements",
            &[],
        )
        .await
        .unwrap();
    let (calls, total): (i64, f64) = (all.get(0), all.get(1));
    println!(
        "statements in all: {calls} calls, {total:.0} ms of execution ({chunks} chunks committed, {prompts} prompts: {:.2} statements a chunk)",
        calls as f64 / chunks.max(1) as f64
    );
    println!();
    println!("| statement | calls | total ms | mean ms | cores | rows | buffers | dirtied | WAL records |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for row in rows {
        let (calls, total, count, query): (i64, f64, i64, String) = (row.get(0), row.get(1), row.get(2), row.get(3));
        let (buffers, dirtied, wal): (i64, i64, i64) = (row.get(4), row.get(5), row.get(6));
        let query: String = query.chars().take(140).collect();
        println!(
            "| `{query}` | {calls} | {total:.0} | {:.3} | {:.3} | {count} | {buffers} | {dirtied} | {wal} |",
            total / calls.max(1) as f64,
            total / 1e3 / wall.as_secs_f64()
        );
    }
    println!();
}
