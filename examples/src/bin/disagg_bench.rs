//! Transfer benchmark of burn-kvtransfer over TCP loopback, with a synthetic prefill engine (no
//! model): the framed transport alone, end-to-end layer-state throughput unpaced and at emulated
//! link rates, pull and push, and many concurrent requests through one prefill server with every
//! byte checked.
//!
//! `cargo run --release -p examples --bin disagg_bench`

use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use burn_kvtransfer::{
    engine::SyntheticPrefill,
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
}

fn descriptor() -> SchemeDescriptor {
    SchemeDescriptor { scheme: "dense".into(), model: ModelFingerprint::of_bytes(b"disagg_bench synthetic") }
}

fn client_config(args: &Args, mode: Mode) -> ClientConfig {
    ClientConfig { mode, data_streams: args.data_streams, ..ClientConfig::new(descriptor()) }
}

/// Starts a server on a free loopback port.
async fn start(shape: ModelShape, block_kib: u32, link_gbps: Option<f64>) -> anyhow::Result<(PrefillServer, String)> {
    let config = ServerConfig { block_size: block_kib * 1024, link_gbps, ..ServerConfig::default() };
    let server = PrefillServer::new(SyntheticPrefill::new(shape, descriptor()), config);
    let listener = TcpServer::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?.to_string();
    let serving = server.clone();
    tokio::spawn(async move { serving.serve(listener).await });
    Ok((server, addr))
}

/// Receives a request, returning its layers' state bytes and, if `hash`, their SHA-256s
/// (hashing is kept out of timed requests).
async fn drain(handle: &mut RequestHandle, layers: usize, hash: bool) -> anyhow::Result<(usize, Vec<[u8; 32]>)> {
    let mut hashes = vec![[0u8; 32]; layers];
    let mut bytes = 0;
    while let Some(event) = handle.next().await {
        match event? {
            RequestEvent::Layer { layer, state } => {
                bytes += state.byte_len();
                if hash {
                    hashes[layer] = Sha256::digest(encode_state(&state)).into();
                }
            }
            RequestEvent::Logits(_) => return Ok((bytes, hashes)),
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

/// Median seconds and KV bytes of `reps` rounds of `args.in_flight` requests submitted at once
/// (after a checked warm-up round), wire bytes per round, and CPU seconds per GB.
async fn throughput(
    args: &Args,
    shape: ModelShape,
    tokens: u32,
    mode: Mode,
    link: Option<f64>,
) -> anyhow::Result<(f64, usize, u64, Option<f64>)> {
    let (_server, addr) = start(shape, args.block_kib, link).await?;
    let client = PrefillClient::connect(&TcpConnector { addr }, client_config(args, mode)).await?;
    let prompt: Vec<u32> = (0..tokens).collect();
    let expected = expected_hashes(shape, &prompt);
    let mut seconds = Vec::new();
    let mut kv_bytes = 0;
    let before = client.bytes_received();
    let mut cpu_before = None;
    let layers = shape.num_layers as usize;
    for rep in 0..=args.reps {
        if rep == 1 {
            cpu_before = cpu_seconds();
        }
        let started = Instant::now();
        let handles =
            (0..args.in_flight.max(1)).map(|_| client.submit(prompt.clone())).collect::<Result<Vec<_>, _>>()?;
        let check = rep == 0;
        let rounds: Vec<_> =
            handles.into_iter().map(|mut h| tokio::spawn(async move { drain(&mut h, layers, check).await })).collect();
        kv_bytes = 0;
        for round in rounds {
            let (bytes, hashes) = round.await.context("request task")??;
            ensure!(!check || hashes == expected, "received KV differs from what was sent");
            kv_bytes += bytes;
        }
        if !check {
            seconds.push(started.elapsed().as_secs_f64());
        }
    }
    let cpu_per_gb = cpu_before.zip(cpu_seconds()).map(|(b, a)| (a - b) / (kv_bytes as f64 * args.reps as f64 / 1e9));
    let wire_per_round = (client.bytes_received() - before) / (args.reps as u64 + 1);
    seconds.sort_by(f64::total_cmp);
    Ok((seconds[seconds.len() / 2], kv_bytes, wire_per_round, cpu_per_gb))
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
    let (server, addr) = start(shape, args.block_kib, None).await?;
    let client = PrefillClient::connect(&TcpConnector { addr }, client_config(args, Mode::Pull)).await?;
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
        let (bytes, hashes) = task.await.context("request task")??;
        total += bytes;
        intact += usize::from(hashes == expected_hashes(shape, prompt));
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
    let per_token = 2 * 4 * args.kv_heads as usize * args.head_dim as usize * args.layers as usize;
    println!(
        "median of {} rounds of {} requests after a checked warm-up; KV = layer state bytes per round; GB = 1e9 bytes; CPU s/GB = process CPU time (both ends) per GB",
        args.reps, args.in_flight
    );
    println!(
        "framed transport alone (4 MiB Block frames, CRC-checked, no protocol): {:.2} GB/s",
        frames_only(2 << 30).await?
    );
    println!(
        "{:>10} {:>5} {:>10} {:>9} {:>10} {:>10} {:>10}",
        "link", "mode", "KV MiB", "time ms", "KV GB/s", "% of link", "CPU s/GB"
    );
    for (link, mode) in
        [(None, Mode::Pull), (None, Mode::Push)].into_iter().chain(args.rates.iter().map(|&g| (Some(g), Mode::Pull)))
    {
        // About a second of traffic at the emulated rate (at least 32 MiB, at most the full size).
        let tokens = match link {
            Some(g) => {
                ((g * 1e9 / 8.0) as usize / per_token).clamp((32 << 20) / per_token, args.tokens as usize) as u32
            }
            None => args.tokens,
        };
        let (seconds, bytes, wire, cpu) = throughput(&args, shape, tokens, mode, link).await?;
        let rate = bytes as f64 / seconds / 1e9;
        let share = link.map_or("-".into(), |g| format!("{:.1}%", 100.0 * wire as f64 / seconds / (g * 1e9 / 8.0)));
        let link = link.map_or("loopback".into(), |g| format!("{g} Gbit/s"));
        println!(
            "{link:>10} {:>5} {:>10.1} {:>9.1} {rate:>10.2} {share:>10} {:>10}",
            format!("{mode:?}").to_lowercase(),
            bytes as f64 / (1 << 20) as f64,
            seconds * 1e3,
            cpu.map_or("-".into(), |c| format!("{c:.2}"))
        );
    }
    concurrent(&args, shape).await
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = args.threads.unwrap_or(cores).max(1);
    println!(
        "{cores} cores, {threads} runtime worker threads, {} data streams per connection, {} requests in flight (both ends in this process, over loopback TCP)",
        args.data_streams, args.in_flight
    );
    tokio::runtime::Builder::new_multi_thread().worker_threads(threads).enable_all().build()?.block_on(run(args))
}
