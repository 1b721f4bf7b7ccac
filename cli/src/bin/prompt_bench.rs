//! A prompt's weight products and causal attention on the GPU, Llama-3-8B shapes in f16: Burn's
//! matrix product, `kernels::prompt_product` (the model's products of many rows: cuBLAS where it
//! loads) and each of cubek's variants (checked against Burn's), the attention reference (scores
//! materialized), `kernels::flash_attention` (the dense f16 cache's path) and cubek's
//! flash-attention variants (checked against the reference). Medians of device-synchronized runs,
//! with TFLOP/s. The PyTorch anchor, run in the same call: `cli/bench/prompt_anchor.py`.

use burn::tensor::{ops::AttentionModuleOptions, DType, Distribution, Tensor, TensorPrimitive};
use burn_cubecl::kernel::{attention::flash_attention as cubek_flash_attention, into_contiguous};
use burn_kvcompress::{
    backend::Cuda,
    cache::{attention_reference, AttendOptions},
    kernels::{cublas_product, flash_attention, product_by, prompt_product},
    model::ModelConfig,
};
use clap::Parser;
use cubek::{
    attention::{
        definition::AttentionSetupError,
        launch::{BlueprintStrategy, Strategy as AttentionStrategy},
        routines::blackbox_accelerated::BlackboxAcceleratedStrategy,
    },
    matmul::launch::Strategy,
};
use kvcompress_cli::bench::{diffs, time};

/// Time a prompt's products and attention variants (CUDA).
#[derive(Parser, Debug)]
#[command(about, long_about = None)]
struct Args {
    /// Tokens of the prompt.
    #[arg(long, default_value_t = 8192)]
    context: usize,
    /// Sequences per batch.
    #[arg(long, default_value_t = 1)]
    batch: usize,
    /// Timed calls per measurement.
    #[arg(long, default_value_t = 10)]
    runs: usize,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let device = Default::default();
    let c = ModelConfig::llama3_8b();
    let rows = args.batch * args.context;
    let f16 = |t: Tensor<Cuda, 2>| t.cast(DType::F16);
    println!("## Products [{rows}, k] · [k, n], f16 (ms; TFLOP/s)");
    let (h, kv, ff) = (c.hidden_size, c.num_kv_heads * c.head_dim, c.intermediate_size);
    let strategies = product_strategies();
    print!("| k | n | Burn's matmul | prompt_product |");
    for (name, _) in &strategies {
        print!(" {name} |");
    }
    println!();
    println!("|---:|---:|---:|---:|{}", "---:|".repeat(strategies.len()));
    let mut cublas_status = None;
    for (k, n) in [(h, h + 2 * kv), (h, h), (h, 2 * ff), (ff, h)] {
        let x = f16(Tensor::random([rows, k], Distribution::Normal(0.0, 1.0), &device));
        let w = f16(Tensor::random([k, n], Distribution::Normal(0.0, 0.02), &device));
        if cublas_status.is_none() {
            let out = x.clone().matmul(w.clone()).into_primitive().tensor();
            let (xp, wp) = (x.clone().into_primitive().tensor(), w.clone().into_primitive().tensor());
            cublas_status = Some(cublas_product(&xp, &wp, &out));
        }
        let flop = 2.0 * (rows * k * n) as f64;
        let cell = |us: f64| format!("{:.2} ({:.0})", us / 1e3, flop / us / 1e6);
        let want = x.clone().matmul(w.clone());
        let burn = time::<Cuda>(&device, args.runs, || drop(x.clone().matmul(w.clone())));
        let ours = time::<Cuda>(&device, args.runs, || drop(prompt_product(x.clone(), w.clone())));
        print!("| {k} | {n} | {} | {} |", cell(burn.median), cell(ours.median));
        for (_, strategy) in &strategies {
            match product_by(x.clone(), w.clone(), strategy) {
                Err(e) => print!(" n/a ({}) |", format!("{e:?}").chars().take(40).collect::<String>()),
                Ok(got) => {
                    let err = (got.cast(DType::F32) - want.clone().cast(DType::F32)).abs().max().into_scalar();
                    let t = time::<Cuda>(&device, args.runs, || {
                        drop(product_by(x.clone(), w.clone(), strategy).expect("launched once"))
                    });
                    print!(" {} err {err:.1e} |", cell(t.median));
                }
            }
        }
        println!();
    }
    match cublas_status {
        Some(Ok(())) => println!("\nprompt_product runs cuBLAS."),
        other => println!("\nprompt_product runs cubek's variants: cuBLAS does not run ({other:?})."),
    }

    let (heads, kv_heads, d, s, b) = (c.num_heads, c.num_kv_heads, c.head_dim, args.context, args.batch);
    println!(
        "\n## Causal attention, batch {b}, {heads} heads / {kv_heads} KV heads × {d}, {s} tokens, f16 (ms; TFLOP/s)"
    );
    let f16_4 = |t: Tensor<Cuda, 4>| t.cast(DType::F16);
    let q = f16_4(Tensor::random([b, heads, s, d], Distribution::Normal(0.0, 1.0), &device));
    let k = f16_4(Tensor::random([b, kv_heads, s, d], Distribution::Normal(0.0, 1.0), &device));
    let v = f16_4(Tensor::random([b, kv_heads, s, d], Distribution::Normal(0.0, 1.0), &device));
    let options = AttendOptions { scale: 1.0 / (d as f32).sqrt(), key_start: vec![0; b], window: None };
    let flop = 4.0 * (b * heads * s * s * d) as f64 / 2.0;
    let cell = |us: f64| format!("{:.2} | {:.0}", us / 1e3, flop / us / 1e6);
    println!("| variant | ms | TFLOP/s | max abs diff to the reference |");
    println!("|---|---:|---:|---:|");
    let reference = attention_reference(q.clone(), k.clone(), v.clone(), &options)?;
    let t = time::<Cuda>(&device, args.runs, || {
        drop(attention_reference(q.clone(), k.clone(), v.clone(), &options).expect("reference"))
    });
    println!("| reference (Burn's ops) | {} | 0 |", cell(t.median));
    // The dense f16 cache's prompt path: f32 queries (as the model's rotary embedding gives them).
    let q32 = q.clone().cast(DType::F32);
    match flash_attention(q32.clone(), k.clone(), v.clone(), s, &options) {
        None => println!("| ours (kernels::flash_attention) | n/a | | does not apply on this device |"),
        Some(got) => {
            let (max, _) = diffs(got, reference.clone().cast(DType::F32));
            let t = time::<Cuda>(&device, args.runs, || {
                drop(flash_attention(q32.clone(), k.clone(), v.clone(), s, &options).expect("launched once"))
            });
            println!("| ours (kernels::flash_attention) | {} | {max:.1e} |", cell(t.median));
        }
    }
    let mut plans: Vec<Option<(u8, u8, u8)>> = vec![None];
    for planes in [2, 4, 8] {
        for seq_q in [1, 2] {
            for seq_kv in [1, 2, 4] {
                plans.push(Some((planes, seq_q, seq_kv)));
            }
        }
    }
    for plan in plans {
        let name = plan.map_or("unit".to_string(), |(p, q, k)| format!("accelerated {p} planes, partition {q}×{k}"));
        match cubek_flash(q.clone(), k.clone(), v.clone(), plan) {
            Err(e) => println!("| {name} | n/a | | {} |", format!("{e:?}").chars().take(60).collect::<String>()),
            Ok(got) => {
                let (max, _) = diffs(got.cast(DType::F32), reference.clone().cast(DType::F32));
                let t = time::<Cuda>(&device, args.runs, || {
                    drop(cubek_flash(q.clone(), k.clone(), v.clone(), plan).expect("launched once"))
                });
                println!("| {name} | {} | {max:.1e} |", cell(t.median));
            }
        }
    }
    Ok(())
}

/// cubek's matrix-product variants worth timing for a prompt's products, by name.
fn product_strategies() -> Vec<(&'static str, Strategy)> {
    vec![
        ("simple cyclic cmma (Burn's default)", Strategy::SimpleCyclicCmma(Default::default())),
        ("simple cyclic mma", Strategy::SimpleCyclicMma(Default::default())),
        ("double cyclic cmma", Strategy::DoubleCyclicCmma(Default::default())),
        ("double cyclic mma", Strategy::DoubleCyclicMma(Default::default())),
        ("ordered double cmma", Strategy::OrderedDoubleCmma(Default::default())),
        ("ordered double mma", Strategy::OrderedDoubleMma(Default::default())),
        ("simple tma mma", Strategy::SimpleTmaMma(Default::default())),
        ("double tma mma", Strategy::DoubleTmaMma(Default::default())),
        ("specialized tma mma", Strategy::SpecializedTmaMma(Default::default())),
        ("specialized cyclic mma", Strategy::SpecializedCyclicMma(Default::default())),
    ]
}

/// Causal attention of a prompt over itself by cubek's flash-attention kernel (Burn's, behind
/// its `autotune` feature): `q` `[batch, heads, len, head_dim]`, `k` and `v`
/// `[batch, kv_heads, len, head_dim]` (their heads repeated: the kernel has no GQA), scale
/// `1/√head_dim`; `plan` its tile plan (planes, partition of queries × keys), `None` the unit
/// variant (no tensor cores).
fn cubek_flash(
    q: Tensor<Cuda, 4>,
    k: Tensor<Cuda, 4>,
    v: Tensor<Cuda, 4>,
    plan: Option<(u8, u8, u8)>,
) -> Result<Tensor<Cuda, 4>, AttentionSetupError> {
    let [_, heads, _, _] = q.dims();
    let repeat = |t: Tensor<Cuda, 4>| {
        let [b, kv_heads, s, d] = t.dims();
        t.unsqueeze_dim::<5>(2).expand([b, kv_heads, heads / kv_heads, s, d]).reshape([b, heads, s, d])
    };
    let arg = |t: Tensor<Cuda, 4>| into_contiguous(t.into_primitive().tensor());
    let strategy = match plan {
        Some((num_planes, seq_q, seq_kv)) => {
            AttentionStrategy::BlackboxAccelerated(BlueprintStrategy::Inferred(BlackboxAcceleratedStrategy {
                num_planes,
                seq_q,
                seq_kv,
            }))
        }
        None => AttentionStrategy::Unit(BlueprintStrategy::Inferred(())),
    };
    let options = AttentionModuleOptions { scale: None, softcap: None, is_causal: true };
    let out = cubek_flash_attention(arg(q), arg(repeat(k)), arg(repeat(v)), None, None, options, strategy)?;
    Ok(Tensor::from_primitive(TensorPrimitive::Float(out)))
}
