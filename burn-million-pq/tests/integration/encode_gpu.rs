//! The encode kernel on wgpu (lavapipe in CI) or CUDA: codes bit-exact with the host encoder,
//! ties included, and a cache filled by a prefill and decode steps holding the state the ndarray
//! cache holds (and attending as it does).
#![cfg(any(feature = "wgpu", feature = "cuda"))]

use crate::common::{
    case::{config, tensor},
    random_books, random_values, scheme, Gpu,
};
use burn::tensor::{Int, Tensor, TensorData};
use burn_kvcompress::cache::{AttendOptions, CacheGeometry, KvCache, KvScheme, TransferableCache};
use burn_million_pq::{
    cache::PqCache,
    codebook::Codebooks,
    kernels::{encode_host, PqBackend},
    CodebookScope,
};

type Cpu = burn::backend::NdArray<f32>;

fn words<B: burn::tensor::backend::Backend>(t: Tensor<B, 4, Int>) -> Vec<u32> {
    t.into_data().convert::<i64>().into_vec::<i64>().unwrap().into_iter().map(|x| x as u32).collect()
}

/// Layer 0's codebook of `books` as a tensor.
fn book_tensor(books: &Codebooks, kind: usize) -> Tensor<Gpu, 4> {
    let data = if kind == 0 { &books.keys[0] } else { &books.values[0] };
    Tensor::from_data(TensorData::new(data.clone(), books.shape()), &Default::default())
}

#[test]
fn encode_kernel_equals_the_host_encoder_bit_for_bit() {
    use CodebookScope::{Layer, LayerHead};
    // (config, [batch, kv_heads, n, head_dim])
    let cases = [
        (config(8, 4, Layer), [1, 2, 1, 16]),
        (config(32, 8, Layer), [2, 3, 37, 64]),
        (config(8, 6, LayerHead), [1, 3, 19, 32]),
        (config(64, 8, LayerHead), [1, 2, 9, 128]),
        (config(3, 12, Layer), [1, 1, 5, 12]),
        (config(16, 1, Layer), [1, 1, 7, 16]),
    ];
    for (i, (config, shape)) in cases.into_iter().enumerate() {
        let [_, kv_heads, _, d] = shape;
        let mut books = random_books(config, 1, kv_heads, d, 10 + i as u64);
        let [groups, m, k, ds] = books.shape();
        let mut x = random_values(shape.iter().product(), 20 + i as u64);
        if k > 2 {
            // Ties: centroid 2 duplicates centroid 1 everywhere, and the first vector's first
            // sub-vector sits exactly on it; the lower index must win on both sides.
            for g in 0..groups * m {
                let base = g * k * ds;
                let (one, two) = (base + ds, base + 2 * ds);
                books.keys[0].copy_within(one..one + ds, two);
            }
            x[..ds].copy_from_slice(&books.keys[0][ds..2 * ds]);
        }
        let expected = encode_host(&x, shape, &books.keys[0], groups, &config);
        let got = <Gpu as PqBackend>::pq_encode(tensor::<Gpu>(x, shape), &book_tensor(&books, 0), &config);
        let expected: Vec<u32> = expected.into_iter().map(|w| w as u32).collect();
        assert_eq!(words(got), expected, "case {i}: {config} {shape:?}");
    }
}

#[test]
#[cfg_attr(feature = "cuda", ignore = "CUDA runs the prefill's f32 matmuls in TF32, outside this f32 tolerance")]
fn prefill_then_decode_on_wgpu_holds_the_state_ndarray_holds() {
    let (kv_heads, d) = (3, 64);
    let scheme = scheme(config(32, 8, CodebookScope::Layer), kv_heads, d, 4, 3);
    let geometry = CacheGeometry { batch: 1, kv_heads, heads: 9, head_dim: d };
    let mut gpu: PqCache<Gpu> = scheme.new_cache(0, geometry, &Default::default());
    let mut cpu: PqCache<Cpu> = scheme.new_cache(0, geometry, &Default::default());
    for (n, seed) in [(40, 1), (1, 2), (1, 3), (7, 4), (1, 5)] {
        let (k, v) = (random_values(kv_heads * n * d, seed), random_values(kv_heads * n * d, seed + 50));
        gpu.append(tensor::<Gpu>(k.clone(), [1, kv_heads, n, d]), tensor::<Gpu>(v.clone(), [1, kv_heads, n, d]))
            .unwrap();
        cpu.append(tensor::<Cpu>(k, [1, kv_heads, n, d]), tensor::<Cpu>(v, [1, kv_heads, n, d])).unwrap();
    }
    assert_eq!(gpu.export_state(), cpu.export_state());
    let q = random_values(9 * 3 * d, 9);
    let options = AttendOptions { scale: 0.125, key_start: vec![0], window: None };
    let a = gpu.attend(tensor::<Gpu>(q.clone(), [1, 9, 3, d]), &options).unwrap().into_data();
    let b = cpu.attend(tensor::<Cpu>(q, [1, 9, 3, d]), &options).unwrap().into_data();
    a.assert_approx_eq::<f32>(&b, burn::tensor::Tolerance::absolute(1e-5));
}
