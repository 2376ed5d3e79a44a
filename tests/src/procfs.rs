//! What `/proc` says of a process the tests started: its CPU time and its memory.

/// CPU time of `pid` in seconds (Linux counts it in USER_HZ, 100 ticks a second): utime and
/// stime, and with `children` also the time of the children it waited for (`iptables-restore`,
/// `nft`). Zero when the process is gone.
pub fn cpu_seconds(pid: u32, children: bool) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name (which may hold spaces): proc(5)'s third onwards, so
    // utime, stime, cutime and cstime (its 14th to 17th) are here the 11th to 14th (0-based).
    let rest = stat.rsplit_once(") ").map(|(_, r)| r).unwrap_or("");
    let fields: Vec<u64> = rest.split_whitespace().map(|f| f.parse().unwrap_or(0)).collect();
    let last = if children { 15 } else { 13 };
    let ticks: u64 = fields.get(11..last).map(|f| f.iter().sum()).unwrap_or(0);
    ticks as f64 / 100.0
}

/// A memory field of `/proc/PID/status` (`VmRSS`, `VmHWM`, `RssAnon`), in KiB; zero when the
/// process or the field is gone.
pub fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Resident memory of `pid` (`VmRSS`), in MiB.
pub fn rss_mib(pid: u32) -> f64 {
    status_kib(pid, "VmRSS") as f64 / 1024.0
}
