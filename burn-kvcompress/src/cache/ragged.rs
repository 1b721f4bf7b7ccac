//! Sequences of different lengths decoded as one batch, joining and leaving between steps: the
//! cache side of continuous batching.
//!
//! Each sequence keeps the cache it was prefilled into (a batch of one). A step runs the model's
//! weight products on every sequence at once, which is what batching buys at decode (the weights
//! are read once per step), and attention per sequence over its own cache at its own length:
//! nothing is padded, stored or attended twice, and a sequence's attention is exactly what it
//! would be decoded alone.
//!
//! To the model the batch looks left-padded to its longest sequence: row `b`'s
//! [`key_start`](LayerCaches::key_start) is `longest − len_b` plus the row's own padding, so
//! that its RoPE positions continue its own sequence. That padding is virtual: [`RaggedCache`]
//! hands each row's cache its own options.

use burn::tensor::{backend::Backend, FloatDType, Tensor};

use super::{AttendOptions, KvCache, LayerCaches};
use crate::error::CacheError;

/// One layer's caches of the sequences of a ragged batch, one per row (each a batch of one).
#[derive(Debug, Clone)]
pub struct RaggedCache<C> {
    rows: Vec<Row<C>>,
}

/// One sequence's cache of a layer and its own first real slot.
#[derive(Debug, Clone)]
struct Row<C> {
    cache: C,
    key_start: usize,
}

impl<C> Default for RaggedCache<C> {
    fn default() -> Self {
        Self { rows: Vec::new() }
    }
}

impl<C> RaggedCache<C> {
    /// Sequences held.
    pub fn rows(&self) -> usize {
        self.rows.len()
    }

    /// Each row's attention: `f` of the row's cache, its queries (`q: [rows, heads, q_len,
    /// head_dim]` narrowed to the row) and its own options; the outputs concatenated in row
    /// order, `[rows, heads, q_len, head_dim]`.
    fn attend_per_row<B: Backend>(
        &self,
        q: Tensor<B, 4>,
        mut f: impl FnMut(&C, Tensor<B, 4>, &AttendOptions) -> Result<Tensor<B, 4>, CacheError>,
        options: &AttendOptions,
    ) -> Result<Tensor<B, 4>, CacheError> {
        self.check_rows(q.dims())?;
        let mut outputs = self
            .rows
            .iter()
            .enumerate()
            .map(|(b, row)| f(&row.cache, q.clone().narrow(0, b, 1), &row.options(options)))
            .collect::<Result<Vec<_>, _>>()?;
        // Burn's `cat` allocates and copies even one tensor: a batch of one (a worker decoding
        // one request at a time) returns its row's output as it is.
        match outputs.len() {
            1 => Ok(outputs.pop().expect("one output")),
            _ => Ok(Tensor::cat(outputs, 0)),
        }
    }

    /// Each row's append: `f` of the row's cache and its keys and values (`k`, `v`: `[rows,
    /// kv_heads, new, head_dim]` narrowed to the row).
    fn append_per_row<B: Backend>(
        &mut self,
        k: Tensor<B, 4>,
        v: Tensor<B, 4>,
        mut f: impl FnMut(&mut C, Tensor<B, 4>, Tensor<B, 4>) -> Result<(), CacheError>,
    ) -> Result<(), CacheError> {
        self.check_rows(k.dims())?;
        self.check_rows(v.dims())?;
        for (b, row) in self.rows.iter_mut().enumerate() {
            f(&mut row.cache, k.clone().narrow(0, b, 1), v.clone().narrow(0, b, 1))?;
        }
        Ok(())
    }

    fn check_rows(&self, dims: [usize; 4]) -> Result<(), CacheError> {
        match dims[0] == self.rows.len() && !self.rows.is_empty() {
            true => Ok(()),
            false => Err(CacheError::Shape {
                what: "batch rows",
                expected: format!("[{}, ·, ·, ·] (one per sequence)", self.rows.len()),
                found: dims.to_vec(),
            }),
        }
    }
}

impl<C> Row<C> {
    /// `options` (the batch's, with virtual padding) as the row's own cache takes them.
    fn options(&self, options: &AttendOptions) -> AttendOptions {
        AttendOptions { key_start: vec![self.key_start], ..options.clone() }
    }
}

impl<B: Backend, C: KvCache<B>> KvCache<B> for RaggedCache<C> {
    fn append(&mut self, k: Tensor<B, 4>, v: Tensor<B, 4>) -> Result<(), CacheError> {
        self.append_per_row(k, v, |cache, k, v| cache.append(k, v))
    }

    fn attend(&self, q: Tensor<B, 4>, options: &AttendOptions) -> Result<Tensor<B, 4>, CacheError> {
        self.attend_per_row(q, |cache, q, options| cache.attend(q, options), options)
    }

    /// The longest row's slots (the batch's length with its virtual padding).
    fn len(&self) -> usize {
        self.rows.iter().map(|row| row.cache.len()).max().unwrap_or(0)
    }

    fn memory_bytes(&self) -> usize {
        self.rows.iter().map(|row| row.cache.memory_bytes()).sum()
    }

    /// The rows' type (the first row's: the rows are caches of one scheme and layer).
    fn input_dtype(&self) -> FloatDType {
        self.rows.first().map_or(FloatDType::F32, |row| row.cache.input_dtype())
    }

    /// The rows' rotation (the first row's: one scheme and layer rotate alike).
    fn key_rotation(&self) -> Option<Tensor<B, 3>> {
        self.rows.first().and_then(|row| row.cache.key_rotation())
    }

    fn append_rotated(&mut self, k: Tensor<B, 4>, v: Tensor<B, 4>) -> Result<(), CacheError> {
        self.append_per_row(k, v, |cache, k, v| cache.append_rotated(k, v))
    }

    fn attend_rotated(&self, q: Tensor<B, 4>, options: &AttendOptions) -> Result<Tensor<B, 4>, CacheError> {
        self.attend_per_row(q, |cache, q, options| cache.attend_rotated(q, options), options)
    }
}

/// A ragged batch: the model's view of its sequences' caches ([`Self::caches`]) and the sequences
/// joining and leaving it between steps.
#[derive(Debug)]
pub struct RaggedBatch<C> {
    caches: LayerCaches<RaggedCache<C>>,
}

impl<C> RaggedBatch<C> {
    /// An empty batch for a model of `layers` layers.
    pub fn new(layers: usize) -> Self {
        Self {
            caches: LayerCaches { layers: (0..layers).map(|_| RaggedCache::default()).collect(), key_start: vec![] },
        }
    }

    /// Sequences in the batch.
    pub fn rows(&self) -> usize {
        self.caches.key_start.len()
    }

    /// Whether the batch holds no sequence.
    pub fn is_empty(&self) -> bool {
        self.rows() == 0
    }

    /// The caches to hand the model's forward: one token row per sequence, in join order (a
    /// sequence that leaves closes the gap).
    pub fn caches(&mut self) -> &mut LayerCaches<RaggedCache<C>> {
        &mut self.caches
    }

    /// Adds a sequence prefilled into `caches` (a batch of one, every layer) as the last row;
    /// returns its row.
    pub fn join<B: Backend>(&mut self, caches: LayerCaches<C>) -> Result<usize, CacheError>
    where
        C: KvCache<B>,
    {
        if caches.key_start.len() != 1 || caches.layers.len() != self.caches.layers.len() {
            return Err(CacheError::Request(format!(
                "a sequence joins as one row of {} layers, not {} rows of {} layers",
                self.caches.layers.len(),
                caches.key_start.len(),
                caches.layers.len()
            )));
        }
        let key_start = caches.key_start[0];
        for (layer, cache) in self.caches.layers.iter_mut().zip(caches.layers) {
            layer.rows.push(Row { cache, key_start });
        }
        self.caches.key_start.push(0);
        self.align::<B>();
        Ok(self.rows() - 1)
    }

    /// Removes row `row` (the rows after it move up by one) and returns its caches, a batch of
    /// one as it joined, with the steps decoded since.
    pub fn leave<B: Backend>(&mut self, row: usize) -> Result<LayerCaches<C>, CacheError>
    where
        C: KvCache<B>,
    {
        if row >= self.rows() {
            return Err(CacheError::Request(format!("row {row} of a batch of {}", self.rows())));
        }
        let mut key_start = 0;
        let layers = self
            .caches
            .layers
            .iter_mut()
            .map(|layer| {
                let Row { cache, key_start: start } = layer.rows.remove(row);
                key_start = start;
                cache
            })
            .collect();
        self.caches.key_start.remove(row);
        self.align::<B>();
        Ok(LayerCaches { layers, key_start: vec![key_start] })
    }

    /// Each row's virtual padding: the longest row's slots less its own, plus its own padding.
    fn align<B: Backend>(&mut self)
    where
        C: KvCache<B>,
    {
        let Some(layer) = self.caches.layers.first() else {
            return;
        };
        let longest = KvCache::<B>::len(layer);
        for (start, row) in self.caches.key_start.iter_mut().zip(&layer.rows) {
            *start = longest - row.cache.len() + row.key_start;
        }
    }
}
