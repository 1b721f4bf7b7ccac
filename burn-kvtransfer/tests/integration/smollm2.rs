//! The real model end to end (skipped when SmolLM2 is not downloaded): a prefill server running
//! SmolLM2-135M with each scheme (dense, HACK, PQ), a decode side pulling over the in-process
//! transport; the received KV equals a local prefill's byte for byte and the tokens equal a
//! single-process run with the same scheme.

use std::sync::Arc;

use burn_hack_attn::{HackConfig, HackScheme};
use burn_kvcompress::{
    backend::NdArray,
    cache::{DenseScheme, KvScheme, TransferableCache, TransferableScheme},
    generation::{decode_batch, generate, GenerateOptions, SamplingConfig},
    loading::load_model,
    paths::default_model_path,
};
use burn_kvtransfer::{
    decode::fetch,
    engine::ModelPrefill,
    protocol::{ClientConfig, PrefillClient, PrefillPool, PrefillServer, ServerConfig},
    transport::channel::channel,
    ModelFingerprint, SchemeDescriptor,
};
use burn_million_pq::{
    cache::PqScheme,
    codebook::{CodebookGeometry, Codebooks},
    PqConfig,
};

type B = NdArray;

/// Pulls a prompt's prefill with `scheme` and decodes 8 tokens; checks KV bytes and tokens.
async fn disaggregated_run_matches_single_process<S>(scheme: impl FnOnce(ModelFingerprint) -> S)
where
    S: TransferableScheme<B> + Clone + Send + Sync + 'static,
    S::Cache: TransferableCache<B> + Send + Sync,
{
    let path = default_model_path();
    if !path.exists() {
        eprintln!("skipped: {} is missing (cargo xtask fetch-model)", path.display());
        return;
    }
    let device = Default::default();
    let fingerprint = ModelFingerprint::of_path(&path).unwrap();
    let scheme = scheme(fingerprint);
    let prefill_model = load_model::<B>(&path, &device).unwrap().model;
    let server = PrefillServer::new(
        ModelPrefill::new(prefill_model, scheme.clone(), fingerprint, device),
        ServerConfig::default(),
    );
    let (listener, connector) = channel();
    let serving = server.clone();
    tokio::spawn(async move { serving.serve(listener).await });

    let loaded = load_model::<B>(&path, &device).unwrap();
    let tokenizer = loaded.tokenizer.as_ref().unwrap();
    let prompt = tokenizer.encode("<|im_start|>user\nName a color.<|im_end|>\n<|im_start|>assistant\n", true).unwrap();
    let descriptor = SchemeDescriptor { scheme: KvScheme::<B>::name(&scheme), model: fingerprint };
    let pool = PrefillPool::new(vec![PrefillClient::connect(&connector, ClientConfig::new(descriptor)).await.unwrap()]);
    let mut received = fetch::<B, _>(&pool, &prompt, &scheme, &device, 1).await.unwrap();

    let mut local = loaded.model.new_cache(&scheme, 1, &device);
    loaded.model.prefill_padded(std::slice::from_ref(&prompt), &mut local, 0).unwrap();
    for (l, (got, want)) in received.caches.layers.iter().zip(&local.layers).enumerate() {
        assert!(TransferableCache::<B>::export_state(got) == want.export_state(), "layer {l} differs");
    }

    let options = GenerateOptions { max_new_tokens: 8, stop_tokens: vec![], sampling: SamplingConfig::greedy() };
    let remote = decode_batch(&loaded.model, &mut received.caches, vec![received.logits], &options, |_, _| {}).unwrap();
    let mut caches = loaded.model.new_cache(&scheme, 1, &device);
    let single = generate(&loaded.model, &mut caches, &prompt, &options, |_| {}).unwrap();
    assert_eq!(remote.tokens, single.tokens);
    assert_eq!(remote.tokens[0].len(), 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dense_disaggregated_matches_the_single_process_run() {
    disaggregated_run_matches_single_process(|_| DenseScheme).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hack_disaggregated_matches_the_single_process_run() {
    disaggregated_run_matches_single_process(|_| {
        HackScheme::from("bits=2,pi=32,round=stochastic,seed=3".parse::<HackConfig>().unwrap())
    })
    .await;
}

/// PQ with random codebooks for SmolLM2's geometry: the text is poor, but transfer must still
/// reproduce the single-process run exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pq_disaggregated_matches_the_single_process_run() {
    disaggregated_run_matches_single_process(|model| {
        let config: PqConfig = "m=16,nbits=4".parse().unwrap();
        let mut books = Codebooks {
            config,
            geometry: CodebookGeometry { layers: 30, kv_heads: 3, head_dim: 64 },
            model,
            calibration: "pseudo-random".into(),
            keys: Vec::new(),
            values: Vec::new(),
        };
        let len: usize = books.shape().iter().product();
        let values =
            |seed: usize| (0..len).map(|i| (((i * 7919 + seed * 104_729) % 1000) as f32 / 250.0) - 2.0).collect();
        books.keys = (0..30).map(|l| values(2 * l)).collect();
        books.values = (0..30).map(|l| values(2 * l + 1)).collect();
        PqScheme::new(Arc::new(books), 2)
    })
    .await;
}
