//! [`PqView`]: what attention reads from a PQ cache.

use burn::tensor::{backend::Backend, Int, Tensor};

use crate::PqConfig;

/// A pair of borrowed key and value tensors.
pub type KvPair<'a, T> = Option<(&'a T, &'a T)>;

/// A PQ cache's state as attention sees it. Slots `0..coded` are codes, slots `coded..len` are
/// the recent window in f32.
#[derive(Debug, Clone, Copy)]
pub struct PqView<'a, B: Backend> {
    /// The quantizer.
    pub config: PqConfig,
    /// Key codebooks, `[groups, subspaces, centroids, sub_dim]`.
    pub key_books: &'a Tensor<B, 4>,
    /// Value codebooks, same shape.
    pub value_books: &'a Tensor<B, 4>,
    /// Packed key and value codes, `[batch, kv_heads, coded, words_per_vector]` each.
    pub codes: KvPair<'a, Tensor<B, 4, Int>>,
    /// The recent window's keys and values, `[batch, kv_heads, recent, head_dim]` each.
    pub recent: KvPair<'a, Tensor<B, 4>>,
}

impl<B: Backend> PqView<'_, B> {
    /// Slots held as codes.
    pub fn coded(&self) -> usize {
        self.codes.map_or(0, |(k, _)| k.dims()[2])
    }

    /// Slots held in f32.
    pub fn recent_len(&self) -> usize {
        self.recent.map_or(0, |(k, _)| k.dims()[2])
    }

    /// All slots.
    pub fn len(&self) -> usize {
        self.coded() + self.recent_len()
    }

    /// Whether the view holds no slot.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
