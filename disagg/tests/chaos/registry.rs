//! The prefill servers' registry in a real etcd (`--etcd`; an etcd process per test,
//! [`support::etcd`](crate::support::etcd)): a registered server is found and decodes what a
//! static list decodes; loads are reported and the least loaded server is chosen; a SIGKILLed
//! server leaves the registry within its lease and is never connected to again; a SIGTERMed one
//! leaves it at once and finishes the requests it holds; an unreachable etcd is a clear error at
//! start.

use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use burn_kvtransfer::wire::FrameKind;

use crate::support::etcd::{free_port, Etcd};
use crate::support::proxy::{Fault, Proxy};
use crate::support::server::Server;
use crate::support::wait::wait_until;
use crate::support::worker::Worker;

/// Where servers register by default.
const SERVERS: &str = "/burn-kvtransfer/servers/";

/// The lease of the servers of the kill test, seconds (etcd's minimum with its default timings).
const LEASE_SECS: u64 = 2;

/// A server registered in `etcd` (with `args` more), and its key.
fn registered(etcd: &Etcd, args: &[&str]) -> (Server, String) {
    let server = Server::start(&[&["--etcd", &etcd.endpoint], args].concat());
    // It registers before it says it listens; its stderr says under which key.
    let said = format!("[registry: {} registered as ", server.addr);
    let limit = Duration::from_secs(10);
    wait_until(limit, "the server's key on its stderr", || server.stderr(), |e| e.contains(&said));
    let stderr = server.stderr();
    let key = stderr.split(&said).nth(1).and_then(|rest| rest.split(']').next()).unwrap().to_string();
    assert_eq!(etcd.get(&key).map(|v| v.contains(&format!("\"address\":\"{}\"", server.addr))), Some(true));
    (server, key)
}

/// Prefills a server has run: the lines its engine prints, one per prompt.
fn prefills(server: &Server) -> usize {
    server.stderr().matches("[prefill ").count()
}

/// A worker of the registry finds the registered server (ignoring a malformed value and a
/// server of another scheme), and its request's KV and tokens equal a single-process run's
/// (`--check`), as a worker given the server's address in a static list does.
#[test]
fn a_registered_server_is_found_and_decodes_what_a_static_list_decodes() {
    let etcd = Etcd::start();
    let (server, _) = registered(&etcd, &[]);
    let garbage = format!("{SERVERS}garbage");
    etcd.put(&garbage, "{not json");
    // Nothing listens there: a worker that tried it would say so.
    let elsewhere = r#"{"address":"127.0.0.1:1","scheme":"hack:bits=2,pi=64,round=nearest","model":"00","link_gbps":null,"load":0}"#;
    etcd.put(&format!("{SERVERS}other-scheme"), elsewhere);

    let found = Worker::run("registry-found", &[], &["--etcd", &etcd.endpoint, "--check"]);
    assert!(found.status.success(), "{}", found.stderr);
    assert!(found.stderr.contains(&format!("[registry: ignoring {garbage}: not a server entry")), "{}", found.stderr);
    assert!(found.stderr.contains(&format!("prefill server 0 at {} joined", server.addr)), "{}", found.stderr);
    assert!(!found.stderr.contains("127.0.0.1:1"), "the worker tried a server of another scheme:\n{}", found.stderr);
    let listed = Worker::run("registry-listed", &[&server.addr], &["--check"]);
    assert!(listed.status.success(), "{}", listed.stderr);
    // 160 prompt tokens from server 0 at the first try, 4 new tokens, KV and tokens equal to the
    // single-process run's: the same row both ways.
    for run in [&found, &listed] {
        let row = run.row(0);
        assert_eq!(
            (row[1], row[2], row[3], row[12], row[13], row[14]),
            ("160", "0", "1", "4", "yes", "yes"),
            "{row:?}"
        );
    }
}

/// A proxy to `server` that passes the Submit and stalls at the first Ready: the server holds
/// the request (its load) until its lease ends.
fn held_at_first_ready(server: &Server) -> Proxy {
    Proxy::faulting(&server.addr, |kind, _| match kind {
        FrameKind::Ready => Fault::Stall,
        _ => Fault::Pass,
    })
}

/// Two registered servers, the first holding two requests of other workers (stalled by their
/// proxies): it reports a load of 2, and a worker of the registry sends all its requests to the
/// second, one at a time (its own count is 0 on both; only the reported load tells them apart).
#[test]
fn loads_are_reported_and_the_least_loaded_server_is_chosen() {
    let etcd = Etcd::start();
    // Its held requests must outlive the test.
    let (busy, busy_key) = registered(&etcd, &["--lease-secs", "120"]);
    let (idle, _) = registered(&etcd, &[]);
    let proxies = [held_at_first_ready(&busy), held_at_first_ready(&busy)];
    let hogs: Vec<Worker> = proxies
        .iter()
        .enumerate()
        .map(|(i, proxy)| Worker::start(&format!("registry-hog-{i}"), &[&proxy.addr], &["--io-timeout-secs", "120"]))
        .collect();
    let limit = Duration::from_secs(60);
    wait_until(
        limit,
        "the busy server's load of 2 in etcd",
        || etcd.get(&busy_key),
        |v| v.as_deref().is_some_and(|v| v.contains("\"load\":2")),
    );
    wait_until(limit, "the busy server's two prefills", || prefills(&busy), |&n| n == 2);

    let run = Worker::run("registry-least-loaded", &[], &["--etcd", &etcd.endpoint, "--prompt-tokens", "8,8,8,8"]);
    assert!(run.status.success(), "{}", run.stderr);
    assert_eq!((prefills(&busy), prefills(&idle)), (2, 4), "requests went to the busy server:\n{}", run.stdout);
    drop(hogs);
}

/// Connections to an address, recorded with when they came: a listener that takes over a
/// killed server's address shows whether anyone still connects there.
struct Connections {
    seen: Arc<Mutex<Vec<Instant>>>,
    stop: Arc<AtomicBool>,
}

impl Connections {
    /// Listens on `addr` (retrying while the killed server's socket lets it go).
    fn listen(addr: &str) -> Self {
        let start = Instant::now();
        let listener = loop {
            match TcpListener::bind(addr) {
                Ok(listener) => break listener,
                Err(e) => assert!(start.elapsed() < Duration::from_secs(5), "binding {addr}: {e}"),
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        listener.set_nonblocking(true).unwrap();
        let (seen, stop) = (Arc::new(Mutex::new(Vec::new())), Arc::new(AtomicBool::new(false)));
        let (log, stopped) = (seen.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stopped.load(Ordering::SeqCst) {
                match listener.accept() {
                    // Closed at once: the worker's handshake fails.
                    Ok(_) => log.lock().unwrap().push(Instant::now()),
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Self { seen, stop }
    }

    /// When connections came.
    fn times(&self) -> Vec<Instant> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for Connections {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Issue 64's item 4: of two registered servers, one is SIGKILLed while a worker of the registry
/// sends it requests. Its key is deleted within its lease's TTL (measured from the kill to the
/// deletion's arrival at an independent `etcdctl watch`); the worker says it left; no connection
/// reaches its address after that (a listener takes the address over, so reconnection tries
/// would show), and every request of the worker succeeds, on the other server after the kill.
#[test]
fn a_killed_server_leaves_the_registry_within_its_lease_and_is_never_connected_to_again() {
    let etcd = Etcd::start();
    let events = etcd.watch(SERVERS);
    let lease = LEASE_SECS.to_string();
    let (doomed, doomed_key) = registered(&etcd, &["--etcd-lease-secs", &lease]);
    let doomed_registered = Instant::now();
    let (survivor, _) = registered(&etcd, &["--etcd-lease-secs", &lease]);
    // 60 requests over 12 s: past the kill, the deletion and the worker's reconnection tries
    // after it (its backoff reaches 3.2 s) if it kept the server.
    let prompts = vec!["8"; 60].join(",");
    let args =
        ["--etcd", &etcd.endpoint, "--prompt-tokens", &prompts, "--request-rate", "5", "--io-timeout-secs", "10"];
    let worker = Worker::start("registry-killed", &[], &args);
    let limit = Duration::from_secs(60);
    wait_until(
        limit,
        "both servers serving the worker",
        || (prefills(&doomed), prefills(&survivor)),
        |&(d, s)| d > 0 && s > 0,
    );
    // Two TTLs after it registered, the key is there: keep-alives renewed its lease.
    let ttl = Duration::from_secs(LEASE_SECS);
    std::thread::sleep((doomed_registered + ttl * 2).saturating_duration_since(Instant::now()));
    assert!(etcd.get(&doomed_key).is_some(), "the lease lapsed while the server ran");

    let killed = Instant::now();
    doomed.killer()();
    let connections = Connections::listen(&doomed.addr);
    let slack = Duration::from_secs(1);
    wait_until(ttl + slack * 5, "the killed server's key deleted", || events.deleted(&doomed_key), Option::is_some);
    let removal = events.deleted(&doomed_key).unwrap() - killed;
    eprintln!(
        "registry: the killed server's key was deleted {:.2} s after the kill (lease TTL {LEASE_SECS} s)",
        removal.as_secs_f64()
    );
    assert!(removal <= ttl + slack, "deleted {removal:?} after the kill, past the TTL of {ttl:?} and {slack:?}");
    // Keep-alives go every third of the TTL: the last one came at most that long before the
    // kill, so the lease, not something else, ended it.
    assert!(removal >= ttl / 2, "deleted {removal:?} after the kill: before its lease could run out");

    let run = worker.finish();
    assert!(run.status.success(), "{}", run.stderr);
    assert_eq!(run.records.as_ref().map(Vec::len), Some(60));
    // At most the request in flight at the kill needed a second try.
    let retried = (0..60).filter(|&i| run.row(i)[3] != "1").count();
    assert!(retried <= 1, "{retried} requests retried:\n{}", run.stdout);
    let deleted = events.deleted(&doomed_key).unwrap();
    // The worker hears of the deletion as the watch does; a try already under way may land just
    // after.
    let late: Vec<Duration> =
        connections.times().iter().filter(|&&t| t > deleted + slack).map(|&t| t - deleted).collect();
    assert!(late.is_empty(), "the worker connected to the removed server's address {late:?} after its deletion");
    assert!(
        run.stderr.contains(&format!("prefill server at {} left ({doomed_key} is gone)", doomed.addr)),
        "{}",
        run.stderr
    );
}

/// One of two registered servers is sent SIGTERM while a worker of the registry sends them
/// requests: its key is deleted at once (its lease is revoked, long before its 30 s TTL), it
/// exits cleanly after the requests it held are completed, and every request of the worker
/// succeeds at the first try (the one in flight on the stopped server included), the later
/// ones on the other server.
#[test]
fn a_terminated_server_leaves_the_registry_at_once_and_finishes_what_it_holds() {
    let etcd = Etcd::start();
    let events = etcd.watch(SERVERS);
    let (stopping, stopping_key) = registered(&etcd, &["--etcd-lease-secs", "30"]);
    let (survivor, _) = registered(&etcd, &["--etcd-lease-secs", "30"]);
    let prompts = vec!["8"; 30].join(",");
    let args = ["--etcd", &etcd.endpoint, "--prompt-tokens", &prompts, "--request-rate", "5"];
    let worker = Worker::start("registry-terminated", &[], &args);
    let limit = Duration::from_secs(60);
    wait_until(
        limit,
        "both servers serving the worker",
        || (prefills(&stopping), prefills(&survivor)),
        |&(s, v)| s > 0 && v > 0,
    );

    let terminated = Instant::now();
    let status = stopping.terminate(Duration::from_secs(40));
    assert!(status.success(), "{status:?}: {}", stopping.stderr());
    let removal = events.deleted(&stopping_key).map(|at| at - terminated);
    assert!(
        removal.is_some_and(|r| r < Duration::from_secs(2)),
        "key deleted {removal:?} after SIGTERM, lease TTL 30 s: {}",
        stopping.stderr()
    );
    let said = stopping.stderr();
    assert!(said.contains("[serve: SIGTERM: left the registry]"), "{said}");
    assert!(said.contains("[serve: SIGTERM: exiting, 0 requests still held]"), "{said}");

    let run = worker.finish();
    assert!(run.status.success(), "{}", run.stderr);
    assert_eq!(run.records.as_ref().map(Vec::len), Some(30));
    let retried = (0..30).filter(|&i| run.row(i)[3] != "1").count();
    assert_eq!(retried, 0, "requests retried:\n{}", run.stdout);
}

/// An etcd that does not answer (nothing listens at the endpoint): `serve` and `decode` fail at
/// start with an error that names it, and print nothing on stdout.
#[test]
fn an_unreachable_etcd_is_a_clear_error_at_start() {
    let endpoint = format!("127.0.0.1:{}", free_port());
    let unreachable = format!("etcd at {endpoint} is unreachable");
    let serve = Command::new(env!("CARGO_BIN_EXE_disagg"))
        .args(["serve", "--random-model", "tiny", "--listen", "127.0.0.1:0", "--etcd", &endpoint])
        .stdin(Stdio::null())
        .output()
        .expect("disagg serve runs");
    let stderr = String::from_utf8_lossy(&serve.stderr);
    assert_eq!(serve.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("registering in etcd under /burn-kvtransfer") && stderr.contains(&unreachable), "{stderr}");
    assert!(serve.stdout.is_empty(), "{}", String::from_utf8_lossy(&serve.stdout));

    let decode = Worker::run("registry-unreachable", &[], &["--etcd", &endpoint]);
    assert_eq!(decode.status.code(), Some(1), "{}", decode.stderr);
    assert!(
        decode.stderr.contains("reading the prefill servers' registry under /burn-kvtransfer"),
        "{}",
        decode.stderr
    );
    assert!(decode.cause().starts_with(&unreachable), "{}", decode.stderr);
    assert_eq!(decode.stdout, "");
}

/// etcd killed while a worker of the registry runs: the worker keeps the server it knew, and
/// every request succeeds; the worker and the server both say they lost etcd.
#[test]
fn a_worker_keeps_the_servers_it_knew_when_etcd_goes_away() {
    let etcd = Etcd::start();
    let (server, _) = registered(&etcd, &["--etcd-lease-secs", &LEASE_SECS.to_string()]);
    let prompts = vec!["8"; 20].join(",");
    let args = ["--etcd", &etcd.endpoint, "--prompt-tokens", &prompts, "--request-rate", "5"];
    let worker = Worker::start("registry-etcd-gone", &[], &args);
    wait_until(Duration::from_secs(60), "the worker's first requests served", || prefills(&server), |&n| n > 0);
    drop(etcd);
    let run = worker.finish();
    assert!(run.status.success(), "{}", run.stderr);
    assert_eq!(run.records.as_ref().map(Vec::len), Some(20));
    assert!(run.stderr.contains("lost the watch of etcd"), "{}", run.stderr);
    assert!(run.stderr.contains("keeping the 1 known server(s)"), "{}", run.stderr);
    let limit = Duration::from_secs(10);
    wait_until(
        limit,
        "the server saying its registration lapsed",
        || server.stderr(),
        |e| e.contains("registration lapsed"),
    );
}
