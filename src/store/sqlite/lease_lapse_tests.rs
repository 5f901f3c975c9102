//! When a lease has lapsed: a pid is looked up in our `/proc` only for a holder on our host,
//! boot and pid namespace; every other holder (another namespace on the same host name, another
//! boot, a row an older cairn wrote, a holder that could not read its own start time) is judged
//! by its heartbeat, whatever a pid of the same number does here.

use std::cell::Cell;

use super::{Holder, Row, STALE_AFTER, Seen, Stat};

const NOW: i64 = 10_000_000;

fn bound() -> i64 {
    i64::try_from(STALE_AFTER.as_millis()).unwrap()
}

/// Us, in pid namespace `pid:[1]` on host `box`, our `/proc` our namespace's.
fn me() -> Holder {
    Holder {
        token: "proc_me".into(),
        pid: 100,
        host: "box".into(),
        started: Some("boot-1/500".into()),
        boot: Some("boot-1".into()),
        pid_ns: Some("pid:[1]".into()),
    }
}

/// A lease taken by pid 42 of namespace `ns` on host `box`, started at tick 700, its last
/// heartbeat `age` ms ago.
fn lease(ns: &str, age: i64) -> Row {
    Row {
        token: "proc_other".into(),
        pid: 42,
        host: "box".into(),
        started: Some("boot-1/700".into()),
        taken_at: NOW - age,
        heartbeat_at: NOW - age,
        released_at: None,
        boot: Some("boot-1".into()),
        pid_ns: Some(ns.into()),
        take_id: Some("take_1".into()),
        take_token: Some("proc_other".into()),
    }
}

const FRESH: i64 = 1_000;

fn stale() -> i64 {
    bound() + 1
}

/// What `/proc` answers for pid 42, counting the questions.
fn proc_says(seen: impl Fn() -> Option<Seen>, asked: &Cell<u32>) -> impl FnOnce(u32) -> Option<Seen> {
    move |pid| {
        assert_eq!(pid, 42);
        asked.set(asked.get() + 1);
        seen()
    }
}

fn running(start: &str) -> Option<Seen> {
    Some(Seen::Running(format!("boot-1/{start}")))
}

#[test]
fn in_our_namespace_the_pid_decides_whatever_the_heartbeat_says() {
    let asked = Cell::new(0);
    let same = lease("pid:[1]", stale());
    assert!(me().judge(&same, NOW, proc_says(|| running("700"), &asked)), "its process runs: a slow heartbeat");
    let fresh = lease("pid:[1]", FRESH);
    assert!(!me().judge(&fresh, NOW, proc_says(|| Some(Seen::Gone), &asked)), "its pid is gone");
    assert!(!me().judge(&fresh, NOW, proc_says(|| running("999"), &asked)), "its pid was reused");
    assert!(me().judge(&fresh, NOW, proc_says(|| None, &asked)), "/proc cannot tell: the heartbeat is fresh");
    assert!(!me().judge(&same, NOW, proc_says(|| None, &asked)), "/proc cannot tell: the heartbeat is stale");
    assert_eq!(asked.get(), 5);
}

#[test]
fn a_live_holder_in_another_pid_namespace_on_the_same_host_is_not_taken_for_dead() {
    // Its pid 42 means nothing here: no process 42, or one that started at another time.
    let asked = Cell::new(0);
    let container = lease("pid:[2]", FRESH);
    assert!(me().judge(&container, NOW, proc_says(|| Some(Seen::Gone), &asked)));
    assert!(me().judge(&container, NOW, proc_says(|| running("999"), &asked)));
    assert_eq!(asked.get(), 0, "our /proc is not asked about another namespace's pid");
}

#[test]
fn a_dead_holder_in_another_pid_namespace_lapses_with_its_heartbeat_even_if_its_pid_runs_here() {
    let asked = Cell::new(0);
    let container = lease("pid:[2]", stale());
    assert!(!me().judge(&container, NOW, proc_says(|| running("700"), &asked)));
    let mut at_the_bound = lease("pid:[2]", bound());
    assert!(me().judge(&at_the_bound, NOW, proc_says(|| running("700"), &asked)), "a heartbeat at the bound holds");
    at_the_bound.heartbeat_at -= 1;
    assert!(!me().judge(&at_the_bound, NOW, proc_says(|| running("700"), &asked)));
    assert_eq!(asked.get(), 0);
}

#[test]
fn another_boot_another_host_or_unknown_identities_are_judged_by_the_heartbeat() {
    let asked = Cell::new(0);
    let gone = || Some(Seen::Gone);
    let mut rebooted = lease("pid:[1]", FRESH);
    rebooted.boot = Some("boot-0".into());
    let mut remote = lease("pid:[1]", FRESH);
    remote.host = "elsewhere".into();
    let mut unknown = lease("pid:[1]", FRESH);
    (unknown.boot, unknown.pid_ns) = (None, None);
    // An older cairn's take leaves the columns of the holder before it.
    let mut older = lease("pid:[1]", FRESH);
    older.token = "proc_older".into();
    for row in [&rebooted, &remote, &unknown, &older] {
        assert!(me().judge(row, NOW, proc_says(gone, &asked)), "a fresh heartbeat holds");
    }
    for mut row in [rebooted, remote, unknown, older] {
        row.heartbeat_at = NOW - stale();
        assert!(!me().judge(&row, NOW, proc_says(gone, &asked)), "a stale heartbeat lapses");
    }
    // We do not know our own namespace, or our /proc is another namespace's.
    let mut lost = me();
    lost.pid_ns = None;
    let mut foreign_proc = me();
    foreign_proc.started = None;
    for us in [lost, foreign_proc] {
        assert!(us.judge(&lease("pid:[1]", FRESH), NOW, proc_says(gone, &asked)));
        assert!(!us.judge(&lease("pid:[1]", stale()), NOW, proc_says(|| running("700"), &asked)));
    }
    assert_eq!(asked.get(), 0);
}

#[test]
fn a_running_pid_whose_holder_had_no_start_time_falls_back_to_the_heartbeat() {
    let asked = Cell::new(0);
    let mut fresh = lease("pid:[1]", FRESH);
    fresh.started = None;
    assert!(me().judge(&fresh, NOW, proc_says(|| running("700"), &asked)));
    let mut stale_one = lease("pid:[1]", stale());
    stale_one.started = None;
    assert!(!me().judge(&stale_one, NOW, proc_says(|| running("700"), &asked)), "not held forever by a pid");
    stale_one.heartbeat_at = NOW;
    assert!(!me().judge(&stale_one, NOW, proc_says(|| Some(Seen::Gone), &asked)), "a pid that is gone still tells");
}

#[test]
fn a_stat_line_gives_its_pid_state_and_start_time_whatever_the_command_name() {
    let line = "4242 (a) (b c) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 123456 19 20\n";
    let stat = Stat::parse(line).unwrap();
    assert_eq!((stat.pid, stat.state, stat.start), (4242, "S", "123456"));
    assert!(Stat::parse("garbage").is_none());
}

#[test]
fn this_process_has_a_start_time_only_when_its_proc_shows_it_under_its_own_pid() {
    let me = Holder::this_process();
    let own = std::fs::read_to_string("/proc/self/stat").ok();
    let shown = own.as_deref().and_then(Stat::parse).map(|stat| stat.pid);
    assert_eq!(me.started.is_some(), me.boot.is_some() && shown == Some(std::process::id()), "{me:?}");
    if let Some(started) = &me.started {
        assert!(started.starts_with(me.boot.as_deref().unwrap()), "{started}");
    }
}
