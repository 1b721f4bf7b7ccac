//! [`PqCache`]: one layer's PQ-coded K/V and recent window.

use burn::tensor::{Int, Tensor};
use burn_kvcompress::{
    cache::{append_slots, AttendOptions, CacheGeometry, KvCache},
    error::CacheError,
};

use crate::{
    kernels::{PqBackend, PqView},
    PqConfig,
};

/// One layer's cache: slots `0..coded` as packed codes, the rest in f32 (see
/// [`PqScheme`](super::PqScheme) for the window rule).
#[derive(Debug, Clone)]
pub struct PqCache<B: PqBackend> {
    pub(super) config: PqConfig,
    pub(super) window: usize,
    pub(super) geometry: CacheGeometry,
    /// Key and value codebooks, `[groups, subspaces, centroids, sub_dim]`.
    pub(super) books: [Tensor<B, 4>; 2],
    books_bytes: usize,
    /// Packed key and value codes, `[batch, kv_heads, coded, words_per_vector]`.
    pub(super) codes: Option<(Tensor<B, 4, Int>, Tensor<B, 4, Int>)>,
    /// Recent keys and values, `[batch, kv_heads, recent, head_dim]`.
    pub(super) recent: Option<(Tensor<B, 4>, Tensor<B, 4>)>,
    pub(super) len: usize,
    /// Why this cache cannot work (codebooks that do not fit), reported on use.
    problem: Option<String>,
}

impl<B: PqBackend> PqCache<B> {
    /// An empty cache; `problem` (codebooks that do not fit) is reported as an error on use.
    pub(super) fn new(
        config: PqConfig,
        window: usize,
        geometry: CacheGeometry,
        books: [Tensor<B, 4>; 2],
        books_bytes: usize,
        problem: Option<String>,
    ) -> Self {
        Self { config, window, geometry, books, books_bytes, codes: None, recent: None, len: 0, problem }
    }

    pub(super) fn check_usable(&self) -> Result<(), CacheError> {
        match &self.problem {
            Some(p) => Err(CacheError::Request(p.clone())),
            None => Ok(()),
        }
    }

    /// Slots held as codes.
    pub fn coded_len(&self) -> usize {
        self.codes.as_ref().map_or(0, |(k, _)| k.dims()[2])
    }

    /// Slots held in f32.
    pub fn recent_len(&self) -> usize {
        self.recent.as_ref().map_or(0, |(k, _)| k.dims()[2])
    }

    /// What attention reads.
    pub fn view(&self) -> PqView<'_, B> {
        PqView {
            config: self.config,
            key_books: &self.books[0],
            value_books: &self.books[1],
            codes: self.codes.as_ref().map(|(k, v)| (k, v)),
            recent: self.recent.as_ref().map(|(k, v)| (k, v)),
        }
    }

    /// Encodes the oldest `n` recent slots and moves them to the codes.
    fn encode_oldest(&mut self, n: usize) {
        let Some((k, v)) = self.recent.take() else { return };
        let r = k.dims()[2];
        let encode = |x: Tensor<B, 4>, books: &Tensor<B, 4>| B::pq_encode(x, books, &self.config);
        let k_codes = encode(k.clone().narrow(2, 0, n), &self.books[0]);
        let v_codes = encode(v.clone().narrow(2, 0, n), &self.books[1]);
        self.codes = Some(match self.codes.take() {
            Some((kc, vc)) => (Tensor::cat(vec![kc, k_codes], 2), Tensor::cat(vec![vc, v_codes], 2)),
            None => (k_codes, v_codes),
        });
        if r > n {
            self.recent = Some((k.narrow(2, n, r - n), v.narrow(2, n, r - n)));
        }
    }
}

/// How many of the `recent` f32 slots an append of `new` slots encodes: all but the newest
/// `window - new` (none when `new` alone fills the window), so that after the append the newest
/// `max(window, new)` slots are in f32 (see [`PqScheme`](super::PqScheme)).
pub fn slots_to_encode(window: usize, recent: usize, new: usize) -> usize {
    recent.saturating_sub(window.saturating_sub(new))
}

impl<B: PqBackend> KvCache<B> for PqCache<B> {
    fn append(&mut self, k: Tensor<B, 4>, v: Tensor<B, 4>) -> Result<(), CacheError> {
        self.check_usable()?;
        self.geometry.check_append(k.dims(), v.dims())?;
        let new = k.dims()[2];
        let flush = slots_to_encode(self.window, self.recent_len(), new);
        if flush > 0 {
            self.encode_oldest(flush);
        }
        self.recent = Some(match self.recent.take() {
            Some((rk, rv)) => (append_slots(Some(rk), k), append_slots(Some(rv), v)),
            None => (k, v),
        });
        self.len += new;
        Ok(())
    }

    fn attend(&self, q: Tensor<B, 4>, options: &AttendOptions) -> Result<Tensor<B, 4>, CacheError> {
        self.check_usable()?;
        B::pq_attention(q, &self.view(), options)
    }

    fn len(&self) -> usize {
        self.len
    }

    /// Codes and recent slots as stored (32-bit words, f32), plus this layer's codebooks in f32
    /// (shared by the batch; amortized over the context in per-token figures).
    fn memory_bytes(&self) -> usize {
        let codes = self
            .codes
            .as_ref()
            .map_or(0, |(k, v)| 4 * (k.dims().iter().product::<usize>() + v.dims().iter().product::<usize>()));
        let recent = self
            .recent
            .as_ref()
            .map_or(0, |(k, v)| 4 * (k.dims().iter().product::<usize>() + v.dims().iter().product::<usize>()));
        codes + recent + self.books_bytes
    }
}
