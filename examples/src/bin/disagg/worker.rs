//! The decode worker: pulls each request's KV cache from the prefill servers of one (scheme, link)
//! pair, decodes, and measures.

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use burn::tensor::backend::Backend;
use burn_kvcompress::{
    cache::{KvCache, LayerCaches, TransferableCache, TransferableScheme},
    generation::{decode_batch, generate, GenerateOptions, SamplingConfig},
    model::CausalLm,
    tokenizer::{chatml_prompt, ChatMessage, Role, TokenStream, Tokenizer},
};
use burn_kvtransfer::{
    decode::{fetch, Arrivals, Received},
    protocol::{ClientConfig, PrefillClient, PrefillPool},
    state_codec::encode_state,
    transport::tcp::TcpConnector,
    wire::Mode,
    ModelFingerprint, SchemeDescriptor,
};
use examples::{
    backend_choice::KernelBackend, e2e_report::RequestRecord, random_model::random_prompt, scheme_arg::Scheme,
    with_scheme,
};
use sha2::{Digest, Sha256};

use crate::{runtime, BaseModel, ModeArg, RunArgs};

/// One decode run: a (scheme, link rate) pair, the requests' options and the servers of the pair.
pub struct Job<'a> {
    /// The scheme in `--kv`'s spelling.
    pub kv: &'a str,
    /// The emulated link rate (None: unpaced).
    pub link_gbps: Option<f64>,
    /// The requests and how to run them.
    pub run: &'a RunArgs,
    /// Prefill server addresses serving this pair.
    pub servers: &'a [String],
    /// Untimed rounds of the requests before the timed ones.
    pub warmup: usize,
}

const DEFAULT_PROMPTS: [&str; 4] = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain in two sentences why the sky is blue.",
    "List three uses of a paperclip.",
];

/// Runs `job` with `model`, `base` prepared for `scheme` ([`BaseModel::prepared`] of `job.kv`):
/// its records, after printing its table.
pub fn run_job<B: KernelBackend>(
    base: &BaseModel<B>,
    (model, scheme): &(CausalLm<B>, Scheme),
    job: &Job,
    device: &B::Device,
) -> anyhow::Result<Vec<RequestRecord>> {
    with_scheme!(scheme.clone(), decode_scheme::<B, _>, (job, model, base.tokenizer(), base.fingerprint, device))
}

/// One request's measurements.
struct Row {
    prompt_tokens: usize,
    server: usize,
    attempts: usize,
    kv_bytes: usize,
    wire_bytes: u64,
    arrivals: Arrivals,
    ttft: Duration,
    tbt: Duration,
    jct: Duration,
    tokens: Vec<u32>,
    check: Option<(bool, bool)>,
}

impl Row {
    /// The row as a record of `job`'s scheme and link.
    fn record(&self, job: &Job) -> RequestRecord {
        RequestRecord {
            scheme: job.kv.to_string(),
            link_gbps: job.link_gbps,
            prompt_tokens: self.prompt_tokens,
            new_tokens: self.tokens.len(),
            kv_bytes: self.kv_bytes,
            wire_bytes: self.wire_bytes,
            first_layer_ms: ms(self.arrivals.first_layer),
            last_layer_ms: ms(self.arrivals.last_layer),
            logits_ms: ms(self.arrivals.logits),
            ttft_ms: ms(self.ttft),
            tbt_ms: ms(self.tbt),
            jct_ms: ms(self.jct),
        }
    }
}

/// What every request of a job shares.
struct JobContext<'a, B: Backend, S> {
    rt: &'a tokio::runtime::Runtime,
    pool: &'a PrefillPool,
    model: &'a CausalLm<B>,
    scheme: &'a S,
    device: &'a B::Device,
    options: GenerateOptions,
}

impl<B: Backend, S> JobContext<'_, B, S>
where
    S: TransferableScheme<B>,
    S::Cache: TransferableCache<B>,
{
    /// `tokens`' KV cache pulled from the pool (a failed server's request retried on the others).
    fn fetch(&self, tokens: &[u32]) -> anyhow::Result<Received<S::Cache>> {
        Ok(self.rt.block_on(fetch::<B, S>(self.pool, tokens, self.scheme, self.device, self.pool.clients().len()))?)
    }
}

fn decode_scheme<B: Backend, S>(
    scheme: S,
    job: &Job,
    model: &CausalLm<B>,
    tokenizer: Option<&Tokenizer>,
    fingerprint: ModelFingerprint,
    device: &B::Device,
) -> anyhow::Result<Vec<RequestRecord>>
where
    S: TransferableScheme<B>,
    S::Cache: TransferableCache<B>,
{
    let mut config = ClientConfig::new(SchemeDescriptor { scheme: scheme.name(), model: fingerprint });
    config.mode = match job.run.mode {
        ModeArg::Pull => Mode::Pull,
        ModeArg::Push => Mode::Push,
    };
    config.link_gbps = job.link_gbps;
    config.data_streams = job.run.data_streams;
    let rt = runtime()?;
    let pool = rt.block_on(async {
        let mut clients = Vec::new();
        for addr in job.servers {
            let connector = TcpConnector { addr: addr.clone() };
            clients.push(
                PrefillClient::connect(&connector, config.clone())
                    .await
                    .with_context(|| format!("connecting to {addr}"))?,
            );
        }
        anyhow::Ok(PrefillPool::new(clients))
    })?;
    let options = GenerateOptions {
        max_new_tokens: job.run.max_new_tokens,
        stop_tokens: tokenizer.and_then(|t| t.eos_id()).into_iter().collect(),
        sampling: SamplingConfig { temperature: job.run.temperature, top_p: 0.9, seed: job.run.seed },
    };
    let context = JobContext { rt: &rt, pool: &pool, model, scheme: &scheme, device, options };
    let requests = requests(job.run, tokenizer, model.config().vocab_size)?;
    for (_, tokens) in (0..job.warmup).flat_map(|_| &requests) {
        run_request(&context, tokens, None)?;
    }
    let mut rows = Vec::new();
    for (text, tokens) in requests {
        let check = match job.run.check {
            true => Some(check_request(&context, &tokens)?),
            false => None,
        };
        let mut stream = tokenizer.filter(|_| job.run.show_text).map(|t| t.stream(true));
        if stream.is_some() {
            println!("> {text}");
        }
        let mut row = run_request(&context, &tokens, stream.as_mut())?;
        if let Some(mut stream) = stream {
            println!("{}\n", stream.finish()?);
        }
        row.check = check.map(|(kv_ok, reference)| (kv_ok, reference == row.tokens));
        rows.push(row);
    }
    print_table(&scheme.name(), job, &rows);
    if rows.iter().any(|r| r.check.is_some_and(|(kv, tokens)| !(kv && tokens))) {
        bail!("a disaggregated run differs from the single-process run");
    }
    Ok(rows.iter().map(|r| r.record(job)).collect())
}

/// Fetches `tokens`' KV cache, decodes from it and measures (printing the text to `stream`).
fn run_request<B: Backend, S>(
    cx: &JobContext<B, S>,
    tokens: &[u32],
    mut stream: Option<&mut TokenStream<'_>>,
) -> anyhow::Result<Row>
where
    S: TransferableScheme<B>,
    S::Cache: TransferableCache<B>,
{
    let before = cx.pool.wire_bytes();
    let started = Instant::now();
    let mut received = cx.fetch(tokens)?;
    let kv_bytes = received.caches.layers.iter().map(KvCache::memory_bytes).sum();
    let mut times = Vec::new();
    let decoded = decode_batch(cx.model, &mut received.caches, vec![received.logits], &cx.options, |_, token| {
        times.push(started.elapsed());
        if let Some(Ok(piece)) = stream.as_mut().map(|s| s.push(token)) {
            print!("{piece}");
            _ = std::io::stdout().flush();
        }
    })?;
    let after = cx.pool.wire_bytes();
    let gaps = times.windows(2).map(|w| w[1] - w[0]);
    let tbt = gaps.clone().sum::<Duration>().checked_div(gaps.len() as u32).unwrap_or_default();
    Ok(Row {
        prompt_tokens: tokens.len(),
        server: received.server,
        attempts: received.attempts,
        kv_bytes,
        wire_bytes: (after.0 - before.0) + (after.1 - before.1),
        arrivals: received.arrivals,
        ttft: times.first().copied().unwrap_or_default(),
        tbt,
        jct: started.elapsed(),
        tokens: decoded.tokens.into_iter().next().unwrap_or_default(),
        check: None,
    })
}

/// The requests of `run`, each with its text (or a description) and its tokens: random token ids
/// for `--prompt-tokens`, else the ChatML-wrapped `--prompt`s (or the built-in questions), which
/// need `tokenizer`.
fn requests(run: &RunArgs, tokenizer: Option<&Tokenizer>, vocab: usize) -> anyhow::Result<Vec<(String, Vec<u32>)>> {
    if !run.prompt_tokens.is_empty() {
        let prompt = |(i, &len): (usize, &usize)| {
            (format!("{len} random tokens"), random_prompt(len, vocab, run.seed.wrapping_add(i as u64)))
        };
        return Ok(run.prompt_tokens.iter().enumerate().map(prompt).collect());
    }
    let tokenizer = tokenizer.context("the model carries no tokenizer: pass --prompt-tokens")?;
    let texts: Vec<String> = match run.prompts.is_empty() {
        true => DEFAULT_PROMPTS.iter().map(|s| s.to_string()).collect(),
        false => run.prompts.clone(),
    };
    texts
        .into_iter()
        .map(|text| {
            let chat = chatml_prompt(&[ChatMessage { role: Role::User, content: text.clone() }], true);
            Ok((text, tokenizer.encode(&chat, true)?))
        })
        .collect()
}

/// Fetches the request once more only to hash its KV, and runs it in this process: returns
/// whether the received KV hashes equal a local prefill's, and the single-process tokens.
fn check_request<B: Backend, S>(cx: &JobContext<B, S>, tokens: &[u32]) -> anyhow::Result<(bool, Vec<u32>)>
where
    S: TransferableScheme<B>,
    S::Cache: TransferableCache<B>,
{
    let received = cx.fetch(tokens)?;
    let mut local = cx.model.new_cache(cx.scheme, 1, cx.device);
    cx.model.prefill_padded(&[tokens.to_vec()], &mut local, 0)?;
    let kv_ok = kv_hash(&received.caches) == kv_hash(&local);
    let mut caches = cx.model.new_cache(cx.scheme, 1, cx.device);
    let reference = generate(cx.model, &mut caches, tokens, &cx.options, |_| {})?;
    Ok((kv_ok, reference.tokens.into_iter().next().unwrap_or_default()))
}

/// SHA-256 over every layer's serialized state.
fn kv_hash<B: Backend, C: TransferableCache<B>>(caches: &LayerCaches<C>) -> [u8; 32] {
    let mut hasher = Sha256::new();
    for layer in &caches.layers {
        hasher.update(encode_state(&layer.export_state()));
    }
    hasher.finalize().into()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn print_table(scheme: &str, job: &Job, rows: &[Row]) {
    let link = job.link_gbps.map_or("unpaced".into(), |g| format!("{g} Gbit/s"));
    println!("scheme {scheme}, {:?} mode, link {link}, {} server(s)", job.run.mode, job.servers.len());
    println!(
        "{:>3} {:>6} {:>6} {:>4} {:>10} {:>10} {:>9} {:>9} {:>9} {:>8} {:>9} {:>6} {:>5} {:>6}",
        "req",
        "prompt",
        "server",
        "try",
        "KV bytes",
        "wire B",
        "layer0 ms",
        "layerN ms",
        "TTFT ms",
        "TBT ms",
        "JCT ms",
        "tokens",
        "KV=",
        "tok="
    );
    let mark = |c: Option<bool>| c.map_or("-", |ok| if ok { "yes" } else { "NO" });
    for (i, r) in rows.iter().enumerate() {
        println!(
            "{:>3} {:>6} {:>6} {:>4} {:>10} {:>10} {:>9.1} {:>9.1} {:>9.1} {:>8.1} {:>9.1} {:>6} {:>5} {:>6}",
            i,
            r.prompt_tokens,
            r.server,
            r.attempts,
            r.kv_bytes,
            r.wire_bytes,
            ms(r.arrivals.first_layer),
            ms(r.arrivals.last_layer),
            ms(r.ttft),
            ms(r.tbt),
            ms(r.jct),
            r.tokens.len(),
            mark(r.check.map(|c| c.0)),
            mark(r.check.map(|c| c.1)),
        );
    }
    let n = rows.len().max(1) as f64;
    let mean = |f: fn(&Row) -> Duration| rows.iter().map(|r| ms(f(r))).sum::<f64>() / n;
    println!(
        "mean TTFT {:.1} ms, TBT {:.1} ms, JCT {:.1} ms; wire bytes {} (--check and warm-up fetches not counted)",
        mean(|r| r.ttft),
        mean(|r| r.tbt),
        mean(|r| r.jct),
        rows.iter().map(|r| r.wire_bytes).sum::<u64>()
    );
}
