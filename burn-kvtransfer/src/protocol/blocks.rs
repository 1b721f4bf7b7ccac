//! Block arithmetic: coalescing pulled ranges, cutting them into frames, and reassembling a
//! layer from blocks that may arrive in any order, twice, or not at all.

use std::collections::BTreeMap;

use burn_kvcompress::cache::HostBuffer;

use crate::wire::{crc_concat, BlockRange, Layout, BLOCK_HEADER_LEN};

/// Sorts ranges and merges those that touch or overlap within one (request, layer), so the
/// server answers with as few frames as possible.
pub fn coalesce(mut ranges: Vec<BlockRange>) -> Vec<BlockRange> {
    ranges.retain(|r| r.count > 0);
    ranges.sort_by_key(|r| (r.request, r.layer, r.first));
    let mut out: Vec<BlockRange> = Vec::with_capacity(ranges.len());
    for r in ranges {
        match out.last_mut() {
            Some(last)
                if last.request == r.request
                    && last.layer == r.layer
                    && last.first as u64 + last.count as u64 >= r.first as u64 =>
            {
                let end = (last.first as u64 + last.count as u64).max(r.first as u64 + r.count as u64);
                last.count = (end - last.first as u64) as u32;
            }
            _ => out.push(r),
        }
    }
    out
}

/// Blocks that fit in one Block frame of at most `max_payload` bytes.
pub fn blocks_per_frame(layout: &Layout, max_payload: u32) -> u32 {
    ((max_payload as usize).saturating_sub(BLOCK_HEADER_LEN) / layout.block_size as usize).max(1) as u32
}

/// Splits a range into pieces of at most `per_frame` blocks.
pub fn split(range: BlockRange, per_frame: u32) -> impl Iterator<Item = BlockRange> {
    (0..range.count.div_ceil(per_frame)).map(move |i| {
        let first = range.first + i * per_frame;
        BlockRange { first, count: per_frame.min(range.first + range.count - first), ..range }
    })
}

/// Byte span `[start, end)` of `count` blocks from `first` in a layer of `len` bytes, or `None`
/// when the range leaves the layer.
pub fn span(block_size: u32, len: usize, first: u32, count: u32) -> Option<(usize, usize)> {
    let start = first as usize * block_size as usize;
    let end = ((first as usize + count as usize) * block_size as usize).min(len);
    (count > 0 && start < len).then_some((start, end))
}

/// Where one block of a layer being received stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BlockState {
    Missing,
    /// Being written by the holder of a [`Claim`].
    Claimed,
    Received,
}

/// One layer being received: its buffer, which blocks arrived, and its announced checksum.
///
/// Blocks are stored in two steps so that several threads can copy into one layer at once: a
/// [`claim`](Self::claim) reserves the missing blocks of a piece, the claimant writes them, and
/// [`finish`](Self::finish) marks them received. A block already received or claimed is never
/// written again, so late duplicates (after a re-pull) are skipped.
///
/// The layer's checksum is combined from the pieces' data checksums (which the frames' checksums
/// give for free) when whole pieces tile the layer; after a piece was stored only in part it is
/// computed from the bytes instead.
#[derive(Debug)]
pub struct Reassembly {
    bytes: HostBuffer,
    blocks: Vec<BlockState>,
    missing: usize,
    block_size: u32,
    /// First block of each piece stored whole -> (its bytes, their CRC-32).
    pieces: BTreeMap<u32, (usize, u32)>,
    /// Whether `pieces` tile what was received (no piece was stored in part).
    pieces_tile: bool,
    /// CRC-32 the sender announced for the whole layer.
    pub crc: u32,
}

/// A block write that does not fit the layer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{len} bytes at block {first} do not fit a layer of {layer_len} bytes in {block_size}-byte blocks")]
pub struct MisplacedBlocks {
    /// First block.
    pub first: u32,
    /// Data length.
    pub len: usize,
    /// The layer's length.
    pub layer_len: usize,
    /// Block size.
    pub block_size: u32,
}

/// Blocks of one piece reserved for writing by [`Reassembly::claim`].
#[derive(Debug)]
#[must_use = "claimed blocks stay claimed until finished"]
pub struct Claim {
    /// The piece's first block.
    first: u32,
    /// The piece's length, bytes.
    len: usize,
    /// Runs `[start, end)` of claimed blocks.
    runs: Vec<(u32, u32)>,
    /// Whether every block of the piece was claimed.
    whole: bool,
    /// The layer's block size and length, bytes.
    block_size: u32,
    layer_len: usize,
}

impl Claim {
    /// Whether every block of the piece was claimed (its data goes to the layer in one copy).
    pub fn is_whole(&self) -> bool {
        self.whole
    }

    /// Where the piece's data starts in the layer, bytes.
    pub fn offset(&self) -> usize {
        self.first as usize * self.block_size as usize
    }

    /// Copies to make: `(offset in the piece's data, offset in the layer, length)`, bytes.
    pub fn copies(&self) -> impl Iterator<Item = (usize, usize, usize)> + '_ {
        let bs = self.block_size as usize;
        self.runs.iter().map(move |&(start, end)| {
            let to = start as usize * bs;
            let from = (start - self.first) as usize * bs;
            (from, to, (end as usize * bs).min(self.layer_len) - to)
        })
    }
}

impl Reassembly {
    /// An empty layer filling `buffer`, whose length is the layer's (the caller has checked it
    /// against its cap; the contents do not matter, every byte is overwritten by a block).
    pub fn new(buffer: impl Into<HostBuffer>, block_size: u32, crc: u32) -> Self {
        let buffer = buffer.into();
        let blocks = buffer.len().div_ceil(block_size as usize);
        let (pieces, pieces_tile) = (BTreeMap::new(), true);
        let states = vec![BlockState::Missing; blocks];
        Self { bytes: buffer, blocks: states, missing: blocks, block_size, pieces, pieces_tile, crc }
    }

    /// The layer's buffer, given away.
    pub fn into_buffer(self) -> HostBuffer {
        self.bytes
    }

    /// Where the layer's bytes start, for a claimant that writes its claimed blocks from another
    /// thread. The buffer never moves or shrinks while the layer lives.
    pub fn buffer_ptr(&mut self) -> *mut u8 {
        self.bytes.as_mut_ptr()
    }

    /// Reserves the missing blocks of a piece of `len` bytes from block `first` (whole blocks;
    /// the layer's last block may be short). `None` when every block of it is received or
    /// claimed already.
    pub fn claim(&mut self, first: u32, len: usize) -> Result<Option<Claim>, MisplacedBlocks> {
        let bs = self.block_size as usize;
        let count = len.div_ceil(bs) as u32;
        let fail = || MisplacedBlocks { first, len, layer_len: self.bytes.len(), block_size: self.block_size };
        let (start, end) = span(self.block_size, self.bytes.len(), first, count).ok_or_else(fail)?;
        if end - start != len {
            return Err(fail());
        }
        let mut runs: Vec<(u32, u32)> = Vec::new();
        for b in first..first + count {
            let state = &mut self.blocks[b as usize];
            if *state != BlockState::Missing {
                continue;
            }
            *state = BlockState::Claimed;
            match runs.last_mut() {
                Some((_, end)) if *end == b => *end = b + 1,
                _ => runs.push((b, b + 1)),
            }
        }
        let whole = runs == [(first, first + count)];
        let (block_size, layer_len) = (self.block_size, self.bytes.len());
        Ok((!runs.is_empty()).then_some(Claim { first, len, runs, whole, block_size, layer_len }))
    }

    /// Marks a claim's blocks received once the claimant wrote them; `data_crc` is the CRC-32
    /// of the whole piece.
    pub fn finish(&mut self, claim: Claim, data_crc: u32) {
        for &(start, end) in &claim.runs {
            self.blocks[start as usize..end as usize].iter_mut().for_each(|b| *b = BlockState::Received);
            self.missing -= (end - start) as usize;
        }
        match claim.whole {
            true => _ = self.pieces.insert(claim.first, (claim.len, data_crc)),
            false => self.pieces_tile = false,
        }
    }

    /// Gives a claim's blocks back unwritten (its data was corrupt, or never came): they are
    /// missing again.
    pub fn abandon(&mut self, claim: Claim) {
        for &(start, end) in &claim.runs {
            self.blocks[start as usize..end as usize].iter_mut().for_each(|b| *b = BlockState::Missing);
        }
    }

    /// Stores blocks from `first` whose CRC-32 is `data_crc` (claim, copy and finish in one
    /// step); `data` must cover whole blocks (the layer's last block may be short). Blocks
    /// received before are kept, not written again.
    pub fn put(&mut self, first: u32, data: &[u8], data_crc: u32) -> Result<(), MisplacedBlocks> {
        let Some(claim) = self.claim(first, data.len())? else { return Ok(()) };
        for (from, to, n) in claim.copies() {
            self.bytes[to..to + n].copy_from_slice(&data[from..from + n]);
        }
        self.finish(claim, data_crc);
        Ok(())
    }

    /// Whether every block arrived.
    pub fn is_complete(&self) -> bool {
        self.missing == 0
    }

    /// Runs of blocks neither received nor being written.
    pub fn missing(&self) -> Vec<(u32, u32)> {
        let mut runs = Vec::new();
        let mut run: Option<(u32, u32)> = None;
        for (i, &state) in self.blocks.iter().enumerate() {
            match (state == BlockState::Missing, &mut run) {
                (true, Some((_, n))) => *n += 1,
                (true, None) => run = Some((i as u32, 1)),
                (false, Some(_)) => runs.extend(run.take()),
                (false, None) => {}
            }
        }
        runs.extend(run);
        runs
    }

    /// Forgets every block (after a checksum mismatch of the whole layer); no claim may be
    /// outstanding.
    pub fn reset(&mut self) {
        debug_assert!(!self.blocks.contains(&BlockState::Claimed), "reset with blocks being written");
        self.blocks.iter_mut().for_each(|b| *b = BlockState::Missing);
        self.missing = self.blocks.len();
        self.pieces.clear();
        self.pieces_tile = true;
    }

    /// CRC-32 of the layer's bytes (meaningful once complete), combined from the pieces'
    /// checksums when they tile the layer, else hashed.
    pub fn checksum(&self) -> u32 {
        match self.pieces_tile {
            true => self.pieces.values().fold(0, |crc, &(len, piece)| crc_concat(crc, piece, len)),
            false => crc32fast::hash(&self.bytes),
        }
    }

    /// The layer's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}
