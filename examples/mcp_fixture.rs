//! The tests' MCP server on stdin/stdout (see `tests/it/mcp/fixture.rs` for its tools).
//!
//! `mcp_fixture` serves; `mcp_fixture hostile` serves more tools (see `Fixture::hostile`) and
//! keeps running after its stdin ends; `mcp_fixture flood` lists tools without end (see
//! `Fixture::flood`); `mcp_fixture huge-list` lists tools in one line of over 20 MiB;
//! `mcp_fixture stderr-flood` serves while a thread writes short lines to stderr as fast as it
//! can; `mcp_fixture garbage` answers every line with a line that is not JSON-RPC;
//! `mcp_fixture exit-at-start` writes to stderr and exits 1 at once.

#![allow(clippy::print_stdout, clippy::print_stderr, clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/it/mcp/fixture.rs"]
mod fixture;

use std::io::{BufRead, Write};

use fixture::{Action, Fixture};

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_default();
    if mode == "exit-at-start" {
        eprintln!("fixture: starting");
        eprintln!("fixture: cannot open the database");
        std::process::exit(1);
    }
    if mode == "stderr-flood" {
        std::thread::spawn(flood_stderr);
    }
    let mut fixture = Fixture {
        hostile: mode == "hostile",
        flood: mode == "flood",
        huge_list: mode == "huge-list",
        ..Fixture::default()
    };
    let stdin = std::io::stdin();
    let mut stdout = std::io::stdout();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        if mode == "garbage" {
            writeln!(stdout, "Welcome to the fixture! Type HELP for help.").unwrap();
            stdout.flush().unwrap();
            continue;
        }
        let Ok(message) = serde_json::from_str(&line) else { continue };
        match fixture.handle(&message) {
            Action::Send(messages) => {
                for message in messages {
                    writeln!(stdout, "{message}").unwrap();
                }
                stdout.flush().unwrap();
            }
            Action::Nothing => {}
            Action::Crash(why) => {
                eprintln!("{why}");
                std::process::exit(3);
            }
            Action::Cancelled(id) => {
                if let Ok(path) = std::env::var("MCP_FIXTURE_CANCEL_LOG") {
                    let mut log = std::fs::OpenOptions::new().create(true).append(true).open(path).unwrap();
                    writeln!(log, "{id}").unwrap();
                }
            }
        }
    }
    // A hostile server does not end when its stdin does.
    if fixture.hostile {
        loop {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        }
    }
}

/// Writes 64 KiB of short lines to stderr at a time, without pause, until the pipe breaks.
fn flood_stderr() {
    let chunk: String = (0..2340).map(|i| format!("fixture: noise line {i:08}\n")).collect();
    let mut stderr = std::io::stderr().lock();
    while stderr.write_all(chunk.as_bytes()).is_ok() {}
}
