//! Read mode end to end with NIXL: byte-identical layers against pulled ones, layers that do not
//! fit the registered memory pulled instead, the completion notification freeing the server,
//! refusals, the lease, a killed prefill server, a missing library, and SmolLM2 with each scheme.
//!
//! Needs the NIXL libraries, so every test is ignored in a plain `cargo test`: `cargo xtask test`
//! installs them and runs this binary's ignored tests with `LD_LIBRARY_PATH` and
//! `NIXL_PLUGIN_DIR` set, UCX over TCP on loopback (`UCX_TLS=tcp UCX_NET_DEVICES=lo`) and one
//! test thread (NIXL can deadlock under a multithreaded harness; [`SERIAL`] also keeps the tests
//! apart under any harness). Without the libraries every test fails with the error that says so.

#[path = "integration/common.rs"]
mod common;
#[path = "integration/model_run.rs"]
mod model_run;

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use burn_kvcompress::{backend::NdArray, cache::DenseScheme, cache::TransferableCache};
use burn_kvtransfer::{
    decode::fetch,
    engine::PrefillEngine,
    nixl::{NixlConfig, NixlDecode, NixlPrefill},
    protocol::{ClientConfig, PrefillClient, PrefillPool, PrefillServer, ServerConfig},
    state_codec::encode_state,
    transport::{
        tcp::{TcpConnector, TcpServer},
        FrameReader, FrameWriter, WireCounter,
    },
    wire::{ErrorCode, FrameCodec, Message, Mode},
    ModelFingerprint, SchemeDescriptor, TransferError,
};
use common::*;
use model_run::{disaggregated_run_matches_single_process, hack_scheme, pq_scheme, Transfer};
use tokio::sync::{Mutex, MutexGuard};

/// Held by each test: one test at a time, whatever the harness's threads (an async lock: the
/// tests hold it across awaits).
static SERIAL: Mutex<()> = Mutex::const_new(());

async fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().await
}

fn nixl_config(memory_bytes: usize) -> NixlConfig {
    NixlConfig { memory_bytes, ..NixlConfig::default() }
}

/// A prefill server of `engine` whose layers decode sides may read (`memory_bytes` registered),
/// on a loopback TCP port; returns it, its agent and a connector.
async fn start_readable(
    engine: impl PrefillEngine,
    config: ServerConfig,
    memory_bytes: usize,
) -> (PrefillServer, NixlPrefill, TcpConnector) {
    let nixl = NixlPrefill::start(&nixl_config(memory_bytes)).expect("a NIXL prefill agent");
    let server = PrefillServer::new(engine, ServerConfig { readable: Some(nixl.memory()), ..config });
    nixl.free_completed(&server);
    let listener = TcpServer::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let serving = server.clone();
    tokio::spawn(async move { serving.serve(listener).await });
    (server, nixl, TcpConnector { addr })
}

fn decode_side() -> Arc<NixlDecode> {
    Arc::new(NixlDecode::start(&nixl_config(64 << 20), None).expect("a NIXL decode agent"))
}

fn read_config(decode: &Arc<NixlDecode>) -> ClientConfig {
    ClientConfig { mode: Mode::Read, reads: Some(decode.clone()), ..ClientConfig::new(descriptor()) }
}

/// Bytes of the serialized layers of a prompt.
fn layer_bytes(tokens: &[u32], layers: std::ops::Range<usize>) -> u64 {
    layers.map(|l| encode_state(&expected_state(SHAPE, tokens, l)).len() as u64).sum()
}

#[tokio::test]
#[ignore = "needs the NIXL libraries and one test thread: `cargo xtask test` runs it"]
async fn read_layers_are_byte_identical_to_pulled_ones_and_completion_frees_the_server() {
    let _serial = serial().await;
    let config = ServerConfig { block_size: 4096, ..ServerConfig::default() };
    let (server, _nixl, connector) = start_readable(engine(), config, 64 << 20).await;
    let decode = decode_side();
    let reading = PrefillClient::connect(&connector, read_config(&decode)).await.unwrap();
    let pulling = PrefillClient::connect(&connector, ClientConfig::new(descriptor())).await.unwrap();
    let tokens: Vec<u32> = (0..300).map(|i| i * 5 + 3).collect();
    let (read, read_logits) = collect(&mut reading.submit(tokens.clone()).unwrap()).await;
    let (pulled, pulled_logits) = collect(&mut pulling.submit(tokens.clone()).unwrap()).await;
    for (l, (read, pulled)) in read.iter().zip(&pulled).enumerate() {
        let (read, pulled) = (read.as_ref().expect("every layer"), pulled.as_ref().expect("every layer"));
        assert_eq!(hash(read), hash(pulled), "layer {l}");
        assert_eq!(hash(read), hash(&expected_state(SHAPE, &tokens, l)), "layer {l}");
    }
    assert_eq!(read_logits, pulled_logits);
    // Every layer came by NIXL, none over the connection (which carried the handshake, the
    // announcements and the logits: a few hundred bytes per layer at most).
    let bytes = layer_bytes(&tokens, 0..SHAPE.num_layers as usize);
    assert_eq!(decode.bytes_read(), bytes);
    assert!(pulling.bytes_received() > bytes && reading.bytes_received() < bytes / 10, "{}", reading.bytes_received());
    // Both requests freed, the read one by its completion notification: no lease expired.
    wait_until_freed(&server, Duration::from_secs(5)).await;
    assert_eq!((server.stats().store.expired, server.stats().live_bytes), (0, 0));

    // Many requests at once on one connection, each byte-identical.
    let prompts: Vec<Vec<u32>> = (0..8u32).map(|r| (0..(50 + r * 30)).map(|i| i * 13 + r).collect()).collect();
    let mut handles: Vec<_> = prompts.iter().map(|p| reading.submit(p.clone()).unwrap()).collect();
    for (prompt, handle) in prompts.iter().zip(&mut handles) {
        let (layers, logits) = collect(handle).await;
        for (l, state) in layers.iter().enumerate() {
            assert_eq!(hash(state.as_ref().unwrap()), hash(&expected_state(SHAPE, prompt, l)));
        }
        assert_eq!(logits, expected_logits(SHAPE, prompt));
    }
    wait_until_freed(&server, Duration::from_secs(5)).await;
    assert_eq!(server.stats().store.expired, 0);
}

#[tokio::test]
#[ignore = "needs the NIXL libraries and one test thread: `cargo xtask test` runs it"]
async fn layers_that_do_not_fit_the_registered_memory_are_pulled() {
    let _serial = serial().await;
    let tokens: Vec<u32> = (0..100).collect();
    // Room for two layers (buffers are rounded up to 64 bytes): layers 0 and 1 are read, the
    // others, stored while those are held, are announced by a plain Ready and pulled.
    let layer = layer_bytes(&tokens, 0..1);
    let memory = 2 * (layer as usize).next_multiple_of(64) + 32;
    let (server, _nixl, connector) = start_readable(engine(), ServerConfig::default(), memory).await;
    let decode = decode_side();
    let client = PrefillClient::connect(&connector, read_config(&decode)).await.unwrap();
    let (layers, logits) = collect(&mut client.submit(tokens.clone()).unwrap()).await;
    for (l, state) in layers.iter().enumerate() {
        assert_eq!(hash(state.as_ref().unwrap()), hash(&expected_state(SHAPE, &tokens, l)), "layer {l}");
    }
    assert_eq!(logits, expected_logits(SHAPE, &tokens));
    assert_eq!(decode.bytes_read(), 2 * layer);
    wait_until_freed(&server, Duration::from_secs(5)).await;
    assert_eq!(server.stats().store.expired, 0);
}

#[tokio::test]
#[ignore = "needs the NIXL libraries and one test thread: `cargo xtask test` runs it"]
async fn read_mode_is_refused_by_a_server_without_registered_memory_and_on_a_scheme_mismatch() {
    let _serial = serial().await;
    let decode = decode_side();
    let plain = TcpServer::bind("127.0.0.1:0").await.unwrap();
    let addr = plain.local_addr().unwrap().to_string();
    let server = PrefillServer::new(engine(), ServerConfig::default());
    tokio::spawn(async move { server.serve(plain).await });
    match PrefillClient::connect(&TcpConnector { addr }, read_config(&decode)).await.unwrap_err() {
        TransferError::Remote { code: ErrorCode::Refused, message } => {
            assert!(message.contains("registered"), "{message}")
        }
        other => panic!("{other:?}"),
    }

    let (_server, _nixl, connector) = start_readable(engine(), ServerConfig::default(), 1 << 20).await;
    let theirs = SchemeDescriptor { scheme: "hack:bits=2,pi=64".into(), ..descriptor() };
    let config = ClientConfig { descriptor: theirs, ..read_config(&decode) };
    match PrefillClient::connect(&connector, config).await.unwrap_err() {
        TransferError::Remote { code: ErrorCode::Incompatible, message } => {
            assert!(message.contains("hack:bits=2,pi=64"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    // Mode Read without a transfer engine is a configuration error, found before connecting.
    let config = ClientConfig { mode: Mode::Read, ..ClientConfig::new(descriptor()) };
    assert!(matches!(PrefillClient::connect(&connector, config).await, Err(TransferError::Protocol(_))));
}

#[tokio::test]
#[ignore = "needs the NIXL libraries and one test thread: `cargo xtask test` runs it"]
async fn a_decode_side_that_never_completes_is_reaped_by_the_lease() {
    let _serial = serial().await;
    let lease = Duration::from_millis(200);
    let config = ServerConfig { lease, ..ServerConfig::default() };
    let (server, _nixl, connector) = start_readable(engine(), config, 1 << 20).await;
    // A raw read-mode connection that submits, sees where layer 0 lies, and goes away.
    let stream = tokio::net::TcpStream::connect(&connector.addr).await.unwrap();
    let (rd, wr) = tokio::io::split(stream);
    let codec = FrameCodec::new(1 << 20);
    let mut reader = FrameReader::new(rd, codec, WireCounter::default());
    let mut writer = FrameWriter::new(wr, None, WireCounter::default());
    let hello = Message::Hello { descriptor: descriptor(), mode: Mode::Read, session: 77 };
    writer.send(&hello.encode(&codec).unwrap()).await.unwrap();
    assert!(matches!(next(&mut reader).await, Message::Layout(_)));
    assert!(matches!(next(&mut reader).await, Message::Agent { metadata } if !metadata.is_empty()));
    writer.send(&Message::Submit { request: 9, tokens: vec![1, 2, 3] }.encode(&codec).unwrap()).await.unwrap();
    assert!(matches!(next(&mut reader).await, Message::ReadyAt { request: 9, layer: 0, address, .. } if address != 0));
    drop((reader, writer));
    assert_eq!(server.stats().store.requests, 1);
    wait_until_freed(&server, lease * 20).await;
    assert_eq!((server.stats().store.expired, server.stats().live_bytes), (1, 0));
}

/// The next message on a raw connection.
async fn next<R: tokio::io::AsyncRead + Unpin>(reader: &mut FrameReader<R>) -> Message {
    Message::decode(reader.next().await.unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the NIXL libraries and one test thread: `cargo xtask test` runs it"]
async fn a_prefill_server_killed_mid_transfer_is_retried_on_another() {
    let _serial = serial().await;
    // The first server computes a layer per 150 ms and is killed (its runtime, and with it its
    // connections, shut down) after its first layer was read.
    let dying_runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let slow = engine().with_per_layer(Duration::from_millis(150));
    let dying = dying_runtime.spawn(start_readable(slow, ServerConfig::default(), 1 << 20));
    let (dying_server, dying_nixl, dying) = dying.await.unwrap();
    let (_healthy_server, _healthy_nixl, healthy) = start_readable(engine(), ServerConfig::default(), 1 << 20).await;
    let decode = decode_side();
    let pool = PrefillPool::new(vec![
        PrefillClient::connect(&dying, read_config(&decode)).await.unwrap(),
        PrefillClient::connect(&healthy, read_config(&decode)).await.unwrap(),
    ]);
    let killer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(220)).await;
        dying_runtime.shutdown_background();
        drop((dying_server, dying_nixl));
    });
    let tokens: Vec<u32> = (0..40).collect();
    let received = fetch::<NdArray, _>(&pool, &tokens, &DenseScheme, &Default::default(), 2).await.unwrap();
    killer.await.unwrap();
    assert_eq!((received.server, received.attempts), (1, 2));
    let failure = pool.client(0).and_then(|client| client.failure());
    assert!(failure.as_ref().is_some_and(|e| e.is_retryable()), "{failure:?}");
    for (l, cache) in received.caches.layers.iter().enumerate() {
        assert_eq!(TransferableCache::<NdArray>::export_state(cache), expected_state(SHAPE, &tokens, l));
    }
    assert_eq!(received.logits, expected_logits(SHAPE, &tokens));
}

#[test]
#[ignore = "needs the NIXL libraries and one test thread: `cargo xtask test` runs it"]
fn a_missing_library_or_backend_is_a_typed_error_not_an_abort() {
    let _serial = SERIAL.blocking_lock();
    const CHILD: &str = "KVC_NIXL_TEST_WITHOUT_LIBRARY";
    if std::env::var_os(CHILD).is_some() {
        // In the child, started without the library path.
        match NixlDecode::start(&NixlConfig::default(), None) {
            Err(TransferError::NixlUnavailable(why)) => assert!(why.contains("libnixl_capi.so"), "{why}"),
            other => panic!("{other:?}"),
        }
        return;
    }
    let name = "a_missing_library_or_backend_is_a_typed_error_not_an_abort";
    let child = Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--ignored", "--test-threads=1", "--nocapture"])
        .env(CHILD, "1")
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&child.stdout);
    assert!(child.status.success() && out.contains("1 passed"), "{out}{}", String::from_utf8_lossy(&child.stderr));

    // Here the library loads: an unknown plugin fails as cleanly.
    let config = NixlConfig { backend: "NO_SUCH_PLUGIN".into(), ..NixlConfig::default() };
    match NixlPrefill::start(&config) {
        Err(TransferError::NixlUnavailable(why)) => assert!(why.contains("NO_SUCH_PLUGIN"), "{why}"),
        other => panic!("{other:?}"),
    }
}

/// SmolLM2 with `scheme`, read with NIXL; the model must be there (`cargo xtask test` fetches it).
async fn smollm2_read<S>(scheme: impl FnOnce(ModelFingerprint) -> S)
where
    S: burn_kvcompress::cache::TransferableScheme<model_run::B> + Clone + Send + Sync + 'static,
    S::Cache: TransferableCache<model_run::B> + Send + Sync,
{
    let _serial = serial().await;
    let path = burn_kvcompress::paths::default_model_path();
    assert!(path.exists(), "{} is missing (cargo xtask fetch-model)", path.display());
    let prefill = NixlPrefill::start(&nixl_config(256 << 20)).expect("a NIXL prefill agent");
    let decode = Arc::new(NixlDecode::start(&nixl_config(256 << 20), None).expect("a NIXL decode agent"));
    disaggregated_run_matches_single_process(scheme, Transfer::Read { prefill: &prefill, decode }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the NIXL libraries and one test thread: `cargo xtask test` runs it"]
async fn dense_smollm2_read_with_nixl_matches_the_single_process_run() {
    smollm2_read(|_| DenseScheme).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the NIXL libraries and one test thread: `cargo xtask test` runs it"]
async fn hack_smollm2_read_with_nixl_matches_the_single_process_run() {
    smollm2_read(|_| hack_scheme()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the NIXL libraries and one test thread: `cargo xtask test` runs it"]
async fn pq_smollm2_read_with_nixl_matches_the_single_process_run() {
    smollm2_read(pq_scheme).await;
}
