//! A workspace for the policy's tests, without a disk: at `/w`, `link` is a symlink out of it,
//! `loop` a symlink loop, `.git/` and `.env*` are protected; `l*` matches `link`, `*.rs` two
//! files, `many*` too many. Below `.` lies `.env`, below `conf` a link out (`conf/out`), below
//! `huge` too much to check.

use super::{Paths, PermissionRequest};
use crate::workspace::Place;

/// The fake workspace.
pub struct Fake;

impl Paths for Fake {
    fn place(&self, path: &str) -> Place {
        let relative = path.strip_prefix("/w/").unwrap_or(path);
        if relative.starts_with('/') || relative.split('/').any(|part| part == "..") {
            return Place::Outside;
        }
        if relative == "link" || relative.starts_with("link/") {
            return Place::Outside;
        }
        if relative == "loop" {
            return Place::Unknown("loop is a symlink loop".into());
        }
        let relative = relative.to_owned();
        if relative.split('/').any(|part| part == ".git") {
            return Place::Protected { relative, why: "git runs hooks", secret: false };
        }
        if relative.rsplit('/').next().is_some_and(|name| name.starts_with(".env")) {
            return Place::Protected { relative, why: "secrets", secret: true };
        }
        Place::Inside { relative }
    }

    fn glob(&self, pattern: &str) -> Result<Vec<String>, String> {
        match pattern {
            "l*" => Ok(vec!["link".into()]),
            "*.rs" => Ok(vec!["a.rs".into(), "b.rs".into()]),
            "many*" => Err("`many*` matches more than 256 paths".into()),
            _ => Ok(Vec::new()),
        }
    }

    fn reaches(&self, dir: &str, follow: bool, _budget: &mut usize) -> Result<Option<(String, Place)>, String> {
        match dir.strip_prefix("/w").unwrap_or(dir).trim_end_matches('/') {
            "" | "." => Ok(Some((".env".into(), self.place(".env")))),
            "conf" if follow => Ok(Some(("conf/out".into(), Place::Outside))),
            "huge" => Err("`huge` holds more than 10,000 entries to check".into()),
            _ => Ok(None),
        }
    }
}

/// A request to run `line` in the fake workspace.
pub fn bash(line: &str) -> PermissionRequest {
    PermissionRequest::for_command(line, &Fake)
}
