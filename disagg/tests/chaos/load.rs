//! Load through real processes: requests through one prefill server and four decode workers on
//! loopback, each worker keeping all its requests at the server at once (`--concurrency`, all
//! arriving together) and decoding them 16 at a time. CI runs 16 requests a worker (64 in all);
//! `DISAGG_LOAD_PER_WORKER=64` runs the 256. Every request's
//! received KV must hash like a local prefill's and its tokens equal a single-process run's
//! (`--check`, which fails the worker otherwise); the server must end holding nothing; and each
//! process's peak resident memory must stay within its model's footprint plus what its share of
//! the requests can hold.
//!
//! The full-size run (longer prompts, more tokens) is the same command at other sizes:
//! `results/e2e/load-256-cpu/README.md`.

use std::time::{Duration, Instant};

use crate::support::server::Server;
use crate::support::worker::{Finished, Worker};

/// Decode worker processes.
const WORKERS: usize = 4;
/// Requests each worker runs, all outstanding at once, unless `DISAGG_LOAD_PER_WORKER` says
/// otherwise: 64 in all fit CI's two cores within half a minute; 256 took 118 s there.
const PER_WORKER: usize = 16;
/// Tokens of each prompt: short, so that 256 prefills fit CI's two cores.
const PROMPT_TOKENS: usize = 8;
/// New tokens of each request (the worker helper's `--max-new-tokens`).
const NEW_TOKENS: usize = 4;
/// Requests a worker decodes together.
const MAX_BATCH: usize = 16;

/// Bytes of K and V a token adds to the tiny random model's dense f32 cache: 2 layers of 2 KV
/// heads of 128 dimensions, K and V, 4 bytes each.
const KV_BYTES_PER_TOKEN: u64 = 2 * 2 * 128 * 2 * 4;
/// Bytes of a request's logits (its vocabulary of 4096, f32), sent with its layers.
const LOGITS_BYTES: u64 = 4096 * 4;
/// Slots a dense cache may hold beyond its tokens (its buffers grow 256 slots at a time).
const CACHE_SPARE_SLOTS: u64 = 256;
/// What a process may hold beyond its model and its requests: thread stacks, the runtime's and
/// the allocator's buffers and arenas, the tables and records.
const SLACK: u64 = 64 << 20;

/// A request's serialized state and logits: what the server holds of it and what a worker
/// receives into host memory.
fn request_bytes() -> u64 {
    PROMPT_TOKENS as u64 * KV_BYTES_PER_TOKEN + LOGITS_BYTES
}

/// Requests a worker runs: `DISAGG_LOAD_PER_WORKER`, or [`PER_WORKER`].
fn per_worker() -> usize {
    std::env::var("DISAGG_LOAD_PER_WORKER").map_or(PER_WORKER, |n| n.parse().expect("DISAGG_LOAD_PER_WORKER: a count"))
}

#[test]
fn concurrent_requests_through_four_workers_are_byte_identical_within_bounded_memory() {
    let started = Instant::now();
    let per_worker_n = per_worker();
    let server = Server::start(&[]);
    let idle = server.stats();
    assert!(idle.is_idle(), "{idle:?}");
    let prompts = vec![PROMPT_TOKENS.to_string(); per_worker_n].join(",");
    let (per_worker, batch) = (per_worker_n.to_string(), MAX_BATCH.to_string());
    let workers: Vec<Worker> = (0..WORKERS)
        .map(|w| {
            // Request i of worker w draws its prompt from seed w * per_worker_n + i: all distinct.
            let seed = (w * per_worker_n).to_string();
            let args = ["--prompt-tokens", &prompts, "--request-rate", "1000", "--concurrency", &per_worker];
            // The server prefills one request at a time, and the worker's --io-timeout-secs
            // counts a request's wait in its queue as silence: behind 255 others on a busy
            // 2-core machine, the default 30 s ran out (a failed run at 256 requests).
            let args =
                [&args[..], &["--max-batch", &batch, "--seed", &seed, "--check", "--io-timeout-secs", "600"]].concat();
            Worker::start(&format!("load-{w}"), &[&server.addr], &args)
        })
        .collect();
    // The most requests the server held under leases at once, sampled while the workers ran.
    let mut most_held = 0;
    let mut runs: Vec<Option<Finished>> = (0..WORKERS).map(|_| None).collect();
    let mut workers: Vec<Option<Worker>> = workers.into_iter().map(Some).collect();
    while runs.iter().any(Option::is_none) {
        most_held = most_held.max(server.stats().requests);
        for (worker, run) in workers.iter_mut().zip(&mut runs) {
            if worker.as_mut().is_some_and(Worker::exited) {
                *run = worker.take().map(Worker::finish);
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let runs: Vec<Finished> = runs.into_iter().map(Option::unwrap).collect();

    let mut identical = 0;
    for (w, run) in runs.iter().enumerate() {
        assert!(run.status.success(), "worker {w} failed:\n{}\n{}", run.stdout, run.stderr);
        let records = run.records.as_ref().expect("the worker wrote its records");
        assert_eq!(records.len(), per_worker_n);
        for (i, record) in records.iter().enumerate() {
            // KV= and tok=, the last two cells of its row.
            let row = run.row(i);
            assert_eq!((row[13], row[14]), ("yes", "yes"), "worker {w}, request {i}:\n{}", run.stdout);
            assert_eq!((record.prompt_tokens, record.new_tokens), (PROMPT_TOKENS, NEW_TOKENS));
            identical += 1;
        }
        // Every request arrived before any had its tokens: all the worker's were
        // outstanding together (each submitted on arrival, `--concurrency` being their number).
        let last_arrival = records.iter().map(|r| r.arrival_ms).fold(0.0, f64::max);
        let first_done = records.iter().map(|r| r.arrival_ms + r.jct_ms).fold(f64::INFINITY, f64::min);
        assert!(last_arrival < first_done, "worker {w}: the last request arrived after one was done");
    }
    assert_eq!(identical, WORKERS * per_worker_n);

    // Back to idle: every request completed and freed, none left to a lease.
    let end = server.wait_idle(Duration::from_secs(10));
    assert_eq!(end.expired, 0, "{end:?}");

    // The server's peak: its model's (the peak once loaded, before any request) plus every
    // request held at once, twice (the store's state and the frames that carry it, queued on a
    // connection), plus the slack.
    let server_bound = idle.peak_rss_bytes + 2 * (WORKERS * per_worker_n) as u64 * request_bytes() + SLACK;
    // A worker's peak: the same model's footprint, plus each of its requests received into host
    // memory twice (the buffers it lands in and the states decoded from them), plus each one's
    // device cache at its final length and the spare slots of its buffers (all of them at once, a
    // bound over the 16 decoded together and the one checked locally at a time), plus the slack.
    let cache_bytes = (PROMPT_TOKENS + NEW_TOKENS) as u64 * KV_BYTES_PER_TOKEN + CACHE_SPARE_SLOTS * KV_BYTES_PER_TOKEN;
    let worker_bound = idle.peak_rss_bytes + per_worker_n as u64 * (2 * request_bytes() + cache_bytes) + SLACK;
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    assert!(
        end.peak_rss_bytes <= server_bound,
        "server peak {:.1} MiB > {:.1}",
        mib(end.peak_rss_bytes),
        mib(server_bound)
    );
    for (w, run) in runs.iter().enumerate() {
        let peak = run.peak_rss_bytes();
        assert!(peak <= worker_bound, "worker {w} peak {:.1} MiB > {:.1}", mib(peak), mib(worker_bound));
    }
    eprintln!(
        "load: {identical}/{} identical in {:.1} s; most held at once {most_held}; peak RSS server {:.1} MiB \
         (idle {:.1}, bound {:.1}), workers {} MiB (bound {:.1})",
        WORKERS * per_worker_n,
        started.elapsed().as_secs_f64(),
        mib(end.peak_rss_bytes),
        mib(idle.peak_rss_bytes),
        mib(server_bound),
        runs.iter().map(|r| format!("{:.1}", mib(r.peak_rss_bytes()))).collect::<Vec<_>>().join(", "),
        mib(worker_bound)
    );
}
