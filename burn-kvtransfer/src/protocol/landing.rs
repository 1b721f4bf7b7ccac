//! Where received blocks land: the layers a connection is receiving, shared by its session task
//! and its stream readers. A reader copies the blocks it has read and checked straight into their
//! layer's buffer, so the copies of one request's blocks run on as many cores as there are
//! streams; the session only hears that a layer is complete.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use super::blocks::{MisplacedBlocks, Reassembly};
use crate::wire::BlockFrame;

/// One layer being received; `None` once the session took it back.
type Slot = Arc<Mutex<Option<Reassembly>>>;

/// The layers being received, by (request, layer). Cloning shares them.
#[derive(Debug, Clone, Default)]
pub struct Landing {
    layers: Arc<Mutex<HashMap<(u64, u32), Slot>>>,
}

/// What became of a Block frame offered to [`Landing::land`].
#[derive(Debug, PartialEq, Eq)]
pub enum Landed {
    /// No such layer is being received (not announced yet, or delivered already).
    NotOpen,
    /// Stored; the layer still misses blocks (or was complete before: a late duplicate).
    Stored,
    /// Stored, and this frame completed the layer: take it with [`Landing::take`].
    Completed,
    /// The blocks do not fit the layer.
    Misplaced(MisplacedBlocks),
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl Landing {
    /// Starts receiving `layer` of `request` into `reassembly` (replacing any earlier one).
    pub fn open(&self, request: u64, layer: u32, reassembly: Reassembly) {
        lock(&self.layers).insert((request, layer), Arc::new(Mutex::new(Some(reassembly))));
    }

    /// Stores a Block frame's data in its layer. Frames of one layer landed from several
    /// threads are copied one at a time; frames of different layers in parallel.
    pub fn land(&self, block: &BlockFrame) -> Landed {
        let Some(slot) = lock(&self.layers).get(&(block.request, block.layer)).cloned() else {
            return Landed::NotOpen;
        };
        let mut guard = lock(&slot);
        let Some(layer) = guard.as_mut() else { return Landed::NotOpen };
        let was_complete = layer.is_complete();
        match layer.put(block.first, block.data(), block.data_crc()) {
            Err(misplaced) => Landed::Misplaced(misplaced),
            Ok(()) if !was_complete && layer.is_complete() => Landed::Completed,
            Ok(()) => Landed::Stored,
        }
    }

    /// Stops receiving `layer` of `request` and returns it; frames of it that land later are
    /// [`Landed::NotOpen`].
    pub fn take(&self, request: u64, layer: u32) -> Option<Reassembly> {
        let slot = lock(&self.layers).remove(&(request, layer))?;
        let taken = lock(&slot).take();
        taken
    }

    /// Runs of blocks of `layer` of `request` not received yet (none when it is not open).
    pub fn missing(&self, request: u64, layer: u32) -> Vec<(u32, u32)> {
        let Some(slot) = lock(&self.layers).get(&(request, layer)).cloned() else { return Vec::new() };
        let missing = lock(&slot).as_ref().map(Reassembly::missing).unwrap_or_default();
        missing
    }

    /// Stops receiving every layer of `request`.
    pub fn close(&self, request: u64) {
        lock(&self.layers).retain(|&(r, _), _| r != request);
    }
}
