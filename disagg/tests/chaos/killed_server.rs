//! A prefill server SIGKILLed while a request's layer streams to the decode worker: the proxy
//! forwards half of the first Block frame, kills the server, and closes the worker's connection
//! there. With another server, the worker retries the request on it and decodes the right
//! tokens; alone, it fails with the transfer's error and prints or records no token.

use burn_kvtransfer::wire::FrameKind;

use crate::support::proxy::{Fault, Proxy};
use crate::support::server::Server;
use crate::support::worker::Worker;

/// The error of a connection that ended inside a frame, as the worker reports it.
const MID_FRAME: &str = "connection closed mid-frame";

/// A proxy to `server` that kills it in the middle of the first Block frame it sends.
fn killed_at_first_block(server: &Server) -> Proxy {
    let rule = |kind, nth| match (kind, nth) {
        (FrameKind::Block, 0) => Fault::Cut,
        _ => Fault::Pass,
    };
    Proxy::start(&server.addr, rule, server.killer())
}

/// The first server is killed mid-stream; the request is retried on the second. `--check`
/// checks that the caches the request was decoded from (the retry's) hash like a local
/// prefill's, and that its tokens equal a single-process run's: the worker's table marks both
/// `yes`.
#[test]
fn a_server_killed_mid_stream_is_retried_on_another_and_decodes_the_right_tokens() {
    let (dying, healthy) = (Server::start(&[]), Server::start(&[]));
    let proxy = killed_at_first_block(&dying);
    let run = Worker::run("killed-retried", &[&proxy.addr, &healthy.addr], &["--check"]);
    assert!(run.status.success(), "{}", run.stderr);
    assert!(dying.was_killed(), "the first server still runs: {:?}", dying.exited());
    let failed = format!("[prefill server 0 at tcp://{}: connection failed: {MID_FRAME}", proxy.addr);
    assert!(run.stderr.contains(&failed), "{}", run.stderr);
    // Request 0: 160 prompt tokens, from server 1 at its second try (the first met the kill on
    // server 0), 4 tokens, KV and tokens equal to the single-process run's.
    let row = run.row(0);
    assert_eq!((row[1], row[2], row[3], row[12], row[13], row[14]), ("160", "1", "2", "4", "yes", "yes"), "{row:?}");
    assert_eq!(run.records.as_ref().map(Vec::len), Some(1));
    // The healthy server completed the retried fetch: nothing held, nothing expired.
    let stats = healthy.wait_idle(std::time::Duration::from_secs(10));
    assert_eq!(stats.expired, 0, "{stats:?}");
}

/// The only server is killed mid-stream: the worker exits with the fetch's error and the
/// transfer's cause, having printed no table and no token and written no record.
#[test]
fn a_lone_server_killed_mid_stream_fails_the_worker_cleanly_with_no_tokens() {
    let dying = Server::start(&[]);
    let proxy = killed_at_first_block(&dying);
    let run = Worker::run("killed-alone", &[&proxy.addr], &[]);
    assert_eq!(run.status.code(), Some(1), "{}", run.stderr);
    assert!(dying.was_killed());
    assert!(
        run.stderr.contains("fetching the KV cache of a 160-token prompt from 1 prefill server(s)"),
        "{}",
        run.stderr
    );
    // anyhow's report: the context, then its cause.
    assert!(run.cause().starts_with(MID_FRAME), "{}", run.stderr);
    assert_eq!(run.stdout, "", "the worker printed something of a broken transfer");
    assert!(run.records.is_none(), "the worker wrote records of a broken transfer");
    assert_eq!(proxy.seen(FrameKind::Block), 1);
}
