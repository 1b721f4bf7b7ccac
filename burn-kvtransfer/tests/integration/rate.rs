//! The token bucket paces a connection to its emulated link rate.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::*;
use burn_kvtransfer::{
    protocol::{ClientConfig, PrefillClient, ServerConfig, StoreStats},
    rate::TokenBucket,
    transport::{FrameWriter, WireCounter},
};
use tokio::io::AsyncReadExt;

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
async fn writers_sharing_a_bucket_stay_within_its_burst_of_the_link() {
    // 50 MB/s with a 250 kB burst, four writers of 1 MB each: had each written before paying for
    // its chunk, the four would have put a megabyte on the wire at once.
    let bucket = TokenBucket::new(50e6);
    let received = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let writers: Vec<_> = (0..4)
        .map(|_| {
            let (tx, mut rx) = tokio::io::duplex(4 << 20);
            let received = received.clone();
            tokio::spawn(async move {
                let mut buf = vec![0; 64 << 10];
                while let Ok(n @ 1..) = rx.read(&mut buf).await {
                    received.fetch_add(n, Ordering::Relaxed);
                }
            });
            let mut writer = FrameWriter::new(tx, Some(bucket.clone()), WireCounter::default());
            tokio::spawn(async move { writer.send(&vec![7; 1_000_000]).await })
        })
        .collect();
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let seen = received.load(Ordering::Relaxed);
        let allowed = bucket.burst() as f64 + bucket.rate() * started.elapsed().as_secs_f64();
        assert!(seen as f64 <= allowed, "{seen} bytes after {:?}, {allowed:.0} allowed", started.elapsed());
    }
    for writer in writers {
        writer.await.unwrap().unwrap();
    }
    // Everything arrives, at no more than the link's rate.
    let seconds = started.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(received.load(Ordering::Relaxed), 4_000_000);
    assert!(seconds >= (4e6 - bucket.burst() as f64) / bucket.rate(), "{seconds} s");
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
