//! The token bucket paces a connection to its emulated link rate.

mod common;

use std::time::{Duration, Instant};

use burn_kvtransfer::{
    protocol::{ClientConfig, PrefillClient, ServerConfig, StoreStats},
    rate::TokenBucket,
};
use common::*;

#[test]
fn a_bucket_admits_its_burst_then_charges_the_rest() {
    let bucket = TokenBucket::from_gbps(8.0); // 1 GB/s, burst 5 MB
    assert_eq!(bucket.rate(), 1e9);
    assert_eq!(bucket.burst(), 5_000_000);
    assert_eq!(bucket.take(5_000_000), Duration::ZERO);
    let wait = bucket.take(1_000_000);
    assert!(wait > Duration::from_micros(900) && wait <= Duration::from_millis(1), "{wait:?}");
}

#[tokio::test]
async fn a_paced_server_sends_at_its_link_rate_over_one_stream_or_several() {
    // The server's link is shared by all its streams: three data streams get no more than one.
    for data_streams in [0, 3] {
        paced_transfer(data_streams).await;
    }
}

async fn paced_transfer(data_streams: usize) {
    let gbps = 0.4; // 50 MB/s
    let config = ServerConfig { link_gbps: Some(gbps), ..ServerConfig::default() };
    let shape = burn_kvtransfer::wire::ModelShape { num_layers: 4, kv_heads: 8, heads: 8, head_dim: 64, vocab: 8 };
    let engine = burn_kvtransfer::engine::SyntheticPrefill::new(shape, descriptor());
    let (server, connector) = start(engine, config);
    let client_config = ClientConfig { data_streams, ..ClientConfig::new(descriptor()) };
    let client = PrefillClient::connect(&connector, client_config).await.unwrap();
    let prompt: Vec<u32> = (0..1000).collect(); // 4 layers x 4 MB
                                                // The first request also generates the states; the second (memoized) is pure transfer.
    let mut seconds = 0.0;
    let mut bytes = 0;
    for _ in 0..2 {
        let (before, started) = (client.bytes_received(), Instant::now());
        let mut handle = client.submit(prompt.clone()).unwrap();
        while let Some(event) = handle.next().await {
            if let burn_kvtransfer::protocol::RequestEvent::Logits(_) = event.unwrap() {
                break;
            }
        }
        (seconds, bytes) = (started.elapsed().as_secs_f64(), client.bytes_received() - before);
    }
    let achieved = bytes as f64 / seconds / (gbps * 1e9 / 8.0);
    // Paced: never faster than the link; within 20% of it even on a loaded CI machine.
    assert!(
        (0.8..=1.02).contains(&achieved),
        "{data_streams} data streams: {:.1}% of the link in {seconds:.3} s",
        achieved * 100.0
    );
    wait_until_freed(&server, Duration::from_secs(2)).await;
    assert_eq!(server.stats().store, StoreStats::default());
}
