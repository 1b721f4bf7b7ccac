//! Block arithmetic: coalescing pulled ranges, cutting them into frames, and reassembling a
//! layer from blocks that may arrive in any order, twice, or not at all.

use std::collections::BTreeMap;

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

/// One layer being received: its buffer, which blocks arrived, and its announced checksum.
///
/// The layer's checksum is combined from the pieces' data checksums (which the frames' checksums
/// give for free) when the pieces tile the layer; after an overlapping re-delivery it is
/// computed from the bytes instead.
#[derive(Debug)]
pub struct Reassembly {
    bytes: Vec<u8>,
    received: Vec<bool>,
    missing: usize,
    block_size: u32,
    /// First block of each piece stored -> (its bytes, their CRC-32).
    pieces: BTreeMap<u32, (usize, u32)>,
    /// Whether `pieces` tile what was received (no piece overlapped another partially).
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

impl Reassembly {
    /// An empty layer filling `buffer`, whose length is the layer's (the caller has checked it
    /// against its cap; the contents do not matter, every byte is overwritten by a block).
    pub fn new(buffer: Vec<u8>, block_size: u32, crc: u32) -> Self {
        let blocks = buffer.len().div_ceil(block_size as usize);
        let (pieces, pieces_tile) = (BTreeMap::new(), true);
        Self { bytes: buffer, received: vec![false; blocks], missing: blocks, block_size, pieces, pieces_tile, crc }
    }

    /// The layer's buffer, given away.
    pub fn into_buffer(self) -> Vec<u8> {
        self.bytes
    }

    /// Stores blocks from `first` whose CRC-32 is `data_crc`; `data` must cover whole blocks (the
    /// layer's last block may be short). Blocks received before are overwritten, not counted
    /// twice.
    pub fn put(&mut self, first: u32, data: &[u8], data_crc: u32) -> Result<(), MisplacedBlocks> {
        let bs = self.block_size as usize;
        let count = data.len().div_ceil(bs) as u32;
        let fail =
            || MisplacedBlocks { first, len: data.len(), layer_len: self.bytes.len(), block_size: self.block_size };
        let (start, end) = span(self.block_size, self.bytes.len(), first, count).ok_or_else(fail)?;
        if end - start != data.len() {
            return Err(fail());
        }
        self.bytes[start..end].copy_from_slice(data);
        let range = first as usize..first as usize + count as usize;
        let overlaps = self.received[range.clone()].iter().any(|&seen| seen);
        match (overlaps, self.pieces.get(&first)) {
            (false, _) => _ = self.pieces.insert(first, (data.len(), data_crc)),
            // The same piece again (a re-pull): its bytes were just overwritten in place.
            (true, Some(&(len, _))) if len == data.len() => _ = self.pieces.insert(first, (len, data_crc)),
            (true, _) => self.pieces_tile = false,
        }
        for seen in &mut self.received[range] {
            if !*seen {
                *seen = true;
                self.missing -= 1;
            }
        }
        Ok(())
    }

    /// Whether every block arrived.
    pub fn is_complete(&self) -> bool {
        self.missing == 0
    }

    /// Runs of blocks not received yet.
    pub fn missing(&self) -> Vec<(u32, u32)> {
        let mut runs = Vec::new();
        let mut run: Option<(u32, u32)> = None;
        for (i, &seen) in self.received.iter().enumerate() {
            match (seen, &mut run) {
                (false, Some((_, n))) => *n += 1,
                (false, None) => run = Some((i as u32, 1)),
                (true, Some(_)) => runs.extend(run.take()),
                (true, None) => {}
            }
        }
        runs.extend(run);
        runs
    }

    /// Forgets every block (after a checksum mismatch of the whole layer).
    pub fn reset(&mut self) {
        self.received.iter_mut().for_each(|r| *r = false);
        self.missing = self.received.len();
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
