//! Which requests a continuous batch takes under a KV memory budget, and when.
//!
//! The policy:
//! - A request is sized at arrival: the bytes its cache will hold at its longest (prompt plus
//!   new tokens, in its scheme's format). Sizing at admission, not paging, keeps the rule simple
//!   and a sequence's cache contiguous; a compressed scheme's smaller size is what lets it admit
//!   more requests under the same budget.
//! - Requests are admitted strictly in arrival order while the first waiting one fits in what the
//!   budget has left. A request that does not fit waits, and so do the requests behind it (no
//!   overtaking: a long request is not starved by short ones arriving after it).
//! - A request larger than the whole budget can never fit: it is refused at arrival with
//!   [`AdmissionError::NeverFits`], and nothing else changes.
//! - A request that finishes (or fails) returns its bytes with [`Admission::release`]; the next
//!   [`Admission::admit`] takes what now fits.
//!
//! No request is lost: each is refused at arrival, or waiting, or admitted until released.

use std::collections::VecDeque;

/// A refusal of the admission policy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdmissionError {
    /// The request's cache is larger than the whole budget.
    #[error("request {id} needs {bytes} bytes of KV cache, more than the whole budget of {budget}")]
    NeverFits {
        /// The request.
        id: u64,
        /// Its cache's bytes at its longest.
        bytes: usize,
        /// The budget.
        budget: usize,
    },
    /// An id that is already waiting or admitted.
    #[error("request {0} is already waiting or admitted")]
    Duplicate(u64),
    /// A release of an id that is not admitted.
    #[error("request {0} is not admitted")]
    NotAdmitted(u64),
}

/// The admission state of a continuous batch: the budget, the admitted requests and the queue of
/// waiting ones, each holding its `T` (what the caller needs to start it) until admitted.
#[derive(Debug, Clone)]
pub struct Admission<T> {
    budget: usize,
    admitted: Vec<(u64, usize)>,
    waiting: VecDeque<Waiting<T>>,
}

/// A request in the queue.
#[derive(Debug, Clone)]
struct Waiting<T> {
    id: u64,
    bytes: usize,
    item: T,
}

impl<T> Admission<T> {
    /// An empty batch with `budget` bytes of KV memory.
    pub fn new(budget: usize) -> Self {
        Self { budget, admitted: Vec::new(), waiting: VecDeque::new() }
    }

    /// Queues request `id` whose cache takes `bytes` at its longest, with `item`; refused (and
    /// `item` dropped) if it can never fit or if `id` is already known.
    pub fn arrive(&mut self, id: u64, bytes: usize, item: T) -> Result<(), AdmissionError> {
        if self.admitted().chain(self.waiting()).any(|known| known == id) {
            return Err(AdmissionError::Duplicate(id));
        }
        if bytes > self.budget {
            return Err(AdmissionError::NeverFits { id, bytes, budget: self.budget });
        }
        self.waiting.push_back(Waiting { id, bytes, item });
        Ok(())
    }

    /// Admits the waiting requests that fit, in arrival order, stopping at the first that does
    /// not; returns their items in that order.
    pub fn admit(&mut self) -> Vec<T> {
        std::iter::from_fn(|| self.admit_next()).collect()
    }

    /// Admits the first waiting request if it fits; returns its item. (For a batch that also
    /// caps the number of requests: take one while there is room.)
    pub fn admit_next(&mut self) -> Option<T> {
        let first = self.waiting.front()?;
        if first.bytes > self.budget - self.held_bytes() {
            return None;
        }
        let Waiting { id, bytes, item } = self.waiting.pop_front()?;
        self.admitted.push((id, bytes));
        Some(item)
    }

    /// Returns admitted request `id`'s bytes to the budget.
    pub fn release(&mut self, id: u64) -> Result<(), AdmissionError> {
        let at = self.admitted.iter().position(|&(known, _)| known == id).ok_or(AdmissionError::NotAdmitted(id))?;
        self.admitted.remove(at);
        Ok(())
    }

    /// Bytes the admitted requests hold.
    pub fn held_bytes(&self) -> usize {
        self.admitted.iter().map(|&(_, bytes)| bytes).sum()
    }

    /// Admitted requests, in admission order.
    pub fn admitted(&self) -> impl Iterator<Item = u64> + '_ {
        self.admitted.iter().map(|&(id, _)| id)
    }

    /// Waiting requests, in arrival order.
    pub fn waiting(&self) -> impl Iterator<Item = u64> + '_ {
        self.waiting.iter().map(|w| w.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Queues request `id` carrying its own id, so that admissions read as ids.
    fn arrive(a: &mut Admission<u64>, id: u64, bytes: usize) -> Result<(), AdmissionError> {
        a.arrive(id, bytes, id)
    }

    #[test]
    fn requests_are_admitted_in_arrival_order_while_they_fit() {
        let mut a = Admission::new(100);
        for (id, bytes) in [(1, 40), (2, 50), (3, 30), (4, 5)] {
            arrive(&mut a, id, bytes).unwrap();
        }
        // 40 + 50 fit; 30 does not (10 left), and 4 (5 bytes, would fit) waits behind it.
        assert_eq!(a.admit(), [1, 2]);
        assert_eq!(a.waiting().collect::<Vec<_>>(), [3, 4]);
        assert_eq!(a.held_bytes(), 90);
        assert_eq!(a.admit(), Vec::<u64>::new(), "nothing changed, nothing admitted");
        // Request 1 finishes while others wait: 3 and 4 now fit (50 + 30 + 5).
        a.release(1).unwrap();
        assert_eq!(a.admit(), [3, 4]);
        assert_eq!(a.admitted().collect::<Vec<_>>(), [2, 3, 4]);
        assert_eq!(a.held_bytes(), 85);
    }

    #[test]
    fn a_long_request_is_not_overtaken_and_gets_in_when_the_batch_drains() {
        let mut a = Admission::new(100);
        arrive(&mut a, 1, 60).unwrap();
        arrive(&mut a, 2, 90).unwrap();
        assert_eq!(a.admit(), [1]);
        // Short requests arriving after the long one wait behind it.
        for id in 3..8 {
            arrive(&mut a, id, 1).unwrap();
        }
        assert_eq!(a.admit(), Vec::<u64>::new());
        a.release(1).unwrap();
        assert_eq!(a.admit(), [2, 3, 4, 5, 6, 7]);
        assert_eq!(a.held_bytes(), 95);
    }

    #[test]
    fn impossible_duplicate_and_unknown_requests_are_refused_without_side_effects() {
        let mut a = Admission::new(100);
        arrive(&mut a, 1, 100).unwrap();
        assert_eq!(arrive(&mut a, 2, 101), Err(AdmissionError::NeverFits { id: 2, bytes: 101, budget: 100 }));
        assert_eq!(arrive(&mut a, 1, 5), Err(AdmissionError::Duplicate(1)));
        assert_eq!(a.release(1), Err(AdmissionError::NotAdmitted(1)), "waiting, not admitted");
        assert_eq!(a.admit(), [1]);
        assert_eq!(arrive(&mut a, 1, 5), Err(AdmissionError::Duplicate(1)));
        a.release(1).unwrap();
        assert_eq!(a.release(1), Err(AdmissionError::NotAdmitted(1)));
        assert_eq!((a.held_bytes(), a.waiting().count()), (0, 0));
    }

    #[test]
    fn every_request_is_accounted_for_under_random_arrivals_and_releases() {
        // A fixed pseudo-random schedule: sizes from 1 byte to the whole budget, arrivals and
        // releases interleaved; at every point each arrived request is waiting, admitted or
        // released exactly once, admitted bytes never exceed the budget, and admission order is
        // arrival order.
        let budget = 1000;
        let mut a = Admission::new(budget);
        let (mut arrived, mut admitted_order, mut released) = (Vec::new(), Vec::new(), Vec::new());
        let mut state = 12345u64;
        let mut next = || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 33) as usize
        };
        for id in 0..500u64 {
            let bytes = 1 + next() % budget;
            arrive(&mut a, id, bytes).unwrap();
            arrived.push(id);
            admitted_order.extend(a.admit());
            let held: Vec<u64> = a.admitted().collect();
            if !held.is_empty() && next() % 2 == 0 {
                // Any admitted request may finish first.
                let done = held[next() % held.len()];
                a.release(done).unwrap();
                released.push(done);
                admitted_order.extend(a.admit());
            }
            assert!(a.held_bytes() <= budget);
            let mut seen: Vec<u64> = a.admitted().chain(a.waiting()).chain(released.iter().copied()).collect();
            seen.sort_unstable();
            assert_eq!(seen, arrived, "after request {id}");
        }
        assert!(admitted_order.windows(2).all(|w| w[0] < w[1]), "admitted in arrival order");
        assert!(admitted_order.len() > 100, "the schedule admits many requests");
    }
}
