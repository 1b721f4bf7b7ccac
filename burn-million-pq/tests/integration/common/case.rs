//! Attention scenarios run against attention over host-reconstructed K/V.

use burn::tensor::{backend::Backend, ElementConversion, Tensor, TensorData};
use burn_kvcompress::cache::{attention_reference, AttendOptions, CacheGeometry, KvCache, KvScheme};
use burn_million_pq::{cache::PqCache, kernels::PqBackend, CodebookScope, PqConfig};

use super::{random_values, reconstruct_host, scheme};

/// Where the references run.
type Host = burn::backend::NdArray<f32>;

/// One attention scenario.
pub struct Case {
    pub config: PqConfig,
    pub head_dim: usize,
    pub kv_heads: usize,
    pub group: usize,
    pub batch: usize,
    pub window: usize,
    pub appends: &'static [usize],
    pub q_len: usize,
    pub key_start: Vec<usize>,
    pub sliding: Option<usize>,
}

/// A tensor on the default device.
pub fn tensor<B: Backend>(values: Vec<f32>, shape: [usize; 4]) -> Tensor<B, 4> {
    Tensor::from_data(TensorData::new(values, shape), &Default::default())
}

/// Slots `[from, to)` of `x: [batch, heads, n, d]` (row-major) as a flat vector.
pub fn slots(x: &[f32], shape: [usize; 4], from: usize, to: usize) -> Vec<f32> {
    let [b, h, n, d] = shape;
    (0..b * h).flat_map(|bh| x[(bh * n + from) * d..(bh * n + to) * d].iter().copied()).collect()
}

/// The precision of the tables a decode kernel may run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tables {
    /// Lookup table and codebooks in f32 (the reference, the scalar kernel).
    F32,
    /// Lookup table and value codebooks in f16, a code word's lookups added in f16 and the
    /// weights in f16 (the tensor-core kernel, on CUDA).
    F16,
}

/// Returns the max difference from the expected output, its bound for attention on `tables`, and
/// the max difference from attention over the unquantized K/V (which must be far larger when
/// slots are coded).
pub fn run<B: PqBackend>(case: &Case, seed: u64, tables: Tables) -> (f32, f32, f32) {
    let Case { config, head_dim: d, kv_heads, group, batch, window, .. } = *case;
    let heads = kv_heads * group;
    let scheme = scheme(config, kv_heads, d, window, seed);
    let geometry = CacheGeometry { batch, kv_heads, heads, head_dim: d };
    let mut cache: PqCache<B> = scheme.new_cache(0, geometry, &Default::default());
    let total: usize = case.appends.iter().sum();
    let kv_shape = [batch, kv_heads, total, d];
    let (k, v) =
        (random_values(kv_shape.iter().product(), seed + 10), random_values(kv_shape.iter().product(), seed + 11));
    let mut at = 0;
    for &n in case.appends {
        let piece = |x: &[f32]| tensor(slots(x, kv_shape, at, at + n), [batch, kv_heads, n, d]);
        cache.append(piece(&k), piece(&v)).unwrap();
        at += n;
    }
    let last = *case.appends.last().unwrap();
    let recent = total.min(window.max(last));
    assert_eq!((cache.coded_len(), cache.recent_len(), cache.len()), (total - recent, recent, total));

    // Expected: coded slots reconstructed on the host, recent ones as they are.
    let coded = total - recent;
    let expect = |x: &[f32], kind: usize| -> Vec<f32> {
        let old = reconstruct_host(&slots(x, kv_shape, 0, coded), [batch, kv_heads, coded, d], &scheme.codebooks, kind);
        let new = slots(x, kv_shape, coded, total);
        (0..batch * kv_heads)
            .flat_map(|bh| {
                old[bh * coded * d..(bh + 1) * coded * d].iter().chain(&new[bh * recent * d..(bh + 1) * recent * d])
            })
            .copied()
            .collect()
    };
    let (k_hat, v_hat) = (expect(&k, 0), expect(&v, 1));
    let q_shape = [batch, heads, case.q_len, d];
    let q = random_values(q_shape.iter().product(), seed + 12);
    let options =
        AttendOptions { scale: 1.0 / (d as f32).sqrt(), key_start: case.key_start.clone(), window: case.sliding };
    let got = cache.attend(tensor(q.clone(), q_shape), &options).unwrap();
    let got = Tensor::<Host, 4>::from_data(got.into_data(), &Default::default());
    // The references run on ndarray in f32: a GPU backend may run f32 matmuls in TF32 (CUDA's
    // tensor cores), outside the bound below.
    let reference = |k: &[f32], v: &[f32]| {
        attention_reference(
            tensor::<Host>(q.clone(), q_shape),
            tensor(k.to_vec(), kv_shape),
            tensor(v.to_vec(), kv_shape),
            &options,
        )
        .unwrap()
    };
    let diff = (got.clone() - reference(&k_hat, &v_hat)).abs().max().into_scalar();
    let raw_diff = (got - reference(&k, &v)).abs().max().into_scalar();

    // Bound: the table sums a score's d products in another order than the direct dot product,
    // so each score differs by at most γ_(d+1) Σ|q_i k_i| (u = 2^-24) times the scale; a softmax
    // input error ε moves the output by at most 2ε max|v|. Both sides also round the softmax
    // and the P·V sum: (total + d) u max|v| each, counted twice.
    let u = f32::EPSILON / 2.0;
    let max_v = v_hat.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    let mut max_abs_dot = 0.0f32;
    for qv in q.chunks_exact(d) {
        for kv in k_hat.chunks_exact(d) {
            max_abs_dot = max_abs_dot.max(qv.iter().zip(kv).map(|(a, b)| (a * b).abs()).sum());
        }
    }
    let mut bound =
        2.0 * options.scale * (d + 1) as f32 * u * max_abs_dot * max_v + 4.0 * (total + d) as f32 * u * max_v;
    if tables == Tables::F16 {
        // f16 (unit roundoff 2^-11): each table entry is rounded and a code word's `32 / nbits`
        // entries are added in f16, so a score moves by at most `(32 / nbits + 1) · u16 ·
        // scale · Σ|q_i k_i|` (first order), and the output by twice that times max|v|; the
        // value codebooks (or recent values) and the weights are rounded once each, `u16 ·
        // max|v|` apiece; a third `u16 · max|v|` covers the second-order terms.
        let u16 = 2f32.powi(-11);
        let per_word = (32 / config.nbits as usize) as f32;
        bound += 2.0 * options.scale * (per_word + 1.0) * u16 * max_abs_dot * max_v + 3.0 * u16 * max_v;
    }
    (diff.elem(), bound, raw_diff.elem())
}

/// A config.
pub fn config(subspaces: usize, nbits: u8, scope: CodebookScope) -> PqConfig {
    PqConfig { subspaces, nbits, scope }
}

/// Scenarios every backend runs.
pub fn cases() -> Vec<Case> {
    use CodebookScope::{Layer, LayerHead};
    vec![
        // Window 0: every older slot coded; decode steps; GQA 2; left padding.
        Case {
            config: config(8, 4, Layer),
            head_dim: 16,
            kv_heads: 2,
            group: 2,
            batch: 2,
            window: 0,
            appends: &[7, 1, 1, 1],
            q_len: 1,
            key_start: vec![0, 2],
            sliding: None,
        },
        // Per-head codebooks, 6-bit codes (5 per word), GQA 3, window 5.
        Case {
            config: config(8, 6, LayerHead),
            head_dim: 32,
            kv_heads: 2,
            group: 3,
            batch: 1,
            window: 5,
            appends: &[13, 1, 1, 1, 1, 1, 1],
            q_len: 1,
            key_start: vec![0],
            sliding: None,
        },
        // SmolLM2's shape: 8-bit codes of 2 channels; a chunk of 9 queries over codes + window, sliding window.
        Case {
            config: config(32, 8, Layer),
            head_dim: 64,
            kv_heads: 3,
            group: 3,
            batch: 2,
            window: 4,
            appends: &[20, 9],
            q_len: 9,
            key_start: vec![3, 0],
            sliding: Some(6),
        },
        // One channel per subspace (scalar codebooks), window longer than the context.
        Case {
            config: config(8, 3, LayerHead),
            head_dim: 8,
            kv_heads: 1,
            group: 4,
            batch: 1,
            window: 64,
            appends: &[3, 1, 1],
            q_len: 1,
            key_start: vec![0],
            sliding: None,
        },
        // 12-bit codes (2 per word), an odd number of subspaces' words.
        Case {
            config: config(3, 12, Layer),
            head_dim: 12,
            kv_heads: 2,
            group: 1,
            batch: 1,
            window: 2,
            appends: &[30, 3],
            q_len: 3,
            key_start: vec![0],
            sliding: None,
        },
    ]
}
