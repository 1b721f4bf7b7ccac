//! The decode worker: pulls each request's KV cache from the prefill servers of one (scheme, link)
//! pair, decodes, and measures; either one request at a time, or requests arriving at a rate
//! (on a fixed schedule or by a Poisson process), pulled (prefilled and transferred) in arrival
//! order on one thread while the requests before them are imported and decoded, batched, on
//! another.

use burn_kvschemes::{with_scheme, AnyScheme};
use std::convert::Infallible;
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use burn::tensor::backend::Backend;
use burn_kvcompress::{
    cache::{device_host_allocator, KvCache, LayerCaches, LimitedAllocator, TransferableCache, TransferableScheme},
    generation::{generate, GenerateOptions, Sampler, SamplingConfig},
    model::{CausalLm, Logits},
    tokenizer::{chatml_prompt, ChatMessage, Role, TokenStream, Tokenizer},
};
use burn_kvtransfer::{
    decode::{fetch, Received},
    nixl::NixlDecode,
    protocol::{ClientConfig, PrefillClient, PrefillPool},
    state_codec::encode_state,
    transport::tcp::TcpConnector,
    wire::Mode,
    ModelFingerprint, SchemeDescriptor,
};
use kvcompress_cli::{
    backend_choice::KernelBackend,
    e2e_report::{ArrivalProcess, RequestRecord},
    random_model::random_prompt,
};
use sha2::{Digest, Sha256};

mod batching;
mod fetching;

use crate::{
    measurements::{print_table, Row},
    registry::{self, RegistryArgs, Watched},
    runtime, BaseModel, ModeArg, RunArgs,
};
use batching::{batch_policy, run_at_rate};

/// One decode run: a (scheme, link rate) pair, the requests' options and the servers of the pair.
pub struct Job<'a> {
    /// The scheme in `--kv`'s spelling.
    pub kv: &'a str,
    /// The emulated link rate (None: unpaced).
    pub link_gbps: Option<f64>,
    /// Requests per second arriving by `arrivals` (None: one request at a time).
    pub request_rate: Option<f64>,
    /// How requests arrive at `request_rate`.
    pub arrivals: ArrivalProcess,
    /// The requests and how to run them.
    pub run: &'a RunArgs,
    /// Where the prefill servers of this pair are.
    pub servers: Servers<'a>,
    /// Untimed rounds (one request of each distinct prompt length) before the timed requests;
    /// at a request rate with `--max-batch` above 1, followed by two requests decoded together.
    pub warmup: usize,
}

/// Where a job's prefill servers are.
#[derive(Clone, Copy)]
pub enum Servers<'a> {
    /// At these addresses.
    Listed(&'a [String]),
    /// In this registry (those of the job's scheme, model and link rate).
    Registry(&'a RegistryArgs),
}

impl std::fmt::Display for Servers<'_> {
    /// How many servers, or where they are found.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Listed(addresses) => write!(f, "{} server(s)", addresses.len()),
            Self::Registry(args) => write!(f, "servers of etcd at {} under {}", args.etcd.join(","), args.etcd_prefix),
        }
    }
}

/// A job's prefill servers, connected.
enum Connected {
    Listed(PrefillPool),
    Registry(Watched),
}

impl Connected {
    /// Connects to `servers` with `config` (on `rt`), those of a registry at `link_gbps`.
    fn connect(
        rt: &tokio::runtime::Runtime,
        servers: Servers,
        config: ClientConfig,
        link_gbps: Option<f64>,
    ) -> anyhow::Result<Self> {
        rt.block_on(async {
            match servers {
                Servers::Listed(addresses) => {
                    let mut clients = Vec::new();
                    for addr in addresses {
                        let connector = TcpConnector { addr: addr.clone() };
                        let client = PrefillClient::connect(&connector, config.clone()).await;
                        clients.push(client.with_context(|| format!("connecting to {addr}"))?);
                    }
                    Ok(Self::Listed(PrefillPool::new(clients)))
                }
                Servers::Registry(args) => Ok(Self::Registry(registry::watch(args, config, link_gbps).await?)),
            }
        })
    }

    fn pool(&self) -> &PrefillPool {
        match self {
            Self::Listed(pool) => pool,
            Self::Registry(watched) => watched.pool(),
        }
    }
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
    (model, scheme): &(CausalLm<B>, AnyScheme),
    job: &Job,
    device: &B::Device,
) -> anyhow::Result<Vec<RequestRecord>> {
    with_scheme!(scheme.clone(), decode_scheme::<B, _>, (job, model, base.tokenizer(), base.fingerprint, device))
}

/// The prefill servers of a job and the runtime their connections run on: what the fetching
/// thread of a job at a request rate borrows (it receives layer states into host memory and does
/// no work on the device, so that the thread that decodes imports them: CubeCL backends run each
/// thread's work on a stream of its own).
#[derive(Clone, Copy)]
struct Puller<'a> {
    rt: &'a tokio::runtime::Runtime,
    pool: &'a PrefillPool,
}

/// What fetching a request's KV cache into caches needs.
struct Fetcher<'a, B: Backend, S> {
    puller: Puller<'a>,
    scheme: &'a S,
    device: &'a B::Device,
}

/// A request's KV cache (or the states it is imported from), received, and when its phases
/// began.
struct Fetched<R> {
    received: R,
    prompt_tokens: usize,
    /// Bytes on the wire for it, both directions.
    wire_bytes: u64,
    /// When it arrived.
    arrived: Instant,
    /// When it was submitted to a prefill server (after the requests before it were fetched).
    submitted: Instant,
    /// When its caches (or states) and logits were in.
    ready: Instant,
}

impl<R> Fetched<R> {
    /// The same request with `f` of what was received.
    fn map<T>(self, f: impl FnOnce(R) -> T) -> Fetched<T> {
        match self.try_map(|received| Ok::<T, Infallible>(f(received))) {
            Ok(fetched) => fetched,
            Err(never) => match never {},
        }
    }

    /// The same request with `f` of what was received, or `f`'s error.
    fn try_map<T, E>(self, f: impl FnOnce(R) -> Result<T, E>) -> Result<Fetched<T>, E> {
        let Self { received, prompt_tokens, wire_bytes, arrived, submitted, ready } = self;
        Ok(Fetched { received: f(received)?, prompt_tokens, wire_bytes, arrived, submitted, ready })
    }
}

impl<B: Backend, S> Fetcher<'_, B, S>
where
    S: TransferableScheme<B>,
    S::Cache: TransferableCache<B>,
{
    /// `tokens`' KV cache pulled from the pool (a failed server's request retried on the others),
    /// imported on this thread as its layers arrive.
    fn fetch(&self, tokens: &[u32]) -> anyhow::Result<Received<S::Cache>> {
        let Puller { rt, pool } = self.puller;
        let fetched = rt.block_on(fetch::<B, S>(pool, tokens, self.scheme, self.device, pool.len()));
        fetched.with_context(|| self.puller.failed_fetch(tokens))
    }
}

impl Puller<'_> {
    /// What failed when fetching `tokens`' KV cache failed (the transfer error is its cause).
    fn failed_fetch(&self, tokens: &[u32]) -> String {
        let servers = self.pool.len();
        format!("fetching the KV cache of a {}-token prompt from {servers} prefill server(s)", tokens.len())
    }

    /// `fetch` (of caches or of states) of the request `tokens` that arrived at `arrived`, timed.
    fn timed<R>(
        &self,
        tokens: &[u32],
        arrived: Instant,
        fetch: impl FnOnce(&[u32]) -> anyhow::Result<R>,
    ) -> anyhow::Result<Fetched<R>> {
        let start = self.start_fetch();
        let received = fetch(tokens)?;
        Ok(self.fetched(start, received, tokens, arrived))
    }

    /// Bytes on the wire over all the pool's connections, both directions.
    fn wire_bytes(&self) -> u64 {
        let (sent, received) = self.pool.wire_bytes();
        sent + received
    }

    /// A fetch submitted now.
    fn start_fetch(&self) -> FetchStart {
        FetchStart { wire_bytes: self.wire_bytes(), submitted: Instant::now() }
    }

    /// The request `tokens` (arrived at `arrived`, its fetch begun at `start`), `received` now.
    fn fetched<R>(&self, start: FetchStart, received: R, tokens: &[u32], arrived: Instant) -> Fetched<R> {
        let ready = Instant::now();
        let wire_bytes = self.wire_bytes() - start.wire_bytes;
        Fetched { received, prompt_tokens: tokens.len(), wire_bytes, arrived, submitted: start.submitted, ready }
    }
}

/// Where a fetch began: the pool's wire bytes then, and when it was submitted.
struct FetchStart {
    wire_bytes: u64,
    submitted: Instant,
}

/// What every request of a job shares.
struct JobContext<'a, B: Backend, S> {
    fetcher: Fetcher<'a, B, S>,
    model: &'a CausalLm<B>,
    options: GenerateOptions,
    /// Whether each request's received caches are hashed ([`kv_hash`]) for `--check`.
    check: bool,
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
    config.io_timeout = Duration::from_secs_f64(job.run.io_timeout_secs);
    if !job.run.pageable_receive {
        config.receive_allocator = match (device_host_allocator::<B>(device), job.run.kv_budget_bytes()) {
            (Some(locked), Some(budget)) => Some(Arc::new(LimitedAllocator::new(locked, budget))),
            (locked, _) => locked,
        };
    }
    if let Some(nixl) = job.run.transfer.nixl() {
        // Received layers land in the memory registered with NIXL, itself page-locked where
        // the receive allocator is.
        config.reads = Some(Arc::new(NixlDecode::start(&nixl, config.receive_allocator.clone())?));
        config.mode = Mode::Read;
    }
    let rt = runtime()?;
    let servers = Connected::connect(&rt, job.servers, config, job.link_gbps)?;
    let result = decode_with_pool(&scheme, job, model, tokenizer, device, (&rt, servers.pool()));
    report_connections(servers.pool());
    result
}

/// Says on stderr which of `pool`'s connections failed and which received corrupt frames (whose
/// blocks were pulled again): what a run survived, or why it failed.
fn report_connections(pool: &PrefillPool) {
    for (i, client) in pool.clients() {
        if let Some(failure) = client.failure() {
            eprintln!("[prefill server {i} at {}: connection failed: {failure}]", client.peer());
        }
        let corrupt = client.corrupt_frames();
        if corrupt > 0 {
            eprintln!("[prefill server {i} at {}: {corrupt} corrupt Block frame(s) detected]", client.peer());
        }
    }
}

/// [`decode_scheme`]'s requests, run against a connected pool (and the runtime it runs on).
fn decode_with_pool<B: Backend, S>(
    scheme: &S,
    job: &Job,
    model: &CausalLm<B>,
    tokenizer: Option<&Tokenizer>,
    device: &B::Device,
    (rt, pool): (&tokio::runtime::Runtime, &PrefillPool),
) -> anyhow::Result<Vec<RequestRecord>>
where
    S: TransferableScheme<B>,
    S::Cache: TransferableCache<B>,
{
    let options = GenerateOptions {
        max_new_tokens: job.run.max_new_tokens,
        stop_tokens: tokenizer.and_then(|t| t.eos_id()).into_iter().collect(),
        sampling: SamplingConfig { temperature: job.run.temperature, top_p: 0.9, seed: job.run.seed },
    };
    let fetcher = Fetcher { puller: Puller { rt, pool }, scheme, device };
    let context = JobContext { fetcher, model, options, check: job.run.check };
    let requests = requests(job.run, tokenizer, model.config().vocab_size)?;
    let mut one_per_length: Vec<&[u32]> = Vec::new();
    for (_, tokens) in &requests {
        if !one_per_length.iter().any(|w| w.len() == tokens.len()) {
            one_per_length.push(tokens);
        }
    }
    for tokens in (0..job.warmup).flat_map(|_| &one_per_length) {
        let fetcher = &context.fetcher;
        let now = Instant::now();
        context.decode(fetcher.puller.timed(tokens, now, |t| fetcher.fetch(t))?, None, now)?;
    }
    let policy = batch_policy(job.run);
    let first = requests.first().filter(|_| job.warmup > 0 && job.request_rate.is_some() && policy.max_batch > 1);
    if let Some(first) = first {
        // Steps that decode several requests run kernels a lone request never does, compiled on
        // first use: without this round, the timed run's first join stalled every running
        // request for 1.3–2.1 s on an H200 (`results/e2e/pinned-import-8b-f16-h200/`).
        run_at_rate(&context, &[first.clone(), first.clone()], &[Duration::ZERO; 2], &policy)?;
    }
    let checks = match job.run.check {
        true => requests.iter().map(|(_, tokens)| check_request(&context, tokens).map(Some)).collect(),
        false => Ok(vec![None; requests.len()]),
    }?;
    let mut rows = match job.request_rate {
        None => run_one_at_a_time(&context, &requests, tokenizer.filter(|_| job.run.show_text))?,
        Some(rate) => {
            let arrivals = job.arrivals.times(rate, requests.len());
            let puller = context.fetcher.puller;
            let before = puller.wire_bytes();
            let mut rows = run_at_rate(&context, &requests, &arrivals, &policy)?;
            if policy.in_flight > 1 {
                // Requests outstanding together share the wire: each gets the run's mean.
                spread_wire_bytes(&mut rows, puller.wire_bytes() - before);
            }
            rows
        }
    };
    for (row, check) in rows.iter_mut().zip(checks) {
        row.check = check.map(|(local_hash, reference)| (row.kv_hash == Some(local_hash), reference == row.tokens));
    }
    print_table(&scheme.name(), job, &rows);
    if rows.iter().any(|r| r.check.is_some_and(|(kv, tokens)| !(kv && tokens))) {
        bail!("a disaggregated run differs from the single-process run");
    }
    Ok(rows.iter().map(|r| r.record(job)).collect())
}

/// Sets each of `rows`' wire bytes to its share of `total`, the bytes the run of them moved.
fn spread_wire_bytes(rows: &mut [Row], total: u64) {
    let n = rows.len();
    for (row, share) in rows.iter_mut().zip(shares(total, n)) {
        row.wire_bytes = share;
    }
}

/// `total` split into `n` shares that differ by at most 1 and add up to it (the first take the
/// remainder).
fn shares(total: u64, n: usize) -> impl Iterator<Item = u64> {
    let n = n.max(1) as u64;
    (0..n).map(move |i| total / n + u64::from(i < total % n))
}

/// Runs `requests` one at a time, each arriving when the previous one has finished (printing
/// their text as they decode when `show_text` gives a tokenizer).
fn run_one_at_a_time<B: Backend, S>(
    cx: &JobContext<B, S>,
    requests: &[(String, Vec<u32>)],
    show_text: Option<&Tokenizer>,
) -> anyhow::Result<Vec<Row>>
where
    S: TransferableScheme<B>,
    S::Cache: TransferableCache<B>,
{
    let mut rows = Vec::new();
    let run_start = Instant::now();
    for (text, tokens) in requests {
        let mut stream = show_text.map(|t| t.stream(true));
        if stream.is_some() {
            println!("> {text}");
        }
        let fetcher = &cx.fetcher;
        let fetched = fetcher.puller.timed(tokens, Instant::now(), |t| fetcher.fetch(t))?;
        rows.push(cx.decode(fetched, stream.as_mut(), run_start)?);
        if let Some(mut stream) = stream {
            println!("{}\n", stream.finish()?);
        }
    }
    Ok(rows)
}

/// A step's logits `[rows, 1, vocab]` on the host, row after row.
fn host_logits<B: Backend>(logits: burn::tensor::Tensor<B, 3>) -> anyhow::Result<Vec<f32>> {
    logits.into_data().convert::<f32>().into_vec().map_err(|e| anyhow::anyhow!("logits: {e:?}"))
}

/// A request being decoded: its row so far, its sampler and when each of its tokens came.
struct Decoding {
    row: Row,
    sampler: Sampler,
    arrived: Instant,
    /// Each new token's time from the request's arrival.
    times: Vec<Duration>,
}

impl Decoding {
    /// Its newest token.
    fn last_token(&self) -> u32 {
        *self.row.tokens.last().expect("a decoding request has its first token")
    }

    /// Picks the next token from `logits` (`[vocab]`); returns it.
    fn push(&mut self, logits: &[f32]) -> u32 {
        let token = self.sampler.pick(logits);
        self.row.tokens.push(token);
        self.times.push(self.arrived.elapsed());
        token
    }

    /// Whether it has all its tokens: `max_new_tokens`, or a stop token.
    fn finished(&self, options: &GenerateOptions) -> bool {
        self.row.tokens.len() >= options.max_new_tokens || options.stop_tokens.contains(&self.last_token())
    }

    /// Its row, timed, its arrival counted from `run_start`.
    fn finish(mut self, run_start: Instant) -> Row {
        self.row.token_gaps = self.times.windows(2).map(|w| w[1] - w[0]).collect();
        let gaps = &self.row.token_gaps;
        self.row.tbt = gaps.iter().sum::<Duration>().checked_div(gaps.len() as u32).unwrap_or_default();
        self.row.ttft = self.times.first().copied().unwrap_or_default();
        self.row.jct = self.arrived.elapsed();
        self.row.arrival = self.arrived.saturating_duration_since(run_start);
        self.row
    }
}

impl<B: Backend, S> JobContext<'_, B, S>
where
    S: TransferableScheme<B>,
    S::Cache: TransferableCache<B>,
{
    /// A fetched request's decoding, its first token picked from the prompt's logits, and its
    /// caches (imported from `import_began` on, timed as decoding).
    fn start(&self, fetched: Fetched<Received<S::Cache>>, import_began: Instant) -> (Decoding, LayerCaches<S::Cache>) {
        let Fetched { received, prompt_tokens, wire_bytes, arrived, submitted, ready } = fetched;
        let row = Row {
            prompt_tokens,
            server: received.server,
            attempts: received.attempts,
            kv_bytes: received.caches.layers.iter().map(KvCache::memory_bytes).sum(),
            wire_bytes,
            arrivals: received.arrivals,
            queue: (submitted - arrived) + import_began.saturating_duration_since(ready),
            ttft: Duration::ZERO,
            tbt: Duration::ZERO,
            jct: Duration::ZERO,
            arrival: Duration::ZERO,
            token_gaps: Vec::new(),
            peak_batch: 1,
            reserved_bytes: None,
            tokens: Vec::new(),
            kv_hash: self.check.then(|| kv_hash(&received.caches)),
            check: None,
        };
        // The sampler a batch of one seeds (`generation::decode_batch`'s row 0).
        let mut decoding = Decoding { row, sampler: Sampler::new(self.options.sampling), arrived, times: Vec::new() };
        decoding.push(&received.logits);
        (decoding, received.caches)
    }

    /// Decodes a fetched request alone and measures it (printing its text to `stream`; its
    /// arrival counted from `run_start`).
    fn decode(
        &self,
        fetched: Fetched<Received<S::Cache>>,
        mut stream: Option<&mut TokenStream<'_>>,
        run_start: Instant,
    ) -> anyhow::Result<Row> {
        let (mut decoding, mut caches) = self.start(fetched, Instant::now());
        let mut show = |token: u32| {
            if let Some(Ok(piece)) = stream.as_mut().map(|s| s.push(token)) {
                print!("{piece}");
                _ = std::io::stdout().flush();
            }
        };
        show(decoding.last_token());
        while !decoding.finished(&self.options) {
            let logits = host_logits(self.model.forward(&[vec![decoding.last_token()]], &mut caches, Logits::Last)?)?;
            show(decoding.push(&logits));
        }
        Ok(decoding.finish(run_start))
    }
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

/// Runs the request in this process: returns the KV hash of a local prefill ([`kv_hash`]), for
/// the hash of the caches the run received, and the single-process tokens.
fn check_request<B: Backend, S>(cx: &JobContext<B, S>, tokens: &[u32]) -> anyhow::Result<([u8; 32], Vec<u32>)>
where
    S: TransferableScheme<B>,
    S::Cache: TransferableCache<B>,
{
    let fetcher = &cx.fetcher;
    let mut local = cx.model.new_cache(fetcher.scheme, 1, fetcher.device);
    cx.model.prefill_padded(&[tokens.to_vec()], &mut local, 0)?;
    let mut caches = cx.model.new_cache(fetcher.scheme, 1, fetcher.device);
    let reference = generate(cx.model, &mut caches, tokens, &cx.options, |_| {})?;
    Ok((kv_hash(&local), reference.tokens.into_iter().next().unwrap_or_default()))
}

/// SHA-256 over every layer's serialized state.
fn kv_hash<B: Backend, C: TransferableCache<B>>(caches: &LayerCaches<C>) -> [u8; 32] {
    let mut hasher = Sha256::new();
    for layer in &caches.layers {
        hasher.update(encode_state(&layer.export_state()));
    }
    hasher.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::shares;

    #[test]
    fn shares_of_the_wire_add_up_and_differ_by_at_most_one() {
        assert_eq!(shares(10, 4).collect::<Vec<_>>(), [3, 3, 2, 2]);
        assert_eq!(shares(8, 4).collect::<Vec<_>>(), [2; 4]);
        assert_eq!(shares(3, 5).collect::<Vec<_>>(), [1, 1, 1, 0, 0]);
        assert_eq!(shares(7, 0).collect::<Vec<_>>(), [7]);
    }
}
