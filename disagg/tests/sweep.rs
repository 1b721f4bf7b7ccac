//! `disagg sweep` end to end on the tiny random model: two schemes at one link rate, through
//! spawned prefill server processes, and the files it writes; requests one at a time and
//! arriving at a rate.

use std::path::PathBuf;
use std::process::Command;

use kvcompress_cli::e2e_report::{ArrivalProcess, RequestRecord};

/// Runs `disagg sweep` of the tiny random model with dense and HACK storage at 10 Gbit/s, 4 new
/// tokens a request, and `args`, into a fresh directory named after `name`: the directory and the
/// records.
fn sweep(name: &str, args: &[&str]) -> (PathBuf, Vec<RequestRecord>) {
    sweep_tokens(name, 4, args)
}

/// [`sweep`] with `new_tokens` new tokens a request.
fn sweep_tokens(name: &str, new_tokens: usize, args: &[&str]) -> (PathBuf, Vec<RequestRecord>) {
    let out = std::env::temp_dir().join(format!("disagg-{name}-{}", std::process::id()));
    let status = Command::new(env!("CARGO_BIN_EXE_disagg"))
        .args(["sweep", "--random-model", "tiny", "--max-new-tokens", &new_tokens.to_string()])
        .args(["--kv", "dense", "--kv", "hack:bits=2,pi=64", "--link-gbps", "10"])
        .args(args)
        .arg("--out")
        .arg(&out)
        .status()
        .expect("disagg runs");
    assert!(status.success());
    let records = serde_json::from_str(&std::fs::read_to_string(out.join("e2e.json")).unwrap()).unwrap();
    (out, records)
}

#[test]
fn a_sweep_writes_ordered_records_a_table_against_the_baseline_and_a_plot() {
    let (out, records) = sweep("sweep", &["--prompt-tokens", "160"]);
    let schemes: Vec<&str> = records.iter().map(|r| r.scheme.as_str()).collect();
    assert_eq!(schemes, ["dense", "hack:bits=2,pi=64"]);
    for r in &records {
        assert_eq!((r.link_gbps, r.request_rate, r.prompt_tokens, r.new_tokens), (Some(10.0), None, 160, 4));
        let times = [r.first_layer_ms, r.last_layer_ms, r.logits_ms, r.ttft_ms, r.jct_ms];
        assert!(times[0] > 0.0 && times.windows(2).all(|w| w[0] <= w[1]), "{r:?}");
    }
    // 2-bit codes (and a 64-token f32 value tail) put a quarter of f32 K/V's bytes on the wire, or less.
    assert!(records[1].wire_bytes < records[0].wire_bytes / 4, "{records:?}");

    let table = std::fs::read_to_string(out.join("e2e.md")).unwrap();
    let rows: Vec<&str> = table.lines().skip(2).collect();
    assert_eq!(rows.len(), 2, "{table}");
    let starts = ["| dense | 10 | one at a time | 160 | 1 |", "| hack:bits=2,pi=64 | 10 | one at a time | 160 | 1 |"];
    assert!(rows[0].starts_with(starts[0]) && rows[0].ends_with("| +0.0 % |"), "{table}");
    assert!(rows[1].starts_with(starts[1]) && rows[1].ends_with(" % |"), "{table}");
    assert!(std::fs::read_to_string(out.join("jct-vs-link.svg")).unwrap().contains("<svg"));
    assert!(!out.join("jct-vs-rate.svg").exists());

    // `report` rebuilds the same table from the records.
    let again = out.join("report");
    let status = Command::new(env!("CARGO_BIN_EXE_disagg"))
        .args(["report", "--records"])
        .arg(out.join("e2e.json"))
        .arg("--out")
        .arg(&again)
        .status()
        .expect("disagg runs");
    assert!(status.success());
    assert_eq!(std::fs::read_to_string(again.join("e2e.md")).unwrap(), table);
    assert!(again.join("jct-vs-link.svg").exists());
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn requests_arriving_faster_than_they_are_served_queue_and_decode_the_same_tokens() {
    // Three requests a millisecond apart: the second and the third arrive while the first is
    // still being prefilled, so both wait. `--check` fails the run if a request's tokens differ
    // from a single-process run's (the fetching thread imports caches while another decodes).
    let (out, records) = sweep("rate", &["--prompt-tokens", "160,96,160", "--request-rate", "1000", "--check"]);
    let schemes: Vec<&str> = records.iter().map(|r| r.scheme.as_str()).collect();
    assert_eq!(schemes, ["dense", "dense", "dense", "hack:bits=2,pi=64", "hack:bits=2,pi=64", "hack:bits=2,pi=64"]);
    for (i, r) in records.iter().enumerate() {
        assert_eq!((r.request_rate, r.prompt_tokens, r.new_tokens), (Some(1000.0), [160, 96, 160][i % 3], 4));
        // Counted from arrival, the queueing comes before the first token and the last.
        assert!(r.queue_ms >= 0.0 && r.queue_ms <= r.ttft_ms && r.ttft_ms <= r.jct_ms, "{r:?}");
        if i % 3 > 0 {
            assert!(r.queue_ms > 1.0, "request {i} arrived while another was being served: {r:?}");
        }
    }
    let table = std::fs::read_to_string(out.join("e2e.md")).unwrap();
    // Groups per prompt length: 160 (two requests) and 96, per scheme, in the first table.
    let rows: Vec<&str> = table.lines().skip(2).take_while(|l| !l.is_empty()).collect();
    assert_eq!(rows.len(), 4, "{table}");
    assert!(rows[0].starts_with("| dense | 10 | 1000 | 160 | 2 |"), "{table}");
    assert!(std::fs::read_to_string(out.join("jct-vs-rate.svg")).unwrap().contains("<svg"));
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn a_continuous_batch_decodes_each_request_as_it_decodes_alone() {
    // Four requests a millisecond apart, up to three decoded together: each decodes 24 tokens,
    // longer than the next one's prefill, so the next joins while the ones before it decode, at
    // another length. `--check` fails the run if a request's tokens differ from a single-process
    // run's or its received KV from a local prefill's.
    // A joining request's cache is imported a layer between steps (`--import-mb-per-step 0`). A
    // warm-up round (each prompt length alone, then two requests together) runs first and leaves
    // no records.
    let args =
        ["--prompt-tokens", "160,96,160,64", "--request-rate", "1000", "--max-batch", "3", "--import-mb-per-step", "0"];
    let args = [&args[..], &["--check", "--warmup", "1"]].concat();
    let (out, records) = sweep_tokens("batch", 24, &args);
    assert_eq!(records.len(), 8);
    for (i, r) in records.iter().enumerate() {
        assert_eq!((r.prompt_tokens, r.new_tokens, r.max_batch), ([160, 96, 160, 64][i % 4], 24, 3));
        assert!(r.queue_ms >= 0.0 && r.queue_ms <= r.ttft_ms && r.ttft_ms <= r.jct_ms, "{r:?}");
    }
    // Requests overlap: one's first token comes before the one that arrived before it finishes
    // (arrivals are 1 ms apart).
    for scheme in records.chunks(4) {
        assert!(
            scheme.windows(2).any(|w| w[1].ttft_ms + 1.0 < w[0].jct_ms),
            "no two requests decoded together: {scheme:?}"
        );
        // And the steps say so: some decoded with another, none with more than three.
        assert!(scheme.iter().any(|r| r.peak_batch > 1) && scheme.iter().all(|r| r.peak_batch <= 3), "{scheme:?}");
    }
    for r in &records {
        // Every gap between its 24 tokens, which average to its mean gap.
        assert_eq!(r.token_gaps_ms.len(), 23, "{r:?}");
        let mean = r.token_gaps_ms.iter().map(|&g| f64::from(g)).sum::<f64>() / 23.0;
        assert!((mean - r.tbt_ms).abs() < 1e-3 * r.tbt_ms.max(1.0), "{r:?}");
    }
    let table = std::fs::read_to_string(out.join("e2e.md")).unwrap();
    assert!(table.lines().nth(2).unwrap().starts_with("| dense | 10 | 1000, batch 3 | 160 | 2 |"), "{table}");
    // The load table and the most load within the TBT target follow, with their plots.
    assert!(table.contains("| served req/s |") && table.contains("with TBT p99 ≤ 50 ms"), "{table}");
    for plot in ["tbt-p99-vs-rate.svg", "served-vs-rate.svg"] {
        assert!(std::fs::read_to_string(out.join(plot)).unwrap().contains("<svg"), "{plot}");
    }
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn a_batch_of_no_requests_is_refused() {
    let out = std::env::temp_dir().join(format!("disagg-batch0-{}", std::process::id()));
    let output = Command::new(env!("CARGO_BIN_EXE_disagg"))
        .args(["sweep", "--random-model", "tiny", "--kv", "dense", "--request-rate", "10", "--max-batch", "0"])
        .arg("--out")
        .arg(&out)
        .output()
        .expect("disagg runs");
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("--max-batch"));
}

#[test]
fn under_a_kv_budget_the_compressed_cache_decodes_more_requests_at_once() {
    // 1 MB of KV: one dense (f32) request of 160 prompt and 24 new tokens takes about 0.75 MB, so
    // the next waits until it finishes; HACK's 2-bit requests (about 0.15 MB each) decode together.
    let args = ["--prompt-tokens", "160,96,160", "--request-rate", "1000", "--max-batch", "3"];
    let (out, records) = sweep_tokens("budget", 24, &[&args[..], &["--kv-budget-gb", "0.001", "--check"]].concat());
    let (dense, hack) = records.split_at(3);
    assert!(dense.windows(2).all(|w| w[1].ttft_ms + 1.0 >= w[0].jct_ms), "dense requests overlapped: {dense:?}");
    assert!(hack.windows(2).any(|w| w[1].ttft_ms + 1.0 < w[0].jct_ms), "no two HACK requests overlapped: {hack:?}");
    assert!(dense.iter().all(|r| r.peak_batch == 1) && hack.iter().any(|r| r.peak_batch > 1), "{records:?}");
    // Each request holds a share of the budget that grows with its prompt (160, 96, 160 tokens)
    // and is smaller in HACK's format.
    let reserved = |r: &RequestRecord| r.reserved_bytes.expect("a request under a budget holds some of it");
    for r in &records {
        assert_eq!(r.kv_budget_bytes, Some(1_000_000));
        assert!(reserved(r) <= 1_000_000, "{r:?}");
    }
    for scheme in [dense, hack] {
        assert!(reserved(&scheme[0]) > reserved(&scheme[1]) && reserved(&scheme[0]) == reserved(&scheme[2]));
    }
    assert!(reserved(&hack[0]) * 4 < reserved(&dense[0]), "{records:?}");
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn a_request_larger_than_the_whole_budget_is_refused_with_an_error() {
    let output = Command::new(env!("CARGO_BIN_EXE_disagg"))
        .args(["sweep", "--random-model", "tiny", "--kv", "dense", "--max-new-tokens", "4"])
        .args(["--prompt-tokens", "160", "--request-rate", "10", "--link-gbps", "10", "--kv-budget-gb", "0.0001"])
        .arg("--out")
        .arg(std::env::temp_dir().join(format!("disagg-budget-{}", std::process::id())))
        .output()
        .expect("disagg runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("more than the whole budget"), "{stderr}");
}

#[test]
fn poisson_arrivals_follow_the_seeded_schedule() {
    let args = ["--prompt-tokens", "64,64,64", "--request-rate", "20", "--arrivals", "poisson", "--arrival-seed", "3"];
    let (out, records) = sweep("poisson", &args);
    let expected = ArrivalProcess::Poisson { seed: 3 }.times(20.0, 3);
    for (i, r) in records.iter().enumerate() {
        assert_eq!(r.arrivals, ArrivalProcess::Poisson { seed: 3 });
        let at = expected[i % 3].as_secs_f64() * 1e3;
        assert!((r.arrival_ms - at).abs() < 0.01, "request {i} arrived at {} ms, not {at}: {r:?}", r.arrival_ms);
    }
    let table = std::fs::read_to_string(out.join("e2e.md")).unwrap();
    assert!(table.lines().nth(2).unwrap().starts_with("| dense | 10 | 20 Poisson | 64 | 3 |"), "{table}");
    std::fs::remove_dir_all(&out).unwrap();
}
