//! Values: quantized per channel in blocks of Π consecutive tokens. The newest block, until it
//! holds Π tokens, stays in floating point (requantization elimination: a partial block's range
//! could still widen, which would force requantizing it); it is quantized once, when it fills.
//!
//! The tail is kept in f32 (the model's precision here; the paper's FP16 matches its FP16 model).

use crate::quant::{GroupParams, GroupTable, QuantError, Rounder};

/// The quantized values of one (sequence, KV head) stream.
#[derive(Debug, Clone)]
pub struct ValueStore {
    head_dim: usize,
    partition: usize,
    /// `[blocks, head_dim]` quantized channels of the closed blocks, Π tokens each.
    table: GroupTable,
    /// The open block, `[tail_len, head_dim]` token-major, fewer than Π tokens.
    tail: Vec<f32>,
    blocks: usize,
}

impl ValueStore {
    /// An empty store.
    pub fn new(head_dim: usize, bits: u8, partition: usize) -> Self {
        Self { head_dim, partition, table: GroupTable::new(bits, partition), tail: Vec::new(), blocks: 0 }
    }

    /// Tokens stored (quantized blocks and tail).
    pub fn len(&self) -> usize {
        self.blocks * self.partition + self.tail_len()
    }

    /// Whether no token is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Quantized (closed) blocks of Π tokens.
    pub fn blocks(&self) -> usize {
        self.blocks
    }

    /// Tokens in the floating-point tail (always `< Π`).
    pub fn tail_len(&self) -> usize {
        self.tail.len() / self.head_dim
    }

    /// The tail, `[tail_len, head_dim]`.
    pub fn tail(&self) -> &[f32] {
        &self.tail
    }

    /// Appends one token's value (`[head_dim]`); quantizes the tail into a block when it reaches
    /// Π tokens.
    pub fn push(&mut self, value: &[f32], rounder: &mut Rounder) -> Result<(), QuantError> {
        assert_eq!(value.len(), self.head_dim, "a value has head_dim values");
        self.tail.extend_from_slice(value);
        if self.tail_len() == self.partition {
            self.flush(rounder)?;
        }
        Ok(())
    }

    fn flush(&mut self, rounder: &mut Rounder) -> Result<(), QuantError> {
        let d = self.head_dim;
        for channel in 0..d {
            let column: Vec<f32> = self.tail.iter().skip(channel).step_by(d).copied().collect();
            self.table.push(&column, rounder)?;
        }
        self.tail.clear();
        self.blocks += 1;
        Ok(())
    }

    /// Unpacked codes of `channel` in block `block`, `[Π]`.
    pub fn codes(&self, block: usize, channel: usize) -> Vec<u8> {
        self.table.codes(block * self.head_dim + channel)
    }

    /// Metadata of `channel` in block `block`.
    pub fn params(&self, block: usize, channel: usize) -> GroupParams {
        self.table.params(block * self.head_dim + channel)
    }

    /// Cached code sum of `channel` in block `block`.
    pub fn sum(&self, block: usize, channel: usize) -> u16 {
        self.table.sum(block * self.head_dim + channel)
    }

    /// The dequantized block, `[Π, head_dim]` token-major.
    pub fn dequantized_block(&self, block: usize) -> Vec<f32> {
        let d = self.head_dim;
        let mut out = vec![0.0; self.partition * d];
        for channel in 0..d {
            let column = self.table.dequantized(block * self.head_dim + channel);
            for (t, v) in column.into_iter().enumerate() {
                out[t * d + channel] = v;
            }
        }
        out
    }

    /// Bytes stored: packed codes, fp16 (min, scale), sums at their storage width, and the f32
    /// tail.
    pub fn memory_bytes(&self) -> usize {
        self.table.memory_bytes() + self.tail.len() * 4
    }
}
