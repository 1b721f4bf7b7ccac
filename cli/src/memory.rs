//! The process's peak memory, for reports.

/// Peak resident set size in bytes (`VmHWM` of `/proc/self/status`), `None` where that file does
/// not exist (not Linux).
pub fn peak_resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
