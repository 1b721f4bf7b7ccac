//! A token bucket that paces one connection's writes to emulate a link of a given rate.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Paces writes to `rate` bytes per second with a burst of a few milliseconds of traffic.
///
/// Tokens may go negative: a writer takes the tokens of `n` bytes at once, sleeps off its debt,
/// then writes, so the long-run rate is exact even though timers oversleep by up to a
/// millisecond (the burst cap is large enough to absorb that), and by any time `t` the writers
/// sharing a bucket have written at most `burst + rate · t`. Clones share one bucket: the
/// streams of one connection share its link.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    /// Tokens and when they were last counted.
    state: Arc<Mutex<(f64, Instant)>>,
}

impl TokenBucket {
    /// A bucket for `bytes_per_second`, holding at most 5 ms of traffic (and at least 64 KiB).
    pub fn new(bytes_per_second: f64) -> Self {
        let burst = (bytes_per_second * 0.005).max(64.0 * 1024.0);
        Self { rate: bytes_per_second, burst, state: Arc::new(Mutex::new((burst, Instant::now()))) }
    }

    /// A bucket for a link of `gbps` gigabits per second (10^9 bit/s).
    pub fn from_gbps(gbps: f64) -> Self {
        Self::new(gbps * 1e9 / 8.0)
    }

    /// The rate, bytes per second.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// The largest write admitted without waiting, bytes.
    pub fn burst(&self) -> usize {
        self.burst as usize
    }

    /// Takes `n` tokens and returns how long the caller must wait before sending more.
    pub fn take(&self, n: usize) -> Duration {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (tokens, last) = &mut *state;
        let now = Instant::now();
        let refill = now.duration_since(*last).as_secs_f64() * self.rate;
        *last = now;
        *tokens = (*tokens + refill).min(self.burst) - n as f64;
        match *tokens < 0.0 {
            true => Duration::from_secs_f64(-*tokens / self.rate),
            false => Duration::ZERO,
        }
    }
}
