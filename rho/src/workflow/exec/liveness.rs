//! Is a process of an old attempt still alive? Used by recovery before a new attempt.
//!
//! Invariant: when the answer cannot be established (no `/proc`, permission denied), the
//! process is reported alive, so recovery refuses rather than guesses.

use std::io;

use nix::errno::Errno;
use nix::sys::signal::killpg;
use nix::unistd::Pid;

/// Facts from `/proc/<pid>/stat`.
struct Stat {
    state: char,
    pgrp: i32,
    start_time_ticks: u64,
}

fn read_stat(pid: i32) -> io::Result<Stat> {
    // One read into a buffer that fits the line: procfs reports a size of 0, so
    // `read_to_string` would read in doubling steps from 32 bytes (five reads per launch).
    let mut file = std::fs::File::open(format!("/proc/{pid}/stat"))?;
    let mut bytes = Vec::with_capacity(1024);
    std::io::Read::read_to_end(&mut file, &mut bytes)?;
    let text = String::from_utf8(bytes)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.utf8_error()))?;
    parse_stat(&text).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("malformed /proc/{pid}/stat"),
        )
    })
}

/// Parses the fields after the command name (which may contain spaces and parentheses,
/// hence the last `)`): field 3 state, 5 pgrp, 22 start time.
fn parse_stat(text: &str) -> Option<Stat> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `fields[0]` is field 3 of the full line.
    let state = fields.first()?.chars().next()?;
    let pgrp = fields.get(5 - 3)?.parse().ok()?;
    let start_time_ticks = fields.get(22 - 3)?.parse().ok()?;
    Some(Stat {
        state,
        pgrp,
        start_time_ticks,
    })
}

/// Start time (clock ticks after boot) and state letter of `pid`.
pub fn process_start_time(pid: i32) -> io::Result<(u64, char)> {
    read_stat(pid).map(|s| (s.start_time_ticks, s.state))
}

fn is_dead_state(state: char) -> bool {
    // Zombie or dead: it can no longer run or write anything.
    matches!(state, 'Z' | 'X' | 'x')
}

/// Whether the process `pid` that started at `start_time_ticks` still runs. A reused pid
/// (other start time) or a zombie is not alive; an unreadable `/proc` counts as alive.
pub fn process_alive(pid: i32, start_time_ticks: u64) -> bool {
    if pid <= 0 {
        return false;
    }
    match read_stat(pid) {
        Ok(stat) => stat.start_time_ticks == start_time_ticks && !is_dead_state(stat.state),
        Err(e) if e.kind() == io::ErrorKind::NotFound => false,
        Err(_) => true,
    }
}

/// Whether any non-zombie process is in group `pgid`.
pub fn group_alive(pgid: i32) -> bool {
    if pgid <= 1 {
        return false;
    }
    if let Err(Errno::ESRCH) = killpg(Pid::from_raw(pgid), None) {
        return false;
    }
    // The group exists, but perhaps only as an unreaped zombie leader (a container whose
    // init never reaps): look for a live member.
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return true;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        match read_stat(pid) {
            Ok(stat) if stat.pgrp == pgid && !is_dead_state(stat.state) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(_) => return true,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_parentheses_in_the_name() {
        let line = "4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 987654 \
                    1000 10 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0";
        let stat = parse_stat(line).unwrap();
        assert_eq!(stat.state, 'S');
        assert_eq!(stat.pgrp, 4242);
        assert_eq!(stat.start_time_ticks, 987_654);
        assert!(parse_stat("no paren here").is_none());
    }

    #[test]
    fn own_process_is_alive_and_wrong_start_time_is_not() {
        let me = i32::try_from(std::process::id()).unwrap();
        let (ticks, state) = process_start_time(me).unwrap();
        assert!(!is_dead_state(state));
        assert!(process_alive(me, ticks));
        assert!(!process_alive(me, ticks + 1));
        assert!(!process_alive(-5, ticks));
        let own_group = nix::unistd::getpgrp().as_raw();
        assert!(group_alive(own_group));
    }
}
