//! The quantize kernels against their references on wgpu (lavapipe in CI) or CUDA: the row and
//! block quantizers' codes, metadata and sums bit-exact (clipped or not, subnormal fp16 metadata
//! included), and a key cache's metadata after appends dense and equal to the host's.
#![cfg(any(feature = "wgpu", feature = "cuda"))]

use crate::kernel_inputs::{normal, Cpu, Gpu};
use burn::tensor::{Int, Tensor, TensorData};
use burn_hack_attn::{
    cache::Codes,
    kernels::{quantize_blocks_reference, quantize_reference, HackBackend, QuantizeSpec, RowLayout},
    quant::Rounder,
    HackConfig, HackScheme, Rounding,
};
use burn_kvcompress::cache::{CacheGeometry, KvCache, KvScheme};
use rand::{rngs::StdRng, Rng, SeedableRng};

fn values(shape: [usize; 4], seed: u64) -> Vec<f32> {
    let mut rng = StdRng::seed_from_u64(seed);
    let n: usize = shape.iter().product();
    // Mixed scales, plus a constant run (degenerate partitions) at the start.
    (0..n).map(|i| if i < 32 { 0.75 } else { (rng.random::<f32>() - 0.4) * 6.0 * (1 + i % 3) as f32 }).collect()
}

fn ints<B: burn::tensor::backend::Backend>(t: Tensor<B, 4, Int>) -> Vec<u32> {
    t.into_data().convert::<i64>().into_vec::<i64>().unwrap().into_iter().map(|x| x as u32).collect()
}

fn host<B: burn::tensor::backend::Backend>(c: Codes<B>) -> [Vec<u32>; 3] {
    [ints(c.words), ints(c.params), ints(c.sums)]
}

#[test]
fn quantize_kernel_equals_reference_bit_for_bit() {
    // Each case with min/max ranges, then with clipped ranges.
    let cases = [
        // (shape [b, h, rows, z], bits, group, layout, rounding, magnitude of the values)
        ([2, 3, 5, 64], 2, 32, RowLayout::Keys { first_slot: 0 }, Rounding::Nearest, 1.0),
        ([1, 2, 7, 64], 2, 64, RowLayout::Keys { first_slot: 13 }, Rounding::Stochastic { seed: 3 }, 1.0),
        ([2, 1, 3, 128], 4, 128, RowLayout::Keys { first_slot: 1000 }, Rounding::Stochastic { seed: 4 }, 1.0),
        ([1, 3, 2 * 64, 32], 2, 32, RowLayout::ValueBlocks { first_slot: 32 }, Rounding::Stochastic { seed: 5 }, 1.0),
        ([2, 2, 64, 64], 4, 64, RowLayout::ValueBlocks { first_slot: 0 }, Rounding::Nearest, 1.0),
        ([1, 1, 1, 16], 2, 16, RowLayout::Keys { first_slot: 7 }, Rounding::Nearest, 1.0),
        // Minima and scales that are subnormal fp16 numbers (below 2^-14).
        ([1, 2, 4, 64], 2, 32, RowLayout::Keys { first_slot: 0 }, Rounding::Nearest, 1e-5),
    ];
    let clipped = cases.iter().map(|&case| (case, true));
    for (i, ((shape, bits, group, layout, rounding, magnitude), clip)) in
        cases.iter().map(|&case| (case, false)).chain(clipped).enumerate()
    {
        let head_dim = match layout {
            RowLayout::Keys { .. } => shape[3],
            RowLayout::ValueBlocks { .. } => 64,
        };
        let spec = QuantizeSpec {
            bits,
            group,
            head_dim,
            partition: 32,
            rounder: Rounder::new(rounding, i as u32),
            clip,
            layout,
        };
        let data: Vec<f32> = values(shape, i as u64).into_iter().map(|x| x * magnitude).collect();
        let cpu = quantize_reference(
            Tensor::<Cpu, 4>::from_data(TensorData::new(data.clone(), shape), &Default::default()),
            &spec,
        )
        .unwrap();
        let gpu =
            Gpu::hack_quantize(Tensor::<Gpu, 4>::from_data(TensorData::new(data, shape), &Default::default()), &spec)
                .unwrap();
        let (want, got) = (host(cpu), host(gpu));
        for (name, (w, g)) in ["words", "params", "sums"].iter().zip(want.iter().zip(&got)) {
            let mismatches = w.iter().zip(g).filter(|(a, b)| a != b).count();
            assert_eq!(mismatches, 0, "case {i} {name}: {mismatches} of {} differ", w.len());
        }
        if magnitude < 1.0 {
            let subnormal = |half: u32| half & 0x7C00 == 0 && half & 0x3FF != 0;
            let words = &want[1];
            assert!(words.iter().any(|w| subnormal(w & 0xFFFF)), "case {i}: no subnormal minimum");
            assert!(words.iter().any(|w| subnormal(w >> 16)), "case {i}: no subnormal scale");
        }
    }
}

#[test]
fn block_quantize_kernel_equals_reference_bit_for_bit() {
    // (batch, kv_heads, blocks, head_dim, Π, bits, keys (else values), rounding, clip, first slot)
    let cases = [
        (1, 1, 1, 64, 64, 2, true, Rounding::Nearest, true, 4),
        (1, 1, 1, 64, 64, 2, false, Rounding::Nearest, true, 4),
        (2, 3, 2, 128, 64, 2, true, Rounding::Stochastic { seed: 1 }, false, 68),
        // Values in two channel groups per slot (Π < head_dim).
        (2, 3, 2, 128, 64, 4, false, Rounding::Stochastic { seed: 2 }, true, 0),
        // Π above the head (one group per slot; more partitions per block than channels).
        (1, 2, 3, 32, 128, 4, true, Rounding::Nearest, true, 1000),
        (1, 2, 3, 32, 128, 2, false, Rounding::Stochastic { seed: 3 }, false, 1000),
        (3, 1, 1, 16, 16, 2, false, Rounding::Nearest, false, 7),
        (3, 1, 1, 16, 16, 4, true, Rounding::Nearest, true, 7),
    ];
    for (i, &(batch, kv_heads, blocks, d, pi, bits, keys, rounding, clip, first_slot)) in cases.iter().enumerate() {
        let (group, layout) = match keys {
            true => (pi, RowLayout::ValueBlocks { first_slot }),
            false => (pi.min(d), RowLayout::Keys { first_slot }),
        };
        let spec = QuantizeSpec {
            bits,
            group,
            head_dim: d,
            partition: pi,
            rounder: Rounder::new(rounding, i as u32),
            clip,
            layout,
        };
        let shape = [batch, kv_heads, blocks * pi, d];
        let data = values(shape, 100 + i as u64);
        let cpu = quantize_blocks_reference(
            Tensor::<Cpu, 4>::from_data(TensorData::new(data.clone(), shape), &Default::default()),
            &spec,
        )
        .unwrap();
        let gpu = Gpu::hack_quantize_blocks(
            Tensor::<Gpu, 4>::from_data(TensorData::new(data, shape), &Default::default()),
            &spec,
        )
        .unwrap();
        for (name, want, got) in [("words", cpu.words, gpu.words), ("params", cpu.params, gpu.params)] {
            assert_eq!(want.dims(), got.dims(), "case {i} {name} shape");
            let (want, got) = (ints(want), ints(got));
            let mismatches = want.iter().zip(&got).filter(|(a, b)| a != b).count();
            assert_eq!(mismatches, 0, "case {i} {name}: {mismatches} of {} differ", want.len());
        }
    }
}

#[test]
fn appended_key_metadata_stays_dense_and_equal() {
    // Two key groups per slot: two 4-byte words per row, which CUDA's allocations pad to 16
    // bytes when a tensor of such rows is allocated whole (as a concatenation's output is).
    let config: HackConfig = "bits=2,pi=64,round=nearest".parse().unwrap();
    let geometry = CacheGeometry { batch: 2, kv_heads: 2, heads: 4, head_dim: 128 };
    let mut gpu_cache = KvScheme::<Gpu>::new_cache(&HackScheme::from(config.clone()), 0, geometry, &Default::default());
    let mut cpu_cache = KvScheme::<Cpu>::new_cache(&HackScheme::from(config.clone()), 0, geometry, &Default::default());
    for (i, len) in [70, 1, 57].into_iter().enumerate() {
        let shape = [2, 2, len, 128];
        let n: usize = shape.iter().product();
        let (k, v) = (normal(n, 10 + i as u64, 1.0), normal(n, 20 + i as u64, 1.0));
        let gpu = |x: Vec<f32>| Tensor::<Gpu, 4>::from_data(TensorData::new(x, shape), &Default::default());
        let cpu = |x: Vec<f32>| Tensor::<Cpu, 4>::from_data(TensorData::new(x, shape), &Default::default());
        gpu_cache.append(gpu(k.clone()), gpu(v.clone())).unwrap();
        cpu_cache.append(cpu(k), cpu(v)).unwrap();
    }
    let (gpu_keys, cpu_keys) = (gpu_cache.view().unwrap().keys.clone(), cpu_cache.view().unwrap().keys.clone());
    for (name, t) in [("params", gpu_keys.params.clone()), ("sums", gpu_keys.sums.clone())] {
        let strides = t.into_primitive().meta.strides().to_vec();
        assert_eq!(strides, [2 * 128 * 2, 128 * 2, 2, 1], "key {name}");
    }
    assert_eq!(host(gpu_keys), host(cpu_keys));
}
