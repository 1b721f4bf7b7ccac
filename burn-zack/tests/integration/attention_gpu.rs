//! The ZACK attention kernels, decode and prefill, against the plain-tensor reference on wgpu
//! (lavapipe in CI) or CUDA, with uneven per-head ranks, GQA, batch, padding and sliding windows,
//! across the decode schedule's splits and the prefill's balanced tiles.
#![cfg(any(feature = "wgpu", feature = "cuda"))]

use crate::common::{host, uniform, Cpu, Gpu};
use burn::tensor::{backend::Backend, f16, FloatDType, Tensor, TensorData};
use burn_kvcompress::cache::AttendOptions;
use burn_zack::{
    cache::HeadLayout,
    kernels::{attention::prefill_geometry, ZackBackend},
};

/// f32's unit roundoff, 2^-24.
const F32_ROUNDOFF: f64 = f32::EPSILON as f64 / 2.0;
/// The unit roundoff of an f32 matmul's inputs on the device: CUDA runs f32 matmuls on tensor
/// cores in TF32 (10 stored mantissa bits, 2^-11; `cubek-matmul`'s `adjust_dtypes`), lavapipe in f32.
#[cfg(feature = "cuda")]
const DEVICE_MATMUL_ROUNDOFF: f64 = 1.0 / 2048.0;
#[cfg(not(feature = "cuda"))]
const DEVICE_MATMUL_ROUNDOFF: f64 = F32_ROUNDOFF;
/// f16's unit roundoff, 2^-11.
const F16_ROUNDOFF: f64 = 1.0 / 2048.0;

/// Upper bounds on the unit roundoffs `(score_u, operand_u)` of the decode kernel that runs a
/// case of `group` query heads per KV head of `head_dim` channels with a cache of `dtype`: CUDA's
/// tensor-core kernel (f16 caches, groups up to 8, up to 128 channels, loads of at least 2
/// elements: `burn_zack::kernels::attention::mma_geometry`; elsewhere these bounds are loose)
/// rounds the reduced queries and the softmax numerators to f16 (`operand_u`) and accumulates
/// products in f32 on tensor cores, whose additions may truncate (`2 · 2^-24`); the scalar
/// kernel computes in f32 throughout.
fn decode_roundoffs(group: usize, head_dim: usize, dtype: FloatDType) -> (f64, f64) {
    let tensor_cores = cfg!(feature = "cuda") && dtype == FloatDType::F16 && group <= 8 && head_dim <= 128;
    match tensor_cores {
        true => (2.0 * F32_ROUNDOFF, F16_ROUNDOFF),
        false => (F32_ROUNDOFF, 0.0),
    }
}

fn on<B: Backend, const D: usize>(values: &[f32], shape: [usize; D]) -> Tensor<B, D> {
    Tensor::from_data(TensorData::new(values.to_vec(), shape), &Default::default())
}

/// One attention call's inputs: `q_len` query slots (the last ones) over `len` cached slots.
struct Case {
    layout: HeadLayout,
    batch: usize,
    heads: usize,
    len: usize,
    q_len: usize,
    q: Vec<f32>,
    basis: Vec<f32>,
    keys: Vec<f32>,
    values: Vec<f32>,
    options: AttendOptions,
}

impl Case {
    fn new(
        layout: HeadLayout,
        group: usize,
        batch: usize,
        [len, q_len]: [usize; 2],
        window: Option<usize>,
        seed: u64,
    ) -> Self {
        let (d, heads) = (layout.head_dim, layout.kv_heads() * group);
        Self {
            q: uniform(batch * heads * q_len * d, seed),
            basis: uniform(d * layout.key_width(), seed + 1),
            keys: uniform(batch * len * layout.key_width(), seed + 2),
            values: uniform(batch * len * layout.value_width(), seed + 3),
            options: AttendOptions {
                scale: 1.0 / (d as f32).sqrt(),
                key_start: (0..batch).map(|b| (b * 3).min(len - 1)).collect(),
                window,
            },
            layout,
            batch,
            heads,
            len,
            q_len,
        }
    }

    /// The same case with keys and values rounded to f16 (what f16 storage holds).
    fn rounded_to_f16(mut self) -> Self {
        for x in self.keys.iter_mut().chain(&mut self.values) {
            *x = f16::from_f32(*x).to_f32();
        }
        self
    }

    /// Attention on backend `B`, with the keys and values held as `dtype`.
    fn run<B: ZackBackend>(&self, dtype: FloatDType) -> Vec<f32> {
        let (d, kw, vw) = (self.layout.head_dim, self.layout.key_width(), self.layout.value_width());
        let out = B::zack_attention(
            on(&self.q, [self.batch, self.heads, self.q_len, d]),
            on(&self.basis, [d, kw]),
            on(&self.keys, [self.batch, self.len, kw]).cast(dtype),
            on(&self.values, [self.batch, self.len, vw]).cast(dtype),
            &self.layout,
            &self.options,
        );
        host(out.unwrap())
    }

    /// A derived bound on |kernel − reference|. Both compute in f32 in different orders. The
    /// reduced query `q̃_j = Σ_c q_c R_cj` and the score `Σ_j q̃_j k̃_j` carry at most
    /// `γ_(d+k+2) · scale · Σ_j (Σ_c |q_c||R_cj|)|k̃_j|` error (γ_n = n·u/(1 − n·u), u = 2^-24);
    /// a score error δ moves the softmax-weighted output by at most `(e^(2δ) − 1) · max|v|`; the
    /// exponentials, the split sums and the merge add a few ulps per slot: `8 · len · u · max|v|`.
    /// `score_u` is the unit roundoff of the device's score products: `u` for the kernel, the
    /// device's matmul roundoff ([`DEVICE_MATMUL_ROUNDOFF`]) where the reference runs there.
    /// Where the kernel rounds `q̃` and the softmax numerators `p` to a format of unit roundoff
    /// `operand_u` (0: it does not), the score moves by at most `operand_u · |q̃|·|k̃|` more, and
    /// the output, whose mass is summed from the unrounded `p`, by `operand_u · max|v|`.
    fn bound(&self, score_u: f64, operand_u: f64) -> f32 {
        let (layout, d, kw) = (&self.layout, self.layout.head_dim, self.layout.key_width());
        let u = F32_ROUNDOFF;
        let gamma = |n: usize| n as f64 * score_u / (1.0 - n as f64 * score_u);
        let group = self.heads / layout.kv_heads();
        let mut delta: f64 = 0.0;
        for b in 0..self.batch {
            for h in 0..self.heads {
                let cols = layout.key_columns(h / group);
                for qi in 0..self.q_len {
                    let q = &self.q[((b * self.heads + h) * self.q_len + qi) * d..];
                    let q_abs: Vec<f64> = cols
                        .clone()
                        .map(|j| (0..d).map(|c| f64::from(q[c].abs() * self.basis[c * kw + j].abs())).sum())
                        .collect();
                    for s in 0..self.len {
                        let row = &self.keys[(b * self.len + s) * kw..];
                        let dot: f64 = cols.clone().zip(&q_abs).map(|(j, qa)| qa * f64::from(row[j].abs())).sum();
                        let relative = gamma(d + cols.len() + 2) + operand_u * (1.0 + gamma(d + 1));
                        delta = delta.max(relative * f64::from(self.options.scale) * dot);
                    }
                }
            }
        }
        let v_max = f64::from(self.values.iter().fold(0.0f32, |m, v| m.max(v.abs())));
        (((2.0 * delta).exp() - 1.0) * v_max + (8.0 * self.len as f64 * u + operand_u) * v_max) as f32
    }
}

#[test]
fn decode_kernel_equals_the_reference_on_uneven_heads() {
    let layout =
        |d, qk: &[usize], vo: &[usize]| HeadLayout { head_dim: d, qk_ranks: qk.to_vec(), vo_ranks: vo.to_vec() };
    // (layout, group, batch, len, window, whether the kernel takes it)
    let cases = [
        (layout(16, &[16], &[16]), 1, 1, 1, None, true),
        (layout(16, &[3, 16], &[16, 5]), 2, 2, 7, None, true),
        (layout(64, &[1, 64, 20], &[64, 1, 33]), 3, 2, 65, None, true),
        (layout(64, &[8, 64, 32], &[8, 64, 17]), 3, 1, 300, Some(100), true),
        (layout(32, &[32, 9], &[4, 32]), 4, 2, 129, None, true),
        (layout(128, &[64, 128], &[32, 128]), 4, 1, 257, None, true),
        (layout(64, &[2, 2], &[2, 2]), 1, 3, 600, Some(7), true),
        // Longer splits (72 000 slots in all: 128-slot base splits), many tiles per task.
        (layout(64, &[64, 10, 33], &[7, 64, 40]), 3, 8, 3000, Some(2500), true),
        // Gemma's 256 channels (16-slot tiles), and 8 query heads per KV head.
        (layout(256, &[256, 100], &[256, 3]), 1, 1, 100, None, true),
        (layout(128, &[128, 50], &[90, 128]), 8, 2, 70, None, true),
        // Offsets and ranks multiples of 8: the kernel loads whole vectors (4 or 8 elements);
        // several scoring rounds per task, 8 heads per KV head (4-channel blocks), a window.
        (layout(128, &[64, 64], &[64, 64]), 4, 2, 1100, None, true),
        (layout(64, &[32, 64, 16], &[16, 32, 64]), 3, 2, 700, Some(300), true),
        (layout(128, &[64, 128], &[128, 32]), 8, 1, 500, None, true),
        // 16 query heads per KV head: 2-channel blocks, few score lanes per round.
        (layout(128, &[128, 40], &[24, 128]), 16, 1, 90, None, true),
        // 32 query heads per KV head: beyond the kernel, the reference runs.
        (layout(16, &[16], &[9]), 32, 1, 40, None, false),
        // The benchmark's uneven ranks, 8 KV heads per cube.
        (layout(128, &BENCH_KEY_RANKS, &BENCH_VALUE_RANKS), 4, 2, 700, None, true),
    ];
    for (i, (layout, group, batch, len, window, kernel)) in cases.into_iter().enumerate() {
        let case = Case::new(layout, group, batch, [len, 1], window, 100 * i as u64);
        let head_dim = case.layout.head_dim;
        let roundoffs = |dtype| match kernel {
            true => decode_roundoffs(group, head_dim, dtype),
            false => (DEVICE_MATMUL_ROUNDOFF, 0.0),
        };
        check(&case, FloatDType::F32, roundoffs(FloatDType::F32), &format!("case {i}"));
        // f16 storage: the kernel stages f16 elements; the reference sees the same rounded values.
        if i % 2 == 1 || (10..14).contains(&i) {
            check(&case.rounded_to_f16(), FloatDType::F16, roundoffs(FloatDType::F16), &format!("case {i}, f16"));
        }
    }
    // On CUDA, steps long enough for the TMA kernel (8 rounds per cube and more): 34 000 slots
    // dealt out to 132 splits on an H100 (8 or 9 rounds each), all 8 KV heads per cube (8 landed
    // blocks of keys and of values); the last head's products read 8 columns past each run. Then
    // wider ranks, 4 KV heads per cube (8 do not fit the shared memory) in 66 splits (17 rounds
    // each): the narrower group lands as many blocks as the wider (7 of keys, 8 of values), the
    // next group's columns past its own run.
    if cfg!(feature = "cuda") {
        let cases = [
            (layout(128, &BENCH_KEY_RANKS, &BENCH_VALUE_RANKS), "TMA case, f16"),
            (layout(128, &WIDE_KEY_RANKS, &WIDE_VALUE_RANKS), "TMA case, two groups, f16"),
        ];
        for (layout, name) in cases {
            let case = Case::new(layout, 4, 1, [34_000, 1], None, 1600);
            check(&case.rounded_to_f16(), FloatDType::F16, decode_roundoffs(4, 128, FloatDType::F16), name);
        }
    }
}

/// Uneven ranks as the benchmark spreads them (mean 64 of 128), the last head's not a multiple
/// of 16.
const BENCH_KEY_RANKS: [usize; 8] = [32, 40, 48, 56, 72, 80, 96, 88];
/// Their value ranks.
const BENCH_VALUE_RANKS: [usize; 8] = [40, 32, 56, 48, 80, 72, 96, 88];

/// Uneven ranks with a mean of 96: in groups of 4 KV heads, key runs of 320 and 448 columns (5
/// and 7 blocks), each group's last rank not a multiple of 16, so that its last products read 8
/// columns past its run.
const WIDE_KEY_RANKS: [usize; 8] = [64, 72, 80, 104, 88, 112, 128, 120];
/// Their value ranks: runs of 320 and 464 columns (5 and 8 blocks).
const WIDE_VALUE_RANKS: [usize; 8] = [64, 72, 80, 104, 112, 104, 128, 120];

/// Score of the spike slots in [`decode_kernel_follows_a_score_that_rises_within_a_split`]:
/// more than the tensor-core kernel's rescale margin (8) above the other slots' scores.
const SPIKE_SCORE: f32 = 9.0;

#[test]
fn decode_kernel_follows_a_score_that_rises_within_a_split() {
    // 8 full-rank KV heads of 128 channels, one query head each: on an H100 the tensor-core
    // kernels take 4 KV heads per cube (8 do not fit their shared memory) and split each group's
    // slots 66 ways: 8192 slots into splits of 128 (4 rounds, the `wmma` kernel), on CUDA also
    // 20 480 slots whose 640 rounds are dealt out in turn (9 or 10 rounds a split, the TMA
    // kernel). Slot `s` scores about 0 (keys scaled by 0.01), except every 128th from slot 100
    // (every fourth round), whose key is `SPIKE_SCORE · q̃ / |q̃|²`: a split's reference max moves
    // by more than its margin after up to 100 slots (`wmma`) or a round (TMA: the splits whose
    // first round has no spike and whose second has) whose mass (e^-9 each) the rescale must keep.
    let lens: &[usize] = if cfg!(feature = "cuda") { &[8192, 20_480] } else { &[8192] };
    for &len in lens {
        let layout = HeadLayout { head_dim: 128, qk_ranks: vec![128; 8], vo_ranks: vec![128; 8] };
        let mut case = Case::new(layout, 1, 1, [len, 1], None, 9100);
        let (d, kw, scale) = (case.layout.head_dim, case.layout.key_width(), case.options.scale);
        for x in &mut case.keys {
            *x *= 0.01;
        }
        for h in 0..case.heads {
            let columns = case.layout.key_columns(h);
            let reduced: Vec<f32> = columns
                .clone()
                .map(|j| scale * (0..d).map(|c| case.q[h * d + c] * case.basis[c * kw + j]).sum::<f32>())
                .collect();
            let norm2: f32 = reduced.iter().map(|x| x * x).sum();
            for slot in (100..case.len).step_by(128) {
                for (j, x) in columns.clone().zip(&reduced) {
                    case.keys[slot * kw + j] = SPIKE_SCORE * x / norm2;
                }
            }
        }
        let roundoffs = decode_roundoffs(1, 128, FloatDType::F16);
        check(&case.rounded_to_f16(), FloatDType::F16, roundoffs, &format!("rising scores, {len} slots, f16"));
    }
}

#[test]
fn prefill_kernel_equals_the_reference_on_uneven_heads() {
    let layout =
        |d, qk: &[usize], vo: &[usize]| HeadLayout { head_dim: d, qk_ranks: qk.to_vec(), vo_ranks: vo.to_vec() };
    // (layout, group, batch, [len, q_len], window): all slots as queries, or a chunk of queries
    // after cached slots; tiles of 1 to 16 rows (5 query slots of 3 heads), blocks of 8 to 32
    // slots, causal edges inside a block.
    let cases = [
        (layout(64, &[8, 64, 32], &[8, 64, 17]), 3, 2, [70, 70], None),
        (layout(128, &[64, 128], &[32, 128]), 4, 1, [100, 37], None),
        (layout(32, &[32, 9], &[4, 32]), 4, 2, [45, 45], Some(10)),
        (layout(16, &[3, 16], &[16, 5]), 2, 2, [33, 20], None),
        (layout(128, &[128, 50], &[90, 128]), 8, 1, [40, 40], None),
        (layout(64, &[64, 10], &[7, 64]), 16, 1, [20, 20], None),
        // Gemma's 256 channels: 8-slot blocks.
        (layout(256, &[256, 100], &[256, 3]), 1, 1, [30, 30], None),
        (layout(64, &[32, 64, 16], &[16, 32, 64]), 1, 3, [50, 50], Some(7)),
    ];
    for (i, (layout, group, batch, lens, window)) in cases.into_iter().enumerate() {
        // The kernel, not the reference, runs for these shapes.
        assert!(prefill_geometry(group, layout.head_dim).is_some(), "prefill case {i}");
        let case = Case::new(layout, group, batch, lens, window, 7000 + 100 * i as u64);
        check(&case, FloatDType::F32, (F32_ROUNDOFF, 0.0), &format!("prefill case {i}"));
        if i % 2 == 0 {
            check(&case.rounded_to_f16(), FloatDType::F16, (F32_ROUNDOFF, 0.0), &format!("prefill case {i}, f16"));
        }
    }
}

/// The kernel on the GPU with keys and values as `dtype` against the reference on ndarray (f32),
/// within [`Case::bound`] for the unit roundoffs `(score_u, operand_u)`.
fn check(case: &Case, dtype: FloatDType, (score_u, operand_u): (f64, f64), name: &str) {
    let (kernel, reference) = (case.run::<Gpu>(dtype), case.run::<Cpu>(FloatDType::F32));
    let tolerance = case.bound(score_u, operand_u);
    let diff = kernel.iter().zip(&reference).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    assert!(diff <= tolerance, "{name}: kernel differs by {diff} > bound {tolerance}");
    // Zero past each head's value rank, exactly.
    let (d, group) = (case.layout.head_dim, case.heads / case.layout.kv_heads());
    for (index, x) in kernel.iter().enumerate() {
        let head = (index / (case.q_len * d)) % case.heads;
        if index % d >= case.layout.vo_ranks[head / group] {
            assert_eq!(*x, 0.0, "{name}: padding at {index}");
        }
    }
    eprintln!("{name}: max diff {diff:.2e} (bound {tolerance:.2e})");
}
