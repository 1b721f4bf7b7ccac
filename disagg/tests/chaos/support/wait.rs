//! Bounded waiting: every wait of the chaos tests ends, with a panic naming what never came.

use std::time::{Duration, Instant};

/// How often conditions are polled.
const POLL: Duration = Duration::from_millis(20);

/// Polls `condition` until it holds; panics with `what` and `state()` once `limit` has passed.
/// Returns how long it took.
pub fn wait_until<S: std::fmt::Debug>(
    limit: Duration,
    what: &str,
    mut state: impl FnMut() -> S,
    mut condition: impl FnMut(&S) -> bool,
) -> Duration {
    let start = Instant::now();
    loop {
        let now = state();
        if condition(&now) {
            return start.elapsed();
        }
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}; last seen {now:?}");
        std::thread::sleep(POLL);
    }
}
