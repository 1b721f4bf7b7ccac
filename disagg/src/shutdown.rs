//! How `disagg serve` stops on SIGTERM or SIGINT (an orchestrator's stop, Ctrl-C): it leaves the
//! registry at once, so that no decode worker picks it while it stops, then waits for the
//! requests it holds to be completed (their workers are still pulling them) before it exits.

use std::time::Duration;

use tokio::signal::unix::{signal, SignalKind};

use crate::stats::PairServer;

/// Waits for SIGTERM or SIGINT; returns its name.
pub async fn stop_signal() -> anyhow::Result<&'static str> {
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    Ok(tokio::select! {
        _ = terminate.recv() => "SIGTERM",
        _ = interrupt.recv() => "SIGINT",
    })
}

/// How long a stopping server keeps listening after it left the registry, even holding nothing:
/// a worker that chose it before the deletion reached the worker's watch (milliseconds on one
/// network) may still submit, and is served rather than refused.
const LINGER: Duration = Duration::from_secs(1);

/// Keeps serving for [`LINGER`], then until no pair holds a request, at most `limit` in all;
/// returns how many requests are still held (their workers' pulls fail once the process is gone).
pub async fn drain(pairs: &[PairServer], limit: Duration) -> usize {
    let held = || pairs.iter().map(|pair| *pair.server.load().borrow()).sum::<usize>();
    let deadline = tokio::time::Instant::now() + limit;
    tokio::time::sleep(LINGER.min(limit)).await;
    while held() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    held()
}
