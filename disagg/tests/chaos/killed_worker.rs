//! A decode worker SIGKILLed while the prefill server holds its request (layers computed, a
//! transfer under way on a slow link): no Complete ever comes, so the server's lease frees the
//! request, and its held requests and the bytes of their layers return to the idle level; the
//! server says so on stderr.

use std::time::Duration;

use crate::support::server::{Server, Stats};
use crate::support::wait::wait_until;
use crate::support::worker::Worker;

/// The server's lease: renewed by each pull, so it runs from the pulls of the two layers at the
/// start of the transfer; long enough that the worker is killed well within it.
const LEASE: Duration = Duration::from_secs(2);

#[test]
fn a_worker_killed_holding_a_lease_is_freed_by_expiry_back_to_the_idle_level() {
    // 10 Mbit/s: the 1024-token prompt's two 2 MiB layers take about 3.4 s to send, so the
    // worker is killed mid-transfer.
    let server = Server::start(&["--lease-secs", "2", "--link-gbps", "0.01"]);
    let idle = server.stats();
    assert!(idle.is_idle() && idle.expired == 0, "{idle:?}");
    let worker = Worker::start("killed-worker", &[&server.addr], &["--prompt-tokens", "1024"]);
    // Held, every layer computed, and the first 64 KiB of a layer on their way.
    let streaming = |s: &Stats| s.requests == 1 && s.held_bytes >= 4 << 20 && s.bytes_sent > 64 << 10;
    wait_until(Duration::from_secs(120), "the request streaming", || server.stats(), streaming);
    let run = worker.kill();
    assert!(run.records.is_none() && run.stdout.is_empty(), "{run:?}");
    let held = server.stats();
    assert_eq!((held.requests, held.expired), (1, 0), "the request was freed before its lease ended: {held:?}");

    let stats = server.wait_idle(LEASE * 10);
    // Freed by its lease, not completed: one lease expired.
    assert_eq!(stats.expired, 1, "{stats:?}");
    assert_eq!((stats.requests, stats.held_bytes, stats.live_bytes), (idle.requests, idle.held_bytes, idle.live_bytes));
    let said = "[dense at 0.01 Gbit/s: 1 lease(s) expired, their requests freed; holding 0 request(s), 0 bytes]";
    wait_until(Duration::from_secs(5), "the expiry's line on stderr", || server.stderr(), |e| e.contains(said));
}
