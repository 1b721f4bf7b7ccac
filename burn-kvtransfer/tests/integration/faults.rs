//! Faults: incompatible peers, foreign versions, hostile lengths, corrupt and truncated streams,
//! peers that vanish or stall. Each ends in a typed error or a recovery, and the prefill side
//! never keeps a request's memory past its lease.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::common::*;
use burn_hack_attn::HackConfig;
use burn_kvcompress::{
    backend::NdArray,
    cache::{DenseCache, DenseScheme, TransferableCache},
};
use burn_kvtransfer::engine::SyntheticPrefill;
use burn_kvtransfer::{
    decode::{fetch, fetch_states, Received},
    protocol::{ClientConfig, PrefillClient, PrefillPool, RequestEvent, ServerConfig},
    transport::{channel::ChannelConnector, Connector, FrameReader, FrameWriter, WireCounter},
    wire::{ErrorCode, FrameCodec, FrameKind, Message, Mode, WireError, MAGIC, VERSION},
    ModelFingerprint, SchemeDescriptor, TransferError,
};
use tokio::io::{ReadHalf, WriteHalf};

const CODEC: FrameCodec = FrameCodec { max_payload: 1 << 20 };
const SHORT: Duration = Duration::from_millis(300);

type Raw = (FrameReader<ReadHalf<tokio::io::DuplexStream>>, FrameWriter<WriteHalf<tokio::io::DuplexStream>>);

/// A connection that speaks frames by hand.
async fn raw(connector: &ChannelConnector) -> Raw {
    let (rd, wr) = tokio::io::split(connector.connect().await.unwrap());
    (FrameReader::new(rd, CODEC, WireCounter::default()), FrameWriter::new(wr, None, WireCounter::default()))
}

/// Opens a connection under session id `session` by hand; returns its first reply.
async fn hello_as(raw: &mut Raw, session: u64) -> Message {
    let hello = Message::Hello { descriptor: descriptor(), mode: Mode::Pull, session };
    raw.1.send(&hello.encode(&CODEC).unwrap()).await.unwrap();
    Message::decode(raw.0.next().await.unwrap()).unwrap()
}

async fn hello(raw: &mut Raw) {
    static SESSIONS: AtomicU64 = AtomicU64::new(1);
    let reply = hello_as(raw, SESSIONS.fetch_add(1, Ordering::Relaxed)).await;
    assert!(matches!(reply, Message::Layout(_)), "{reply:?}");
}

#[tokio::test]
async fn a_data_stream_of_an_unknown_session_and_a_reused_session_id_are_refused() {
    let (_server, connector) = start(engine(), ServerConfig::default());
    let mut stray = raw(&connector).await;
    stray.1.send(&Message::Attach { session: 77 }.encode(&CODEC).unwrap()).await.unwrap();
    let (code, message) = next_error(&mut stray).await;
    assert!(code == ErrorCode::Refused && message.contains("77"), "{code:?}: {message}");
    let mut first = raw(&connector).await;
    assert!(matches!(hello_as(&mut first, 78).await, Message::Layout(_)));
    let mut second = raw(&connector).await;
    match hello_as(&mut second, 78).await {
        Message::Error { code, message, .. } => assert!(code == ErrorCode::Refused && message.contains("in use")),
        other => panic!("{other:?}"),
    }
}

/// A frame header with any version and length (checksum made valid).
fn header(version: u16, kind: u8, len: u32) -> Vec<u8> {
    let mut h = MAGIC.to_vec();
    h.extend(version.to_le_bytes());
    h.extend([kind, 0]);
    h.extend(len.to_le_bytes());
    let crc = crc32fast::hash(&h);
    h.extend(crc.to_le_bytes());
    h
}

async fn next_error(raw: &mut Raw) -> (ErrorCode, String) {
    match Message::decode(raw.0.next().await.unwrap()).unwrap() {
        Message::Error { code, message, .. } => (code, message),
        other => panic!("expected an Error, got {other:?}"),
    }
}

#[tokio::test]
async fn scheme_or_model_mismatch_is_refused_at_connect_with_both_descriptors() {
    let (_server, connector) = start(engine(), ServerConfig::default());
    let other_scheme = SchemeDescriptor { scheme: "hack:bits=2,pi=64".into(), ..descriptor() };
    let other_model = SchemeDescriptor { model: ModelFingerprint::of_bytes(b"another model"), ..descriptor() };
    for theirs in [other_scheme, other_model] {
        let err = PrefillClient::connect(&connector, ClientConfig::new(theirs.clone())).await.unwrap_err();
        match err {
            TransferError::Remote { code: ErrorCode::Incompatible, message } => {
                assert!(
                    message.contains(&theirs.to_string()) && message.contains(&descriptor().to_string()),
                    "{message}"
                );
            }
            other => panic!("{other:?}"),
        }
    }
}

#[tokio::test]
async fn hack_formats_that_differ_in_one_setting_refuse_each_other() {
    // The scheme's name spells every setting of the format: prefill and decode sides that differ
    // in any (bits, axes, rotation, window, clipping) refuse each other before a byte of cache
    // is sent.
    let spelled = |s: &str| SchemeDescriptor { scheme: s.parse::<HackConfig>().unwrap().to_string(), ..descriptor() };
    let prefill = spelled("hack2");
    let (_server, connector) = start(SyntheticPrefill::new(SHAPE, prefill.clone()), ServerConfig::default());
    let hack2 = HackConfig::preset("hack2").unwrap();
    let others = [
        HackConfig::preset("hack4").unwrap(),
        HackConfig { window: hack2.window / 2, ..hack2.clone() },
        HackConfig { rotation: burn_hack_attn::RotationSpec::None, ..hack2.clone() },
        HackConfig { clip: !hack2.clip, ..hack2.clone() },
        HackConfig { axes: burn_hack_attn::Axes::Paper, sinks: 0, window: 0, ..hack2.clone() },
    ];
    for other in others {
        let theirs = spelled(&other.to_string());
        assert_ne!(theirs, prefill);
        match PrefillClient::connect(&connector, ClientConfig::new(theirs.clone())).await.unwrap_err() {
            TransferError::Remote { code: ErrorCode::Incompatible, message } => {
                assert!(message.contains(&theirs.scheme) && message.contains(&prefill.scheme), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }
    PrefillClient::connect(&connector, ClientConfig::new(spelled("hack2"))).await.unwrap();
}

#[tokio::test]
async fn another_protocol_version_is_reported_to_the_peer() {
    let (_server, connector) = start(engine(), ServerConfig::default());
    let mut raw = raw(&connector).await;
    raw.1.send(&header(VERSION + 1, FrameKind::Hello as u8, 0)).await.unwrap();
    let (code, message) = next_error(&mut raw).await;
    assert_eq!(code, ErrorCode::Malformed);
    assert!(message.contains(&format!("protocol version {}", VERSION + 1)), "{message}");
    assert!(matches!(raw.0.next().await, Err(TransferError::Closed)));
}

#[tokio::test]
async fn a_server_of_another_version_fails_the_client_cleanly() {
    let (listener, connector) = burn_kvtransfer::transport::channel::channel();
    tokio::spawn(async move {
        use burn_kvtransfer::transport::Listener;
        let mut listener = listener;
        let stream = listener.accept().await.unwrap();
        let (_rd, wr) = tokio::io::split(stream);
        let mut w = FrameWriter::new(wr, None, WireCounter::default());
        w.send(&header(7, FrameKind::Layout as u8, 0)).await.unwrap();
        std::future::pending::<()>().await;
    });
    let err = PrefillClient::connect(&connector, ClientConfig::new(descriptor())).await.unwrap_err();
    assert_eq!(err, TransferError::Wire(WireError::UnsupportedVersion { found: 7, supported: VERSION }));
}

#[tokio::test]
async fn hostile_lengths_are_rejected_from_the_header() {
    let (_server, connector) = start(engine(), ServerConfig::default());
    let mut raw = raw(&connector).await;
    hello(&mut raw).await;
    // A 4 GiB Submit: refused from its 16-byte header, nothing more is read or allocated.
    raw.1.send(&header(VERSION, FrameKind::Submit as u8, u32::MAX)).await.unwrap();
    let (code, message) = next_error(&mut raw).await;
    assert_eq!(code, ErrorCode::Malformed);
    assert!(message.contains("exceeds the cap"), "{message}");

    // A hostile token count inside a small payload: checked against the payload's size.
    let mut raw = raw_connected(&connector).await;
    let mut payload = 1u64.to_le_bytes().to_vec();
    payload.extend(u32::MAX.to_le_bytes());
    raw.1.send(&CODEC.encode(FrameKind::Submit, &payload).unwrap()).await.unwrap();
    let (code, message) = next_error(&mut raw).await;
    assert_eq!(code, ErrorCode::Malformed);
    assert!(message.contains("truncated"), "{message}");
}

async fn raw_connected(connector: &ChannelConnector) -> Raw {
    let mut r = raw(connector).await;
    hello(&mut r).await;
    r
}

#[tokio::test]
async fn a_layer_announced_over_the_cap_fails_the_request_not_the_process() {
    let (server, connector) = start(engine(), ServerConfig::default());
    let config = ClientConfig { max_layer_bytes: 100, ..ClientConfig::new(descriptor()) };
    let client = PrefillClient::connect(&connector, config).await.unwrap();
    let mut handle = client.submit(vec![1, 2, 3]).unwrap();
    match handle.next().await.unwrap() {
        Err(TransferError::Protocol(m)) => assert!(m.contains("over the cap"), "{m}"),
        other => panic!("{other:?}"),
    }
    // The client completes the failed request: freed at once, not after the 30 s lease.
    wait_until_freed(&server, Duration::from_secs(2)).await;
    assert_eq!(server.stats().store.expired, 0);
}

#[tokio::test]
async fn pulls_of_unknown_requests_and_oversized_prompts_are_refused() {
    let config = ServerConfig { max_prompt_tokens: 8, ..ServerConfig::default() };
    let (_server, connector) = start(engine(), config);
    let mut raw = raw_connected(&connector).await;
    let pull = Message::Pull(vec![burn_kvtransfer::wire::BlockRange { request: 42, layer: 0, first: 0, count: 3 }]);
    raw.1.send(&pull.encode(&CODEC).unwrap()).await.unwrap();
    assert_eq!(next_error(&mut raw).await.0, ErrorCode::UnknownRequest);
    raw.1.send(&Message::Submit { request: 1, tokens: vec![0; 9] }.encode(&CODEC).unwrap()).await.unwrap();
    assert_eq!(next_error(&mut raw).await.0, ErrorCode::Refused);
}

/// Push mode makes the stream's order fixed: Layout (44 bytes), Ready of layer 0 (44), then
/// layer 0's Block frames (16-byte frame header, 16-byte block header, data).
const FIRST_BLOCK_DATA: u64 = 44 + 44 + 16 + 16;

/// Where every data stream of a pulled 40-token request (1600-byte frames of three 512-byte
/// blocks) is hit: inside its fourth frame's data, past all the control stream carries.
const DATA_STREAM_FAULT: u64 = 3 * (16 + 16 + 3 * 512 + 4) + 284;

/// Pushed over one stream, or pulled over `data_streams` data streams (faulty at
/// [`DATA_STREAM_FAULT`]) when there are some.
fn faulty_client(max_payload: u32, data_streams: usize) -> ClientConfig {
    let mode = if data_streams > 0 { Mode::Pull } else { Mode::Push };
    ClientConfig { mode, max_payload, data_streams, ..ClientConfig::new(descriptor()) }
}

async fn corrupt_block_is_pulled_again(block_size: u32, max_payload: u32, tokens: u32, data_streams: usize) {
    let config = ServerConfig { block_size, max_payload, ..ServerConfig::default() };
    let (server, inner) = start(engine(), config);
    let at = if data_streams > 0 { DATA_STREAM_FAULT } else { FIRST_BLOCK_DATA + 100 };
    let connector = FaultyConnector { inner, fault: Fault::Corrupt(at) };
    let client_config = faulty_client(max_payload, data_streams);
    let client = PrefillClient::connect(&connector, client_config).await.unwrap();
    let tokens: Vec<u32> = (0..tokens).collect();
    let mut handle = client.submit(tokens.clone()).unwrap();
    let mut layers = 0;
    while let Some(event) = handle.next().await {
        match event.unwrap() {
            RequestEvent::Layer { layer, state } => {
                assert_eq!(state, expected_state(SHAPE, &tokens, layer));
                layers += 1;
            }
            RequestEvent::Logits(_) => break,
        }
    }
    assert_eq!(layers, SHAPE.num_layers);
    // One corrupt frame per stream that carried blocks.
    assert!((1..=data_streams.max(1) as u64).contains(&client.corrupt_frames()), "{}", client.corrupt_frames());
    wait_until_freed(&server, Duration::from_secs(2)).await;
}

#[tokio::test]
async fn a_corrupt_block_is_detected_and_pulled_again() {
    // Small frames (through the read buffer) and 512 KiB frames (read straight into the payload).
    corrupt_block_is_pulled_again(512, 1600, 40, 0).await;
    corrupt_block_is_pulled_again(64 << 10, 1 << 20, 2048, 0).await;
    // Pulled over two data streams, each of which corrupts one frame: small frames, then 1 MiB
    // frames read straight into their layers.
    corrupt_block_is_pulled_again(512, 1600, 40, 2).await;
    corrupt_block_is_pulled_again(64 << 10, 1 << 20, 2048, 2).await;
}

#[tokio::test]
async fn a_corrupt_control_frame_or_header_ends_the_connection_with_an_error() {
    let config = ServerConfig { block_size: 512, max_payload: 1600, ..ServerConfig::default() };
    let (_server, inner) = start(engine(), config);
    // Byte 60 is in the payload of the Ready frame, byte 44 + 3 in its header's magic.
    for (offset, expected) in
        [(60, TransferError::Corrupt(FrameKind::Ready)), (47, TransferError::Wire(WireError::BadMagic(*b"KVC\xb9")))]
    {
        let connector = FaultyConnector { inner: inner.clone(), fault: Fault::Corrupt(offset) };
        let client_config = ClientConfig { mode: Mode::Push, max_payload: 1600, ..ClientConfig::new(descriptor()) };
        let client = PrefillClient::connect(&connector, client_config).await.unwrap();
        let mut handle = client.submit(vec![5; 10]).unwrap();
        assert_eq!(handle.next().await.unwrap(), Err(expected));
    }
}

async fn cut_stream_errors_and_the_lease_frees_the_server(max_payload: u32, tokens: u32, data_streams: usize) {
    let config = ServerConfig { block_size: 512, max_payload, lease: SHORT, ..ServerConfig::default() };
    let (server, inner) = start(engine(), config);
    let at = if data_streams > 0 { DATA_STREAM_FAULT } else { FIRST_BLOCK_DATA + 700 };
    let connector = FaultyConnector { inner, fault: Fault::CutAt(at) };
    let client_config = faulty_client(max_payload, data_streams);
    let client = PrefillClient::connect(&connector, client_config).await.unwrap();
    let mut handle = client.submit((0..tokens).collect()).unwrap();
    assert!(matches!(handle.next().await.unwrap(), Err(TransferError::Truncated(_))));
    assert!(server.stats().store.requests <= 1);
    wait_until_freed(&server, SHORT * 10).await;
    assert_eq!(server.stats().store.expired, 1);
}

#[tokio::test]
async fn a_stream_cut_mid_transfer_errors_and_the_lease_frees_the_server() {
    cut_stream_errors_and_the_lease_frees_the_server(1600, 40, 0).await;
    cut_stream_errors_and_the_lease_frees_the_server(1 << 20, 2048, 0).await;
    // A data stream cut: the request fails cleanly and the server frees it all the same (also
    // inside a 1 MiB frame being read straight into its layer).
    cut_stream_errors_and_the_lease_frees_the_server(1600, 40, 2).await;
    cut_stream_errors_and_the_lease_frees_the_server(1 << 20, 2048, 2).await;
}

#[tokio::test]
async fn a_decode_worker_that_vanishes_mid_request_is_reaped_by_the_lease() {
    let config = ServerConfig { lease: SHORT, ..ServerConfig::default() };
    let (server, connector) = start(engine(), config);
    let mut raw = raw_connected(&connector).await;
    raw.1.send(&Message::Submit { request: 9, tokens: vec![1, 2, 3] }.encode(&CODEC).unwrap()).await.unwrap();
    assert!(matches!(Message::decode(raw.0.next().await.unwrap()).unwrap(), Message::Ready { request: 9, .. }));
    drop(raw);
    assert_eq!(server.stats().store.requests, 1);
    assert!(server.stats().live_bytes > 0);
    wait_until_freed(&server, SHORT * 10).await;
    assert_eq!(server.stats().store.expired, 1);
    // Nothing references its layers any more.
    assert_eq!(server.stats().live_bytes, 0);
}

/// A pool of two servers of which the first is cut mid-transfer (after 2000 bytes), and the
/// servers (kept alive with it).
async fn a_dying_and_a_healthy_server() -> (PrefillPool, [impl Sized; 2]) {
    let config = || ServerConfig { block_size: 512, max_payload: 1600, ..ServerConfig::default() };
    let (dying_server, inner) = start(engine(), config());
    let (healthy_server, healthy) = start(engine(), config());
    let client_config = ClientConfig { max_payload: 1600, ..ClientConfig::new(descriptor()) };
    let dying = FaultyConnector { inner, fault: Fault::CutAt(2000) };
    let pool = PrefillPool::new(vec![
        PrefillClient::connect(&dying, client_config.clone()).await.unwrap(),
        PrefillClient::connect(&healthy, client_config).await.unwrap(),
    ]);
    (pool, [dying_server, healthy_server])
}

/// Checks that `received` came from the second server of [`a_dying_and_a_healthy_server`]'s
/// `pool` at the second attempt, with `tokens`' states and logits.
fn served_by_the_healthy_server(pool: &PrefillPool, received: &Received<DenseCache<NdArray>>, tokens: &[u32]) {
    assert_eq!((received.server, received.attempts), (1, 2));
    assert!(matches!(pool.client(0).unwrap().failure(), Some(TransferError::Truncated(_))));
    for (l, cache) in received.caches.layers.iter().enumerate() {
        assert_eq!(TransferableCache::<NdArray>::export_state(cache), expected_state(SHAPE, tokens, l));
    }
    assert_eq!(received.logits, expected_logits(SHAPE, tokens));
}

#[tokio::test]
async fn a_killed_prefill_server_is_retried_on_another() {
    let (pool, _servers) = a_dying_and_a_healthy_server().await;
    let tokens: Vec<u32> = (0..40).collect();
    let device = Default::default();
    let received = fetch::<NdArray, _>(&pool, &tokens, &DenseScheme, &device, 2).await.unwrap();
    served_by_the_healthy_server(&pool, &received, &tokens);
}

#[tokio::test]
async fn a_corrupt_control_frame_is_retried_on_another_server() {
    // Byte 60 is in the payload of the first Ready frame (see the test above): the connection
    // to the first server ends with that error, and the request goes to the second.
    let config = || ServerConfig { block_size: 512, max_payload: 1600, ..ServerConfig::default() };
    let (_corrupting, inner) = start(engine(), config());
    let (_healthy, healthy) = start(engine(), config());
    let client_config = ClientConfig { mode: Mode::Push, max_payload: 1600, ..ClientConfig::new(descriptor()) };
    let corrupting = FaultyConnector { inner, fault: Fault::Corrupt(60) };
    let pool = PrefillPool::new(vec![
        PrefillClient::connect(&corrupting, client_config.clone()).await.unwrap(),
        PrefillClient::connect(&healthy, client_config).await.unwrap(),
    ]);
    let tokens: Vec<u32> = (0..40).collect();
    let received = fetch::<NdArray, _>(&pool, &tokens, &DenseScheme, &Default::default(), 2).await.unwrap();
    assert_eq!((received.server, received.attempts), (1, 2));
    assert_eq!(pool.client(0).unwrap().failure(), Some(TransferError::Corrupt(FrameKind::Ready)));
    for (l, cache) in received.caches.layers.iter().enumerate() {
        assert_eq!(TransferableCache::<NdArray>::export_state(cache), expected_state(SHAPE, &tokens, l));
    }
}

#[test]
fn failures_of_the_link_are_retried_and_failures_of_the_request_are_not() {
    let retried = [
        TransferError::Io("reset".into()),
        TransferError::Closed,
        TransferError::Truncated(3),
        TransferError::Timeout(SHORT),
        TransferError::Wire(WireError::HeaderChecksum),
        TransferError::Corrupt(FrameKind::Done),
        TransferError::TooManyRepulls { request: 1, attempts: 3 },
        TransferError::Remote { code: ErrorCode::Malformed, message: "bad frame".into() },
    ];
    assert!(retried.iter().all(TransferError::is_retryable));
    let final_ = [
        TransferError::Remote { code: ErrorCode::Prefill, message: "out of memory".into() },
        TransferError::Remote { code: ErrorCode::Incompatible, message: "another model".into() },
        TransferError::Protocol("layer 9 of a 2-layer model".into()),
        TransferError::Import("layer 0: bad shape".into()),
    ];
    assert!(!final_.iter().any(TransferError::is_retryable));
}

#[tokio::test]
async fn states_fetched_for_another_thread_are_retried_alike_and_import_to_the_same_caches() {
    let (pool, _servers) = a_dying_and_a_healthy_server().await;
    let tokens: Vec<u32> = (0..40).collect();
    let states = fetch_states(&pool, &tokens, 2).await.unwrap();
    assert_eq!(states.states.len(), SHAPE.num_layers as usize);
    let arrivals = states.arrivals;
    assert!(arrivals.first_layer <= arrivals.last_layer && arrivals.last_layer <= arrivals.logits, "{arrivals:?}");
    let received =
        std::thread::spawn(|| states.import::<NdArray, _>(&DenseScheme, &Default::default())).join().unwrap().unwrap();
    served_by_the_healthy_server(&pool, &received, &tokens);
}

#[tokio::test]
async fn states_imported_a_layer_at_a_time_give_the_same_caches_and_are_not_finished_early() {
    let (pool, _servers) = a_dying_and_a_healthy_server().await;
    let tokens: Vec<u32> = (0..40).collect();
    let states = fetch_states(&pool, &tokens, 2).await.unwrap();
    let layer_bytes: Vec<usize> = states.states.iter().map(|s| s.byte_len()).collect();
    assert_eq!(states.bytes(), layer_bytes.iter().sum::<usize>());
    let device = Default::default();
    let mut importing = states.importing();
    for (layer, &bytes) in layer_bytes.iter().enumerate() {
        assert!(!importing.is_done());
        assert_eq!(importing.next_layer_bytes(), Some(bytes), "layer {layer}");
        assert_eq!(importing.import_next::<NdArray, _>(&DenseScheme, &device).unwrap(), bytes);
    }
    assert!(importing.is_done() && importing.next_layer_bytes().is_none());
    assert_eq!(importing.import_next::<NdArray, _>(&DenseScheme, &device).unwrap(), 0);
    served_by_the_healthy_server(&pool, &importing.finish().unwrap(), &tokens);

    let mut partial = fetch_states(&pool, &tokens, 2).await.unwrap().importing();
    partial.import_next::<NdArray, _>(&DenseScheme, &device).unwrap();
    let err = partial.finish().unwrap_err();
    assert!(matches!(&err, TransferError::Import(m) if m.contains(&format!("1 of {}", layer_bytes.len()))), "{err:?}");
}

#[tokio::test]
async fn a_stalled_peer_times_out() {
    // A server whose prefill takes far longer than the client's patience.
    let engine = engine().with_per_layer(Duration::from_secs(5));
    let (_server, connector) = start(engine, ServerConfig::default());
    let config = ClientConfig { io_timeout: SHORT, ..ClientConfig::new(descriptor()) };
    let client = PrefillClient::connect(&connector, config.clone()).await.unwrap();
    let mut handle = client.submit(vec![1]).unwrap();
    assert_eq!(handle.next().await.unwrap(), Err(TransferError::Timeout(SHORT)));

    // A listener that never answers the Hello.
    let (_listener, silent) = burn_kvtransfer::transport::channel::channel();
    let err = PrefillClient::connect(&silent, config).await.unwrap_err();
    assert_eq!(err, TransferError::Timeout(SHORT));
}

/// An engine that publishes layer 0 twice and fails prompts of one token.
struct Broken;

impl burn_kvtransfer::engine::PrefillEngine for Broken {
    fn descriptor(&self) -> SchemeDescriptor {
        descriptor()
    }

    fn shape(&self) -> burn_kvtransfer::wire::ModelShape {
        SHAPE
    }

    fn prefill(
        &mut self,
        tokens: &[u32],
        publish: &dyn Fn(usize, burn_kvcompress::cache::LayerState),
    ) -> Result<Vec<f32>, String> {
        if tokens.len() == 1 {
            return Err("out of memory".into());
        }
        for layer in [0, 0, 1, 2, 3] {
            publish(layer, expected_state(SHAPE, tokens, layer));
        }
        Ok(expected_logits(SHAPE, tokens))
    }
}

#[tokio::test]
async fn a_failing_engine_fails_the_request_and_frees_it() {
    let (server, connector) = start(Broken, ServerConfig::default());
    let client = connect(&connector).await;
    for (tokens, expected) in [(vec![1], "out of memory"), (vec![1, 2], "layer 0 published twice")] {
        let mut handle = client.submit(tokens).unwrap();
        let error = loop {
            if let Err(e) = handle.next().await.unwrap() {
                break e;
            }
        };
        match error {
            TransferError::Remote { code: ErrorCode::Prefill, message } => {
                assert!(message.contains(expected), "{message}")
            }
            other => panic!("{other:?}"),
        }
    }
    wait_until_freed(&server, Duration::from_secs(2)).await;
}

#[tokio::test]
async fn arrivals_follow_a_prefill_computed_layer_by_layer() {
    // Each layer takes 30 ms to compute and is sent once computed: the first layer cannot arrive
    // before 30 ms, the last before every layer's 30 ms, and the logits come after it.
    let per_layer = Duration::from_millis(30);
    let (_server, connector) = start(engine().with_per_layer(per_layer), ServerConfig::default());
    let pool =
        PrefillPool::new(vec![PrefillClient::connect(&connector, ClientConfig::new(descriptor())).await.unwrap()]);
    let device = Default::default();
    let received = fetch::<NdArray, _>(&pool, &[3, 1, 4, 1, 5], &DenseScheme, &device, 1).await.unwrap();
    let arrivals = received.arrivals;
    let layers = SHAPE.num_layers;
    assert!(arrivals.first_layer >= per_layer, "{arrivals:?}");
    assert!(arrivals.last_layer >= per_layer * layers, "{arrivals:?}");
    assert!(arrivals.first_layer < arrivals.last_layer && arrivals.last_layer <= arrivals.logits, "{arrivals:?}");
}
