//! The flash-attention kernel (tensor cores, f16 keys and values) against exact attention in f64
//! on the same f16 keys and values, within the bound its documentation derives, for awkward
//! shapes: prompts (partial query blocks and key tiles, a cache longer than the prompt) and
//! decode steps (the keys split and merged, GQA groups of 1 to 20 heads), left padding, sliding
//! windows, head dimensions from 16 to 128, key and value buffers with unfilled room after the
//! cache's slots (NaN there, which any read of them would spread). On CUDA (an H200 or H100) the kernel
//! must launch; on a device without warp matrix instructions (lavapipe in CI) it must decline, and
//! the f16 cache then takes the f32 path (`dense_half.rs` checks that one).
#![cfg(any(feature = "wgpu", feature = "cuda"))]

use crate::common::{lcg_uniform, to_vec as host, Gpu};
use burn::tensor::{DType, FloatDType, Tensor, TensorData};
use burn_kvcompress::{
    cache::{AttendOptions, CacheGeometry, HalfDenseScheme, KvCache, KvScheme},
    kernels::{flash_attention, flash_geometry},
};

/// f16's unit roundoff.
const U_HALF: f64 = 1.0 / 2048.0;
/// f32's unit roundoff.
const U_F32: f64 = 1.0 / (1u64 << 24) as f64;
/// Half the spacing of f16's subnormals: the absolute error of rounding a tiny value to f16.
const HALF_SUBNORMAL: f64 = 1.0 / (1u64 << 25) as f64;

/// One attention call's shapes and options.
struct Case {
    batch: usize,
    heads: usize,
    kv_heads: usize,
    q_len: usize,
    total_len: usize,
    head_dim: usize,
    key_start: Vec<usize>,
    window: Option<usize>,
    /// Spread of the queries: larger makes the softmax peakier.
    query_scale: f32,
    /// Unfilled slots after `total_len` in the key and value buffers.
    room: usize,
}

impl Case {
    fn options(&self) -> AttendOptions {
        let scale = 1.0 / (self.head_dim as f32).sqrt();
        AttendOptions { scale, key_start: self.key_start.clone(), window: self.window }
    }

    /// Slots of the key and value buffers.
    fn capacity(&self) -> usize {
        self.total_len + self.room
    }

    /// Queries (f32) and f16 key and value buffers on the device, `capacity()` slots each.
    fn operands(&self, seed: u64) -> (Tensor<Gpu, 4>, Tensor<Gpu, 4>, Tensor<Gpu, 4>) {
        let device = Default::default();
        let q_shape = [self.batch, self.heads, self.q_len, self.head_dim];
        let kv_shape = [self.batch, self.kv_heads, self.total_len, self.head_dim];
        let tensor = |shape: [usize; 4], seed: u64, spread: f32| {
            let values = lcg_uniform(shape.iter().product(), seed).into_iter().map(|x| x * spread).collect::<Vec<_>>();
            Tensor::<Gpu, 4>::from_data(TensorData::new(values, shape), &device)
        };
        let room = [self.batch, self.kv_heads, self.room, self.head_dim];
        let buffer = |filled: Tensor<Gpu, 4>| match self.room {
            0 => filled.cast(FloatDType::F16),
            _ => Tensor::cat(vec![filled, Tensor::full(room, f32::NAN, &device)], 2).cast(FloatDType::F16),
        };
        let q = tensor(q_shape, seed, self.query_scale);
        let k = buffer(tensor(kv_shape, seed + 1, 1.0));
        let v = buffer(tensor(kv_shape, seed + 2, 1.0));
        (q, k, v)
    }

    /// Checks the kernel's output `out` against exact attention on `q` and the f16 key and value
    /// buffers `k`, `v` (as f32 on the host), row by row within the documented bound.
    fn check(&self, q: &[f32], k: &[f32], v: &[f32], out: &[f32]) {
        let (d, options) = (self.head_dim, self.options());
        let scale = options.scale as f64;
        let group = self.heads / self.kv_heads;
        for b in 0..self.batch {
            for h in 0..self.heads {
                let kv = b * self.kv_heads + h / group;
                let key = |j: usize| &k[(kv * self.capacity() + j) * d..][..d];
                let value = |j: usize| &v[(kv * self.capacity() + j) * d..][..d];
                for i in 0..self.q_len {
                    let slot = self.total_len - self.q_len + i;
                    let q_row = &q[((b * self.heads + h) * self.q_len + i) * d..][..d];
                    let seen: Vec<usize> = (0..self.total_len).filter(|&j| options.allows(b, slot, j)).collect();
                    let scores: Vec<f64> = seen
                        .iter()
                        .map(|&j| scale * q_row.iter().zip(key(j)).map(|(a, b)| *a as f64 * *b as f64).sum::<f64>())
                        .collect();
                    let top = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let weights: Vec<f64> = scores.iter().map(|s| (s - top).exp()).collect();
                    let mass: f64 = weights.iter().sum();
                    // The bound: queries rounded to f16 move a score by at most δ, the weights by
                    // e^(±2δ); weights rounded to f16 and the f32 sums add the rest.
                    let delta = seen
                        .iter()
                        .map(|&j| {
                            let terms = q_row.iter().zip(key(j));
                            terms
                                .map(|(a, b)| (U_HALF * (scale * *a as f64).abs() + HALF_SUBNORMAL) * (*b as f64).abs())
                                .sum::<f64>()
                        })
                        .fold(0.0, f64::max);
                    let v_max = seen.iter().flat_map(|&j| value(j)).fold(0.0f64, |m, x| m.max(x.abs() as f64));
                    let bound =
                        ((2.0 * delta).exp() - 1.0 + U_HALF + (self.total_len + d) as f64 * U_F32) * v_max + 1e-7;
                    for c in 0..d {
                        let exact: f64 =
                            seen.iter().zip(&weights).map(|(&j, w)| w * value(j)[c] as f64).sum::<f64>() / mass;
                        let got = out[((b * self.heads + h) * self.q_len + i) * d + c] as f64;
                        assert!(
                            (got - exact).abs() <= bound,
                            "{}: batch {b} head {h} query {i} channel {c}: {got} vs {exact} (bound {bound:e})",
                            self.name()
                        );
                    }
                }
            }
        }
    }

    fn name(&self) -> String {
        format!(
            "{}x{}/{} heads, {} of {} slots (room for {}), dim {}, starts {:?}, window {:?}",
            self.batch,
            self.heads,
            self.kv_heads,
            self.q_len,
            self.total_len,
            self.room,
            self.head_dim,
            self.key_start,
            self.window
        )
    }
}

fn cases() -> Vec<Case> {
    let case = |batch, heads, kv_heads, q_len, total_len, head_dim, key_start: &[usize], window, query_scale| Case {
        batch,
        heads,
        kv_heads,
        q_len,
        total_len,
        head_dim,
        key_start: key_start.to_vec(),
        window,
        query_scale,
        room: 0,
    };
    let with_room = |case: Case, room| Case { room, ..case };
    vec![
        // One whole query block over one key tile.
        case(1, 2, 1, 64, 64, 64, &[0], None, 1.0),
        // Partial blocks and tiles, a GQA group of 3, left padding on one row, peaky scores.
        case(2, 6, 2, 70, 70, 64, &[0, 37], None, 4.0),
        // A prompt appended to a cache of 130 slots, with a window that skips whole tiles, in
        // buffers with room for 26 more.
        with_room(case(1, 4, 4, 100, 230, 128, &[0], Some(50), 2.0), 26),
        // The smallest head; padding before the first query.
        case(1, 3, 1, 17, 17, 16, &[5], None, 1.0),
        // A head of 80 channels (not a power of two), a window wider than the cache.
        case(1, 2, 2, 129, 129, 80, &[0], Some(200), 1.0),
        // Decode steps: Llama-3-8B's heads over a window; a group of 3 with padding; a cache
        // shorter than a tile; a group of 20 (two blocks of rows); a group of 16 over many tiles.
        // The first two in buffers with room (a tile's worth and more).
        with_room(case(1, 32, 8, 1, 1000, 128, &[0], Some(300), 2.0), 24),
        with_room(case(2, 6, 2, 1, 300, 64, &[0, 37], None, 4.0), 212),
        case(1, 9, 3, 1, 5, 64, &[0], None, 1.0),
        case(1, 20, 1, 1, 70, 16, &[3], None, 1.0),
        case(1, 16, 1, 1, 2100, 32, &[0], None, 1.0),
    ]
}

#[test]
fn flash_attention_stays_within_its_bound_of_exact_attention() {
    let device = Default::default();
    let properties = Tensor::<Gpu, 1>::zeros([1], &device).into_primitive().tensor().client.properties().clone();
    for (n, case) in cases().into_iter().enumerate() {
        let (q, k, v) = case.operands(10 * n as u64);
        let group = case.heads / case.kv_heads;
        let geometry = flash_geometry(case.q_len, case.head_dim, group, (DType::F32, DType::F16), &properties);
        let out = flash_attention(q.clone(), k.clone(), v.clone(), case.total_len, &case.options());
        let Some(out) = out else {
            assert!(geometry.is_none(), "{}: the kernel applies but did not launch", case.name());
            if cfg!(feature = "cuda") {
                panic!("{}: the kernel must launch on the CUDA test devices", case.name());
            }
            continue;
        };
        assert_eq!(out.dims(), [case.batch, case.heads, case.q_len, case.head_dim]);
        let (k, v) = (host(k.cast(DType::F32)), host(v.cast(DType::F32)));
        case.check(&host(q), &k, &v, &host(out));
    }
}

#[test]
fn flash_attention_declines_what_it_does_not_take() {
    let device = Default::default();
    let properties = Tensor::<Gpu, 1>::zeros([1], &device).into_primitive().tensor().client.properties().clone();
    let f16 = (DType::F32, DType::F16);
    // Heads not in blocks of 16 channels, or past 128; keys in another type; f16 queries.
    assert!(flash_geometry(8, 72, 1, f16, &properties).is_none());
    assert!(flash_geometry(1, 256, 1, f16, &properties).is_none());
    assert!(flash_geometry(8, 64, 1, (DType::F32, DType::BF16), &properties).is_none());
    assert!(flash_geometry(1, 64, 1, (DType::F16, DType::F16), &properties).is_none());
    let case = Case {
        batch: 1,
        heads: 2,
        kv_heads: 1,
        q_len: 8,
        total_len: 8,
        head_dim: 72,
        key_start: vec![0],
        window: None,
        query_scale: 1.0,
        room: 0,
    };
    let (q, k, v) = case.operands(7);
    assert!(flash_attention(q, k, v, 8, &case.options()).is_none());
}

#[test]
fn the_half_cache_attends_through_the_kernel_where_it_applies() {
    // A prompt and a decode step.
    for case in [&cases()[1], &cases()[6]] {
        half_cache_attends_through_the_kernel(case);
    }
}

fn half_cache_attends_through_the_kernel(case: &Case) {
    let device = Default::default();
    let (q, k, v) = case.operands(3);
    let geometry =
        CacheGeometry { batch: case.batch, kv_heads: case.kv_heads, heads: case.heads, head_dim: case.head_dim };
    let mut cache = KvScheme::<Gpu>::new_cache(&HalfDenseScheme, 0, geometry, &device);
    let filled = |t: &Tensor<Gpu, 4>| t.clone().narrow(2, 0, case.total_len).cast(DType::F32);
    cache.append(filled(&k), filled(&v)).unwrap();
    let attended = host(cache.attend(q.clone(), &case.options()).unwrap());
    match flash_attention(q.clone(), k.clone(), v.clone(), case.total_len, &case.options()) {
        Some(direct) => assert_eq!(attended, host(direct), "{}: the cache's attention is the kernel's", case.name()),
        None => {
            let (k, v) = (host(k.cast(DType::F32)), host(v.cast(DType::F32)));
            case.check(&host(q), &k, &v, &attended);
        }
    }
}
