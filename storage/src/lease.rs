//! Who owns a session: the identity of this process, and whether another owner still lives.
//!
//! A lease names its owner as `host/pid/start`, the start being the process's start time from
//! /proc (so a reused pid is not mistaken for the owner). A lease whose owner has died (killed,
//! crashed) is free: resuming after `kill -9` must work. An owner on another host cannot be
//! checked and counts as alive.

use std::sync::OnceLock;

/// This process, as a lease owner.
pub fn this_process() -> &'static str {
    static OWNER: OnceLock<String> = OnceLock::new();
    OWNER.get_or_init(|| {
        let pid = std::process::id();
        format!("{}/{pid}/{}", host_name(), start_time(pid).unwrap_or(0))
    })
}

/// Whether the process named by `owner` is running (and is not this one).
pub fn held_by_another(owner: &str) -> bool {
    if owner == this_process() {
        return false;
    }
    let mut parts = owner.rsplitn(3, '/');
    let (Some(start), Some(pid), Some(host)) = (parts.next(), parts.next(), parts.next()) else {
        return true;
    };
    if host != host_name() {
        return true;
    }
    match (pid.parse::<u32>(), start.parse::<u64>()) {
        (Ok(pid), Ok(start)) => start_time(pid) == Some(start),
        _ => true,
    }
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "localhost".into())
}

/// Field 22 of /proc/PID/stat: when the process started, in clock ticks after boot.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count from after it.
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_not_another_and_a_dead_one_holds_nothing() {
        assert!(!held_by_another(this_process()));
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let owner = format!(
            "{}/{}/{}",
            host_name(),
            child.id(),
            start_time(child.id()).unwrap()
        );
        assert!(held_by_another(&owner));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!held_by_another(&owner), "a dead owner holds nothing");
        assert!(
            held_by_another("elsewhere/1/1"),
            "another host cannot be checked"
        );
    }
}
