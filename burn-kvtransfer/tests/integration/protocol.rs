//! The pull protocol end to end over the in-process transport: byte-identical layers, pull and
//! push, layer-wise streaming, completion freeing the server, many requests at once.

use std::time::{Duration, Instant};

use crate::common::*;
use burn_kvtransfer::{
    protocol::{ClientConfig, PrefillClient, RequestEvent, RequestHandle, ServerConfig},
    wire::Mode,
};

async fn round_trip(mode: Mode, block_size: u32, max_payload: u32, data_streams: usize) {
    let config = ServerConfig { block_size, max_payload, ..ServerConfig::default() };
    let (server, connector) = start(engine(), config);
    let client_config = ClientConfig { mode, max_payload, data_streams, ..ClientConfig::new(descriptor()) };
    let client = PrefillClient::connect(&connector, client_config).await.unwrap();
    let tokens: Vec<u32> = (0..37).map(|i| i * 5 + 3).collect();
    let mut handle = client.submit(tokens.clone()).unwrap();
    let (layers, logits) = collect(&mut handle).await;
    for (l, state) in layers.iter().enumerate() {
        let state = state.as_ref().expect("every layer");
        assert_eq!(hash(state), hash(&expected_state(SHAPE, &tokens, l)), "layer {l}");
    }
    assert_eq!(logits, expected_logits(SHAPE, &tokens));
    wait_until_freed(&server, Duration::from_secs(2)).await;
    assert_eq!(server.stats().store.bytes, 0);
}

#[tokio::test]
async fn pulled_layers_are_byte_identical_and_completion_frees_the_server() {
    // 37 tokens x 2 heads x 16 dims x 4 B = 4.7 KB per tensor: many 512-byte blocks, 3 per frame.
    round_trip(Mode::Pull, 512, 1600, 0).await;
    round_trip(Mode::Pull, 256 * 1024, 4 << 20, 0).await;
}

#[tokio::test]
async fn layers_pulled_over_several_data_streams_are_byte_identical() {
    // Blocks of one layer arrive over 3 streams in any order (in push mode they stay behind
    // their Ready on the control stream).
    round_trip(Mode::Pull, 512, 1600, 3).await;
    round_trip(Mode::Push, 512, 1600, 3).await;
}

#[tokio::test]
async fn pushed_layers_are_byte_identical() {
    round_trip(Mode::Push, 512, 1600, 0).await;
}

#[tokio::test]
async fn layer_zero_arrives_while_later_layers_are_still_computed() {
    let per_layer = Duration::from_millis(60);
    let engine = engine().with_per_layer(per_layer);
    let (_server, connector) = start(engine, ServerConfig::default());
    let client = connect(&connector).await;
    let started = Instant::now();
    let mut handle = client.submit(vec![1, 2, 3]).unwrap();
    let first = handle.next().await.unwrap().unwrap();
    let first_at = started.elapsed();
    assert!(matches!(first, RequestEvent::Layer { layer: 0, .. }), "{first:?}");
    collect_rest(&mut handle).await;
    let all_at = started.elapsed();
    // Layer 0 is published after one layer's compute; the prefill takes four.
    assert!(first_at < per_layer * 2, "layer 0 after {first_at:?}");
    assert!(all_at >= per_layer * 4, "whole request after {all_at:?}");
}

async fn collect_rest(handle: &mut RequestHandle) {
    while let Some(event) = handle.next().await {
        if let RequestEvent::Logits(_) = event.unwrap() {
            return;
        }
    }
}

#[tokio::test]
async fn thirty_two_concurrent_requests_on_one_server_all_arrive() {
    let config = ServerConfig { block_size: 1024, max_payload: 8 * 1024, ..ServerConfig::default() };
    let (server, connector) = start(engine(), config);
    let client = connect(&connector).await;
    let prompts: Vec<Vec<u32>> = (0..32u32).map(|r| (0..(5 + r * 3)).map(|i| i * 13 + r).collect()).collect();
    let mut handles: Vec<_> = prompts.iter().map(|p| client.submit(p.clone()).unwrap()).collect();
    assert_eq!(client.in_flight(), 32);
    for (handle, prompt) in handles.iter_mut().zip(&prompts) {
        let (layers, logits) = collect(handle).await;
        for (l, state) in layers.iter().enumerate() {
            assert_eq!(state.as_ref().unwrap(), &expected_state(SHAPE, prompt, l));
        }
        assert_eq!(logits, expected_logits(SHAPE, prompt));
    }
    drop(handles);
    assert_eq!(client.in_flight(), 0);
    wait_until_freed(&server, Duration::from_secs(2)).await;
}

#[tokio::test]
async fn a_pool_sends_each_request_to_the_least_loaded_server() {
    let (_a, a) = start(engine(), ServerConfig::default());
    let (_b, b) = start(engine(), ServerConfig::default());
    let pool = burn_kvtransfer::protocol::PrefillPool::new(vec![connect(&a).await, connect(&b).await]);
    let (first, h1) = pool.submit(vec![1], &[]).unwrap();
    let (second, h2) = pool.submit(vec![2], &[]).unwrap();
    assert_ne!(first, second);
    drop(h1);
    let (third, h3) = pool.submit(vec![3], &[]).unwrap();
    assert_eq!(third, first, "the server whose request finished is the less loaded");
    drop((h2, h3));
    // Equal loads: requests alternate instead of piling on one server.
    let picks: Vec<usize> = (0..4).map(|i| pool.submit(vec![i], &[]).unwrap().0).collect();
    assert!(picks.contains(&0) && picks.contains(&1), "{picks:?}");
}

#[tokio::test]
async fn a_pool_weighs_reported_loads_and_never_chooses_a_removed_server() {
    use std::sync::{atomic::AtomicUsize, atomic::Ordering, Arc};
    let (_a, a) = start(engine(), ServerConfig::default());
    let (_b, b) = start(engine(), ServerConfig::default());
    let pool = burn_kvtransfer::protocol::PrefillPool::default();
    let (a_load, b_load) = (Arc::new(AtomicUsize::new(5)), Arc::new(AtomicUsize::new(0)));
    let a = pool.insert(connect(&a).await, a_load.clone());
    let b = pool.insert(connect(&b).await, b_load.clone());
    // Other workers' requests (reported) weigh against this worker's own.
    let picks: Vec<usize> = (0..3).map(|i| pool.submit(vec![i], &[]).unwrap().0).collect();
    assert_eq!(picks, [b; 3], "the server reporting less load");
    b_load.store(7, Ordering::Relaxed);
    let (pick, mut handle) = pool.submit(vec![9], &[]).unwrap();
    assert_eq!(pick, a, "the other is now the less loaded");
    // This worker's own requests count at once, before a report says so.
    a_load.store(0, Ordering::Relaxed);
    b_load.store(0, Ordering::Relaxed);
    let (pick, mut other) = pool.submit(vec![10], &[]).unwrap();
    assert_eq!(pick, b, "a has a request of ours in flight");
    collect(&mut handle).await;
    collect(&mut other).await;
    let before = pool.wire_bytes();
    assert!(pool.remove(a).is_some());
    assert!(pool.client(a).is_none() && pool.remove(a).is_none());
    assert_eq!((pool.len(), pool.clients().iter().map(|(i, _)| *i).collect::<Vec<_>>()), (1, vec![b]));
    // At most a Complete frame more: the total never goes back.
    let after = pool.wire_bytes();
    assert!(after.0 >= before.0 && after.1 >= before.1, "a removed server's bytes still count: {before:?} {after:?}");
    let picks: Vec<usize> = (0..4).map(|i| pool.submit(vec![i], &[]).unwrap().0).collect();
    assert_eq!(picks, [b; 4], "a removed server is never chosen");
    assert!(pool.remove(b).is_some());
    assert!(pool.is_empty());
    assert!(pool.submit(vec![1], &[]).is_err());
}

#[tokio::test]
async fn a_server_tells_its_load_as_requests_come_and_go() {
    let (server, connector) = start(engine(), ServerConfig::default());
    let mut load = server.load();
    assert_eq!(*load.borrow(), 0);
    let client = connect(&connector).await;
    let mut handle = client.submit(vec![1, 2, 3]).unwrap();
    tokio::time::timeout(Duration::from_secs(2), load.wait_for(|&n| n == 1)).await.unwrap().unwrap();
    collect(&mut handle).await;
    tokio::time::timeout(Duration::from_secs(2), load.wait_for(|&n| n == 0)).await.unwrap().unwrap();
}
