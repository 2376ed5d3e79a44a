//! What `/proc` says of a process: its CPU time and its memory.

/// CPU time of `pid` in ticks (Linux counts in USER_HZ = 100 a second): utime and stime, and
/// with `children` the time of its children it waited for (`iptables-restore`, `nft`).
pub(crate) fn cpu_ticks(pid: u32, children: bool) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the process runs");
    let fields: Vec<&str> = stat.rsplit_once(") ").expect("a stat line").1.split(' ').collect();
    // utime, stime, cutime, cstime are fields 14-17, here 11-14 after the name.
    let last = if children { 15 } else { 13 };
    fields[11..last].iter().map(|f| f.parse::<u64>().unwrap_or(0)).sum()
}

/// Seconds of CPU in `ticks`.
pub(crate) fn seconds(ticks: u64) -> f64 {
    ticks as f64 / 100.0
}

/// Resident memory of `pid`, in MiB.
pub(crate) fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the process runs");
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmRSS");
    kib / 1024.0
}
