//! The process's resident memory, as Linux reports it in `/proc/self/status`: what the prefill
//! server's stats port answers and what a decode worker says on stderr when it ends, so that a
//! load run can bound both sides' memory.

/// The line a decode worker prints on stderr when its run ends: `[peak RSS N bytes]`.
pub const PEAK_RSS: &str = "[peak RSS ";

/// A field of `/proc/self/status` in bytes (`VmRSS`, `VmHWM`), where there is one (Linux).
fn proc_status_bytes(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))?;
    let kib: u64 = line.trim().strip_suffix("kB")?.trim().parse().ok()?;
    Some(kib * 1024)
}

/// The process's resident memory now, bytes.
pub fn rss_bytes() -> Option<u64> {
    proc_status_bytes("VmRSS")
}

/// The most resident memory the process has held so far (its high-water mark), bytes.
pub fn peak_rss_bytes() -> Option<u64> {
    proc_status_bytes("VmHWM")
}

/// Says the process's peak resident memory on stderr ([`PEAK_RSS`]), where it is known.
pub fn report_peak_rss() {
    if let Some(bytes) = peak_rss_bytes() {
        eprintln!("{PEAK_RSS}{bytes} bytes]");
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn the_peak_is_at_least_what_is_resident_now() {
        let touched = vec![1u8; 1 << 20];
        let (now, peak) = (rss_bytes().unwrap(), peak_rss_bytes().unwrap());
        // The megabyte touched is resident, and the peak is at least what is resident.
        assert!(now >= touched.len() as u64 && peak >= now, "{now} {peak}");
        assert_eq!(touched.iter().map(|&b| b as usize).sum::<usize>(), 1 << 20);
    }
}
