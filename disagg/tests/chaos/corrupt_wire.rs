//! Bytes corrupted on the wire between the prefill server and the decode worker, by a proxy
//! that flips a byte in the middle of chosen frames' payloads. A corrupt Block frame fails its
//! checksum and its blocks are pulled again; a link that corrupts every Block frame fails the
//! request after the re-pulls; a corrupt control frame (the logits' Done) ends the connection
//! and the request is retried on another server. The received KV and the tokens are checked
//! against a local run's (`--check`) whenever the worker succeeds: no corrupt byte reaches a
//! token.

use std::time::Duration;

use burn_kvtransfer::wire::FrameKind;

use crate::support::proxy::{Fault, Proxy};
use crate::support::server::Server;
use crate::support::worker::Worker;

/// Checks that request 0 of the printed table came from `server` with 4 tokens, its KV and
/// tokens marked equal to a local run's.
fn checked_row(run: &crate::support::worker::Finished, server: &str) {
    let row = run.row(0);
    assert_eq!((row[2], row[12], row[13], row[14]), (server, "4", "yes", "yes"), "{row:?}");
}

#[test]
fn a_corrupt_block_frame_is_detected_and_pulled_again() {
    let server = Server::start(&[]);
    let rule = |kind, nth| match (kind, nth) {
        (FrameKind::Block, 0) => Fault::Flip,
        _ => Fault::Pass,
    };
    let proxy = Proxy::faulting(&server.addr, rule);
    let run = Worker::run("corrupt-block", &[&proxy.addr], &["--check"]);
    assert!(run.status.success(), "{}", run.stderr);
    assert_eq!(proxy.flipped(), 1);
    let detected = format!("[prefill server 0 at tcp://{}: 1 corrupt Block frame(s) detected]", proxy.addr);
    assert!(run.stderr.contains(&detected), "{}", run.stderr);
    assert!(!run.stderr.contains("connection failed"), "{}", run.stderr);
    checked_row(&run, "0");
    // Both fetches completed: nothing held, nothing left to a lease.
    assert_eq!(server.wait_idle(Duration::from_secs(10)).expired, 0);
}

#[test]
fn a_link_that_corrupts_every_block_fails_the_request_after_its_re_pulls() {
    let server = Server::start(&[]);
    let rule = |kind, _| match kind {
        FrameKind::Block => Fault::Flip,
        _ => Fault::Pass,
    };
    let proxy = Proxy::faulting(&server.addr, rule);
    let run = Worker::run("corrupt-all", &[&proxy.addr], &[]);
    assert_eq!(run.status.code(), Some(1), "{}", run.stderr);
    assert!(run.cause().ends_with(": gave up after 3 re-pulls of corrupt blocks"), "{}", run.stderr);
    // The first pull and three re-pulls, each corrupted.
    assert!(proxy.flipped() >= 4, "{} frames corrupted", proxy.flipped());
    assert_eq!(run.stdout, "", "the worker printed something of a broken transfer");
    assert!(run.records.is_none(), "the worker wrote records of a broken transfer");
    // The worker completed the failed request, so the server freed it at once, not by a lease.
    assert_eq!(server.wait_idle(Duration::from_secs(10)).expired, 0);
}

#[test]
fn a_corrupt_control_frame_ends_the_connection_and_the_request_is_retried_on_another_server() {
    let (corrupting, healthy) = (Server::start(&["--lease-secs", "1"]), Server::start(&[]));
    let rule = |kind, nth| match (kind, nth) {
        (FrameKind::Done, 0) => Fault::Flip,
        _ => Fault::Pass,
    };
    let proxy = Proxy::faulting(&corrupting.addr, rule);
    let run = Worker::run("corrupt-done", &[&proxy.addr, &healthy.addr], &["--check"]);
    assert!(run.status.success(), "{}", run.stderr);
    assert_eq!(proxy.flipped(), 1);
    let failed = format!(
        "[prefill server 0 at tcp://{}: connection failed: the payload of a Done frame failed its checksum]",
        proxy.addr
    );
    assert!(run.stderr.contains(&failed), "{}", run.stderr);
    checked_row(&run, "1");
    assert_eq!(healthy.wait_idle(Duration::from_secs(10)).expired, 0);
    // Its logits lost, the request was never completed on the first server: its lease freed it.
    assert_eq!(corrupting.wait_idle(Duration::from_secs(10)).expired, 1);
}
