//! Where received blocks land: the layers a connection is receiving, shared by its session task
//! and its stream readers. A reader copies the blocks it has read and checked straight into their
//! layer's buffer, so the copies of one request's blocks run on as many cores as there are
//! streams, even within one layer (each reader claims its blocks under the layer's lock and
//! copies them without it); the session only hears that a layer is complete.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use super::blocks::{Claim, MisplacedBlocks, Reassembly};
use crate::wire::{BlockFrame, BLOCK_HEADER_LEN};

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

/// Marks a claim's written blocks received in the layer of `slot`.
fn finish(slot: &Slot, claim: Claim, data_crc: u32) -> Landed {
    let mut guard = lock(slot);
    let layer = guard.as_mut().expect("a layer with claimed blocks stays in its slot");
    layer.finish(claim, data_crc);
    match layer.is_complete() {
        true => Landed::Completed,
        false => Landed::Stored,
    }
}

impl Landing {
    /// Starts receiving `layer` of `request` into `reassembly` (replacing any earlier one).
    pub fn open(&self, request: u64, layer: u32, reassembly: Reassembly) {
        lock(&self.layers).insert((request, layer), Arc::new(Mutex::new(Some(reassembly))));
    }

    /// Stores a Block frame's data in its layer. Several threads may land frames of one layer at
    /// once: their copies run in parallel.
    #[allow(unsafe_code)]
    pub fn land(&self, block: &BlockFrame) -> Landed {
        let Some(slot) = lock(&self.layers).get(&(block.request, block.layer)).cloned() else {
            return Landed::NotOpen;
        };
        let data = block.data();
        let (claim, base) = {
            let mut guard = lock(&slot);
            let Some(layer) = guard.as_mut() else { return Landed::NotOpen };
            match layer.claim(block.first, data.len()) {
                Err(misplaced) => return Landed::Misplaced(misplaced),
                Ok(None) => return Landed::Stored,
                Ok(Some(claim)) => (claim, layer.buffer_ptr()),
            }
        };
        for (from, to, n) in claim.copies() {
            // SAFETY: `claim` checked that `[to, to + n)` lies in the layer's buffer and reserved
            // its blocks for this thread alone: no other claim covers them, and the layer is not
            // complete while they are claimed, so nothing reads, resets or takes it (`take` and
            // `reset` need a complete layer). The buffer stays allocated: `slot` keeps the layer
            // alive (closing a request only unlists it), and its buffer is never resized. `data`
            // is a separate allocation, so the ranges do not overlap.
            unsafe { std::ptr::copy_nonoverlapping(data[from..from + n].as_ptr(), base.add(to), n) };
        }
        finish(&slot, claim, block.data_crc())
    }

    /// Reserves the place of a Block frame's data (`len` bytes after `header`) in its layer, for
    /// a reader to read it there directly; `None` unless the layer is open and every block of
    /// the piece is missing (the frame is then read and [landed](Self::land) as usual).
    pub fn reserve(&self, header: &[u8; BLOCK_HEADER_LEN], len: usize) -> Option<Reserved> {
        let (request, layer, first) = BlockFrame::parse_header(header);
        self.reserve_piece(request, layer, first, len)
    }

    /// Reserves the place of the piece of `len` bytes from block `first` of `layer` of `request`,
    /// for its data to be written there directly (by a reader, or by a one-sided read); `None`
    /// unless the layer is open and every block of the piece is missing.
    #[allow(unsafe_code)]
    pub fn reserve_piece(&self, request: u64, layer: u32, first: u32, len: usize) -> Option<Reserved> {
        let slot = lock(&self.layers).get(&(request, layer)).cloned()?;
        let mut guard = lock(&slot);
        let reassembly = guard.as_mut()?;
        let claim = reassembly.claim(first, len).ok()??;
        if !claim.is_whole() {
            reassembly.abandon(claim);
            return None;
        }
        // SAFETY: `claim` checked that the piece's `len` bytes from its offset lie in the buffer.
        let start = unsafe { reassembly.buffer_ptr().add(claim.offset()) };
        drop(guard);
        Some(Reserved { slot, claim: Some(claim), start, len, request, layer })
    }

    /// Marks a reservation's data, read and checked, as received.
    pub fn fill(&self, mut reserved: Reserved, data_crc: u32) -> Landed {
        let claim = reserved.claim.take().expect("a reservation holds its claim until filled or dropped");
        finish(&reserved.slot, claim, data_crc)
    }

    /// Stops receiving `layer` of `request` and returns it, if it is complete; frames of it that
    /// land later are [`Landed::NotOpen`].
    pub fn take(&self, request: u64, layer: u32) -> Option<Reassembly> {
        let mut layers = lock(&self.layers);
        let slot = layers.get(&(request, layer))?.clone();
        let mut guard = lock(&slot);
        if !guard.as_ref().is_some_and(Reassembly::is_complete) {
            return None;
        }
        layers.remove(&(request, layer));
        guard.take()
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

/// The place of one piece's data in its layer, reserved by [`Landing::reserve`]: a reader reads
/// the data into [`as_mut`](AsMut::as_mut), then hands it to [`Landing::fill`]. Dropped unfilled
/// (corrupt data, a broken stream), it gives its blocks back as missing.
#[derive(Debug)]
pub struct Reserved {
    slot: Slot,
    claim: Option<Claim>,
    start: *mut u8,
    len: usize,
    /// The request.
    pub request: u64,
    /// The layer.
    pub layer: u32,
}

// SAFETY: `start` points into the layer buffer that `slot` keeps alive, at bytes this
// reservation's claim holds for it alone; nothing about them is tied to the creating thread.
#[allow(unsafe_code)]
unsafe impl Send for Reserved {}

impl AsMut<[u8]> for Reserved {
    #[allow(unsafe_code)]
    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: the claim reserves these `len` bytes of the layer's buffer for this reservation
        // alone (no other claim covers them, and the layer cannot be read, reset or taken before
        // they are finished, since it is incomplete until then). `slot` keeps the buffer
        // allocated, and it is never resized. `&mut self` keeps the slice unique.
        unsafe { std::slice::from_raw_parts_mut(self.start, self.len) }
    }
}

impl Drop for Reserved {
    fn drop(&mut self) {
        if let Some(claim) = self.claim.take() {
            if let Some(layer) = lock(&self.slot).as_mut() {
                layer.abandon(claim);
            }
        }
    }
}
