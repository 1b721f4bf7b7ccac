//! Retry pacing: a delay that doubles after every failure up to a ceiling, and starts again
//! after a success.

use std::time::Duration;

/// The delays between retries of one thing.
#[derive(Debug, Clone)]
pub(super) struct Backoff {
    first: Duration,
    next: Duration,
    most: Duration,
}

impl Backoff {
    /// Delays from 100 ms, doubling, to at most `most`: a broken connection on loopback comes
    /// back within the first tries, one to a vanished host costs a try per `most`.
    pub(super) fn up_to(most: Duration) -> Self {
        let first = Duration::from_millis(100).min(most);
        Self { first, next: first, most }
    }

    /// The delay before the next try.
    pub(super) fn next_delay(&mut self) -> Duration {
        let delay = self.next;
        self.next = (delay * 2).min(self.most);
        delay
    }

    /// After a success: the next failure waits the shortest delay again.
    pub(super) fn reset(&mut self) {
        self.next = self.first;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_to_the_ceiling_and_start_over_after_a_success() {
        let mut backoff = Backoff::up_to(Duration::from_millis(500));
        let ms: Vec<u128> = (0..5).map(|_| backoff.next_delay().as_millis()).collect();
        assert_eq!(ms, [100, 200, 400, 500, 500]);
        backoff.reset();
        assert_eq!(backoff.next_delay(), Duration::from_millis(100));
    }
}
