//! Disaggregated inference: a prefill server process and a decode worker process that pulls each
//! request's (compressed) KV cache layer by layer over TCP (`burn-kvtransfer`).
//!
//! ```text
//! disagg demo --kv dense                      # spawns a prefill server, decodes against it, checks
//! disagg serve --listen 127.0.0.1:7070        # a prefill server
//! disagg decode --server 127.0.0.1:7070 ...   # a decode worker (several --server: least loaded)
//! disagg demo --random-model llama3-8b --prompt-tokens 8192 --backend cuda  # random weights
//! disagg sweep --kv dense --kv hack:bits=2,pi=64 --link-gbps 10,25,100 --out DIR ...
//! ```
//!
//! `--random-model` runs a model of random weights of a given shape (no files, no tokenizer:
//! requests are random token ids), for speed runs of shapes whose checkpoints are not at hand.
//!
//! The decode worker prints, per request: TTFT (submit to first token: prefill, transfer and
//! import), TBT (mean gap between later tokens), JCT (submit to last token) and the bytes on the
//! wire. `--check` also verifies that the received KV hashes equal a local prefill's and that
//! the tokens equal a single-process run with the same scheme and seed; `--json FILE` writes the
//! requests' records, with when the first and the last layer and the logits arrived.
//!
//! `sweep` runs the demo for each scheme at each link rate and writes the records, a table of
//! means (the job completion time split into prefill and transfer, until the last layer is in,
//! then the first token, then decoding; each scheme against the first one) and a plot of the job
//! completion time against the link rate.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use burn::tensor::backend::Backend;
use burn_kvcompress::{
    cache::{KvCache, LayerCaches, TransferableCache, TransferableScheme},
    generation::{decode_batch, generate, GenerateOptions, SamplingConfig},
    loading::{load_model, LoadedModel},
    paths::default_model_path,
    tokenizer::{chatml_prompt, ChatMessage, Role, Tokenizer},
};
use burn_kvtransfer::{
    decode::{fetch, Arrivals},
    engine::ModelPrefill,
    protocol::{ClientConfig, PrefillClient, PrefillPool, PrefillServer, ServerConfig},
    state_codec::encode_state,
    transport::tcp::{TcpConnector, TcpServer},
    wire::Mode,
    ModelFingerprint, SchemeDescriptor,
};
use clap::{Args, Parser, Subcommand, ValueEnum};
use examples::{
    backend_choice::{BackendChoice, KernelBackend},
    e2e_report::{group_means, jct_series, markdown_table, RequestRecord},
    plot::{plot_series, PlotSpec},
    random_model::{random_prompt, RandomShape},
    scheme_arg::{Scheme, SchemeArg},
    with_backend, with_scheme,
};
use sha2::{Digest, Sha256};

/// Disaggregated prefill/decode over burn-kvtransfer.
#[derive(Parser, Debug)]
#[command(about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run a prefill server: accepts prompts, prefills them, serves the KV cache.
    Serve(ServeArgs),
    /// Run a decode worker against one or more prefill servers.
    Decode(DecodeArgs),
    /// Spawn prefill server processes on loopback and run a decode worker against them.
    Demo(DemoArgs),
    /// Run the demo for every `--kv` scheme at every `--link-gbps` rate and write the requests'
    /// records (`e2e.json`), a table of means with each scheme's job completion time against the
    /// first scheme's (`e2e.md`) and a plot of job completion time against the link rate
    /// (`jct-vs-link.svg`) to `--out`.
    Sweep(SweepArgs),
}

/// The model both processes load, and where they run it.
#[derive(Args, Debug, Clone)]
struct ModelSource {
    /// Model: a `.gguf` file or a Hugging Face directory. Default: SmolLM2-135M-Instruct.
    #[arg(long)]
    model: Option<PathBuf>,
    /// Random weights of this shape instead of a model file, for speed runs (such a model has
    /// no tokenizer: requests are `--prompt-tokens` random token ids).
    #[arg(long, value_enum, conflicts_with = "model")]
    random_model: Option<RandomShape>,
    /// Seed of `--random-model`'s weights (both processes must use the same).
    #[arg(long, default_value_t = 0)]
    weights_seed: u64,
    /// Backend to run on.
    #[arg(long, value_enum, default_value_t = BackendChoice::Ndarray)]
    backend: BackendChoice,
}

/// Options both processes need to agree on.
#[derive(Args, Debug, Clone)]
struct ModelArgs {
    #[command(flatten)]
    source: ModelSource,
    /// KV cache scheme: `dense`, `hack:bits=2,pi=64,round=stochastic`,
    /// `pq:codebooks=books.safetensors,window=64`, `zack:rotations=rot.safetensors,rate=0.5` or
    /// `zack:rotations=rot.safetensors,rate=0.5+hack:bits=2,pi=64` or
    /// `zack:rotations=rot.safetensors,rate=0.5+pq:codebooks=reduced.safetensors` (the same
    /// spelling as `generate --kv`; both processes must load the same codebook or rotation file).
    #[arg(long, default_value = "dense", value_parser = parse_kv)]
    kv: String,
    /// Emulated rate of each side's outgoing link, Gbit/s (default: unpaced); the prefill
    /// server's connections share its link.
    #[arg(long)]
    link_gbps: Option<f64>,
}

#[derive(Args, Debug, Clone)]
struct ServeArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Address to listen on (port 0 picks a free port; the address is printed).
    #[arg(long, default_value = "127.0.0.1:7070")]
    listen: String,
    /// Block size, KiB.
    #[arg(long, default_value_t = 256)]
    block_kib: u32,
    /// Seconds a request's KV is held without pulls or completion before it is freed.
    #[arg(long, default_value_t = 30.0)]
    lease_secs: f64,
}

#[derive(Args, Debug, Clone)]
struct RunArgs {
    /// User messages to send (ChatML-wrapped); default: four built-in questions.
    #[arg(long = "prompt")]
    prompts: Vec<String>,
    /// Requests of this many random token ids instead of text (several: `64,2048`; what a
    /// `--random-model` needs); drawn from `--seed` and the request's index.
    #[arg(long = "prompt-tokens", value_delimiter = ',', conflicts_with = "prompts")]
    prompt_tokens: Vec<usize>,
    /// Tokens to generate per request.
    #[arg(long, default_value_t = 32)]
    max_new_tokens: usize,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    /// Random seed for sampling.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Who starts block transfers.
    #[arg(long, value_enum, default_value_t = ModeArg::Pull)]
    mode: ModeArg,
    /// Extra TCP streams per prefill server that carry pulled blocks, so several cores receive
    /// them (0: everything on one stream).
    #[arg(long, default_value_t = 0)]
    data_streams: usize,
    /// Also check KV hashes against a local prefill and tokens against a single-process run.
    #[arg(long)]
    check: bool,
    /// Stream each request's generated text to stdout as tokens are decoded.
    #[arg(long)]
    show_text: bool,
    /// Also write the requests' records (JSON, times in ms) to this file (`decode`, `demo`;
    /// `sweep` writes them to `e2e.json` in its `--out`).
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
struct DecodeArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    run: RunArgs,
    /// Prefill server address `host:port`; repeat for several (requests go to the least loaded).
    #[arg(long = "server", required = true)]
    servers: Vec<String>,
}

/// The prefill servers a demo spawns.
#[derive(Args, Debug, Clone)]
struct SpawnArgs {
    /// Prefill server processes to spawn.
    #[arg(long, default_value_t = 1)]
    servers: usize,
    /// Block size of the spawned servers, KiB.
    #[arg(long, default_value_t = 256)]
    block_kib: u32,
}

#[derive(Args, Debug, Clone)]
struct DemoArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    run: RunArgs,
    #[command(flatten)]
    spawn: SpawnArgs,
}

#[derive(Args, Debug, Clone)]
struct SweepArgs {
    #[command(flatten)]
    source: ModelSource,
    /// KV schemes to run, in `--kv`'s spelling; repeat for several. The first is the baseline the
    /// table compares the others with (`dense`, say).
    #[arg(long = "kv", required = true, value_parser = parse_kv)]
    schemes: Vec<String>,
    /// Emulated link rates, Gbit/s (several: `10,25,100`).
    #[arg(long = "link-gbps", value_delimiter = ',', required = true)]
    links: Vec<f64>,
    #[command(flatten)]
    run: RunArgs,
    #[command(flatten)]
    spawn: SpawnArgs,
    /// Directory for `e2e.json`, `e2e.md` and `jct-vs-link.svg` (created if missing).
    #[arg(long)]
    out: PathBuf,
}

/// `--mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ModeArg {
    /// The decode side pulls each layer once announced.
    Pull,
    /// The prefill side pushes each layer as soon as computed.
    Push,
}

/// Validates `--kv` but keeps its spelling, which the demo passes on to the servers it spawns.
fn parse_kv(s: &str) -> Result<String, String> {
    s.parse::<SchemeArg>().map(|_| s.to_string())
}

impl ModelSource {
    fn model_path(&self) -> PathBuf {
        self.model.clone().unwrap_or_else(default_model_path)
    }
}

const DEFAULT_PROMPTS: [&str; 4] = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain in two sentences why the sky is blue.",
    "List three uses of a paperclip.",
];

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?)
}

/// The model, its fingerprint, and the `--kv` scheme resolved against it.
fn load<B: Backend>(
    args: &ModelArgs,
    device: &B::Device,
) -> anyhow::Result<(LoadedModel<B>, ModelFingerprint, Scheme)> {
    let source = &args.source;
    let (path, fingerprint, mut loaded) = match source.random_model {
        Some(shape) => {
            let seed = source.weights_seed;
            (shape.label(seed), shape.fingerprint(seed), shape.load::<B>(seed, device)?)
        }
        None => {
            let path = source.model_path();
            let fingerprint =
                ModelFingerprint::of_path(&path).with_context(|| format!("hashing {}", path.display()))?;
            let loaded = load_model::<B>(&path, device).with_context(|| {
                format!("loading {} (run `cargo xtask fetch-model` for the default model)", path.display())
            })?;
            (path, fingerprint, loaded)
        }
    };
    let kv: SchemeArg = args.kv.parse().map_err(anyhow::Error::msg)?;
    let scheme = kv.resolve(&path, loaded.model.config(), Some(fingerprint))?;
    loaded.model = scheme.prepare(loaded.model)?;
    Ok((loaded, fingerprint, scheme))
}

fn serve<B: KernelBackend>(device: B::Device, args: &ServeArgs) -> anyhow::Result<()>
where
    burn_kvcompress::model::CausalLm<B>: Send,
{
    let (loaded, fingerprint, scheme) = load::<B>(&args.model, &device)?;
    with_scheme!(scheme, serve_scheme::<B, _>, (args, loaded, fingerprint, device))
}

fn serve_scheme<B: Backend, S>(
    scheme: S,
    args: &ServeArgs,
    loaded: LoadedModel<B>,
    fingerprint: ModelFingerprint,
    device: B::Device,
) -> anyhow::Result<()>
where
    burn_kvcompress::model::CausalLm<B>: Send,
    S: TransferableScheme<B> + Send + 'static,
    S::Cache: TransferableCache<B>,
{
    let config = ServerConfig {
        block_size: args.block_kib * 1024,
        lease: Duration::from_secs_f64(args.lease_secs),
        link_gbps: args.model.link_gbps,
        ..ServerConfig::default()
    };
    let server = PrefillServer::new(ModelPrefill::new(loaded.model, scheme, fingerprint, device), config);
    runtime()?.block_on(async {
        let listener = TcpServer::bind(&args.listen).await?;
        println!("listening on {}", listener.local_addr()?);
        std::io::stdout().flush()?;
        server.serve(listener).await?;
        anyhow::Ok(())
    })
}

fn decode<B: KernelBackend>(device: B::Device, args: &DecodeArgs) -> anyhow::Result<Vec<RequestRecord>> {
    let (loaded, fingerprint, scheme) = load::<B>(&args.model, &device)?;
    with_scheme!(scheme, decode_scheme::<B, _>, (args, &loaded, fingerprint, device))
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
    /// The row as a record of `args`'s scheme and link.
    fn record(&self, args: &DecodeArgs) -> RequestRecord {
        RequestRecord {
            scheme: args.model.kv.clone(),
            link_gbps: args.model.link_gbps,
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

fn decode_scheme<B: Backend, S>(
    scheme: S,
    args: &DecodeArgs,
    loaded: &LoadedModel<B>,
    fingerprint: ModelFingerprint,
    device: B::Device,
) -> anyhow::Result<Vec<RequestRecord>>
where
    S: TransferableScheme<B>,
    S::Cache: TransferableCache<B>,
{
    let tokenizer = loaded.tokenizer.as_ref();
    let mut config = ClientConfig::new(SchemeDescriptor { scheme: scheme.name(), model: fingerprint });
    config.mode = match args.run.mode {
        ModeArg::Pull => Mode::Pull,
        ModeArg::Push => Mode::Push,
    };
    config.link_gbps = args.model.link_gbps;
    config.data_streams = args.run.data_streams;
    let rt = runtime()?;
    let pool = rt.block_on(async {
        let mut clients = Vec::new();
        for addr in &args.servers {
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
        max_new_tokens: args.run.max_new_tokens,
        stop_tokens: tokenizer.and_then(|t| t.eos_id()).into_iter().collect(),
        sampling: SamplingConfig { temperature: args.run.temperature, top_p: 0.9, seed: args.run.seed },
    };
    let requests = requests(&args.run, tokenizer, loaded.model.config().vocab_size)?;
    let mut rows = Vec::new();
    for (text, tokens) in requests {
        let check = match args.run.check {
            true => Some(check_request(&rt, &pool, loaded, &scheme, &device, &tokens, &options)?),
            false => None,
        };
        let before = pool.wire_bytes();
        let started = Instant::now();
        let mut received = rt.block_on(fetch::<B, S>(&pool, &tokens, &scheme, &device, pool.clients().len()))?;
        let kv_bytes = received.caches.layers.iter().map(KvCache::memory_bytes).sum();
        let mut times = Vec::new();
        let mut stream = tokenizer.filter(|_| args.run.show_text).map(|t| t.stream(true));
        if stream.is_some() {
            println!("> {text}");
        }
        let decoded =
            decode_batch(&loaded.model, &mut received.caches, vec![received.logits], &options, |_, token| {
                times.push(started.elapsed());
                if let Some(Ok(piece)) = stream.as_mut().map(|s| s.push(token)) {
                    print!("{piece}");
                    _ = std::io::stdout().flush();
                }
            })?;
        if let Some(mut stream) = stream {
            println!("{}\n", stream.finish()?);
        }
        let after = pool.wire_bytes();
        let gaps = times.windows(2).map(|w| w[1] - w[0]);
        let tbt = gaps.clone().sum::<Duration>().checked_div(gaps.len() as u32).unwrap_or_default();
        let tokens_out = decoded.tokens.into_iter().next().unwrap_or_default();
        let check = check.map(|(kv_ok, reference)| (kv_ok, reference == tokens_out));
        rows.push(Row {
            prompt_tokens: tokens.len(),
            server: received.server,
            attempts: received.attempts,
            kv_bytes,
            wire_bytes: (after.0 - before.0) + (after.1 - before.1),
            arrivals: received.arrivals,
            ttft: times.first().copied().unwrap_or_default(),
            tbt,
            jct: started.elapsed(),
            tokens: tokens_out,
            check,
        });
    }
    print_table(&scheme.name(), args, &rows);
    if rows.iter().any(|r| r.check.is_some_and(|(kv, tokens)| !(kv && tokens))) {
        bail!("a disaggregated run differs from the single-process run");
    }
    let records: Vec<RequestRecord> = rows.iter().map(|r| r.record(args)).collect();
    if let Some(path) = &args.run.json {
        std::fs::write(path, serde_json::to_string_pretty(&records)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(records)
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
fn check_request<B: Backend, S>(
    rt: &tokio::runtime::Runtime,
    pool: &PrefillPool,
    loaded: &LoadedModel<B>,
    scheme: &S,
    device: &B::Device,
    tokens: &[u32],
    options: &GenerateOptions,
) -> anyhow::Result<(bool, Vec<u32>)>
where
    S: TransferableScheme<B>,
    S::Cache: TransferableCache<B>,
{
    let received = rt.block_on(fetch::<B, S>(pool, tokens, scheme, device, pool.clients().len()))?;
    let mut local = loaded.model.new_cache(scheme, 1, device);
    loaded.model.prefill_padded(&[tokens.to_vec()], &mut local, 0)?;
    let kv_ok = kv_hash(&received.caches) == kv_hash(&local);
    let mut caches = loaded.model.new_cache(scheme, 1, device);
    let reference = generate(&loaded.model, &mut caches, tokens, options, |_| {})?;
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

fn print_table(scheme: &str, args: &DecodeArgs, rows: &[Row]) {
    let link = args.model.link_gbps.map_or("unpaced".into(), |g| format!("{g} Gbit/s"));
    println!("scheme {scheme}, {:?} mode, link {link}, {} server(s)", args.run.mode, args.servers.len());
    println!(
        "{:>3} {:>6} {:>6} {:>4} {:>10} {:>10} {:>9} {:>8} {:>9} {:>6} {:>5} {:>6}",
        "req", "prompt", "server", "try", "KV bytes", "wire B", "TTFT ms", "TBT ms", "JCT ms", "tokens", "KV=", "tok="
    );
    let mark = |c: Option<bool>| c.map_or("-", |ok| if ok { "yes" } else { "NO" });
    for (i, r) in rows.iter().enumerate() {
        println!(
            "{:>3} {:>6} {:>6} {:>4} {:>10} {:>10} {:>9.1} {:>8.1} {:>9.1} {:>6} {:>5} {:>6}",
            i,
            r.prompt_tokens,
            r.server,
            r.attempts,
            r.kv_bytes,
            r.wire_bytes,
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
        "mean TTFT {:.1} ms, TBT {:.1} ms, JCT {:.1} ms; wire bytes {} (--check fetches not counted)",
        mean(|r| r.ttft),
        mean(|r| r.tbt),
        mean(|r| r.jct),
        rows.iter().map(|r| r.wire_bytes).sum::<u64>()
    );
}

/// A spawned prefill server process, killed when dropped.
struct Spawned(Child);

impl Drop for Spawned {
    fn drop(&mut self) {
        _ = self.0.kill();
        _ = self.0.wait();
    }
}

fn spawn_server(args: &DemoArgs) -> anyhow::Result<(Spawned, String)> {
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--kv", &args.model.kv]);
    cmd.args(["--block-kib", &args.spawn.block_kib.to_string()]);
    let source = &args.model.source;
    cmd.args(["--backend", &format!("{:?}", source.backend).to_lowercase()]);
    if let Some(model) = &source.model {
        cmd.arg("--model").arg(model);
    }
    if let Some(shape) = source.random_model {
        cmd.args(["--random-model", &shape.name(), "--weights-seed", &source.weights_seed.to_string()]);
    }
    if let Some(g) = args.model.link_gbps {
        cmd.args(["--link-gbps", &g.to_string()]);
    }
    let mut child = Spawned(cmd.stdout(Stdio::piped()).spawn()?);
    let stdout = child.0.stdout.take().context("child stdout")?;
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line)?;
    match line.trim().strip_prefix("listening on ") {
        Some(addr) => Ok((child, addr.to_string())),
        None => bail!("the prefill server did not start (said {line:?})"),
    }
}

fn demo(args: &DemoArgs) -> anyhow::Result<Vec<RequestRecord>> {
    let started = Instant::now();
    let spawned = (0..args.spawn.servers).map(|_| spawn_server(args)).collect::<anyhow::Result<Vec<_>>>()?;
    let servers: Vec<String> = spawned.iter().map(|(_, addr)| addr.clone()).collect();
    eprintln!("[{} prefill server(s) up at {servers:?} after {:.1} s]", servers.len(), started.elapsed().as_secs_f64());
    let decode_args = DecodeArgs { model: args.model.clone(), run: args.run.clone(), servers };
    with_backend!(args.model.source.backend, decode(&decode_args))
}

/// `disagg sweep`: the demo for each scheme at each link rate, then the records, the table and
/// the plot.
fn sweep(args: &SweepArgs) -> anyhow::Result<()> {
    if args.run.json.is_some() {
        bail!("sweep writes its records to e2e.json in --out: drop --json");
    }
    std::fs::create_dir_all(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    let mut records = Vec::new();
    for kv in &args.schemes {
        for &link in &args.links {
            eprintln!("[sweep: {kv} at {link} Gbit/s]");
            let model = ModelArgs { source: args.source.clone(), kv: kv.clone(), link_gbps: Some(link) };
            records.extend(demo(&DemoArgs { model, run: args.run.clone(), spawn: args.spawn.clone() })?);
        }
    }
    let json = args.out.join("e2e.json");
    std::fs::write(&json, serde_json::to_string_pretty(&records)?)
        .with_context(|| format!("writing {}", json.display()))?;
    let groups = group_means(&records);
    let table = args.out.join("e2e.md");
    std::fs::write(&table, markdown_table(&groups, &args.schemes[0]))
        .with_context(|| format!("writing {}", table.display()))?;
    let spec = PlotSpec {
        title: "Job completion time against the link rate",
        x_label: "link rate, Gbit/s",
        y_label: "mean JCT, ms",
        curves: &[],
    };
    plot_series(&args.out.join("jct-vs-link.svg"), &spec, &jct_series(&groups))?;
    println!("wrote {}, {} and jct-vs-link.svg", json.display(), table.display());
    Ok(())
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Cmd::Serve(args) => with_backend!(args.model.source.backend, serve(&args)),
        Cmd::Decode(args) => with_backend!(args.model.source.backend, decode(&args)).map(drop),
        Cmd::Demo(args) => demo(&args).map(drop),
        Cmd::Sweep(args) => sweep(&args),
    }
}
