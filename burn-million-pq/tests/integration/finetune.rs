//! Codebook fine-tuning: its code assignment and attention against the cache's, and a short run
//! on the tiny Llama that must lower the held-out loss.

use crate::common::{random_books, random_values, reconstruct_host, scheme};
use burn::{
    backend::Autodiff,
    tensor::{Int, Tensor, TensorData},
};
use burn_kvcompress::{
    backend::NdArray,
    cache::{AttendOptions, CacheGeometry, KvCache, KvScheme},
    finetune::{AttentionSamples, FinetuneConfig, FinetuneData, LayerBatch, OutputProjections},
    fingerprint::ModelFingerprint,
    loading::load_hf_model,
};
use burn_million_pq::{
    cache::PqCache,
    codebook::{train_codebooks, CalibrationSamples, Codebooks},
    finetune::{finetune_codebooks, nearest_codes, pq_attention_output},
    kernels::attention::reconstruct,
    CodebookScope, KmeansConfig, PqConfig,
};
use rand::{rngs::StdRng, Rng, SeedableRng};

type B = NdArray;

fn tensor(values: Vec<f32>, shape: [usize; 4]) -> Tensor<B, 4> {
    Tensor::from_data(TensorData::new(values, shape), &Default::default())
}

fn host(t: Tensor<B, 4>) -> Vec<f32> {
    t.into_data().convert::<f32>().into_vec().unwrap()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

#[test]
fn nearest_codes_pick_the_encoders_centroids() {
    for (scope, m, nbits, d) in [(CodebookScope::Layer, 4, 3, 12), (CodebookScope::LayerHead, 3, 5, 12)] {
        let config = PqConfig { subspaces: m, nbits, scope };
        let books = random_books(config, 1, 3, d, 11);
        let shape = [2, 3, 7, d];
        let x = random_values(shape.iter().product(), 5);
        let books_tensor = tensor(books.keys[0].clone(), books.shape());
        let codes: Tensor<B, 4, Int> = nearest_codes(tensor(x.clone(), shape), books_tensor.clone());
        let rebuilt = host(reconstruct(codes, &books_tensor));
        assert_eq!(max_diff(&rebuilt, &reconstruct_host(&x, shape, &books, 0)), 0.0, "{scope:?}");
    }
}

/// The training forward of the last query row equals the PQ cache's decode attention after
/// `tokens − 1` slots were appended and then the query's own.
#[test]
fn training_attention_is_the_caches_decode_attention() {
    let (kv_heads, group, d, tokens) = (2, 3, 16, 11);
    let config = PqConfig { subspaces: 4, nbits: 4, scope: CodebookScope::LayerHead };
    for window in [0, 1, 4] {
        let scheme = scheme(config, kv_heads, d, window, 3);
        let books = &scheme.codebooks;
        let (k, v) = (random_values(kv_heads * tokens * d, 20), random_values(kv_heads * tokens * d, 21));
        let q = random_values(kv_heads * group * d, 22);
        let geometry = CacheGeometry { batch: 1, kv_heads, heads: kv_heads * group, head_dim: d };
        let mut cache: PqCache<B> = scheme.new_cache(0, geometry, &Default::default());
        let kv_tensor = |x: &[f32]| tensor(x.to_vec(), [1, kv_heads, tokens, d]);
        let (k_all, v_all) = (kv_tensor(&k), kv_tensor(&v));
        cache.append(k_all.clone().narrow(2, 0, tokens - 1), v_all.clone().narrow(2, 0, tokens - 1)).unwrap();
        cache.append(k_all.clone().narrow(2, tokens - 1, 1), v_all.clone().narrow(2, tokens - 1, 1)).unwrap();
        let q = tensor(q, [1, kv_heads * group, 1, d]);
        let options = AttendOptions { scale: 1.0 / (d as f32).sqrt(), key_start: vec![0], window: None };
        let want = host(cache.attend(q.clone(), &options).unwrap());
        let batch = LayerBatch { queries: q.clone(), keys: k_all, values: v_all, outputs: q };
        let book =
            |b: &Codebooks, key: bool| tensor(if key { b.keys[0].clone() } else { b.values[0].clone() }, b.shape());
        let got = host(pq_attention_output(&batch, book(books, true), book(books, false), window));
        assert!(max_diff(&got, &want) < 1e-5, "window {window}: {}", max_diff(&got, &want));
    }
}

/// Seeded token windows.
fn windows(count: usize, tokens: usize, vocab: usize, seed: u64) -> Vec<Vec<u32>> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..count).map(|_| (0..tokens).map(|_| rng.random_range(0..vocab as u32)).collect()).collect()
}

/// The tiny random Llama checkpoint of the workspace's fixtures.
const TINY_LLAMA_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/hf-tiny/tiny-llama");

#[test]
fn a_short_run_on_the_tiny_llama_lowers_the_held_out_loss() {
    let device = Default::default();
    let model = load_hf_model::<B>(TINY_LLAMA_DIR.as_ref(), &device).unwrap().model;
    let (layers, vocab, tokens) = (model.layers.len(), model.config().vocab_size, 48);
    let mut train = AttentionSamples::new(layers, tokens, 16).unwrap();
    let recordings = train.record(&model, &windows(4, tokens, vocab, 1), &device).unwrap();
    let mut held_out = AttentionSamples::new(layers, tokens, 16).unwrap();
    held_out.record(&model, &windows(2, tokens, vocab, 2), &device).unwrap();
    let data = FinetuneData { train, held_out, projections: OutputProjections::of_model(&model) };

    let config = PqConfig { subspaces: 8, nbits: 3, scope: CodebookScope::Layer };
    let samples = CalibrationSamples::from_recordings(&recordings).unwrap();
    let kmeans = KmeansConfig { iterations: 20, batch_size: 256, ..Default::default() };
    let fingerprint = ModelFingerprint::of_bytes(b"tiny");
    let (books, _) = train_codebooks(&samples, config, &kmeans, fingerprint, "random".into(), 1, &|| {}).unwrap();

    let settings = FinetuneConfig { steps: 40, learning_rate: 3e-3, eval_every: 5, patience: 3, ..Default::default() };
    let (tuned, report) = finetune_codebooks::<Autodiff<B>>(&books, 4, &data, &settings, &device, &mut |_| {}).unwrap();
    assert!(
        report.best_held_out < 0.95 * report.initial_held_out,
        "held-out output error {} -> {}",
        report.initial_held_out,
        report.best_held_out
    );
    eprintln!("held-out {} -> {} at step {}", report.initial_held_out, report.best_held_out, report.best_step);
    assert!(report.best_step > 0 && tuned != books && tuned.check_shapes().is_ok());
    assert!(tuned.calibration.contains("fine-tuned"));

    // Fine-tuned codebooks are ordinary codebooks: they save, load and drive a cache.
    let path = std::env::temp_dir().join(format!("pq-finetune-{}.safetensors", std::process::id()));
    tuned.save(&path).unwrap();
    let loaded = Codebooks::load(&path).unwrap();
    std::fs::remove_file(&path).ok();
    assert_eq!(loaded, tuned);
}
