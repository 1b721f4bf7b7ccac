//! Continuous batching with every scheme (dense, HACK, PQ, ZACK): sequences that join and leave a ragged batch between
//! decode steps, each at its own length, decode exactly the tokens each decodes alone (greedy,
//! the same scheme), on the tiny Llama and Mistral (sliding window) fixtures, on the CPU.

use std::{path::PathBuf, sync::Arc};

use burn::tensor::Tensor;
use burn_kvcompress::{
    backend::NdArray,
    cache::{KvScheme, RaggedBatch, RecordingScheme},
    fingerprint::ModelFingerprint,
    loading::load_hf_model,
    model::{CausalLm, Logits},
};
use burn_kvschemes::{with_scheme, AnyScheme, SchemeSpec};
use burn_million_pq::{
    cache::PqScheme,
    codebook::{CodebookGeometry, Codebooks},
    CodebookScope, PqConfig,
};
use burn_zack::{
    cache::ZackScheme,
    rotation::{calibrate_rotations, GramAccumulator, RotationConfig, RotationGeometry},
    RankRule, Ranks,
};

/// A batch's weight products take several rows where a sequence alone takes one, which may change
/// a sum's order in its last bits; logits are O(1).
const TOLERANCE: f32 = 1e-5;

/// One request: its prompt, the step it joins at and the tokens it decodes before it leaves.
struct Request {
    prompt: Vec<u32>,
    joins_at: usize,
    new_tokens: usize,
}

/// Tokens and each token's logits.
type Decoded = (Vec<u32>, Vec<Vec<f32>>);

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/hf-tiny").join(name)
}

fn logits_of(t: Tensor<NdArray, 3>) -> Vec<f32> {
    t.into_data().convert::<f32>().into_vec().expect("f32 logits")
}

fn argmax(logits: &[f32]) -> u32 {
    (0..logits.len()).max_by(|&a, &b| logits[a].total_cmp(&logits[b])).expect("a vocabulary") as u32
}

/// `request` prefilled alone with `scheme`: its caches and first token's logits.
fn prefill<S: KvScheme<NdArray>>(
    model: &CausalLm<NdArray>,
    scheme: &S,
    request: &Request,
) -> (burn_kvcompress::cache::LayerCaches<S::Cache>, Vec<f32>) {
    let mut caches = model.new_cache(scheme, 1, &Default::default());
    let logits = logits_of(model.forward(std::slice::from_ref(&request.prompt), &mut caches, Logits::Last).unwrap());
    (caches, logits)
}

/// Every request decoded alone (a batch of one).
fn alone<S: KvScheme<NdArray>>(scheme: S, model: &CausalLm<NdArray>, requests: &[Request]) -> Vec<Decoded> {
    requests
        .iter()
        .map(|request| {
            let (mut caches, mut logits) = prefill(model, &scheme, request);
            let (mut tokens, mut all) = (vec![argmax(&logits)], vec![logits]);
            while tokens.len() < request.new_tokens {
                let step = [vec![*tokens.last().unwrap()]];
                logits = logits_of(model.forward(&step, &mut caches, Logits::Last).unwrap());
                tokens.push(argmax(&logits));
                all.push(logits);
            }
            (tokens, all)
        })
        .collect()
}

/// Every request decoded in one ragged batch: prefilled alone at its step, it joins; each step
/// decodes every row; a row leaves once it has its tokens.
fn ragged<S: KvScheme<NdArray>>(scheme: S, model: &CausalLm<NdArray>, requests: &[Request]) -> Vec<Decoded> {
    let vocab = model.config().vocab_size;
    let mut batch = RaggedBatch::new(model.config().num_layers);
    let mut results: Vec<Decoded> = requests.iter().map(|_| (vec![], vec![])).collect();
    // The request of each row, in row order.
    let mut rows: Vec<usize> = vec![];
    for step in 0.. {
        for (r, request) in requests.iter().enumerate().filter(|(_, q)| q.joins_at == step) {
            let (caches, logits) = prefill(model, &scheme, request);
            results[r] = (vec![argmax(&logits)], vec![logits]);
            assert_eq!(batch.join(caches).unwrap(), rows.len());
            rows.push(r);
        }
        // Rows with all their tokens leave (from the last, so the indices stay valid).
        for row in (0..rows.len()).rev() {
            if results[rows[row]].0.len() == requests[rows[row]].new_tokens {
                batch.leave(row).unwrap();
                rows.remove(row);
            }
        }
        if rows.is_empty() && requests.iter().all(|q| q.joins_at <= step) {
            break;
        }
        if rows.is_empty() {
            continue;
        }
        let tokens: Vec<Vec<u32>> = rows.iter().map(|&r| vec![*results[r].0.last().unwrap()]).collect();
        let logits = logits_of(model.forward(&tokens, batch.caches(), Logits::Last).unwrap());
        for (row, &r) in rows.iter().enumerate() {
            let row_logits = logits[row * vocab..(row + 1) * vocab].to_vec();
            results[r].0.push(argmax(&row_logits));
            results[r].1.push(row_logits);
        }
    }
    results
}

/// PQ over codebooks of fixed pseudo-random centroids (calibration is not what is tested).
fn pq_scheme(model: &CausalLm<NdArray>, window: usize) -> AnyScheme {
    let config = model.config();
    let geometry =
        CodebookGeometry { layers: config.num_layers, kv_heads: config.num_kv_heads, head_dim: config.head_dim };
    let mut books = Codebooks {
        config: PqConfig { subspaces: 4, nbits: 4, scope: CodebookScope::Layer },
        geometry,
        model: ModelFingerprint::of_bytes(b"fixed centroids"),
        calibration: "fixed pseudo-random centroids".into(),
        keys: vec![],
        values: vec![],
    };
    let len: usize = books.shape().iter().product();
    let centroids = |seed: usize| (0..len).map(|i| ((i * 7919 + seed * 104729) as f32 * 0.618).sin()).collect();
    books.keys = (0..config.num_layers).map(|l| centroids(2 * l)).collect();
    books.values = (0..config.num_layers).map(|l| centroids(2 * l + 1)).collect();
    AnyScheme::Pq(PqScheme::new(Arc::new(books), window))
}

/// ZACK with rotations calibrated on `model`'s own activations for a few prompts and the ranks of
/// a 40 % compression rate (so that heads are truncated).
fn zack_scheme(model: &CausalLm<NdArray>, prompts: &[Vec<u32>]) -> AnyScheme {
    let recording = RecordingScheme { record_queries: true, ..Default::default() };
    let mut grams = GramAccumulator::new(RotationGeometry::of_model(model.config()));
    for prompt in prompts {
        let mut caches = model.new_cache(&recording, 1, &Default::default());
        model.forward(std::slice::from_ref(prompt), &mut caches, Logits::Last).unwrap();
        grams.add(&recording.recorder.take()).unwrap();
    }
    let fingerprint = ModelFingerprint::of_bytes(b"tiny");
    let rotations = calibrate_rotations(&grams, model, RotationConfig::default(), fingerprint, "prompts".into())
        .expect("calibrated rotations");
    let (ranks, _) = Ranks::for_compression_rate(&rotations, 0.4, RankRule::default()).expect("ranks");
    AnyScheme::Zack(ZackScheme::new(Arc::new(rotations), ranks).expect("a ZACK scheme"))
}

#[test]
fn every_scheme_decodes_a_ragged_batch_as_each_sequence_alone() {
    for name in ["tiny-llama", "tiny-mistral-swa"] {
        let loaded = load_hf_model::<NdArray>(&fixture(name), &Default::default()).expect("the tiny fixture");
        let config = loaded.model.config().clone();
        // Prompts of very different lengths (crossing the sliding window of 24 and, with the
        // HACK configurations below, closing blocks); a join or a leave at every step, at step 3
        // both, and a step with one row between.
        let prompt = |span: std::ops::Range<u32>| span.map(|t| 3 + t * 5 % (config.vocab_size as u32 - 3)).collect();
        let requests = [(0..30, 0, 6), (40..49, 1, 2), (50..51, 2, 5), (10..27, 3, 1), (5..8, 5, 3), (20..45, 9, 2)]
            .map(|(span, joins_at, new_tokens)| Request { prompt: prompt(span), joins_at, new_tokens });
        let mut schemes: Vec<(String, AnyScheme)> = [
            "dense",
            "hack:bits=2,pi=16",
            "hack:bits=2,pi=16,axes=channel,rot=hadamard,sinks=2,window=4",
            "hack:bits=4,pi=16,axes=channel,rot=hadamard,sinks=0,window=0,clip=mse",
        ]
        .into_iter()
        .map(|spelling| {
            let spec: SchemeSpec = spelling.parse().expect(spelling);
            let fingerprint = Some(ModelFingerprint::of_bytes(name.as_bytes()));
            (spelling.to_string(), spec.resolve(&fixture(name), &config, fingerprint).expect(spelling))
        })
        .collect();
        schemes.push(("pq (fixed centroids), window 4".into(), pq_scheme(&loaded.model, 4)));
        let prompts: Vec<Vec<u32>> = requests.iter().map(|r| r.prompt.clone()).collect();
        schemes.push(("zack (calibrated, 40 % removed)".into(), zack_scheme(&loaded.model, &prompts)));
        for (spelling, scheme) in schemes {
            let model = scheme.prepare(loaded.model.clone()).expect("prepared");
            let want = with_scheme!(scheme.clone(), alone, (&model, &requests));
            let got = with_scheme!(scheme, ragged, (&model, &requests));
            for (r, ((tokens, logits), (want_tokens, want_logits))) in got.iter().zip(&want).enumerate() {
                assert_eq!(tokens, want_tokens, "{name}, {spelling}: request {r}");
                for (i, (g, w)) in logits.iter().zip(want_logits).enumerate() {
                    let diff = g.iter().zip(w).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
                    assert!(diff < TOLERANCE, "{name}, {spelling}: request {r} token {i}: max abs diff {diff}");
                }
            }
        }
    }
}
