//! Who owns a session: the identity of this process, and whether another owner still lives.
//!
//! A lease names its owner as `host/pid/start`, the start being the process's start time from
//! /proc (so a reused pid is not mistaken for the owner), and carries a heartbeat that its
//! owner renews every [`HEARTBEAT`] while it holds the session. An owner on this host is alive
//! while its process runs: a lease whose owner has died (killed, crashed) is free at once, so
//! resuming after `kill -9` works. An owner on another host (or in another container on the
//! same volume) cannot be looked at, so it is alive while its heartbeat is younger than
//! [`EXPIRY`]: a machine that vanished frees its sessions after that long.

use std::{sync::OnceLock, time::Duration};

/// How often a holder renews its leases (see [`crate::sqlite_heartbeat`]).
pub const HEARTBEAT: Duration = Duration::from_secs(5);
/// A lease of another host whose heartbeat is older than this is free.
pub const EXPIRY: Duration = Duration::from_secs(30);

/// Who holds a lease, judged from its row.
#[derive(Debug, PartialEq, Eq)]
pub enum Holder {
    /// Nobody that counts: this process, a dead process, or an expired lease.
    Free,
    /// A live process (or another host's, heartbeat fresh); how long since its heartbeat.
    Live { silent: Duration },
}

/// Judges the lease row (`owner`, last heartbeat at `heartbeat_ms`) at `now_ms`.
pub fn holder(owner: &str, heartbeat_ms: i64, now_ms: i64) -> Holder {
    let silent = Duration::from_millis(now_ms.saturating_sub(heartbeat_ms).max(0) as u64);
    if owner == this_process() {
        return Holder::Free;
    }
    let alive = match parse(owner) {
        Some((host, pid, start)) if host == host_name() => start_time(pid) == Some(start),
        _ => silent < EXPIRY,
    };
    if alive {
        Holder::Live { silent }
    } else {
        Holder::Free
    }
}

/// `host/pid/start`, split.
fn parse(owner: &str) -> Option<(&str, u32, u64)> {
    let mut parts = owner.rsplitn(3, '/');
    let (start, pid, host) = (parts.next()?, parts.next()?, parts.next()?);
    Some((host, pid.parse().ok()?, start.parse().ok()?))
}

/// This process, as a lease owner.
pub fn this_process() -> &'static str {
    static OWNER: OnceLock<String> = OnceLock::new();
    OWNER.get_or_init(|| {
        let pid = std::process::id();
        format!("{}/{pid}/{}", host_name(), start_time(pid).unwrap_or(0))
    })
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "localhost".into())
}

/// Field 22 of /proc/PID/stat: when the process started, in clock ticks after boot; `None`
/// when there is no such process, or it has exited and only waits for its parent to reap it
/// (a zombie, state `Z`, or dead, `X`): it will never write again.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count from after it.
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = fields.next()?;
    if matches!(state, "Z" | "X" | "x") {
        return None;
    }
    fields.nth(18)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_free_a_live_one_is_not_and_a_dead_one_is() {
        let now = 1_000_000;
        assert_eq!(holder(this_process(), 0, now), Holder::Free);
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
        // A live process on this host holds its lease however old its heartbeat.
        assert!(matches!(holder(&owner, 0, now), Holder::Live { .. }));
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(
            holder(&owner, now, now),
            Holder::Free,
            "a dead owner holds nothing"
        );
    }

    #[test]
    fn an_exited_owner_its_parent_has_not_reaped_holds_nothing() {
        let now = 1_000_000;
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        let owner = format!("{}/{pid}/{}", host_name(), start_time(pid).unwrap());
        assert!(matches!(holder(&owner, now, now), Holder::Live { .. }));
        child.kill().unwrap();
        // Not waited for: a zombie until `wait`, its /proc entry still there.
        let zombie = (0..200).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(10));
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|stat| stat.contains(") Z "))
        });
        assert!(zombie, "the killed child is a zombie");
        assert_eq!(holder(&owner, now, now), Holder::Free);
        child.wait().unwrap();
    }

    #[test]
    fn another_hosts_lease_lives_while_its_heartbeat_is_fresh() {
        let now = 10_000_000;
        let fresh = now - 1_000;
        let stale = now - EXPIRY.as_millis() as i64 - 1;
        assert!(matches!(
            holder("elsewhere/1/1", fresh, now),
            Holder::Live { .. }
        ));
        assert_eq!(holder("elsewhere/1/1", stale, now), Holder::Free);
        assert!(matches!(holder("garbled", fresh, now), Holder::Live { .. }));
    }
}
