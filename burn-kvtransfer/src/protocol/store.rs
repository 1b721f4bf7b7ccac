//! The prefill side's memory: each request's serialized layers, held under a lease until the
//! decode side completes the request or stops renewing the lease.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::held::HeldLayer;

#[derive(Debug)]
struct Held {
    layers: Vec<Option<Arc<HeldLayer>>>,
    deadline: Instant,
}

impl Held {
    fn bytes(&self) -> usize {
        self.layers.iter().flatten().map(|b| b.len()).sum()
    }
}

/// What the store holds right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StoreStats {
    /// Requests held.
    pub requests: usize,
    /// Bytes of serialized state held.
    pub bytes: usize,
    /// Requests freed because their lease expired.
    pub expired: usize,
}

/// Requests' layers under leases.
#[derive(Debug)]
pub struct Store {
    held: Mutex<(HashMap<u64, Held>, usize)>,
    lease: Duration,
    /// How many requests are held, told whenever it changes (the server's load).
    load: watch::Sender<usize>,
}

impl Store {
    /// An empty store whose leases last `lease` past the last activity on a request.
    pub fn new(lease: Duration) -> Self {
        Self { held: Mutex::new((HashMap::new(), 0)), lease, load: watch::Sender::new(0) }
    }

    fn lock(&self) -> MutexGuard<'_, (HashMap<u64, Held>, usize)> {
        self.held.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Tells the load's watchers how many requests `held` holds, if that changed. Called with
    /// the lock held, so that the counts told follow the changes in order.
    fn tell_load(&self, held: &HashMap<u64, Held>) {
        self.load.send_if_modified(|load| std::mem::replace(load, held.len()) != held.len());
    }

    /// How many requests are held, updated whenever it changes.
    pub fn load(&self) -> watch::Receiver<usize> {
        self.load.subscribe()
    }

    /// Registers a request of `layers` layers; false if the id is taken.
    pub fn insert(&self, request: u64, layers: usize) -> bool {
        let mut held = self.lock();
        if held.0.contains_key(&request) {
            return false;
        }
        held.0.insert(request, Held { layers: vec![None; layers], deadline: Instant::now() + self.lease });
        self.tell_load(&held.0);
        true
    }

    /// Stores a computed layer, renewing the request's lease (a decode side that reads layers
    /// one-sidedly renews it by nothing else); false if the request is gone (completed or
    /// expired).
    pub fn put(&self, request: u64, layer: usize, blob: HeldLayer) -> bool {
        let mut held = self.lock();
        let Some(h) = held.0.get_mut(&request) else { return false };
        let Some(slot) = h.layers.get_mut(layer) else { return false };
        *slot = Some(Arc::new(blob));
        h.deadline = Instant::now() + self.lease;
        true
    }

    /// A computed layer, renewing the request's lease; `None` if unknown or not computed yet.
    pub fn get(&self, request: u64, layer: usize) -> Option<Arc<HeldLayer>> {
        let mut held = self.lock();
        let h = held.0.get_mut(&request)?;
        h.deadline = Instant::now() + self.lease;
        h.layers.get(layer)?.clone()
    }

    /// Frees a request; false if it was not held.
    pub fn remove(&self, request: u64) -> bool {
        let mut held = self.lock();
        let removed = held.0.remove(&request).is_some();
        self.tell_load(&held.0);
        removed
    }

    /// Frees every request whose lease ended before `now`; returns how many.
    pub fn expire(&self, now: Instant) -> usize {
        let mut held = self.lock();
        let before = held.0.len();
        held.0.retain(|_, h| h.deadline > now);
        let expired = before - held.0.len();
        held.1 += expired;
        self.tell_load(&held.0);
        expired
    }

    /// Current holdings.
    pub fn stats(&self) -> StoreStats {
        let held = self.lock();
        StoreStats { requests: held.0.len(), bytes: held.0.values().map(Held::bytes).sum(), expired: held.1 }
    }
}
