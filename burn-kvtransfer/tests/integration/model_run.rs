//! SmolLM2 end to end, shared by the integration tests (pulls over the in-process transport) and
//! the NIXL tests (reads): a prefill server running SmolLM2-135M with a scheme, a decode side
//! receiving the prompt's KV; the received KV equals a local prefill's byte for byte and the
//! tokens equal a single-process run with the same scheme. Skipped when SmolLM2 is not
//! downloaded.
#![allow(dead_code)]

use std::sync::Arc;

use burn_hack_attn::{HackConfig, HackScheme};
use burn_kvcompress::{
    backend::NdArray,
    cache::{KvScheme, TransferableCache, TransferableScheme},
    generation::{decode_batch, generate, GenerateOptions, SamplingConfig},
    loading::load_model,
    paths::default_model_path,
};
use burn_kvtransfer::{
    decode::fetch,
    engine::ModelPrefill,
    nixl::{NixlDecode, NixlPrefill},
    protocol::{ClientConfig, PrefillClient, PrefillPool, PrefillServer, ServerConfig},
    state_codec::encode_state,
    transport::channel::channel,
    wire::Mode,
    ModelFingerprint, SchemeDescriptor,
};
use burn_million_pq::{
    cache::PqScheme,
    codebook::{CodebookGeometry, Codebooks},
    PqConfig,
};

pub type B = NdArray;

/// How the decode side receives the layers.
pub enum Transfer<'a> {
    /// Pulled over the in-process transport.
    Pull,
    /// Read with NIXL (the frames still go over the in-process transport).
    Read {
        /// The prefill side's agent.
        prefill: &'a NixlPrefill,
        /// The decode side's agent.
        decode: Arc<NixlDecode>,
    },
}

/// The HACK scheme of the tests.
pub fn hack_scheme() -> HackScheme {
    HackScheme::from("bits=2,pi=32,round=stochastic,seed=3".parse::<HackConfig>().unwrap())
}

/// PQ with random codebooks for SmolLM2's geometry: the text is poor, but transfer must still
/// reproduce the single-process run exactly.
pub fn pq_scheme(model: ModelFingerprint) -> PqScheme {
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
    let values = |seed: usize| (0..len).map(|i| (((i * 7919 + seed * 104_729) % 1000) as f32 / 250.0) - 2.0).collect();
    books.keys = (0..30).map(|l| values(2 * l)).collect();
    books.values = (0..30).map(|l| values(2 * l + 1)).collect();
    PqScheme::new(Arc::new(books), 2)
}

/// Transfers a prompt's prefill with `scheme` and decodes 8 tokens; checks KV bytes and tokens
/// (and, reading, that every layer's bytes came by NIXL).
pub async fn disaggregated_run_matches_single_process<S>(
    scheme: impl FnOnce(ModelFingerprint) -> S,
    transfer: Transfer<'_>,
) where
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
    let readable = match &transfer {
        Transfer::Read { prefill, .. } => Some(prefill.memory()),
        Transfer::Pull => None,
    };
    let server = PrefillServer::new(
        ModelPrefill::new(prefill_model, scheme.clone(), fingerprint, device),
        ServerConfig { readable, ..ServerConfig::default() },
    );
    let (listener, connector) = channel();
    let serving = server.clone();
    tokio::spawn(async move { serving.serve(listener).await });

    let loaded = load_model::<B>(&path, &device).unwrap();
    let tokenizer = loaded.tokenizer.as_ref().unwrap();
    let prompt = tokenizer.encode("<|im_start|>user\nName a color.<|im_end|>\n<|im_start|>assistant\n", true).unwrap();
    let descriptor = SchemeDescriptor { scheme: KvScheme::<B>::name(&scheme), model: fingerprint };
    let client_config = match &transfer {
        Transfer::Read { prefill, decode } => {
            prefill.free_completed(&server);
            let reads = Some(decode.clone() as Arc<_>);
            ClientConfig { mode: Mode::Read, reads, ..ClientConfig::new(descriptor) }
        }
        Transfer::Pull => ClientConfig::new(descriptor),
    };
    let pool = PrefillPool::new(vec![PrefillClient::connect(&connector, client_config).await.unwrap()]);
    let mut received = fetch::<B, _>(&pool, &prompt, &scheme, &device, 1).await.unwrap();

    let mut local = loaded.model.new_cache(&scheme, 1, &device);
    loaded.model.prefill_padded(std::slice::from_ref(&prompt), &mut local, 0).unwrap();
    for (l, (got, want)) in received.caches.layers.iter().zip(&local.layers).enumerate() {
        assert!(TransferableCache::<B>::export_state(got) == want.export_state(), "layer {l} differs");
    }
    if let Transfer::Read { decode, .. } = &transfer {
        let layer_bytes: usize = local.layers.iter().map(|l| encode_state(&l.export_state()).len()).sum();
        assert_eq!(decode.bytes_read(), layer_bytes as u64, "every layer read by NIXL");
    }

    let options = GenerateOptions { max_new_tokens: 8, stop_tokens: vec![], sampling: SamplingConfig::greedy() };
    let remote = decode_batch(&loaded.model, &mut received.caches, vec![received.logits], &options, |_, _| {}).unwrap();
    let mut caches = loaded.model.new_cache(&scheme, 1, &device);
    let single = generate(&loaded.model, &mut caches, &prompt, &options, |_| {}).unwrap();
    assert_eq!(remote.tokens, single.tokens);
    assert_eq!(remote.tokens[0].len(), 8);
}
