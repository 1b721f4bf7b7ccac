//! Transfer benchmark of burn-kvtransfer over TCP loopback, with a synthetic prefill engine (no
//! model): the framed transport alone, end-to-end layer-state throughput unpaced and at emulated
//! link rates, pull and push, the link's sustained utilization with requests kept in flight, and
//! many concurrent requests through one prefill server with every byte checked. With
//! `--transport nixl`, the decode side reads each layer with NIXL instead (unpaced only: the
//! emulated links pace TCP writes), over the transports `UCX_TLS` allows.
//!
//! `cargo run --release -p kvcompress-cli --bin disagg_bench`
//! `UCX_TLS=tcp UCX_NET_DEVICES=lo cargo run --release -p kvcompress-cli --bin disagg_bench --features
//! burn-kvtransfer/nixl -- --transport nixl` (with the variables `cargo xtask nixl-libs` prints)

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use burn_kvtransfer::{
    engine::SyntheticPrefill,
    nixl::{NixlConfig, NixlDecode, NixlPrefill},
    protocol::{ClientConfig, PrefillClient, PrefillServer, RequestEvent, RequestHandle, ServerConfig},
    state_codec::encode_state,
    transport::{
        tcp::{TcpConnector, TcpServer},
        Connector, FrameReader, FrameWriter, Listener, WireCounter,
    },
    wire::{BlockFrame, FrameCodec, FrameKind, Mode, ModelShape, BLOCK_HEADER_LEN},
    ModelFingerprint, SchemeDescriptor,
};
use clap::Parser;
use kvcompress_cli::{bench::median, transfer_args::TransferArgs};
use sha2::{Digest, Sha256};

/// Loopback transfer benchmark.
#[derive(Parser, Debug)]
#[command(about, long_about = None)]
struct Args {
    /// Layers per request.
    #[arg(long, default_value_t = 8)]
    layers: u32,
    /// KV heads of the synthetic states.
    #[arg(long, default_value_t = 8)]
    kv_heads: u32,
    /// Head dimension of the synthetic states.
    #[arg(long, default_value_t = 128)]
    head_dim: u32,
    /// Prompt tokens of the throughput requests (4096 gives 256 MiB with the defaults).
    #[arg(long, default_value_t = 4096)]
    tokens: u32,
    /// Timed repetitions per configuration (after one warm-up).
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Emulated link rates to measure, Gbit/s.
    #[arg(long, value_delimiter = ',', default_value = "1,10,25,100")]
    rates: Vec<f64>,
    /// Concurrent requests in the many-requests run.
    #[arg(long, default_value_t = 32)]
    concurrent: usize,
    /// Prompt tokens of each concurrent request.
    #[arg(long, default_value_t = 256)]
    concurrent_tokens: u32,
    /// Block size, KiB.
    #[arg(long, default_value_t = 256)]
    block_kib: u32,
    /// Requests in flight at once in the throughput runs: each timed repetition submits this
    /// many at once and waits for all (1: one request at a time, so its startup latency counts).
    #[arg(long, default_value_t = 1)]
    in_flight: usize,
    /// Extra TCP streams per connection that carry pulled blocks (0: one stream).
    #[arg(long, default_value_t = 0)]
    data_streams: usize,
    /// Runtime worker threads shared by both ends (default: the machine's cores). The prefill
    /// engine runs on a thread of its own.
    #[arg(long)]
    threads: Option<usize>,
    /// Length of each sustained-utilization run, ms: `--in-flight` requests kept outstanding at
    /// each emulated rate, a new one submitted as soon as one ends, and the wire
    /// bytes received over the run divided by its length (0: skip these runs).
    #[arg(long, default_value_t = 1000)]
    sustain_ms: u64,
    /// How layers move; NIXL's registered memory is raised on both sides to what the requests
    /// in flight need.
    #[command(flatten)]
    transfer: TransferArgs,
}

impl Args {
    /// Requests kept in flight (`--in-flight`, at least one).
    fn requests_in_flight(&self) -> usize {
        self.in_flight.max(1)
    }
}

fn descriptor() -> SchemeDescriptor {
    SchemeDescriptor { scheme: "dense".into(), model: ModelFingerprint::of_bytes(b"disagg_bench synthetic") }
}

/// A client whose receive pool keeps the buffers of `requests` requests of `request_bytes`, so
/// that no timed layer lands in freshly mapped memory (an eighth more for the serializations'
/// headers), reading with `reads` if given.
fn client_config(
    args: &Args,
    mode: Mode,
    requests: usize,
    request_bytes: usize,
    reads: Option<Arc<NixlDecode>>,
) -> ClientConfig {
    let defaults = ClientConfig::new(descriptor());
    let receive_pool_bytes = defaults.receive_pool_bytes.max(requests * request_bytes * 9 / 8);
    let reads = reads.map(|r| r as Arc<_>);
    ClientConfig { mode, data_streams: args.data_streams, receive_pool_bytes, reads, ..defaults }
}

/// NIXL's settings with room for `requests` requests of `request_bytes` on each side.
fn nixl_config(args: &Args, requests: usize, request_bytes: usize) -> Option<NixlConfig> {
    let config = args.transfer.nixl()?;
    Some(NixlConfig { memory_bytes: config.memory_bytes.max(requests * request_bytes * 9 / 8), ..config })
}

/// The mode of the throughput runs without an emulated link: pull and push over TCP, read
/// with NIXL.
fn unpaced_modes(args: &Args) -> Vec<Mode> {
    match args.transfer.nixl() {
        Some(_) => vec![Mode::Read],
        None => vec![Mode::Pull, Mode::Push],
    }
}

/// A server and a client connected to it, with their NIXL sides when reading.
struct Connected {
    server: PrefillServer,
    client: PrefillClient,
    reads: Option<Arc<NixlDecode>>,
    _prefill: Option<NixlPrefill>,
}

impl Connected {
    /// Bytes the client received: over the wire, and by NIXL's reads.
    fn received(&self) -> u64 {
        self.client.bytes_received() + self.reads.as_ref().map_or(0, |r| r.bytes_read())
    }
}

/// Layer-state bytes of a request of `tokens` tokens (f32 keys and values).
fn request_bytes(shape: ModelShape, tokens: u32) -> usize {
    2 * 4 * (shape.kv_heads * shape.head_dim * shape.num_layers) as usize * tokens as usize
}

/// A server on a free loopback port (emulating `link` Gbit/s) and a client connected to it in
/// `mode`, whose receive pool (and NIXL memory) holds `requests` requests of `tokens` tokens.
async fn connected(
    args: &Args,
    shape: ModelShape,
    (tokens, requests): (u32, usize),
    mode: Mode,
    link: Option<f64>,
) -> anyhow::Result<Connected> {
    let bytes = request_bytes(shape, tokens);
    let nixl = nixl_config(args, requests, bytes);
    let prefill = nixl.as_ref().map(NixlPrefill::start).transpose()?;
    let config = ServerConfig {
        block_size: args.block_kib * 1024,
        link_gbps: link,
        readable: prefill.as_ref().map(NixlPrefill::memory),
        ..ServerConfig::default()
    };
    let server = PrefillServer::new(SyntheticPrefill::new(shape, descriptor()), config);
    if let Some(prefill) = &prefill {
        prefill.free_completed(&server);
    }
    let listener = TcpServer::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?.to_string();
    let serving = server.clone();
    tokio::spawn(async move { serving.serve(listener).await });
    let reads = nixl.map(|config| NixlDecode::start(&config, None).map(Arc::new)).transpose()?;
    let config = client_config(args, mode, requests, bytes, reads.clone());
    let client = PrefillClient::connect(&TcpConnector { addr }, config).await?;
    Ok(Connected { server, client, reads, _prefill: prefill })
}

/// What a drained request gave.
struct Drained {
    /// Layer-state bytes.
    bytes: usize,
    /// SHA-256 of each layer's serialization (zeros unless asked for).
    hashes: Vec<[u8; 32]>,
    /// When its first layer arrived.
    first_layer: Instant,
}

/// Receives a request, returning its layers' state bytes and, if `hash`, their SHA-256s
/// (hashing is kept out of timed requests).
async fn drain(handle: &mut RequestHandle, layers: usize, hash: bool) -> anyhow::Result<Drained> {
    let mut hashes = vec![[0u8; 32]; layers];
    let mut bytes = 0;
    let mut first_layer = None;
    while let Some(event) = handle.next().await {
        match event? {
            RequestEvent::Layer { layer, state } => {
                first_layer.get_or_insert_with(Instant::now);
                bytes += state.byte_len();
                if hash {
                    hashes[layer] = Sha256::digest(encode_state(&state)).into();
                }
            }
            RequestEvent::Logits(_) => {
                let first_layer = first_layer.context("a request of no layers")?;
                return Ok(Drained { bytes, hashes, first_layer });
            }
        }
    }
    bail!("the request ended without its logits")
}

fn expected_hashes(shape: ModelShape, tokens: &[u32]) -> Vec<[u8; 32]> {
    (0..shape.num_layers as usize)
        .map(|l| Sha256::digest(encode_state(&SyntheticPrefill::state(shape, tokens, l))).into())
        .collect()
}

/// CPU seconds this process has used (user + system, Linux `/proc/self/stat`, USER_HZ = 100);
/// `None` elsewhere.
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

/// One configuration's timed requests.
struct Timed {
    /// Median seconds from submitting a round to its last logits.
    seconds: f64,
    /// Median seconds from submitting a round to its first layer.
    first_layer: f64,
    /// Layer-state bytes per round.
    kv_bytes: usize,
    /// Bytes received from the wire per round.
    wire_bytes: u64,
    /// Process CPU seconds per GB of layer state.
    cpu_per_gb: Option<f64>,
}

/// `reps` rounds of `args.in_flight` requests submitted at once, after a checked warm-up round.
async fn throughput(
    args: &Args,
    shape: ModelShape,
    tokens: u32,
    mode: Mode,
    link: Option<f64>,
) -> anyhow::Result<Timed> {
    let connected = connected(args, shape, (tokens, args.requests_in_flight()), mode, link).await?;
    let client = &connected.client;
    let prompt: Vec<u32> = (0..tokens).collect();
    let expected = expected_hashes(shape, &prompt);
    let (mut seconds, mut first_layers) = (Vec::new(), Vec::new());
    let mut kv_bytes = 0;
    let before = connected.received();
    let mut cpu_before = None;
    let layers = shape.num_layers as usize;
    for rep in 0..=args.reps {
        if rep == 1 {
            cpu_before = cpu_seconds();
        }
        let started = Instant::now();
        let handles =
            (0..args.requests_in_flight()).map(|_| client.submit(prompt.clone())).collect::<Result<Vec<_>, _>>()?;
        let check = rep == 0;
        let rounds: Vec<_> =
            handles.into_iter().map(|mut h| tokio::spawn(async move { drain(&mut h, layers, check).await })).collect();
        kv_bytes = 0;
        let mut first_layer = None::<Instant>;
        for round in rounds {
            let drained = round.await.context("request task")??;
            ensure!(!check || drained.hashes == expected, "received KV differs from what was sent");
            kv_bytes += drained.bytes;
            first_layer = Some(first_layer.map_or(drained.first_layer, |t| t.min(drained.first_layer)));
        }
        if !check {
            seconds.push(started.elapsed().as_secs_f64());
            first_layers.push(first_layer.context("a round of no requests")?.duration_since(started).as_secs_f64());
        }
    }
    let cpu_per_gb = cpu_before.zip(cpu_seconds()).map(|(b, a)| (a - b) / (kv_bytes as f64 * args.reps as f64 / 1e9));
    let wire_bytes = (connected.received() - before) / (args.reps as u64 + 1);
    Ok(Timed { seconds: median(seconds), first_layer: median(first_layers), kv_bytes, wire_bytes, cpu_per_gb })
}

/// Bytes per second received (over the wire, or by NIXL's reads) while `in_flight` requests
/// are kept outstanding for `args.sustain_ms` (a new one submitted as soon as one ends, after a
/// checked warm-up round) in `mode`, and the requests that ended.
async fn sustained(
    args: &Args,
    shape: ModelShape,
    tokens: u32,
    mode: Mode,
    link: Option<f64>,
) -> anyhow::Result<(f64, usize)> {
    let workers = args.requests_in_flight();
    let connected = Arc::new(connected(args, shape, (tokens, workers), mode, link).await?);
    let client = &connected.client;
    let prompt: Vec<u32> = (0..tokens).collect();
    let layers = shape.num_layers as usize;
    // The warm-up fills the receive pool with the buffers of `workers` requests.
    let handles = (0..workers).map(|_| client.submit(prompt.clone())).collect::<Result<Vec<_>, _>>()?;
    let expected = expected_hashes(shape, &prompt);
    for mut handle in handles {
        ensure!(drain(&mut handle, layers, true).await?.hashes == expected, "received KV differs from what was sent");
    }
    let started = Instant::now();
    let deadline = started + Duration::from_millis(args.sustain_ms);
    let before = connected.received();
    let tasks: Vec<_> = (0..workers)
        .map(|_| {
            let (connected, prompt) = (connected.clone(), prompt.clone());
            tokio::spawn(async move {
                let mut ended = 0;
                while Instant::now() < deadline {
                    drain(&mut connected.client.submit(prompt.clone())?, layers, false).await?;
                    ended += 1;
                }
                anyhow::Ok(ended)
            })
        })
        .collect();
    tokio::time::sleep_until(deadline.into()).await;
    let rate = (connected.received() - before) as f64 / started.elapsed().as_secs_f64();
    let mut ended = 0;
    for task in tasks {
        ended += task.await.context("request task")??;
    }
    Ok((rate, ended))
}

/// The framed transport alone: `total` bytes of 4 MiB Block frames over one loopback TCP
/// connection, written from one buffer without copies and read and CRC-checked by a
/// [`FrameReader`]. Returns GB/s.
async fn frames_only(total: usize) -> anyhow::Result<f64> {
    const FRAME: usize = 4 << 20;
    let codec = FrameCodec::new(FRAME as u32 + 64);
    let mut listener = TcpServer::bind("127.0.0.1:0").await?;
    let connector = TcpConnector { addr: listener.local_addr()?.to_string() };
    let sender = tokio::spawn(async move {
        let stream = listener.accept().await?;
        let mut writer = FrameWriter::new(stream, None, WireCounter::default());
        let data = vec![7u8; FRAME];
        let (header, trailer) = codec.envelope(FrameKind::Block, &[&BlockFrame::header(1, 0, 0), &data])?;
        for _ in 0..total / FRAME {
            writer.send_parts(&[&header, &BlockFrame::header(1, 0, 0), &data, &trailer]).await?;
        }
        writer.shutdown().await?;
        anyhow::Ok(())
    });
    let mut reader = FrameReader::new(connector.connect().await?, codec, WireCounter::default());
    let started = Instant::now();
    let mut received = 0;
    while let Ok(frame) = reader.next().await {
        received += frame.payload.len() - BLOCK_HEADER_LEN;
    }
    let seconds = started.elapsed().as_secs_f64();
    sender.await??;
    ensure!(received == total / FRAME * FRAME, "frames lost");
    Ok(received as f64 / seconds / 1e9)
}

async fn concurrent(args: &Args, shape: ModelShape) -> anyhow::Result<()> {
    // The receive pool (and NIXL's memory) at their defaults: these requests are not timed.
    let connected = connected(args, shape, (0, 0), unpaced_modes(args)[0], None).await?;
    let (server, client) = (&connected.server, &connected.client);
    let prompts: Vec<Vec<u32>> =
        (0..args.concurrent as u32).map(|r| (0..args.concurrent_tokens + r).map(|i| i * 7 + r).collect()).collect();
    let started = Instant::now();
    let handles = prompts.iter().map(|p| client.submit(p.clone())).collect::<Result<Vec<_>, _>>()?;
    let layers = shape.num_layers as usize;
    let tasks: Vec<_> =
        handles.into_iter().map(|mut h| tokio::spawn(async move { drain(&mut h, layers, true).await })).collect();
    let mut total = 0;
    let mut intact = 0;
    for (task, prompt) in tasks.into_iter().zip(&prompts) {
        let drained = task.await.context("request task")??;
        total += drained.bytes;
        intact += usize::from(drained.hashes == expected_hashes(shape, prompt));
    }
    let seconds = started.elapsed().as_secs_f64();
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.stats().store.requests > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let left = server.stats().store;
    println!(
        "{} concurrent requests, one server: {intact}/{} byte-identical, {:.1} MiB in {:.2} s ({:.2} GB/s incl. prefill), server holds {} requests / {} bytes after",
        args.concurrent,
        args.concurrent,
        total as f64 / (1 << 20) as f64,
        seconds,
        total as f64 / seconds / 1e9,
        left.requests,
        left.bytes
    );
    ensure!(intact == args.concurrent && left.requests == 0, "requests were lost or leaked");
    Ok(())
}

async fn run(args: Args) -> anyhow::Result<()> {
    let shape = ModelShape {
        num_layers: args.layers,
        kv_heads: args.kv_heads,
        heads: args.kv_heads,
        head_dim: args.head_dim,
        vocab: 1024,
    };
    let per_token = request_bytes(shape, 1);
    println!(
        "median of {} rounds of {} requests after a checked warm-up; KV = layer state bytes per round; first = until a round's first layer arrived; GB = 1e9 bytes; CPU s/GB = process CPU time (both ends) per GB",
        args.reps, args.in_flight
    );
    println!(
        "sustained = wire bytes over {} ms with {} requests kept in flight, against the link (requests ended)",
        args.sustain_ms,
        args.requests_in_flight()
    );
    println!(
        "framed transport alone (4 MiB Block frames, CRC-checked, no protocol): {:.2} GB/s",
        frames_only(2 << 30).await?
    );
    println!(
        "{:>10} {:>5} {:>8} {:>9} {:>9} {:>8} {:>9} {:>10} {:>9}",
        "link", "mode", "KV MiB", "time ms", "first ms", "KV GB/s", "% of link", "sustained", "CPU s/GB"
    );
    // The emulated links pace TCP writes: NIXL runs unpaced only.
    let rates = if args.transfer.nixl().is_some() { &[][..] } else { &args.rates[..] };
    let unpaced = unpaced_modes(&args).into_iter().map(|mode| (None, mode));
    for (link, mode) in unpaced.chain(rates.iter().map(|&g| (Some(g), Mode::Pull))) {
        // About a second of traffic at the emulated rate (at least 32 MiB, at most the full size).
        let full = args.tokens as usize;
        let tokens = match link {
            Some(g) => ((g * 1e9 / 8.0) as usize / per_token).clamp(((32 << 20) / per_token).min(full), full) as u32,
            None => args.tokens,
        };
        let timed = throughput(&args, shape, tokens, mode, link).await?;
        let link_rate = link.map(|g| g * 1e9 / 8.0);
        let share =
            |bytes_per_second: f64| link_rate.map_or("-".into(), |r| format!("{:.1}%", 100.0 * bytes_per_second / r));
        let sustained = match mode != Mode::Push && args.sustain_ms > 0 {
            true => {
                let (rate, ended) = sustained(&args, shape, tokens, mode, link).await?;
                format!("{} ({ended})", link_rate.map_or(format!("{:.2}GB/s", rate / 1e9), |_| share(rate)))
            }
            false => "-".into(),
        };
        println!(
            "{:>10} {:>5} {:>8.1} {:>9.1} {:>9.1} {:>8.2} {:>9} {sustained:>10} {:>9}",
            link.map_or("loopback".into(), |g| format!("{g} Gbit/s")),
            format!("{mode:?}").to_lowercase(),
            timed.kv_bytes as f64 / (1 << 20) as f64,
            timed.seconds * 1e3,
            timed.first_layer * 1e3,
            timed.kv_bytes as f64 / timed.seconds / 1e9,
            share(timed.wire_bytes as f64 / timed.seconds),
            timed.cpu_per_gb.map_or("-".into(), |c| format!("{c:.2}"))
        );
    }
    concurrent(&args, shape).await
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = args.threads.unwrap_or(cores).max(1);
    println!(
        "{cores} cores, {threads} runtime worker threads, {} data streams per connection, {} requests in flight (both ends in this process, over loopback TCP{})",
        args.data_streams,
        args.in_flight,
        match args.transfer.nixl() {
            Some(_) => format!("; layers read with NIXL, UCX_TLS={}", std::env::var("UCX_TLS").unwrap_or_default()),
            None => String::new(),
        }
    );
    tokio::runtime::Builder::new_multi_thread().worker_threads(threads).enable_all().build()?.block_on(run(args))
}
