//! Keys: each token quantized on its own, in groups of Π consecutive channels (the last group holds
//! the remainder when `head_dim` is not a multiple of Π). A key is never requantized.

use crate::quant::{GroupParams, GroupTable, QuantError, Rounder};

/// The quantized keys of one (sequence, KV head) stream.
#[derive(Debug, Clone)]
pub struct KeyStore {
    head_dim: usize,
    partition: usize,
    /// `[tokens, groups]` quantized channel groups.
    table: GroupTable,
    len: usize,
}

impl KeyStore {
    /// An empty store.
    pub fn new(head_dim: usize, bits: u8, partition: usize) -> Self {
        Self { head_dim, partition, table: GroupTable::new(bits, partition), len: 0 }
    }

    /// Channel groups per token.
    pub fn groups(&self) -> usize {
        self.head_dim.div_ceil(self.partition)
    }

    /// Tokens stored.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no token is stored.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Quantizes and appends one token's key (`[head_dim]`).
    pub fn push(&mut self, key: &[f32], rounder: &mut Rounder) -> Result<(), QuantError> {
        assert_eq!(key.len(), self.head_dim, "a key has head_dim values");
        for group in key.chunks(self.partition) {
            self.table.push(group, rounder)?;
        }
        self.len += 1;
        Ok(())
    }

    /// Unpacked codes of `token`, `[head_dim]`.
    pub fn codes(&self, token: usize) -> Vec<u8> {
        (0..self.groups()).flat_map(|g| self.table.codes(token * self.groups() + g)).collect()
    }

    /// Metadata of channel group `group` of `token`.
    pub fn params(&self, token: usize, group: usize) -> GroupParams {
        self.table.params(token * self.groups() + group)
    }

    /// Cached code sum of channel group `group` of `token`.
    pub fn sum(&self, token: usize, group: usize) -> u16 {
        self.table.sum(token * self.groups() + group)
    }

    /// The dequantized key of `token`, `[head_dim]`.
    pub fn dequantized(&self, token: usize) -> Vec<f32> {
        (0..self.groups()).flat_map(|g| self.table.dequantized(token * self.groups() + g)).collect()
    }

    /// Bytes stored: packed codes, fp16 (min, scale) and sums at their storage width.
    pub fn memory_bytes(&self) -> usize {
        self.table.memory_bytes()
    }
}
