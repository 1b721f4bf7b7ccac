//! CubeCL kernels against their references on wgpu (lavapipe in CI): codes, metadata and sums
//! bit-exact.
#![cfg(feature = "wgpu")]

use burn::tensor::{Int, Tensor, TensorData};
use burn_hack_attn::{
    cache::Codes,
    kernels::{quantize_reference, HackBackend, QuantizeSpec, RowLayout},
    quant::Rounder,
    Rounding,
};
use rand::{rngs::StdRng, Rng, SeedableRng};

type Gpu = burn::backend::Wgpu<f32, i32>;
type Cpu = burn::backend::NdArray<f32>;

fn values(shape: [usize; 4], seed: u64) -> Vec<f32> {
    let mut rng = StdRng::seed_from_u64(seed);
    let n: usize = shape.iter().product();
    // Mixed scales, plus a constant run (degenerate partitions) at the start.
    (0..n).map(|i| if i < 32 { 0.75 } else { (rng.random::<f32>() - 0.4) * 6.0 * (1 + i % 3) as f32 }).collect()
}

fn ints<B: burn::tensor::backend::Backend>(t: Tensor<B, 4, Int>) -> Vec<u32> {
    t.into_data().convert::<i64>().into_vec::<i64>().unwrap().into_iter().map(|x| x as u32).collect()
}

fn floats<B: burn::tensor::backend::Backend>(t: Tensor<B, 4>) -> Vec<u32> {
    t.into_data().convert::<f32>().into_vec::<f32>().unwrap().into_iter().map(f32::to_bits).collect()
}

fn host<B: burn::tensor::backend::Backend>(c: Codes<B>) -> [Vec<u32>; 4] {
    [ints(c.words), floats(c.min), floats(c.scale), ints(c.sums)]
}

#[test]
fn quantize_kernel_equals_reference_bit_for_bit() {
    let cases = [
        // (shape [b, h, rows, z], bits, group, layout, rounding)
        ([2, 3, 5, 64], 2, 32, RowLayout::Keys { first_slot: 0 }, Rounding::Nearest),
        ([1, 2, 7, 64], 2, 64, RowLayout::Keys { first_slot: 13 }, Rounding::Stochastic { seed: 3 }),
        ([2, 1, 3, 128], 4, 128, RowLayout::Keys { first_slot: 1000 }, Rounding::Stochastic { seed: 4 }),
        ([1, 3, 2 * 64, 32], 2, 32, RowLayout::ValueBlocks { first_slot: 32 }, Rounding::Stochastic { seed: 5 }),
        ([2, 2, 64, 64], 4, 64, RowLayout::ValueBlocks { first_slot: 0 }, Rounding::Nearest),
        ([1, 1, 1, 16], 2, 16, RowLayout::Keys { first_slot: 7 }, Rounding::Nearest),
    ];
    for (i, (shape, bits, group, layout, rounding)) in cases.into_iter().enumerate() {
        let head_dim = match layout {
            RowLayout::Keys { .. } => shape[3],
            RowLayout::ValueBlocks { .. } => 64,
        };
        let spec =
            QuantizeSpec { bits, group, head_dim, partition: 32, rounder: Rounder::new(rounding, i as u32), layout };
        let data = values(shape, i as u64);
        let cpu = quantize_reference(
            Tensor::<Cpu, 4>::from_data(TensorData::new(data.clone(), shape), &Default::default()),
            &spec,
        )
        .unwrap();
        let gpu =
            Gpu::hack_quantize(Tensor::<Gpu, 4>::from_data(TensorData::new(data, shape), &Default::default()), &spec)
                .unwrap();
        let (want, got) = (host(cpu), host(gpu));
        for (name, (w, g)) in ["words", "min", "scale", "sums"].iter().zip(want.iter().zip(&got)) {
            let mismatches = w.iter().zip(g).filter(|(a, b)| a != b).count();
            assert_eq!(mismatches, 0, "case {i} {name}: {mismatches} of {} differ", w.len());
        }
    }
}
