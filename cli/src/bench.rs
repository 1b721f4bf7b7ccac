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

/// Timings of one operation, in microseconds.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// Median of `runs` calls, each followed by a device sync: what one step costs when nothing
    /// else is queued.
    pub median: f64,
    /// Fastest of those calls.
    pub min: f64,
    /// Slowest of those calls: a step that does rare work (a HACK block closing every Π steps)
    /// shows here, not in the median.
    pub max: f64,
    /// Median host time of those calls before their sync: the enqueueing (argument checks,
    /// allocations, uploads, launches) that the device may wait on.
    pub host: f64,
    /// Mean per call of `runs` calls queued back to back with one sync at the end: the cost per
    /// step once host work overlaps device work.
    pub pipelined: f64,
}

/// The middle value of `values` (the upper of the two middle ones for an even count).
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// [`Timing`] of `f` over `runs` calls (after 10 warm-up calls).
pub fn time<B: Backend>(device: &B::Device, runs: usize, mut f: impl FnMut()) -> Timing {
    let runs = runs.max(1);
    for _ in 0..10 {
        f();
    }
    B::sync(device).expect("sync");
    let (mut totals, mut hosts): (Vec<f64>, Vec<f64>) = (0..runs)
        .map(|_| {
            let start = Instant::now();
            f();
            let host = start.elapsed().as_secs_f64() * 1e6;
            B::sync(device).expect("sync");
            (start.elapsed().as_secs_f64() * 1e6, host)
        })
        .unzip();
    let start = Instant::now();
    for _ in 0..runs {
        f();
    }
    B::sync(device).expect("sync");
    let pipelined = start.elapsed().as_secs_f64() * 1e6 / runs as f64;
    totals.sort_by(f64::total_cmp);
    hosts.sort_by(f64::total_cmp);
    Timing { median: totals[runs / 2], min: totals[0], max: totals[runs - 1], host: hosts[runs / 2], pipelined }
}

/// The columns of a decode timing row after its shape columns: [`DECODE_COLUMNS`] heads them.
pub const DECODE_COLUMNS: &str = "median µs | min µs | host µs | pipelined µs | MB read | GB/s";

/// A decode timing's cells under [`DECODE_COLUMNS`], for a step that reads `bytes` (GB/s from
/// the median).
pub fn decode_cells(timing: Timing, bytes: f64) -> String {
    let Timing { median, min, host, pipelined, .. } = timing;
    format!("{median:.1} | {min:.1} | {host:.1} | {pipelined:.1} | {:.1} | {:.0}", bytes / 1e6, bytes / median / 1e3)
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
    #[arg(long, value_delimiter = ',', default_value = "4096,16384,32768,65536", value_parser = positive)]
    pub contexts: Vec<usize>,
    /// Batch sizes.
    #[arg(long, value_delimiter = ',', default_value = "1,8", value_parser = positive)]
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
    #[arg(long, value_delimiter = ',', default_value = "4096", value_parser = positive)]
    pub prefill_contexts: Vec<usize>,
}

/// A count of at least one (a shape of zero slots or sequences has nothing to time).
fn positive(value: &str) -> Result<usize, String> {
    match value.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

impl AttentionGrid {
    /// The cache geometry of one batch size.
    pub fn geometry(&self, batch: usize) -> CacheGeometry {
        CacheGeometry { batch, kv_heads: self.kv_heads, heads: self.heads, head_dim: self.head_dim }
    }
}
