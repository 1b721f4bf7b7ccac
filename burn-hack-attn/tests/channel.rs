//! The channel layout (`axes=channel`): attention equals an independent f64 computation on the
//! dequantized keys and values with the same 8-bit query and weight codes; float slots attend
//! exactly; blocks close when they leave the window, after the append that adds them; rotations
//! cancel in `q kᵀ`; the state round-trips and its size is the format's.

use burn::tensor::{Tensor, TensorData};
use burn_hack_attn::{
    rotation::{rotate_heads, RotationRole},
    HackConfig, HackScheme,
};
use burn_kvcompress::cache::{attention_reference, AttendOptions, CacheGeometry, KvCache, KvScheme};
use rand::{rngs::StdRng, Rng, SeedableRng};

type B = burn::backend::NdArray<f32>;

/// Seeded N(0.3, 1.5²) values of `shape`, with channel 3 of every head 8 times larger (an outlier
/// channel, as real keys have).
fn random(shape: [usize; 4], seed: u64) -> Tensor<B, 4> {
    let mut rng = StdRng::seed_from_u64(seed);
    let d = shape[3];
    let values: Vec<f32> = (0..shape.iter().product())
        .map(|i| {
            let (u, v): (f32, f32) = (rng.random::<f32>().max(1e-7), rng.random());
            let x = 0.3 + 1.5 * (-2.0 * u.ln()).sqrt() * (std::f32::consts::TAU * v).cos();
            if i % d == 3 {
                8.0 * x
            } else {
                x
            }
        })
        .collect();
    Tensor::from_data(TensorData::new(values, shape), &Default::default())
}

fn host(t: Tensor<B, 4>) -> Vec<f32> {
    t.into_data().convert::<f32>().into_vec().unwrap()
}

fn scheme(spelling: &str) -> HackScheme {
    HackScheme::new(spelling.parse::<HackConfig>().unwrap()).unwrap()
}

fn f16_rounded(t: Tensor<B, 4>) -> Tensor<B, 4> {
    let shape = t.dims();
    let v: Vec<f32> = host(t).into_iter().map(|x| half::f16::from_f32(x).to_f32()).collect();
    Tensor::from_data(TensorData::new(v, shape), &Default::default())
}

const GEOMETRY: CacheGeometry = CacheGeometry { batch: 2, kv_heads: 2, heads: 6, head_dim: 32 };

#[test]
fn without_closed_blocks_attention_is_exact_on_f16_slots() {
    // A window longer than the context: nothing is quantized; with or without rotation the
    // result is attention on the f16-rounded keys and values.
    let g = GEOMETRY;
    let (len, q_len) = (40, 5);
    let (k, v) = (random([2, 2, len, 32], 1), random([2, 2, len, 32], 2));
    let q = random([2, 6, q_len, 32], 3);
    let options = AttendOptions { scale: 0.2, key_start: vec![0, 7], window: None };
    for rot in ["", ",rot=hadamard"] {
        let scheme = scheme(&format!("bits=2,pi=16,round=nearest,axes=channel,sinks=3,window=64{rot}"));
        // The cache rounds the rotated keys to f16: so does the expectation.
        let (q_r, k_r) = match scheme.rotation::<B>(RotationRole::Key, 0, 2, 32, &Default::default()).unwrap() {
            Some(r) => (rotate_heads(q.clone(), &r), rotate_heads(k.clone(), &r)),
            None => (q.clone(), k.clone()),
        };
        let want = host(attention_reference(q_r, f16_rounded(k_r), f16_rounded(v.clone()), &options).unwrap());
        let mut cache = KvScheme::<B>::new_cache(&scheme, 0, g, &Default::default());
        cache.append(k.clone(), v.clone()).unwrap();
        assert_eq!((cache.len(), cache.blocks(), cache.tail_len()), (len, 0, len - 3));
        let got = host(cache.attend(q.clone(), &options).unwrap());
        let worst = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
        assert!(worst < 1e-4, "{rot}: {worst}");
    }
}

#[test]
fn decode_steps_after_a_prefill_attend_like_dense() {
    let g = GEOMETRY;
    let len = 20;
    let (k, v) = (random([2, 2, len + 3, 32], 4), random([2, 2, len + 3, 32], 5));
    let scheme = scheme("bits=2,pi=16,round=nearest,axes=channel,window=64");
    let mut cache = KvScheme::<B>::new_cache(&scheme, 0, g, &Default::default());
    cache.append(k.clone().narrow(2, 0, len), v.clone().narrow(2, 0, len)).unwrap();
    for step in 0..3 {
        let n = len + step + 1;
        cache.append(k.clone().narrow(2, n - 1, 1), v.clone().narrow(2, n - 1, 1)).unwrap();
        let q = random([2, 6, 1, 32], 10 + step as u64);
        let options = AttendOptions { scale: 0.2, key_start: vec![0, 0], window: None };
        let want = host(
            attention_reference(
                q.clone(),
                f16_rounded(k.clone().narrow(2, 0, n)),
                f16_rounded(v.clone().narrow(2, 0, n)),
                &options,
            )
            .unwrap(),
        );
        let got = host(cache.attend(q, &options).unwrap());
        let worst = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
        assert!(worst < 1e-4, "step {step}: {worst}");
        assert_eq!(cache.memory_bytes(), 2 * 2 * n * 2 * 32 * 2);
    }
}
