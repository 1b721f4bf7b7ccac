//! Helpers of the GPU attention benchmarks: the shape grid, synchronized timing, differences,
//! random caches.

use std::time::Instant;

use burn::tensor::{backend::Backend, Distribution, ElementConversion, Tensor};
use burn_kvcompress::{
    backend::NdArray,
    cache::{CacheGeometry, KvCache, KvScheme},
    error::CacheError,
};
use clap::Args;

/// Median and minimum of `runs` device-synchronized calls of `f` (after 10 warm-up calls), in
/// microseconds.
pub fn time<B: Backend>(device: &B::Device, runs: usize, mut f: impl FnMut()) -> (f64, f64) {
    for _ in 0..10 {
        f();
    }
    B::sync(device).expect("sync");
    let mut times: Vec<f64> = (0..runs.max(1))
        .map(|_| {
            let start = Instant::now();
            f();
            B::sync(device).expect("sync");
            start.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    times.sort_by(f64::total_cmp);
    (times[times.len() / 2], times[0])
}

/// Max and mean absolute difference of two tensors.
pub fn diffs<B: Backend>(a: Tensor<B, 4>, b: Tensor<B, 4>) -> (f32, f32) {
    let d = (a - b).abs();
    (d.clone().max().into_scalar().elem::<f32>(), d.mean().into_scalar().elem::<f32>())
}

/// Max and mean absolute difference of a tensor of any backend from one of the ndarray
/// reference (the first is copied to the host).
pub fn diffs_from_cpu<B: Backend>(got: Tensor<B, 4>, want: Tensor<NdArray, 4>) -> (f32, f32) {
    let got = Tensor::<NdArray, 4>::from_data(got.into_data().convert::<f32>(), &want.device());
    diffs(got, want)
}

/// A cache of `scheme` holding `len` slots of N(0, 1) keys and values, appended as a prefill
/// would: in slices of at most 4096 slots.
pub fn filled_cache<B: Backend, S: KvScheme<B>>(
    scheme: &S,
    geometry: CacheGeometry,
    len: usize,
    device: &B::Device,
) -> Result<S::Cache, CacheError> {
    let mut cache = scheme.new_cache(0, geometry, device);
    for start in (0..len).step_by(4096) {
        let n = 4096.min(len - start);
        let shape = [geometry.batch, geometry.kv_heads, n, geometry.head_dim];
        let k = Tensor::<B, 4>::random(shape, Distribution::Normal(0.0, 1.0), device);
        let v = Tensor::<B, 4>::random(shape, Distribution::Normal(0.0, 1.0), device);
        cache.append(k, v)?;
    }
    Ok(cache)
}

/// The shapes an attention benchmark times, and how often.
#[derive(Args, Debug, Clone)]
pub struct AttentionGrid {
    /// Context lengths (cached slots) to time decode at.
    #[arg(long, value_delimiter = ',', default_value = "4096,16384,32768,65536")]
    pub contexts: Vec<usize>,
    /// Batch sizes.
    #[arg(long, value_delimiter = ',', default_value = "1,8")]
    pub batches: Vec<usize>,
    /// Query heads.
    #[arg(long, default_value_t = 32)]
    pub heads: usize,
    /// Key/value heads.
    #[arg(long, default_value_t = 8)]
    pub kv_heads: usize,
    /// Head dimension.
    #[arg(long, default_value_t = 128)]
    pub head_dim: usize,
    /// Timed runs per point (after 10 warm-up runs); the median is reported.
    #[arg(long, default_value_t = 100)]
    pub runs: usize,
    /// Context lengths to time prefill attention at (batch 1; queries = all slots).
    #[arg(long, value_delimiter = ',', default_value = "4096")]
    pub prefill_contexts: Vec<usize>,
}

impl AttentionGrid {
    /// The cache geometry of one batch size.
    pub fn geometry(&self, batch: usize) -> CacheGeometry {
        CacheGeometry { batch, kv_heads: self.kv_heads, heads: self.heads, head_dim: self.head_dim }
    }
}
