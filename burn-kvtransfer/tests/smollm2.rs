//! The real model end to end (skipped when SmolLM2 is not downloaded): a prefill server running
//! SmolLM2-135M with the dense scheme, a decode side pulling over the in-process transport; the
//! received KV equals a local prefill's byte for byte and the tokens equal a single-process run.

use burn_kvcompress::{
    backend::NdArray,
    cache::{DenseScheme, KvScheme, TransferableCache},
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

type B = NdArray;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disaggregated_smollm2_matches_the_single_process_run() {
    let path = default_model_path();
    if !path.exists() {
        eprintln!("skipped: {} is missing (cargo xtask fetch-model)", path.display());
        return;
    }
    let device = Default::default();
    let fingerprint = ModelFingerprint::of_path(&path).unwrap();
    let prefill_model = load_model::<B>(&path, &device).unwrap().model;
    let server =
        PrefillServer::new(ModelPrefill::new(prefill_model, DenseScheme, fingerprint, device), ServerConfig::default());
    let (listener, connector) = channel();
    let serving = server.clone();
    tokio::spawn(async move { serving.serve(listener).await });

    let loaded = load_model::<B>(&path, &device).unwrap();
    let tokenizer = loaded.tokenizer.as_ref().unwrap();
    let prompt = tokenizer.encode("<|im_start|>user\nName a color.<|im_end|>\n<|im_start|>assistant\n", true).unwrap();
    let descriptor = SchemeDescriptor { scheme: KvScheme::<B>::name(&DenseScheme), model: fingerprint };
    let pool = PrefillPool::new(vec![PrefillClient::connect(&connector, ClientConfig::new(descriptor)).await.unwrap()]);
    let mut received = fetch::<B, _>(&pool, &prompt, &DenseScheme, &device, 1).await.unwrap();

    let mut local = loaded.model.new_cache(&DenseScheme, 1, &device);
    loaded.model.prefill_padded(std::slice::from_ref(&prompt), &mut local, 0).unwrap();
    for (l, (got, want)) in received.caches.layers.iter().zip(&local.layers).enumerate() {
        assert!(TransferableCache::<B>::export_state(got) == want.export_state(), "layer {l} differs");
    }

    let options = GenerateOptions { max_new_tokens: 8, stop_tokens: vec![], sampling: SamplingConfig::greedy() };
    let remote = decode_batch(&loaded.model, &mut received.caches, vec![received.logits], &options, |_, _| {}).unwrap();
    let mut caches = loaded.model.new_cache(&DenseScheme, 1, &device);
    let single = generate(&loaded.model, &mut caches, &prompt, &options, |_| {}).unwrap();
    assert_eq!(remote.tokens, single.tokens);
    assert_eq!(remote.tokens[0].len(), 8);
}
