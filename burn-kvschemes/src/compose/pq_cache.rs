//! [`ZackPqCache`]: one layer's reduced keys and values as PQ codes plus a recent f32 window.

use burn::tensor::{Int, Tensor};
use burn_kvcompress::{
    cache::{append_slots, AttendOptions, CacheGeometry, KvCache},
    error::CacheError,
};
use burn_million_pq::{
    cache::slots_to_encode,
    kernels::{attention::reconstruct, unpack_codes, PqBackend},
    PqConfig,
};

use burn_zack::{
    cache::{reduce_keys, reduce_values, HeadLayout},
    kernels::ZackBackend,
};

/// What a layer's cache is built from: its ranks and packing, the packed query/key basis
/// `[head_dim, Σ k_qk]`, and the key and value codebooks `[1, subspaces, centroids, sub_dim]`
/// with their quantizers and f32 bytes.
pub(super) struct LayerQuantizer<B: ZackBackend + PqBackend> {
    pub layout: HeadLayout,
    pub basis: Tensor<B, 2>,
    pub books: [Tensor<B, 4>; 2],
    pub configs: [PqConfig; 2],
    pub books_bytes: usize,
}

/// One layer's ZACK + PQ cache for a batch. Slots `0..coded` are codes, the newest in f32 (the
/// window rule of [`PqScheme`](burn_million_pq::cache::PqScheme)):
///
/// - codes: keys `[batch, 1, coded, words(Σ k_qk / sub_dim)]`, values alike with `Σ k_vo`
///   (one packed vector per slot holding every head's subspaces in order);
/// - recent: keys `[batch, recent, Σ k_qk]`, values `[batch, recent, Σ k_vo]`.
#[derive(Debug)]
pub struct ZackPqCache<B: ZackBackend + PqBackend> {
    pub(super) window: usize,
    pub(super) geometry: CacheGeometry,
    pub(super) layout: HeadLayout,
    basis: Tensor<B, 2>,
    books: [Tensor<B, 4>; 2],
    pub(super) configs: [PqConfig; 2],
    books_bytes: usize,
    pub(super) codes: Option<[Tensor<B, 4, Int>; 2]>,
    pub(super) recent: Option<[Tensor<B, 3>; 2]>,
    pub(super) len: usize,
    /// Set when the scheme cannot serve this geometry; every call then fails with it.
    problem: Option<String>,
}

impl<B: ZackBackend + PqBackend> ZackPqCache<B> {
    pub(super) fn new(
        window: usize,
        geometry: CacheGeometry,
        parts: Result<LayerQuantizer<B>, String>,
        device: &B::Device,
    ) -> Self {
        let (parts, problem) = match parts {
            Ok(parts) => (parts, None),
            Err(problem) => {
                let config = PqConfig { subspaces: 1, nbits: 1, scope: burn_million_pq::CodebookScope::Layer };
                let parts = LayerQuantizer {
                    layout: HeadLayout { head_dim: geometry.head_dim, qk_ranks: Vec::new(), vo_ranks: Vec::new() },
                    basis: Tensor::zeros([geometry.head_dim, 0], device),
                    books: [Tensor::zeros([1, 1, 2, 1], device), Tensor::zeros([1, 1, 2, 1], device)],
                    configs: [config; 2],
                    books_bytes: 0,
                };
                (parts, Some(problem))
            }
        };
        let LayerQuantizer { layout, basis, books, configs, books_bytes } = parts;
        Self {
            window,
            geometry,
            layout,
            basis,
            books,
            configs,
            books_bytes,
            codes: None,
            recent: None,
            len: 0,
            problem,
        }
    }

    pub(super) fn check_usable(&self) -> Result<(), CacheError> {
        self.problem.as_ref().map_or(Ok(()), |p| Err(CacheError::Request(p.clone())))
    }

    /// This layer's ranks and packing.
    pub fn layout(&self) -> &HeadLayout {
        &self.layout
    }

    /// Slots held as codes.
    pub fn coded_len(&self) -> usize {
        self.codes.as_ref().map_or(0, |[k, _]| k.dims()[2])
    }

    /// Slots held in f32.
    pub fn recent_len(&self) -> usize {
        self.recent.as_ref().map_or(0, |[k, _]| k.dims()[1])
    }

    /// Encodes the oldest `n` recent slots and moves them to the codes.
    fn encode_oldest(&mut self, n: usize) {
        let Some(recent) = self.recent.take() else { return };
        let [batch, r, _] = recent[0].dims();
        let encoded: [Tensor<B, 4, Int>; 2] = std::array::from_fn(|i| {
            let width = recent[i].dims()[2];
            let oldest = recent[i].clone().narrow(1, 0, n).reshape([batch, 1, n, width]);
            B::pq_encode(oldest, &self.books[i], &self.configs[i])
        });
        self.codes = Some(match self.codes.take() {
            Some(old) => {
                let [k, v] = old;
                let [nk, nv] = encoded;
                [Tensor::cat(vec![k, nk], 2), Tensor::cat(vec![v, nv], 2)]
            }
            None => encoded,
        });
        self.recent = (r > n).then(|| recent.map(|t| t.narrow(1, n, r - n)));
    }

    /// The reduced keys `[batch, slots, Σ k_qk]` and values `[batch, slots, Σ k_vo]` attention
    /// reads: the coded slots rebuilt from their centroids, then the recent ones.
    pub fn reconstructed(&self) -> Option<(Tensor<B, 3>, Tensor<B, 3>)> {
        let batch = self.geometry.batch;
        let rebuilt = self.codes.as_ref().map(|codes| {
            std::array::from_fn::<Tensor<B, 3>, 2, _>(|i| {
                let [_, _, coded, _] = codes[i].dims();
                let width = self.configs[i].subspaces * self.books[i].dims()[3];
                reconstruct(unpack_codes(codes[i].clone(), &self.configs[i]), &self.books[i])
                    .reshape([batch, coded, width])
            })
        });
        let parts: Vec<[Tensor<B, 3>; 2]> = rebuilt.into_iter().chain(self.recent.clone()).collect();
        (!parts.is_empty()).then(|| {
            let (keys, values): (Vec<_>, Vec<_>) = parts.into_iter().map(|[k, v]| (k, v)).unzip();
            (Tensor::cat(keys, 1), Tensor::cat(values, 1))
        })
    }
}

impl<B: ZackBackend + PqBackend> KvCache<B> for ZackPqCache<B> {
    fn append(&mut self, k: Tensor<B, 4>, v: Tensor<B, 4>) -> Result<(), CacheError> {
        self.check_usable()?;
        self.geometry.check_append(k.dims(), v.dims())?;
        let new = k.dims()[2];
        let flush = slots_to_encode(self.window, self.recent_len(), new);
        if flush > 0 {
            self.encode_oldest(flush);
        }
        let reduced = [reduce_keys(k, &self.basis, &self.layout), reduce_values(v, &self.layout)];
        self.recent = Some(match self.recent.take() {
            Some([rk, rv]) => {
                let [nk, nv] = reduced;
                [append_slots(Some(rk), nk), append_slots(Some(rv), nv)]
            }
            None => reduced,
        });
        self.len += new;
        Ok(())
    }

    /// ZACK attention on the reconstructed reduced keys and values.
    fn attend(&self, q: Tensor<B, 4>, options: &AttendOptions) -> Result<Tensor<B, 4>, CacheError> {
        self.check_usable()?;
        let (k, v) = self.reconstructed().ok_or_else(|| CacheError::Request("attention over an empty cache".into()))?;
        B::zack_attention(q, self.basis.clone(), k, v, &self.layout, options)
    }

    fn len(&self) -> usize {
        self.len
    }

    /// Codes (32-bit words) and recent slots (f32) as stored, plus this layer's codebooks in f32
    /// (shared by the batch), as MILLION counts them. The basis is model state and not counted.
    fn memory_bytes(&self) -> usize {
        let count = |dims: &[usize]| dims.iter().product::<usize>();
        let codes = self.codes.as_ref().map_or(0, |[k, v]| count(&k.dims()) + count(&v.dims()));
        let recent = self.recent.as_ref().map_or(0, |[k, v]| count(&k.dims()) + count(&v.dims()));
        4 * (codes + recent) + self.books_bytes
    }
}
