//! The [`KvCache`] and [`KvScheme`] traits and the per-model collection of layer caches.

use burn::tensor::{backend::Backend, FloatDType, Tensor};

use super::AttendOptions;
use crate::error::CacheError;

/// One layer's KV cache for a batch of sequences.
///
/// Keys and values are appended after RoPE. Slots are shared across the batch: every sequence
/// appends the same number of tokens per call, and sequences of different lengths are aligned by
/// left padding (see [`AttendOptions::key_start`]).
pub trait KvCache<B: Backend> {
    /// Appends keys and values of shape `[batch, kv_heads, new_tokens, head_dim]` (post-RoPE).
    fn append(&mut self, k: Tensor<B, 4>, v: Tensor<B, 4>) -> Result<(), CacheError>;

    /// Attention of queries `[batch, heads, q_len, head_dim]` over every cached token, computed on
    /// the cache's own representation. The queries are the last `q_len` slots (already appended),
    /// so attention is causal among them. `heads` must be a multiple of `kv_heads` (GQA: query head
    /// `h` reads KV head `h / (heads / kv_heads)`). Returns `[batch, heads, q_len, head_dim]`.
    fn attend(&self, q: Tensor<B, 4>, options: &AttendOptions) -> Result<Tensor<B, 4>, CacheError>;

    /// Number of cached slots (tokens per sequence, padding included).
    fn len(&self) -> usize;

    /// Whether the cache holds no tokens.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes the cached state occupies, all metadata included.
    fn memory_bytes(&self) -> usize;

    /// The float type the cache takes its keys and values in: f32 unless it says otherwise. The
    /// model's layers cast to it, so that a cache storing f16 takes an f16 model's value
    /// projections without a round trip through f32 (two launches a layer in a decode step).
    /// [`append`](Self::append) must take any float type all the same.
    fn input_dtype(&self) -> FloatDType {
        FloatDType::F32
    }

    /// The orthogonal matrices `[kv_heads, head_dim, head_dim]` (f32) this cache multiplies keys
    /// and queries by before it stores or attends them (query head `h` takes KV head `h / (heads
    /// / kv_heads)`'s; the product `q kᵀ` is unchanged), if any. A model may apply them itself,
    /// in the launch that applies RoPE, and hand the products to
    /// [`append_rotated`](Self::append_rotated) and [`attend_rotated`](Self::attend_rotated).
    fn key_rotation(&self) -> Option<Tensor<B, 3>> {
        None
    }

    /// [`append`](Self::append) of keys already multiplied by
    /// [`key_rotation`](Self::key_rotation) (as they are without one).
    fn append_rotated(&mut self, k: Tensor<B, 4>, v: Tensor<B, 4>) -> Result<(), CacheError> {
        self.append(k, v)
    }

    /// [`attend`](Self::attend) of f32 queries already multiplied by
    /// [`key_rotation`](Self::key_rotation) (as they are without one).
    fn attend_rotated(&self, q: Tensor<B, 4>, options: &AttendOptions) -> Result<Tensor<B, 4>, CacheError> {
        self.attend(q, options)
    }
}

/// The geometry a layer cache is built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheGeometry {
    /// Sequences in the batch.
    pub batch: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Query heads (a multiple of `kv_heads`).
    pub heads: usize,
    /// Dimension of one head.
    pub head_dim: usize,
}

impl CacheGeometry {
    /// Checks the keys and values of an append: both `[batch, kv_heads, new_tokens >= 1,
    /// head_dim]` of this geometry, with the same shape.
    pub fn check_append(&self, k: [usize; 4], v: [usize; 4]) -> Result<(), CacheError> {
        for (what, dims) in [("keys", k), ("values", v)] {
            let [batch, kv_heads, new, head_dim] = dims;
            if batch != self.batch || kv_heads != self.kv_heads || head_dim != self.head_dim || new == 0 {
                return Err(CacheError::Shape {
                    what,
                    expected: format!("[{}, {}, >=1, {}]", self.batch, self.kv_heads, self.head_dim),
                    found: dims.to_vec(),
                });
            }
        }
        if k != v {
            return Err(CacheError::Shape {
                what: "values",
                expected: format!("the keys' shape {k:?}"),
                found: v.to_vec(),
            });
        }
        Ok(())
    }
}

/// A cache scheme: the configuration that builds one [`KvCache`] per layer.
pub trait KvScheme<B: Backend> {
    /// The cache type this scheme builds.
    type Cache: KvCache<B>;

    /// Builds the (empty) cache of layer `layer`.
    fn new_cache(&self, layer: usize, geometry: CacheGeometry, device: &B::Device) -> Self::Cache;

    /// A short human-readable name with the configuration, e.g. `dense` or `hack:bits=2,pi=64`.
    fn name(&self) -> String;
}

/// One cache per layer plus the batch's alignment state: the model's whole KV state for a batch.
#[derive(Debug)]
pub struct LayerCaches<C> {
    /// The per-layer caches, index = layer.
    pub layers: Vec<C>,
    /// Per batch row, the first slot that holds a real token (left padding before it).
    pub key_start: Vec<usize>,
}

impl<C> LayerCaches<C> {
    /// Wraps per-layer caches for a batch whose rows start at slot 0.
    pub fn new(layers: Vec<C>, batch: usize) -> Self {
        Self { layers, key_start: vec![0; batch] }
    }

    /// Total bytes of all layers' cached state.
    pub fn memory_bytes<B: Backend>(&self) -> usize
    where
        C: KvCache<B>,
    {
        self.layers.iter().map(|c| c.memory_bytes()).sum()
    }

    /// Slots cached so far (0 for a fresh cache).
    pub fn len<B: Backend>(&self) -> usize
    where
        C: KvCache<B>,
    {
        self.layers.first().map_or(0, |c| c.len())
    }

    /// Whether nothing is cached yet.
    pub fn is_empty<B: Backend>(&self) -> bool
    where
        C: KvCache<B>,
    {
        self.len() == 0
    }
}
