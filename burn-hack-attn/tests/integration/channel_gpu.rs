//! The channel layout's kernels against the reference on wgpu (lavapipe in CI) or CUDA: the
//! quantized state bit-exact where the keys are not rotated (the quantize kernel, clipped or not;
//! `quantize_gpu` tests it alone), decode attention within float noise of the host reference on
//! the same state; a prefill's attention (every slot in float) equal to the dense f16 cache's.
#![cfg(any(feature = "wgpu", feature = "cuda"))]

use burn::tensor::{Tensor, TensorData};
use burn_hack_attn::{kernels::channel_attention_reference, HackConfig, HackScheme, RotationSpec};
use burn_kvcompress::cache::{
    AttendOptions, CacheGeometry, HalfDenseScheme, KvCache, KvScheme, TransferableCache, TransferableScheme,
};
use rand::{rngs::StdRng, Rng, SeedableRng};

#[cfg(feature = "cuda")]
type Gpu = burn::backend::Cuda<f32, i32>;
#[cfg(not(feature = "cuda"))]
type Gpu = burn::backend::Wgpu<f32, i32>;
type Cpu = burn::backend::NdArray<f32>;

/// Seeded N(0, 1) · `spread` values with every 7th channel 6 times larger (outlier channels).
fn normal(n: usize, seed: u64, spread: f32) -> Vec<f32> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n)
        .map(|i| {
            let (u, v): (f32, f32) = (rng.random::<f32>().max(1e-7), rng.random());
            let x = spread * (-2.0 * u.ln()).sqrt() * (std::f32::consts::TAU * v).cos();
            if i % 7 == 3 {
                6.0 * x
            } else {
                x
            }
        })
        .collect()
}

/// A decode step on a channel-layout cache: a prefill of `len - 1` slots, then one appended slot
/// (which closes the blocks the window has left) and its query.
struct Case {
    config: &'static str,
    batch: usize,
    kv_heads: usize,
    group: usize,
    head_dim: usize,
    len: usize,
    window: Option<usize>,
}

const CASES: [Case; 11] = [
    // SmolLM2's heads: 3 query heads per KV head, 64 channels; the hack2-like format.
    Case { config: "hack2", batch: 2, kv_heads: 3, group: 3, head_dim: 64, len: 300, window: None },
    // Llama-3's heads: 4 per KV head, 128 channels (two value groups at Π = 64); a sliding
    // window that cuts a block.
    Case {
        config: "bits=2,pi=64,round=nearest,axes=channel,rot=hadamard,sinks=4,window=16,clip=mse",
        batch: 1,
        kv_heads: 2,
        group: 4,
        head_dim: 128,
        len: 400,
        window: Some(250),
    },
    // 2-bit keys and values at Π = 128 on Llama-3's heads: one value group a slot, and on CUDA
    // each warp's step of two 128-slot blocks in its stage's key and value regions.
    Case {
        config: "bits=2,pi=128,round=nearest,axes=channel,rot=hadamard,sinks=4,window=64,clip=mse",
        batch: 2,
        kv_heads: 2,
        group: 4,
        head_dim: 128,
        len: 1500,
        window: None,
    },
    // hack3's widths (4-bit keys, 2-bit values, Π = 128) on Llama-3's heads.
    Case { config: "hack3", batch: 1, kv_heads: 2, group: 4, head_dim: 128, len: 700, window: None },
    // 4-bit Π = 128, no sinks or window: the tail is only the newest slots.
    Case { config: "hack4", batch: 2, kv_heads: 1, group: 2, head_dim: 64, len: 257, window: None },
    // hack4 on Llama-3's heads: on CUDA a step's two 128-slot blocks (34 KiB) stage in key and
    // value halves at 6 warps a cube.
    Case { config: "hack4", batch: 1, kv_heads: 2, group: 4, head_dim: 128, len: 1500, window: None },
    // Keys and values at different widths, Π = 32; a sliding window that cuts blocks.
    Case {
        config: "kbits=4,vbits=2,pi=32,round=nearest,axes=channel,sinks=2,window=8",
        batch: 2,
        kv_heads: 2,
        group: 1,
        head_dim: 32,
        len: 200,
        window: Some(77),
    },
    Case {
        config: "kbits=2,vbits=4,pi=16,round=nearest,axes=channel,window=5",
        batch: 1,
        kv_heads: 1,
        group: 8,
        head_dim: 16,
        len: 90,
        window: None,
    },
    // Stochastic rounding (the quantize kernel's counter-based offsets).
    Case {
        config: "bits=2,pi=32,round=stochastic,seed=4,axes=channel,sinks=1",
        batch: 1,
        kv_heads: 2,
        group: 2,
        head_dim: 64,
        len: 150,
        window: None,
    },
    // 8 query heads per KV head fill the tensor-core products' columns (one block per product
    // step there; up to 4 heads take two blocks side by side, and one block's depth halves are two
    // words of a lane's rows, so at least 8 words a row: 128 channels, Π = 128); five closed
    // blocks.
    Case {
        config: "bits=2,pi=128,round=nearest,axes=channel,sinks=4,window=16",
        batch: 2,
        kv_heads: 1,
        group: 8,
        head_dim: 128,
        len: 661,
        window: None,
    },
    // Exactly one closed block and nothing else in float but the newest slot.
    Case {
        config: "bits=2,pi=16,round=nearest,axes=channel",
        batch: 1,
        kv_heads: 1,
        group: 2,
        head_dim: 16,
        len: 17,
        window: None,
    },
];

#[test]
fn decode_kernel_matches_the_reference_and_the_state_is_bit_exact() {
    let device = Default::default();
    for (i, c) in CASES.iter().enumerate() {
        let scheme = HackScheme::new(c.config.parse::<HackConfig>().unwrap()).unwrap();
        let heads = c.kv_heads * c.group;
        let geometry = CacheGeometry { batch: c.batch, kv_heads: c.kv_heads, heads, head_dim: c.head_dim };
        let kv_shape = [c.batch, c.kv_heads, c.len, c.head_dim];
        let n: usize = kv_shape.iter().product();
        let (k, v) = (normal(n, 10 + i as u64, 1.0), normal(n, 20 + i as u64, 2.0));
        let q = normal(c.batch * heads * c.head_dim, 30 + i as u64, 1.5);
        let q_shape = [c.batch, heads, 1, c.head_dim];
        let key_start: Vec<usize> = (0..c.batch).map(|b| if b + 1 == c.batch { c.len / 3 } else { 0 }).collect();
        let options = AttendOptions { scale: 1.0 / (c.head_dim as f32).sqrt(), key_start, window: c.window };

        let mut gpu = KvScheme::<Gpu>::new_cache(&scheme, i, geometry, &device);
        let mut cpu = KvScheme::<Cpu>::new_cache(&scheme, i, geometry, &Default::default());
        let gpu_t = |v: &[f32], s: [usize; 4]| Tensor::<Gpu, 4>::from_data(TensorData::new(v.to_vec(), s), &device);
        let cpu_t =
            |v: &[f32], s: [usize; 4]| Tensor::<Cpu, 4>::from_data(TensorData::new(v.to_vec(), s), &Default::default());
        let (k_g, v_g, k_c, v_c) = (gpu_t(&k, kv_shape), gpu_t(&v, kv_shape), cpu_t(&k, kv_shape), cpu_t(&v, kv_shape));
        let prefill = c.len - 1;
        gpu.append(k_g.clone().narrow(2, 0, prefill), v_g.clone().narrow(2, 0, prefill)).unwrap();
        cpu.append(k_c.clone().narrow(2, 0, prefill), v_c.clone().narrow(2, 0, prefill)).unwrap();
        gpu.append(k_g.narrow(2, prefill, 1), v_g.narrow(2, prefill, 1)).unwrap();
        cpu.append(k_c.narrow(2, prefill, 1), v_c.narrow(2, prefill, 1)).unwrap();
        assert!(gpu.blocks() > 0, "case {i}: no closed block");
        // Rotated keys come from each device's own matrix product (summed in its own order), so
        // only unrotated inputs quantize to the same bits on both.
        if scheme.config().rotation == RotationSpec::None {
            assert!(
                TransferableCache::export_state(&gpu) == TransferableCache::export_state(&cpu),
                "case {i} ({}): the quantized state differs from the host's",
                c.config
            );
        }

        let got: Vec<f32> = gpu.attend(gpu_t(&q, q_shape), &options).unwrap().into_data().into_vec().unwrap();
        // The host cache over the GPU's own state runs the reference on its own rotated queries.
        let state = TransferableCache::export_state(&gpu);
        let host = TransferableScheme::<Cpu>::import_state(&scheme, i, geometry, &state, &Default::default()).unwrap();
        let host_out: Vec<f32> = host.attend(cpu_t(&q, q_shape), &options).unwrap().into_data().into_vec().unwrap();
        let direct =
            channel_attention_reference(host.rotated(cpu_t(&q, q_shape)), &host.channel_view().unwrap(), &options);
        assert_eq!(
            direct.unwrap().into_data().into_vec::<f32>().unwrap(),
            host_out,
            "case {i}: the host cache runs the reference"
        );
        // The kernel against the reference given the queries the GPU rotated: CUDA's matrix
        // products run in TF32, so a host rotation differs by more than the kernel's float noise.
        let gpu_rotated = gpu.rotated(gpu_t(&q, q_shape)).into_data();
        let want: Vec<f32> = channel_attention_reference(
            Tensor::<Cpu, 4>::from_data(gpu_rotated, &Default::default()),
            &host.channel_view().unwrap(),
            &options,
        )
        .unwrap()
        .into_data()
        .into_vec()
        .unwrap();
        let diffs: Vec<f32> = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).collect();
        assert!(got.iter().all(|x| x.is_finite()), "case {i}: non-finite output");
        let worst = diffs.iter().fold(0.0f32, |m, &x| m.max(x));
        let mean = diffs.iter().sum::<f32>() / diffs.len() as f32;
        // Float noise (measured on lavapipe: means up to 1.3e-6, outputs up to 2.3e-5): the kernel
        // sums in another order and quantizes block-local numerators. The worst bound leaves room
        // for a P code that flips at a rounding tie, which moves one head's outputs by a code
        // step of a value, as the paper layout's kernel tests allow.
        assert!(mean < 2e-5 && worst < 2e-3, "case {i} ({}): mean {mean:.2e}, worst {worst:.2e}", c.config);
    }
}

#[test]
fn a_prefill_attends_as_the_dense_f16_cache_does() {
    // Before its first decode append the layout holds every slot in float (f16 values), and a
    // prompt's attention is the dense f16 cache's: the tensor-core kernel where it applies
    // (CUDA; a prompt of 32K tokens at batch 8 needs it), else the same fallback.
    let device = Default::default();
    let geometry = CacheGeometry { batch: 2, kv_heads: 2, heads: 8, head_dim: 64 };
    let (len, kv_shape, q_shape) = (100, [2, 2, 100, 64], [2, 8, 100, 64]);
    let tensor =
        |values: Vec<f32>, shape: [usize; 4]| Tensor::<Gpu, 4>::from_data(TensorData::new(values, shape), &device);
    let n = 2 * 2 * len * 64;
    let (k, v, q) = (
        tensor(normal(n, 1, 1.0), kv_shape),
        tensor(normal(n, 2, 2.0), kv_shape),
        tensor(normal(4 * n, 3, 1.5), q_shape),
    );
    let options = AttendOptions { scale: 0.125, key_start: vec![0, 7], window: Some(60) };
    let config = "bits=2,pi=16,round=nearest,axes=channel,sinks=4".parse::<HackConfig>().unwrap();
    let mut hack = KvScheme::<Gpu>::new_cache(&HackScheme::new(config).unwrap(), 0, geometry, &device);
    hack.append(k.clone(), v.clone()).unwrap();
    let mut dense = KvScheme::<Gpu>::new_cache(&HalfDenseScheme, 0, geometry, &device);
    dense.append(k, v).unwrap();
    let got: Vec<f32> = hack.attend(q.clone(), &options).unwrap().into_data().into_vec().unwrap();
    let expected: Vec<f32> = dense.attend(q, &options).unwrap().into_data().into_vec().unwrap();
    assert_eq!(got, expected);
}
