//! The link stalls (the proxy stops forwarding either way, connections left open) when the
//! first Block frame comes: the worker gives the server up after its `--io-timeout-secs`, and
//! the server's lease frees the request. Alone, the worker fails with the timeout and prints or
//! records no token; with another server, it retries the request there.

use std::time::Duration;

use burn_kvtransfer::wire::FrameKind;

use crate::support::proxy::{Fault, Proxy};
use crate::support::server::Server;
use crate::support::worker::Worker;

/// The worker's patience, and how its timeout error spells it.
const TIMEOUT: (&str, &str) = ("1", "no frame from the peer within 1s");

/// A server with a 1 s lease (and 1 s for a connection to accept a frame), and a proxy to it
/// that stalls at its first Block frame.
fn stalling_server() -> (Server, Proxy) {
    let server = Server::start(&["--lease-secs", "1", "--io-timeout-secs", "1"]);
    let rule = |kind, _| match kind {
        FrameKind::Block => Fault::Stall,
        _ => Fault::Pass,
    };
    let proxy = Proxy::faulting(&server.addr, rule);
    (server, proxy)
}

/// Checks that `server` frees the request the stalled link left by its lease, back to idle.
fn freed_by_its_lease(server: &Server) {
    let stats = server.wait_idle(Duration::from_secs(10));
    assert_eq!(stats.expired, 1, "{stats:?}");
}

#[test]
fn a_stalled_link_times_out_with_a_clean_error_and_the_lease_frees_the_server() {
    let (server, proxy) = stalling_server();
    let run = Worker::run("stalled-alone", &[&proxy.addr], &["--io-timeout-secs", TIMEOUT.0]);
    assert!(proxy.stalled());
    assert_eq!(run.status.code(), Some(1), "{}", run.stderr);
    assert!(run.elapsed >= Duration::from_secs(1), "failed before the timeout: {:?}", run.elapsed);
    assert_eq!(run.cause(), TIMEOUT.1, "{}", run.stderr);
    let failed = format!("[prefill server 0 at tcp://{}: connection failed: {}]", proxy.addr, TIMEOUT.1);
    assert!(run.stderr.contains(&failed), "{}", run.stderr);
    assert_eq!(run.stdout, "", "the worker printed something of a broken transfer");
    assert!(run.records.is_none(), "the worker wrote records of a broken transfer");
    freed_by_its_lease(&server);
}

/// With a second server, the stalled request is retried there once the first times out, and
/// `--check` marks its KV and tokens equal to a local run's.
#[test]
fn a_stalled_server_is_given_up_after_the_timeout_and_the_request_retried_on_another() {
    let (stalled, proxy) = stalling_server();
    let healthy = Server::start(&[]);
    let run =
        Worker::run("stalled-retried", &[&proxy.addr, &healthy.addr], &["--io-timeout-secs", TIMEOUT.0, "--check"]);
    assert!(run.status.success(), "{}", run.stderr);
    let failed = format!("[prefill server 0 at tcp://{}: connection failed: {}]", proxy.addr, TIMEOUT.1);
    assert!(run.stderr.contains(&failed), "{}", run.stderr);
    let row = run.row(0);
    assert_eq!((row[2], row[12], row[13], row[14]), ("1", "4", "yes", "yes"), "{row:?}");
    freed_by_its_lease(&stalled);
    assert_eq!(healthy.wait_idle(Duration::from_secs(10)).expired, 0);
}
