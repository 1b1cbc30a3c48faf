//! The CPU time processes have used, read from /proc.

/// The CPU time (user and system) of this process's children that have been waited for.
pub(crate) fn children_cpu_seconds() -> f64 {
    let fields = stat_fields("self");
    // cutime and cstime are the 16th and 17th fields (13 and 14 after the name).
    (field(&fields, 13) + field(&fields, 14)) / USER_HZ
}

/// The CPU time (user and system) process `pid` has used, in seconds.
pub(crate) fn cpu_seconds(pid: u32) -> f64 {
    let fields = stat_fields(&pid.to_string());
    // utime and stime are the 14th and 15th fields of the line (11 and 12 after the name).
    (field(&fields, 11) + field(&fields, 12)) / USER_HZ
}

/// The fields of `/proc/PROCESS/stat` after the command name (which is in parentheses and may
/// hold spaces).
fn stat_fields(process: &str) -> Vec<String> {
    let stat = std::fs::read_to_string(format!("/proc/{process}/stat")).unwrap_or_default();
    stat.rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().map(str::to_owned).collect())
        .unwrap_or_default()
}

/// Field `at` of `fields` as a number of clock ticks (0 when missing).
fn field(fields: &[String], at: usize) -> f64 {
    fields
        .get(at)
        .and_then(|f| f.parse::<f64>().ok())
        .unwrap_or(0.0)
}

/// The unit of /proc's CPU times: clock ticks, 100 a second on Linux (USER_HZ, fixed by the
/// kernel's ABI whatever the kernel's own tick rate).
const USER_HZ: f64 = 100.0;
