//! Disaggregated inference: a prefill server process and a decode worker process that pulls each
//! request's (compressed) KV cache layer by layer over TCP (`burn-kvtransfer`), or reads it
//! from the server's memory with NVIDIA NIXL (`--transport nixl`, `docs/nixl.md`).
//!
//! ```text
//! disagg demo --kv dense                      # spawns a prefill server, decodes against it, checks
//! disagg demo --transport nixl --check        # the same, each layer read with NIXL (UCX)
//! disagg serve --listen 127.0.0.1:7070        # a prefill server
//! disagg decode --server 127.0.0.1:7070 ...   # a decode worker (several --server: least loaded)
//! disagg serve --etcd 127.0.0.1:2379 ...      # a prefill server that registers in etcd
//! disagg decode --etcd 127.0.0.1:2379 ...     # a decode worker of the servers registered there
//! disagg demo --random-model llama3-8b --prompt-tokens 8192 --backend cuda  # random weights
//! disagg sweep --kv dense --kv hack:bits=2,pi=64 --link-gbps 10,25,100 --out DIR ...
//! disagg report --records A/e2e.json --records B/e2e.json --out DIR  # the table and plots again
//! ```
//!
//! `--random-model` runs a model of random weights of a given shape (no files, no tokenizer:
//! requests are random token ids), for speed runs of shapes whose checkpoints are not at hand.
//!
//! Each process loads its model once: a server serves every `--kv` scheme at every `--link-gbps`
//! rate it is given, each pair on its own port, and `demo` and `sweep` run every pair against
//! one spawned server process (or `--servers` of them).
//!
//! The decode worker prints, per request: TTFT (arrival to first token: queueing, prefill,
//! transfer and import), TBT (mean gap between later tokens), JCT (arrival to last token), the
//! time spent queueing and the bytes on the wire. Requests run one at a time, or arrive at each
//! `--request-rate` (requests/s, on a fixed schedule or, with `--arrivals poisson`, by a seeded
//! Poisson process): then they are prefilled and transferred in arrival order while earlier ones
//! decode, and decoded `--max-batch` at a time (continuous batching: a request joins the running
//! batch once its cache is in and fits the `--kv-budget-gb`, and leaves when done; 1 by default),
//! so a rate above what decoding sustains makes a queue; `--concurrency N` keeps up to N of them
//! at the servers at once. `--check` also verifies that each request's received KV hashes like a
//! local prefill's and that its tokens equal a single-process run with the same scheme and seed;
//! `--json FILE` writes the requests' records, with when the first and the last layer and the
//! logits arrived and every gap between tokens.
//!
//! `sweep` runs the demo for each scheme at each link rate (and request rate) and writes the
//! records, a table of means (the job completion time split into queueing, prefill and transfer
//! until the last layer is in, then the first token, then decoding; each scheme against the first
//! one), a table of the load each run made (requests served per second, the most decoded together,
//! 99th percentiles of TTFT, TBT and JCT), the most load each scheme serves with its 99th
//! percentile gap between tokens within `--tbt-target-ms`, and plots of the job completion time
//! against the link rate and, of the JCT, the TBT tail and the requests served, against the
//! request rate.

mod base;
mod measurements;
mod memory;
mod registry;
mod serve;
mod shutdown;
mod spawn;
mod stats;
mod worker;

use burn_kvschemes::SchemeSpec;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context};
use base::BaseModel;
use clap::{ArgGroup, Args, Parser, Subcommand, ValueEnum};
use kvcompress_cli::{
    backend_choice::{BackendChoice, KernelBackend},
    e2e_report::{
        describe_arrivals, group_means, load_table, markdown_table, series, within_tbt_table, ArrivalProcess, Axis,
        Quantity, RequestRecord,
    },
    plot::{plot_series, PlotSpec},
    random_model::RandomShape,
    transfer_args::TransferArgs,
    weights_arg::WeightsArg,
    with_backend,
};
use registry::RegistryArgs;
use serve::serve;
use spawn::spawn_server;
use worker::{run_job, Job, Servers};

/// Disaggregated prefill/decode over burn-kvtransfer.
#[derive(Parser, Debug)]
#[command(about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run a prefill server: accepts prompts, prefills them, serves the KV cache (one port per
    /// `--kv` scheme and `--link-gbps` rate, one model load).
    Serve(ServeArgs),
    /// Run a decode worker against one or more prefill servers.
    Decode(DecodeArgs),
    /// Spawn prefill server processes on loopback and run a decode worker against them.
    Demo(DemoArgs),
    /// Run the demo for every `--kv` scheme at every `--link-gbps` rate (and `--request-rate`)
    /// and write the requests' records (`e2e.json`), a table of means with each scheme's job
    /// completion time against the first scheme's (`e2e.md`) and plots of job completion time
    /// against the link rate (`jct-vs-link.svg`) and, given request rates, against the request
    /// rate (`jct-vs-rate.svg`) to `--out`.
    Sweep(SweepArgs),
    /// Write the table and the plots that `sweep` writes from record files of earlier runs
    /// (`e2e.json` of `sweep`, `--json` of `decode` and `demo`), merged in the order given.
    Report(ReportArgs),
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
    /// Float type of the weights and of the products with them (KV caches and attention stay
    /// f32; f16 and bf16 need wgpu or cuda). Both processes must use the same.
    #[arg(long, value_enum, default_value_t = WeightsArg::F32)]
    weights: WeightsArg,
    /// Run the model's weight products, RMSNorms and rotary embedding with Burn's ops instead of
    /// the backend's kernels (one or two launches each; their baseline; ndarray has none).
    /// `--plain-matmul` is its older name.
    #[arg(long, alias = "plain-matmul")]
    plain_ops: bool,
    /// Backend to run on.
    #[arg(long, value_enum, default_value_t = BackendChoice::Ndarray)]
    backend: BackendChoice,
}

/// The model and the one (scheme, link rate) pair a decode worker runs.
#[derive(Args, Debug, Clone)]
struct DecodeModelArgs {
    #[command(flatten)]
    source: ModelSource,
    /// KV cache scheme: `dense` (or `dense:storage=f16`), `hack:bits=2,pi=64,round=stochastic`,
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

/// The (scheme, link rate) pairs a server serves or a demo runs: every `--kv` at every
/// `--link-gbps`, schemes outermost.
#[derive(Args, Debug, Clone)]
struct Pairs {
    /// KV cache schemes, in `--kv`'s spelling (see `decode --help`); repeat for several. The
    /// first is the baseline `sweep`'s table compares the others with.
    #[arg(long = "kv", default_value = "dense", value_parser = parse_kv)]
    schemes: Vec<String>,
    /// Emulated rates of each side's outgoing link, Gbit/s (several: `10,25,100`; none:
    /// unpaced); a prefill server's connections of one rate share its link.
    #[arg(long = "link-gbps", value_delimiter = ',')]
    links: Vec<f64>,
}

impl Pairs {
    /// The link rates, None for unpaced.
    fn links(&self) -> Vec<Option<f64>> {
        match self.links.is_empty() {
            true => vec![None],
            false => self.links.iter().copied().map(Some).collect(),
        }
    }

    /// How many pairs.
    fn len(&self) -> usize {
        self.schemes.len() * self.links().len()
    }
}

#[derive(Args, Debug, Clone)]
struct ServeArgs {
    #[command(flatten)]
    source: ModelSource,
    #[command(flatten)]
    pairs: Pairs,
    /// Address of the first pair (port 0 picks free ports; with several pairs, the next pairs
    /// listen on the next ports). Each pair's address is printed.
    #[arg(long, default_value = "127.0.0.1:7070")]
    listen: String,
    /// Block size, KiB.
    #[arg(long, default_value_t = 256)]
    block_kib: u32,
    /// Seconds a request's KV is held without pulls or completion before it is freed.
    #[arg(long, default_value_t = 30.0, value_parser = parse_seconds)]
    lease_secs: f64,
    /// Seconds a connection may take to send its Hello, or to accept a frame, before it is
    /// given up (the frames queued for it, and the layers they reference, are then dropped).
    #[arg(long, default_value_t = 30.0, value_parser = parse_seconds)]
    io_timeout_secs: f64,
    /// Also answer queries for the server's counters on this address (port 0: a free port),
    /// printed as `stats on ADDR` after the pairs' addresses: each connection gets one line of
    /// JSON (per pair: requests held under leases, their bytes, leases expired, bytes of layers
    /// still referenced, bytes on the wire; the process's resident memory) and is closed.
    #[arg(long)]
    stats_listen: Option<String>,
    #[command(flatten)]
    registry: RegistryArgs,
    /// Seconds the registration outlives this process: etcd deletes its keys this long after the
    /// last keep-alive (sent every third of it), so a killed server leaves the registry within
    /// it. Whole seconds, at least etcd's minimum (2 with its default timings).
    #[arg(long, default_value_t = 10.0, value_parser = parse_seconds, requires = "etcd")]
    etcd_lease_secs: f64,
    /// Host the registry gives decode workers for this server's pairs (each with its port).
    /// Default: `--listen`'s host, which must then not be 0.0.0.0 or ::.
    #[arg(long, value_name = "HOST", requires = "etcd")]
    etcd_advertise: Option<String>,
    /// On SIGTERM or SIGINT the server leaves the registry at once (it revokes its lease), keeps
    /// serving for a second, then waits for the requests it holds to be completed by their decode
    /// workers before it exits: at most this many seconds in all.
    #[arg(long, default_value_t = 30.0, value_parser = parse_seconds)]
    drain_secs: f64,
    /// How layers reach decode workers: with `--transport nixl` they may also read them (the
    /// server registers memory with NIXL; workers that pull are served as well).
    #[command(flatten)]
    transfer: TransferArgs,
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
    /// Requests per second arriving by `--arrivals` (several: `0.05,0.1`, each a timed run of
    /// all the requests). The requests are prefilled and transferred in arrival order while
    /// earlier ones decode, and decoded in arrival order, `--max-batch` at a time: above the rate
    /// decoding sustains, they queue. Default: one request at a time, each submitted once the
    /// previous one has finished.
    #[arg(long = "request-rate", value_delimiter = ',', value_parser = parse_rate)]
    request_rates: Vec<f64>,
    /// With `--request-rate`: how requests arrive. `fixed`: request `i` at `i / rate` s.
    /// `poisson`: a Poisson process of that rate (exponential gaps drawn from `--arrival-seed`),
    /// the first request at 0.
    #[arg(long, value_enum, default_value_t = ArrivalsArg::Fixed)]
    arrivals: ArrivalsArg,
    /// Seed of `--arrivals poisson`'s gaps (the same seed gives the same schedule at each rate,
    /// scaled).
    #[arg(long, default_value_t = 0)]
    arrival_seed: u64,
    /// With `--request-rate`: the most requests decoded together (continuous batching: a request
    /// joins the running batch once its cache is in, leaves when it has its tokens, and every
    /// step decodes each request of the batch at its own length). 1: one at a time.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    max_batch: u16,
    /// With `--request-rate`: the most requests outstanding at the prefill servers at once
    /// (arrived or waiting to, their caches not yet handed to decoding), each submitted once it
    /// has arrived. 1: a request is submitted once the one before it is in. Above 1 their
    /// transfers share the wire, so each request's wire bytes in the records are the run's mean.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    concurrency: u16,
    /// With `--request-rate`: the decode side's KV memory budget, GB (1e9 bytes). A request is
    /// sized at arrival (its cache at prompt plus new tokens, in its scheme's format) and joins
    /// the batch in arrival order once it fits in what the running requests leave (no
    /// overtaking); a request larger than the whole budget ends the run with an error. Default:
    /// no budget.
    #[arg(long, value_parser = parse_budget)]
    kv_budget_gb: Option<f64>,
    /// With `--request-rate`: the most of a joining request's cache imported (uploaded to the
    /// device) between two decode steps of the running batch, MB, at least one layer a step (0:
    /// a layer a step). Default: the whole cache before the next step. Each step waits for the
    /// uploads before it (about 0.7 ms a MB of an 8K-token f16 cache on an H200 host): smaller
    /// spreads a joining request's stall over more steps, shorter each, and delays its first
    /// token (`results/e2e/batched-8b-f16-h200/` measures both).
    #[arg(long, value_parser = parse_import_mb)]
    import_mb_per_step: Option<f64>,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    /// Random seed for sampling.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Who starts block transfers (over `--transport tcp`).
    #[arg(long, value_enum, default_value_t = ModeArg::Pull)]
    mode: ModeArg,
    /// How layers move (a demo's servers get the same flags).
    #[command(flatten)]
    transfer: TransferArgs,
    /// Longest silence from a prefill server while a request is outstanding, seconds (also
    /// bounds connecting): past it the connection fails with a timeout, and the request is
    /// retried on another server if there is one.
    #[arg(long, default_value_t = 30.0, value_parser = parse_seconds)]
    io_timeout_secs: f64,
    /// Extra TCP streams per prefill server that carry pulled blocks, so several cores receive
    /// them (0: everything on one stream).
    #[arg(long, default_value_t = 0)]
    data_streams: usize,
    /// Receive into pageable host memory even where the decode device can page-lock it (CUDA).
    /// By default a CUDA worker's received layers land in recycled page-locked buffers, which the
    /// import copies to the device by DMA (several times faster than from pageable memory); the
    /// receive pool's buffers then stay locked in host memory while the worker runs, at most
    /// `--kv-budget-gb` of them at once (layers past that land in pageable memory).
    #[arg(long)]
    pageable_receive: bool,
    /// Also check each request's KV hash (of the caches it was decoded from, as received) against
    /// a local prefill's and its tokens against a single-process run; a difference fails the run.
    /// The hashing is timed with the request's first token.
    #[arg(long)]
    check: bool,
    /// Stream each request's generated text to stdout as tokens are decoded.
    #[arg(long)]
    show_text: bool,
    /// Untimed rounds each scheme runs before its first timed requests (at its first link rate
    /// and request rate), so that kernel compilation and autotuning stay out of the records; a
    /// round is one request of each distinct prompt length, one at a time, and with a request
    /// rate and `--max-batch` above 1, two requests of the first prompt decoded together.
    #[arg(long, default_value_t = 0)]
    warmup: usize,
    /// Also write the requests' records (JSON, times in ms) to this file (`decode`, `demo`;
    /// `sweep` writes them to `e2e.json` in its `--out`).
    #[arg(long)]
    json: Option<PathBuf>,
}

/// The prefill servers come from `--server` or from `--etcd`, one of the two.
#[derive(Args, Debug, Clone)]
#[command(group(ArgGroup::new("prefill_servers").required(true).args(["servers", "etcd"])))]
struct DecodeArgs {
    #[command(flatten)]
    model: DecodeModelArgs,
    #[command(flatten)]
    run: RunArgs,
    /// Prefill server address `host:port`; repeat for several (requests go to the least loaded).
    /// The default way; `--etcd` finds the servers in a registry instead.
    // `--etcd-prefix`'s own `requires = "etcd"` does not fire here: clap excuses an argument
    // that conflicts with one present (`--etcd` with `--server`, through the group).
    #[arg(long = "server", conflicts_with = "etcd_prefix")]
    servers: Vec<String>,
    #[command(flatten)]
    registry: RegistryArgs,
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
    /// CUDA device of the spawned servers (their `CUDA_VISIBLE_DEVICES`): on a host of two GPUs,
    /// `--server-gpu 1` prefills on the second while this process decodes on the first.
    #[arg(long)]
    server_gpu: Option<String>,
}

#[derive(Args, Debug, Clone)]
struct DemoArgs {
    #[command(flatten)]
    source: ModelSource,
    #[command(flatten)]
    pairs: Pairs,
    #[command(flatten)]
    run: RunArgs,
    #[command(flatten)]
    spawn: SpawnArgs,
}

#[derive(Args, Debug, Clone)]
struct SweepArgs {
    #[command(flatten)]
    demo: DemoArgs,
    /// Directory for `e2e.json`, `e2e.md` and the plots (created if missing; `e2e.json` is
    /// rewritten after every pair, so an interrupted sweep keeps what it measured).
    #[arg(long)]
    out: PathBuf,
    /// The target of the 99th percentile gap between tokens, ms: the report gives the most
    /// requests per second each scheme served within it.
    #[arg(long, default_value_t = 50.0)]
    tbt_target_ms: f64,
}

#[derive(Args, Debug, Clone)]
struct ReportArgs {
    /// A record file; repeat for several.
    #[arg(long = "records", required = true)]
    records: Vec<PathBuf>,
    /// The scheme the others are compared with, in `--kv`'s spelling (default: the first
    /// record's).
    #[arg(long)]
    baseline: Option<String>,
    /// Directory for `e2e.md` and the plots (created if missing).
    #[arg(long)]
    out: PathBuf,
    /// The target of the 99th percentile gap between tokens, ms (see `sweep --help`).
    #[arg(long, default_value_t = 50.0)]
    tbt_target_ms: f64,
}

/// `--arrivals`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ArrivalsArg {
    /// A fixed schedule, evenly spaced.
    Fixed,
    /// A Poisson process, seeded by `--arrival-seed`.
    Poisson,
}

/// `--mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ModeArg {
    /// The decode side pulls each layer once announced.
    Pull,
    /// The prefill side pushes each layer as soon as computed.
    Push,
}

/// A `--request-rate`: a positive, finite number of requests per second.
fn parse_rate(s: &str) -> Result<f64, String> {
    finite_from(s, false).ok_or_else(|| format!("`{s}` is not a positive number of requests per second"))
}

/// A `--kv-budget-gb`: a positive, finite number of GB.
fn parse_budget(s: &str) -> Result<f64, String> {
    finite_from(s, false).ok_or_else(|| format!("`{s}` is not a positive number of GB"))
}

/// A number of seconds: positive and finite.
fn parse_seconds(s: &str) -> Result<f64, String> {
    finite_from(s, false).ok_or_else(|| format!("`{s}` is not a positive number of seconds"))
}

/// An `--import-mb-per-step`: a finite number of MB, 0 or more.
fn parse_import_mb(s: &str) -> Result<f64, String> {
    finite_from(s, true).ok_or_else(|| format!("`{s}` is not a number of MB (0 or more)"))
}

/// `s` as a finite number above 0 (or at 0, with `zero`).
fn finite_from(s: &str, zero: bool) -> Option<f64> {
    s.parse::<f64>().ok().filter(|&x| x.is_finite() && (x > 0.0 || (zero && x == 0.0)))
}

impl RunArgs {
    /// `--import-mb-per-step` in bytes (the whole cache without it).
    fn import_bytes_per_step(&self) -> usize {
        self.import_mb_per_step.map_or(usize::MAX, |mb| (mb * 1e6) as usize)
    }

    /// The KV budget in bytes, if any.
    fn kv_budget_bytes(&self) -> Option<usize> {
        self.kv_budget_gb.map(|gb| (gb * 1e9) as usize)
    }

    /// How requests arrive at a rate.
    fn arrival_process(&self) -> ArrivalProcess {
        match self.arrivals {
            ArrivalsArg::Fixed => ArrivalProcess::Fixed,
            ArrivalsArg::Poisson => ArrivalProcess::Poisson { seed: self.arrival_seed },
        }
    }

    /// The request rates, None for one request at a time.
    fn request_rates(&self) -> Vec<Option<f64>> {
        match self.request_rates.is_empty() {
            true => vec![None],
            false => self.request_rates.iter().copied().map(Some).collect(),
        }
    }
}

/// Validates `--kv` but keeps its spelling, which the demo passes on to the servers it spawns.
fn parse_kv(s: &str) -> Result<String, String> {
    s.parse::<SchemeSpec>().map(|_| s.to_string())
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?)
}

/// Writes `records` as JSON to `path`.
fn write_records(path: &Path, records: &[RequestRecord]) -> anyhow::Result<()> {
    std::fs::write(path, serde_json::to_string_pretty(records)?).with_context(|| format!("writing {}", path.display()))
}

/// `disagg decode`: one pair against running servers.
fn decode<B: KernelBackend>(device: B::Device, args: &DecodeArgs) -> anyhow::Result<()> {
    let base = BaseModel::<B>::load(&args.model.source, &device)?;
    let model = &args.model;
    let prepared = base.prepared(&model.kv)?;
    let mut records = Vec::new();
    let servers = match args.registry.given() {
        true => Servers::Registry(&args.registry),
        false => Servers::Listed(&args.servers),
    };
    for (rate_index, request_rate) in args.run.request_rates().into_iter().enumerate() {
        let warmup = if rate_index == 0 { args.run.warmup } else { 0 };
        let job = Job {
            kv: &model.kv,
            link_gbps: model.link_gbps,
            request_rate,
            arrivals: args.run.arrival_process(),
            run: &args.run,
            servers,
            warmup,
        };
        records.extend(run_job(&base, &prepared, &job, &device)?);
    }
    args.run.json.as_deref().map_or(Ok(()), |path| write_records(path, &records))?;
    memory::report_peak_rss();
    Ok(())
}

/// Every pair of `args` against spawned servers (one model load in each process): the records,
/// which `after_pair` also sees as they grow (a sweep saves them after each pair).
fn demo<B: KernelBackend>(
    device: B::Device,
    args: &DemoArgs,
    after_pair: &dyn Fn(&[RequestRecord]) -> anyhow::Result<()>,
) -> anyhow::Result<Vec<RequestRecord>> {
    let started = Instant::now();
    // The servers load their models while this process loads its own.
    let starting = (0..args.spawn.servers)
        .map(|_| spawn_server(&args.source, &args.pairs, &args.spawn, &args.run.transfer))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let base = BaseModel::<B>::load(&args.source, &device)?;
    let spawned =
        (starting.into_iter()).map(|server| server.listening(args.pairs.len())).collect::<anyhow::Result<Vec<_>>>()?;
    eprintln!("[{} prefill server(s) up after {:.1} s]", spawned.len(), started.elapsed().as_secs_f64());
    let mut records = Vec::new();
    // Pairs in the order the servers listen: schemes outermost.
    let mut pair = 0;
    for kv in &args.pairs.schemes {
        let prepared = base.prepared(kv)?;
        for (link_index, link_gbps) in args.pairs.links().into_iter().enumerate() {
            let servers: Vec<String> = spawned.iter().map(|(_, addresses)| addresses[pair].clone()).collect();
            let link = link_gbps.map_or("an unpaced link".into(), |g| format!("{g} Gbit/s"));
            for (rate_index, request_rate) in args.run.request_rates().into_iter().enumerate() {
                let arrivals = args.run.arrival_process();
                let rate = describe_arrivals(request_rate, arrivals);
                eprintln!("[{kv} at {link}, {rate}]");
                let warmup = if link_index == 0 && rate_index == 0 { args.run.warmup } else { 0 };
                let servers = Servers::Listed(&servers);
                let job = Job { kv, link_gbps, request_rate, arrivals, run: &args.run, servers, warmup };
                records.extend(run_job(&base, &prepared, &job, &device)?);
                after_pair(&records)?;
            }
            pair += 1;
        }
    }
    Ok(records)
}

/// `disagg sweep`: the demo for each scheme at each link rate, then the records, the table and
/// the plot.
fn sweep(args: &SweepArgs) -> anyhow::Result<()> {
    let demo_args = &args.demo;
    if demo_args.run.json.is_some() {
        bail!("sweep writes its records to e2e.json in --out: drop --json");
    }
    if demo_args.pairs.links.is_empty() {
        bail!("sweep plots against the link rate: give --link-gbps");
    }
    std::fs::create_dir_all(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    let json = args.out.join("e2e.json");
    let save = |records: &[RequestRecord]| write_records(&json, records);
    let records = with_backend!(demo_args.source.backend, demo(demo_args, &save))?;
    write_report(&records, &demo_args.pairs.schemes[0], args.tbt_target_ms, &args.out)?;
    println!("wrote {} and the report", json.display());
    Ok(())
}

/// `disagg report`: the table and the plots of records written by earlier runs.
fn report(args: &ReportArgs) -> anyhow::Result<()> {
    let mut records: Vec<RequestRecord> = Vec::new();
    for path in &args.records {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        records.extend(
            serde_json::from_str::<Vec<RequestRecord>>(&text).with_context(|| format!("parsing {}", path.display()))?,
        );
    }
    let baseline = match (&args.baseline, records.first()) {
        (Some(baseline), _) => baseline.clone(),
        (None, Some(first)) => first.scheme.clone(),
        (None, None) => bail!("the record files hold no requests"),
    };
    std::fs::create_dir_all(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    write_report(&records, &baseline, args.tbt_target_ms, &args.out)
}

/// Writes `records`' tables to `out/e2e.md`: the means against `baseline`'s and, where requests
/// arrived at a rate, the load each run made and the most load each scheme served within
/// `tbt_target_ms`; and the plots: job completion time against the link rate (`jct-vs-link.svg`)
/// and, at rates, the mean JCT, the 99th percentile TBT and the requests served against the
/// request rate (`jct-vs-rate.svg`, `tbt-p99-vs-rate.svg`, `served-vs-rate.svg`).
fn write_report(records: &[RequestRecord], baseline: &str, tbt_target_ms: f64, out: &Path) -> anyhow::Result<()> {
    let groups = group_means(records);
    let at_rates = records.iter().any(|r| r.request_rate.is_some());
    let mut text = markdown_table(&groups, baseline);
    if at_rates {
        text += &format!("\n{}\n{}", load_table(&groups), within_tbt_table(&groups, baseline, tbt_target_ms));
    }
    let table = out.join("e2e.md");
    std::fs::write(&table, text).with_context(|| format!("writing {}", table.display()))?;
    let spec = PlotSpec {
        title: "Job completion time against the link rate",
        x_label: "link rate, Gbit/s",
        y_label: "mean JCT, ms",
        curves: &[],
    };
    plot_series(&out.join("jct-vs-link.svg"), &spec, &series(&groups, Axis::LinkRate, Quantity::MeanJct))?;
    if at_rates {
        let plots = [
            ("jct-vs-rate.svg", "Job completion time against the request rate", "mean JCT, ms", Quantity::MeanJct),
            ("tbt-p99-vs-rate.svg", "Gaps between tokens against the request rate", "p99 TBT, ms", Quantity::P99Tbt),
            ("served-vs-rate.svg", "Requests served against the request rate", "served requests/s", Quantity::Served),
        ];
        for (file, title, y_label, quantity) in plots {
            let spec = PlotSpec { title, x_label: "requests per second", y_label, ..spec };
            plot_series(&out.join(file), &spec, &series(&groups, Axis::RequestRate, quantity))?;
        }
    }
    println!("wrote {} and the plots", table.display());
    Ok(())
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Cmd::Serve(args) => with_backend!(args.source.backend, serve(&args)),
        Cmd::Decode(args) => with_backend!(args.model.source.backend, decode(&args)),
        Cmd::Demo(args) => {
            let records = with_backend!(args.source.backend, demo(&args, &|_| Ok(())))?;
            args.run.json.as_deref().map_or(Ok(()), |path| write_records(path, &records))
        }
        Cmd::Sweep(args) => sweep(&args),
        Cmd::Report(args) => report(&args),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `disagg ARGS`'s parse, or clap's message.
    fn parse(args: &str) -> Result<Cmd, String> {
        Cli::try_parse_from(["disagg"].into_iter().chain(args.split_whitespace()))
            .map(|cli| cli.command)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_worker_takes_its_servers_from_a_list_or_from_etcd_not_both() {
        let listed = parse("decode --server a:1 --server b:2").unwrap();
        assert!(matches!(listed, Cmd::Decode(d) if d.servers == ["a:1", "b:2"] && !d.registry.given()));
        let registered = parse("decode --etcd h:2379,g:2379 --etcd-prefix /p").unwrap();
        assert!(matches!(registered, Cmd::Decode(d) if d.registry.etcd == ["h:2379", "g:2379"]
            && d.registry.etcd_prefix == "/p" && d.servers.is_empty()));
        let both = parse("decode --server a:1 --etcd h:2379").unwrap_err();
        assert!(both.contains("cannot be used with"), "{both}");
        let neither = parse("decode").unwrap_err();
        assert!(neither.contains("--server") && neither.contains("--etcd"), "{neither}");
        let stray_prefix = parse("decode --server a:1 --etcd-prefix /p").unwrap_err();
        assert!(stray_prefix.contains("cannot be used with '--etcd-prefix <PREFIX>'"), "{stray_prefix}");
        let prefix_alone = parse("decode --etcd-prefix /p").unwrap_err();
        assert!(prefix_alone.contains("--etcd <ENDPOINTS>"), "{prefix_alone}");
    }

    #[test]
    fn a_server_registers_only_when_given_etcd() {
        let plain = parse("serve").unwrap();
        assert!(matches!(plain, Cmd::Serve(s) if !s.registry.given()));
        let registered = parse("serve --etcd h:2379 --etcd-lease-secs 3 --etcd-advertise 10.0.0.5").unwrap();
        assert!(matches!(registered, Cmd::Serve(s) if s.registry.given() && s.etcd_lease_secs == 3.0
            && s.etcd_advertise.as_deref() == Some("10.0.0.5")));
        for orphan in ["serve --etcd-lease-secs 3", "serve --etcd-advertise h"] {
            assert!(parse(orphan).unwrap_err().contains("--etcd <ENDPOINTS>"), "{orphan}");
        }
        assert!(parse("serve --etcd h:2379 --etcd-lease-secs 0").is_err());
    }
}
