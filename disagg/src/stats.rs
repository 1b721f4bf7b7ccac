//! What a running prefill server reports about its memory: a query port answering one line of
//! JSON per connection (`serve --stats-listen`), and a line on stderr whenever leases expire.
//! The chaos tests (`tests/chaos/`) read both to check that a vanished or stalled decode worker
//! leaves nothing held.

use std::time::Duration;

use burn_kvtransfer::protocol::{PrefillServer, ServerStats};
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

use crate::memory::{peak_rss_bytes, rss_bytes};

/// The line a server prints once its stats port listens: `stats on ADDR`.
pub const STATS_ON: &str = "stats on ";

/// A (scheme, link rate) pair's server, as the stats name it.
#[derive(Clone)]
pub struct PairServer {
    /// The scheme in `--kv`'s spelling.
    pub kv: String,
    /// The emulated link rate (None: unpaced).
    pub link_gbps: Option<f64>,
    /// The server.
    pub server: PrefillServer,
}

/// One pair's counters as JSON.
fn pair_json(pair: &PairServer) -> Value {
    let ServerStats { store, bytes_sent, bytes_received, live_bytes } = pair.server.stats();
    json!({
        "kv": pair.kv,
        "link_gbps": pair.link_gbps,
        "requests": store.requests,
        "held_bytes": store.bytes,
        "expired": store.expired,
        "live_bytes": live_bytes,
        "bytes_sent": bytes_sent,
        "bytes_received": bytes_received,
    })
}

/// Every pair's counters and the process's resident memory, as one line of JSON.
pub fn stats_line(pairs: &[PairServer]) -> String {
    let value = json!({
        "pairs": pairs.iter().map(pair_json).collect::<Vec<_>>(),
        "rss_bytes": rss_bytes(),
        "peak_rss_bytes": peak_rss_bytes(),
    });
    value.to_string()
}

/// Answers every connection to `listener` with [`stats_line`] and closes it, until accepting
/// fails.
pub async fn serve_stats(listener: TcpListener, pairs: Vec<PairServer>) -> std::io::Result<()> {
    loop {
        let (mut stream, _) = listener.accept().await?;
        let line = stats_line(&pairs) + "\n";
        tokio::spawn(async move {
            // A client that vanished before reading has nothing to be told.
            _ = stream.write_all(line.as_bytes()).await;
            _ = stream.shutdown().await;
        });
    }
}

/// Says on stderr, within `period`, whenever a pair's leases expire: how many requests the
/// expiry freed and what the pair still holds. Runs until dropped.
pub async fn report_expiries(pairs: Vec<PairServer>, period: Duration) {
    let mut seen: Vec<usize> = pairs.iter().map(|p| p.server.stats().store.expired).collect();
    let mut tick = tokio::time::interval(period);
    loop {
        tick.tick().await;
        for (pair, seen) in pairs.iter().zip(&mut seen) {
            let stats = pair.server.stats().store;
            if stats.expired > *seen {
                let link = pair.link_gbps.map_or("unpaced".into(), |g| format!("{g} Gbit/s"));
                eprintln!(
                    "[{} at {link}: {} lease(s) expired, their requests freed; holding {} request(s), {} bytes]",
                    pair.kv,
                    stats.expired - *seen,
                    stats.requests,
                    stats.bytes
                );
                *seen = stats.expired;
            }
        }
    }
}
