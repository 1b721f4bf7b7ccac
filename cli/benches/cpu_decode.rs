//! Criterion benches of SmolLM2-135M-Instruct on the CPU (burn-flex, f32): the batch-1 decode step
//! after a 512-token prompt with the dense cache and HACK's presets, the 512-token prefill, and
//! the step's hot operations (the largest weight product, attention over 1024 cached slots dense
//! and on HACK's channel layout). `cargo bench -p kvcompress-cli --bench cpu_decode`; the model comes
//! from `cargo xtask fetch-model` (without it the model benches are skipped, with a message).

use burn::tensor::{Distribution, Tensor};
use burn_hack_attn::{kernels::channel_attention_reference, HackConfig, HackScheme};
use burn_kvcompress::{
    cache::{attention_reference, AttendOptions, CacheGeometry, DenseScheme, KvCache, KvScheme},
    loading::load_model,
    model::{CausalLm, Logits},
    paths::default_model_path,
};
use criterion::{criterion_group, criterion_main, Criterion};

type B = burn_kvcompress::backend::Flex;

/// The first 512 tokens of tempest.txt, and the model (None without the model file).
fn model_and_prompt() -> Option<(CausalLm<B>, Vec<u32>)> {
    let path = default_model_path();
    if !path.exists() {
        eprintln!("no model at {}: run `cargo xtask fetch-model`; model benches skipped", path.display());
        return None;
    }
    let loaded = load_model::<B>(&path, &Default::default()).expect("the model loads");
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../data/tempest.txt")).expect("tempest.txt");
    let tokens = loaded.tokenizer.as_ref().expect("a tokenizer").encode(&text, false).expect("tokenizes");
    Some((loaded.model, tokens[..512].to_vec()))
}

/// One decode step of `model` with `scheme`'s caches after `prompt` and one first step (which
/// closes the blocks a prefill leaves open): every iteration appends one slot to the same caches,
/// so the steps see 513 to about 700 cached slots, as a generation does.
fn bench_step<S: KvScheme<B>>(c: &mut Criterion, name: &str, model: &CausalLm<B>, scheme: &S, prompt: &[u32]) {
    let mut caches = model.new_cache(scheme, 1, &Default::default());
    model.forward(&[prompt.to_vec()], &mut caches, Logits::Last).expect("prefill").into_data();
    let mut step = move || model.forward(&[vec![prompt[0]]], &mut caches, Logits::Last).expect("step").into_data();
    step();
    c.bench_function(&format!("decode_step/{name}"), |b| b.iter(&mut step));
}

fn model_benches(c: &mut Criterion) {
    let Some((model, prompt)) = model_and_prompt() else { return };
    c.bench_function("prefill_512/dense", |b| {
        b.iter(|| {
            let mut caches = model.new_cache(&DenseScheme, 1, &Default::default());
            model.forward(std::slice::from_ref(&prompt), &mut caches, Logits::Last).expect("prefill").into_data()
        })
    });
    bench_step(c, "dense", &model, &DenseScheme, &prompt);
    for preset in ["hack2", "hack4"] {
        let scheme = HackScheme::new(HackConfig::preset(preset).expect("a preset")).expect("no file to read");
        let folded = scheme.fold(model.clone()).expect("the value rotation folds");
        bench_step(c, preset, &folded, &scheme, &prompt);
    }
}

/// SmolLM2's largest per-token weight product (576 → 1536, the feed-forward's up projection) and
/// attention of one query slot (9 heads over 3 KV heads of 64) on 1024 cached slots.
fn op_benches(c: &mut Criterion) {
    let device = Default::default();
    let x = Tensor::<B, 2>::random([1, 576], Distribution::Normal(0.0, 1.0), &device);
    let w = Tensor::<B, 2>::random([576, 1536], Distribution::Normal(0.0, 0.05), &device);
    c.bench_function("op/row_product_576x1536", |b| b.iter(|| x.clone().matmul(w.clone()).into_data()));

    let geometry = CacheGeometry { batch: 1, kv_heads: 3, heads: 9, head_dim: 64 };
    let kv = || Tensor::<B, 4>::random([1, 3, 1024, 64], Distribution::Normal(0.0, 1.0), &device);
    let (k, v) = (kv(), kv());
    let q = Tensor::<B, 4>::random([1, 9, 1, 64], Distribution::Normal(0.0, 1.0), &device);
    let options = AttendOptions { scale: 0.125, key_start: vec![0], window: None };
    c.bench_function("op/attention_1024/dense", |b| {
        b.iter(|| attention_reference(q.clone(), k.clone(), v.clone(), &options).expect("attends").into_data())
    });
    let scheme = HackScheme::new(HackConfig::preset("hack2").expect("a preset")).expect("no file to read");
    let mut cache = KvScheme::<B>::new_cache(&scheme, 0, geometry, &device);
    cache.append(k.clone(), v.clone()).expect("append");
    cache.close_blocks().expect("close");
    let view = cache.channel_view().expect("the channel layout");
    c.bench_function("op/attention_1024/hack2_channel_reference", |b| {
        b.iter(|| channel_attention_reference(q.clone(), &view, &options).expect("attends").into_data())
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = op_benches, model_benches
}
criterion_main!(benches);
