//! The decode worker: pulls each request's KV cache from the prefill servers of one (scheme, link)
//! pair, decodes, and measures; either one request at a time, or requests arriving at a fixed
//! rate, pulled (prefilled and transferred) in arrival order on one thread while the requests
//! before them are imported and decoded, one at a time in arrival order, on another.

use burn_kvschemes::{with_scheme, AnyScheme};
use std::collections::VecDeque;
use std::io::Write;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use burn::tensor::backend::Backend;
use burn_kvcompress::{
    cache::{KvCache, LayerCaches, RaggedBatch, TransferableCache, TransferableScheme},
    generation::{generate, Admission, GenerateOptions, Sampler, SamplingConfig},
    model::{CausalLm, Logits},
    tokenizer::{chatml_prompt, ChatMessage, Role, TokenStream, Tokenizer},
};
use burn_kvtransfer::{
    decode::{fetch, fetch_states, Received, ReceivedStates},
    protocol::{ClientConfig, PrefillClient, PrefillPool},
    state_codec::encode_state,
    transport::tcp::TcpConnector,
    wire::Mode,
    ModelFingerprint, SchemeDescriptor,
};
use examples::{backend_choice::KernelBackend, e2e_report::RequestRecord, random_model::random_prompt};
use sha2::{Digest, Sha256};

use crate::{
    measurements::{print_table, Row},
    runtime, BaseModel, ModeArg, RunArgs,
};

/// One decode run: a (scheme, link rate) pair, the requests' options and the servers of the pair.
pub struct Job<'a> {
    /// The scheme in `--kv`'s spelling.
    pub kv: &'a str,
    /// The emulated link rate (None: unpaced).
    pub link_gbps: Option<f64>,
    /// Requests per second arriving on a fixed schedule (None: one request at a time).
    pub request_rate: Option<f64>,
    /// The requests and how to run them.
    pub run: &'a RunArgs,
    /// Prefill server addresses serving this pair.
    pub servers: &'a [String],
    /// Untimed rounds (one request of each distinct prompt length) before the timed requests.
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
    (model, scheme): &(CausalLm<B>, AnyScheme),
    job: &Job,
    device: &B::Device,
) -> anyhow::Result<Vec<RequestRecord>> {
    with_scheme!(scheme.clone(), decode_scheme::<B, _>, (job, model, base.tokenizer(), base.fingerprint, device))
}

/// The prefill servers of a job and the runtime their connections run on: what the fetching
/// thread of a job at a request rate borrows (it does no work on the device).
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

impl<B: Backend, S> Fetcher<'_, B, S>
where
    S: TransferableScheme<B>,
    S::Cache: TransferableCache<B>,
{
    /// `tokens`' KV cache pulled from the pool (a failed server's request retried on the others),
    /// imported on this thread as its layers arrive.
    fn fetch(&self, tokens: &[u32]) -> anyhow::Result<Received<S::Cache>> {
        let Puller { rt, pool } = self.puller;
        Ok(rt.block_on(fetch::<B, S>(pool, tokens, self.scheme, self.device, pool.clients().len()))?)
    }
}

impl Puller<'_> {
    /// `tokens`' layer states pulled from the pool, in host memory (no work on the device, so
    /// that the thread that decodes imports them: CubeCL backends run each thread's work on a
    /// stream of its own).
    fn fetch_states(&self, tokens: &[u32]) -> anyhow::Result<ReceivedStates> {
        Ok(self.rt.block_on(fetch_states(self.pool, tokens, self.pool.clients().len()))?)
    }

    /// `fetch` (of caches or of states) of the request `tokens` that arrived at `arrived`, timed.
    fn timed<R>(
        &self,
        tokens: &[u32],
        arrived: Instant,
        fetch: impl FnOnce(&[u32]) -> anyhow::Result<R>,
    ) -> anyhow::Result<Fetched<R>> {
        let before = self.pool.wire_bytes();
        let submitted = Instant::now();
        let received = fetch(tokens)?;
        let ready = Instant::now();
        let after = self.pool.wire_bytes();
        let wire_bytes = (after.0 - before.0) + (after.1 - before.1);
        Ok(Fetched { received, prompt_tokens: tokens.len(), wire_bytes, arrived, submitted, ready })
    }
}

/// What every request of a job shares.
struct JobContext<'a, B: Backend, S> {
    fetcher: Fetcher<'a, B, S>,
    model: &'a CausalLm<B>,
    options: GenerateOptions,
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
    let fetcher = Fetcher { puller: Puller { rt: &rt, pool: &pool }, scheme: &scheme, device };
    let context = JobContext { fetcher, model, options };
    let requests = requests(job.run, tokenizer, model.config().vocab_size)?;
    let mut one_per_length: Vec<&[u32]> = Vec::new();
    for (_, tokens) in &requests {
        if !one_per_length.iter().any(|w| w.len() == tokens.len()) {
            one_per_length.push(tokens);
        }
    }
    for tokens in (0..job.warmup).flat_map(|_| &one_per_length) {
        let fetcher = &context.fetcher;
        context.decode(fetcher.puller.timed(tokens, Instant::now(), |t| fetcher.fetch(t))?, Ok, None)?;
    }
    let checks = match job.run.check {
        true => requests.iter().map(|(_, tokens)| check_request(&context, tokens).map(Some)).collect(),
        false => Ok(vec![None; requests.len()]),
    }?;
    let mut rows = match job.request_rate {
        None => run_one_at_a_time(&context, &requests, tokenizer.filter(|_| job.run.show_text))?,
        Some(rate) => run_at_rate(&context, &requests, rate, job.run.max_batch.into(), job.run.kv_budget_bytes())?,
    };
    for (row, check) in rows.iter_mut().zip(checks) {
        row.check = check.map(|(kv_ok, reference)| (kv_ok, reference == row.tokens));
    }
    print_table(&scheme.name(), job, &rows);
    if rows.iter().any(|r| r.check.is_some_and(|(kv, tokens)| !(kv && tokens))) {
        bail!("a disaggregated run differs from the single-process run");
    }
    Ok(rows.iter().map(|r| r.record(job)).collect())
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
    for (text, tokens) in requests {
        let mut stream = show_text.map(|t| t.stream(true));
        if stream.is_some() {
            println!("> {text}");
        }
        let fetcher = &cx.fetcher;
        let fetched = fetcher.puller.timed(tokens, Instant::now(), |t| fetcher.fetch(t))?;
        rows.push(cx.decode(fetched, Ok, stream.as_mut())?);
        if let Some(mut stream) = stream {
            println!("{}\n", stream.finish()?);
        }
    }
    Ok(rows)
}

/// Runs `requests` arriving `rate` per second, request `i` at `i / rate` s: a thread pulls their
/// layer states into host memory in arrival order (each submitted once it has arrived and the
/// one before it is in) while this one imports and decodes those that are in. Up to `max_batch`
/// decode together (continuous batching): a request joins the running batch when its states are
/// in and there is room, in arrival order, and leaves when it has its tokens; each step decodes
/// every request of the batch, each at its own length ([`RaggedBatch`]). With 1, one at a time
/// in arrival order. All the device's work stays on this thread: with the caches imported on the
/// pulling thread (a stream of its own under CubeCL), a request decoded while the next one was
/// imported decoded other tokens in 3 runs of 21 on an H200.
fn run_at_rate<B: Backend, S>(
    cx: &JobContext<B, S>,
    requests: &[(String, Vec<u32>)],
    rate: f64,
    max_batch: usize,
    kv_budget: Option<usize>,
) -> anyhow::Result<Vec<Row>>
where
    S: TransferableScheme<B>,
    S::Cache: TransferableCache<B>,
{
    let gap = Duration::from_secs_f64(1.0 / rate);
    let puller = &cx.fetcher.puller;
    std::thread::scope(|scope| {
        let (sender, receiver) = mpsc::channel();
        let start = Instant::now();
        scope.spawn(move || {
            for (i, (_, tokens)) in requests.iter().enumerate() {
                let arrived = start + gap * i as u32;
                std::thread::sleep(arrived.saturating_duration_since(Instant::now()));
                let fetched = puller.timed(tokens, arrived, |t| puller.fetch_states(t));
                let failed = fetched.is_err();
                // The decoding side hung up (it failed): stop fetching.
                if sender.send(fetched).is_err() || failed {
                    break;
                }
            }
        });
        let Fetcher { scheme, device, .. } = cx.fetcher;
        let import = |states: ReceivedStates| Ok(states.import::<B, S>(scheme, device)?);
        let mut batch = RaggedBatch::new(cx.model.config().num_layers);
        let mut admission = Admission::new(kv_budget.unwrap_or(usize::MAX));
        // Requests whose states are in, waiting for admission, in arrival order.
        let mut waiting: VecDeque<Fetched<ReceivedStates>> = VecDeque::new();
        // The running requests in the batch's row order, with their arrival indices.
        let mut running: Vec<(usize, Decoding)> = Vec::new();
        let mut rows: Vec<Option<Row>> = requests.iter().map(|_| None).collect();
        let (mut received, mut joined) = (0, 0);
        loop {
            // Take every request whose states are in; with nothing running or waiting, wait.
            while received < requests.len() {
                let fetched = match running.is_empty() && waiting.is_empty() {
                    true => receiver.recv().context("the fetching thread stopped")?,
                    false => match receiver.try_recv() {
                        Ok(fetched) => fetched,
                        Err(mpsc::TryRecvError::Empty) => break,
                        Err(mpsc::TryRecvError::Disconnected) => bail!("the fetching thread stopped"),
                    },
                }?;
                let bytes = final_cache_bytes(&fetched.received, fetched.prompt_tokens, cx.options.max_new_tokens);
                admission.arrive(received as u64, bytes).context("the KV budget (--kv-budget-gb)")?;
                waiting.push_back(fetched);
                received += 1;
            }
            // Admitted requests join, in arrival order, while the batch has room.
            while running.len() < max_batch && admission.admit_next().is_some() {
                let fetched = waiting.pop_front().expect("an admitted request is waiting");
                let (decoding, caches) = cx.start(fetched, import)?;
                batch.join(caches)?;
                running.push((joined, decoding));
                joined += 1;
            }
            for row in (0..running.len()).rev() {
                if running[row].1.finished(&cx.options) {
                    batch.leave(row)?;
                    let (index, decoding) = running.remove(row);
                    admission.release(index as u64)?;
                    rows[index] = Some(decoding.finish());
                }
            }
            if running.is_empty() {
                match joined == requests.len() {
                    true => break,
                    false => continue,
                }
            }
            let tokens: Vec<Vec<u32>> = running.iter().map(|(_, d)| vec![d.last_token()]).collect();
            let logits = host_logits(cx.model.forward(&tokens, batch.caches(), Logits::Last)?)?;
            let vocab = logits.len() / running.len();
            for ((_, decoding), row_logits) in running.iter_mut().zip(logits.chunks(vocab)) {
                decoding.push(row_logits);
            }
        }
        Ok(rows.into_iter().map(|row| row.expect("every request decoded")).collect())
    })
}

/// The bytes a request's caches will hold once it has its tokens, for the KV budget: its
/// received states' bytes (the scheme's format at the prompt's length) scaled from
/// `prompt_tokens` to `prompt_tokens + new_tokens` slots. Exact for dense; an upper bound for the
/// formats whose float windows stay the same size. The buffers' spare room (up to 256 slots of a
/// dense cache) is not counted.
fn final_cache_bytes(states: &ReceivedStates, prompt_tokens: usize, new_tokens: usize) -> usize {
    let bytes: usize = states.states.iter().flat_map(|s| &s.tensors).map(|t| t.bytes.len()).sum();
    (bytes * (prompt_tokens + new_tokens)).div_ceil(prompt_tokens.max(1))
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

    /// Its row, timed.
    fn finish(mut self) -> Row {
        let gaps = self.times.windows(2).map(|w| w[1] - w[0]);
        self.row.tbt = gaps.clone().sum::<Duration>().checked_div(gaps.len() as u32).unwrap_or_default();
        self.row.ttft = self.times.first().copied().unwrap_or_default();
        self.row.jct = self.arrived.elapsed();
        self.row
    }
}

impl<B: Backend, S> JobContext<'_, B, S>
where
    S: TransferableScheme<B>,
    S::Cache: TransferableCache<B>,
{
    /// A fetched request's caches made by `import` (on this thread, timed as decoding) and its
    /// first token picked from the prompt's logits.
    fn start<R>(
        &self,
        fetched: Fetched<R>,
        import: impl FnOnce(R) -> anyhow::Result<Received<S::Cache>>,
    ) -> anyhow::Result<(Decoding, LayerCaches<S::Cache>)> {
        let Fetched { received, prompt_tokens, wire_bytes, arrived, submitted, ready } = fetched;
        let decode_start = Instant::now();
        let received = import(received)?;
        let row = Row {
            prompt_tokens,
            server: received.server,
            attempts: received.attempts,
            kv_bytes: received.caches.layers.iter().map(KvCache::memory_bytes).sum(),
            wire_bytes,
            arrivals: received.arrivals,
            queue: (submitted - arrived) + (decode_start - ready),
            ttft: Duration::ZERO,
            tbt: Duration::ZERO,
            jct: Duration::ZERO,
            tokens: Vec::new(),
            check: None,
        };
        // The sampler a batch of one seeds (`generation::decode_batch`'s row 0).
        let mut decoding = Decoding { row, sampler: Sampler::new(self.options.sampling), arrived, times: Vec::new() };
        decoding.push(&received.logits);
        Ok((decoding, received.caches))
    }

    /// Decodes a fetched request alone, its caches first made by `import`, and measures it
    /// (printing its text to `stream`).
    fn decode<R>(
        &self,
        fetched: Fetched<R>,
        import: impl FnOnce(R) -> anyhow::Result<Received<S::Cache>>,
        mut stream: Option<&mut TokenStream<'_>>,
    ) -> anyhow::Result<Row> {
        let (mut decoding, mut caches) = self.start(fetched, import)?;
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
        Ok(decoding.finish())
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

/// Fetches the request once more only to hash its KV, and runs it in this process: returns
/// whether the received KV hashes equal a local prefill's, and the single-process tokens.
fn check_request<B: Backend, S>(cx: &JobContext<B, S>, tokens: &[u32]) -> anyhow::Result<(bool, Vec<u32>)>
where
    S: TransferableScheme<B>,
    S::Cache: TransferableCache<B>,
{
    let fetcher = &cx.fetcher;
    let received = fetcher.fetch(tokens)?;
    let mut local = cx.model.new_cache(fetcher.scheme, 1, fetcher.device);
    cx.model.prefill_padded(&[tokens.to_vec()], &mut local, 0)?;
    let kv_ok = kv_hash(&received.caches) == kv_hash(&local);
    let mut caches = cx.model.new_cache(fetcher.scheme, 1, fetcher.device);
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
