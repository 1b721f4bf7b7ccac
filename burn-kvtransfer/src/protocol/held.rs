//! A layer as the prefill side holds it for serving: its serialization and the CRC-32 of each
//! block, computed in one pass (blocks hashed in parallel) when the layer is stored. Frame checksums and the layer's
//! announced checksum are then combined from block checksums without reading the bytes again.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use burn_kvcompress::cache::{Bytes, HostBuffer};
use rayon::prelude::*;

use super::blocks::span;
use crate::state_codec::EncodedState;
use crate::transport::Slices;
use crate::wire::crc_concat;

/// Bytes of serialized layers alive, wherever they are referenced: a prefill server counts its
/// layers here from the moment they are stored until the last reference goes (the store's, or a
/// queued or half-written frame's), so that what a stalled connection pins is counted too.
/// Cloning shares the count.
#[derive(Debug, Default, Clone)]
pub struct LiveBytes(Arc<AtomicUsize>);

impl LiveBytes {
    /// The bytes alive now.
    pub fn get(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
}

/// A serialized layer cut into `block_size`-byte blocks, with each block's CRC-32.
#[derive(Debug)]
pub struct HeldLayer {
    state: EncodedState,
    block_size: u32,
    block_crcs: Vec<u32>,
    /// Where its bytes are counted while it lives, if anywhere.
    live: Option<LiveBytes>,
    /// Where its bytes lie, when they were placed in memory that peers may read.
    address: Option<u64>,
}

impl Drop for HeldLayer {
    fn drop(&mut self) {
        if let Some(live) = &self.live {
            live.0.fetch_sub(self.state.len(), Ordering::Relaxed);
        }
    }
}

impl HeldLayer {
    /// Holds `state`, hashing each of its blocks once, on the rayon pool's threads (one thread
    /// hashes about 15 GB/s, below the 100 Gbit/s links the server may feed).
    pub fn new(state: EncodedState, block_size: u32) -> Self {
        let blocks = state.len().div_ceil(block_size as usize) as u32;
        let block_crcs = (0..blocks)
            .into_par_iter()
            .map(|b| {
                let (start, end) = span(block_size, state.len(), b, 1).expect("a block of the layer");
                let mut crc = crc32fast::Hasher::new();
                state.slices(start, end).into_iter().for_each(|s| crc.update(s));
                crc.finalize()
            })
            .collect();
        Self { state, block_size, block_crcs, live: None, address: None }
    }

    /// Holds `state` copied into `buffer` (of its length: memory that peers may read), each
    /// block hashed as it is copied, on the rayon pool's threads; the tensors' own buffers are
    /// then no longer referenced.
    ///
    /// # Panics
    /// If `buffer`'s length is not the state's.
    pub fn placed(state: EncodedState, block_size: u32, mut buffer: HostBuffer) -> Self {
        assert_eq!(buffer.len(), state.len(), "a buffer of the layer's length");
        let block_crcs = buffer
            .par_chunks_mut(block_size as usize)
            .enumerate()
            .map(|(b, block)| {
                let start = b * block_size as usize;
                let mut crc = crc32fast::Hasher::new();
                let mut at = 0;
                for s in state.slices(start, start + block.len()) {
                    block[at..at + s.len()].copy_from_slice(s);
                    crc.update(s);
                    at += s.len();
                }
                crc.finalize()
            })
            .collect();
        let address = Some(buffer.as_ptr() as u64);
        let state = EncodedState::from(Bytes::from_owner(buffer));
        Self { state, block_size, block_crcs, live: None, address }
    }

    /// Where the layer's first byte lies, when it was [placed](Self::placed) in memory that peers
    /// may read.
    pub fn address(&self) -> Option<u64> {
        self.address
    }

    /// The same layer, its bytes counted in `live` until it is dropped.
    pub fn counted_in(mut self, live: &LiveBytes) -> Self {
        if let Some(old) = self.live.replace(live.clone()) {
            old.0.fetch_sub(self.state.len(), Ordering::Relaxed);
        }
        live.0.fetch_add(self.state.len(), Ordering::Relaxed);
        self
    }

    /// Length of the serialization, bytes (never 0: it holds at least the token and tensor counts).
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        self.state.len()
    }

    /// CRC-32 of the whole serialization.
    pub fn crc(&self) -> u32 {
        self.range_crc(0, self.block_crcs.len() as u32)
    }

    /// CRC-32 of blocks `[first, first + count)` (clipped to the layer).
    pub fn range_crc(&self, first: u32, count: u32) -> u32 {
        let blocks = self.block_crcs.iter().enumerate().skip(first as usize).take(count as usize);
        blocks.fold(0, |crc, (b, &block)| {
            let (start, end) = span(self.block_size, self.len(), b as u32, 1).expect("a block of the layer");
            crc_concat(crc, block, end - start)
        })
    }
}

impl Slices for HeldLayer {
    fn slices(&self, start: usize, end: usize) -> Vec<&[u8]> {
        self.state.slices(start, end)
    }
}
