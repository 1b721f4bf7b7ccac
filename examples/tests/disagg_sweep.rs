//! `disagg sweep` end to end on the tiny random model: two schemes at one link rate, through
//! spawned prefill server processes, and the files it writes.

use std::process::Command;

use examples::e2e_report::RequestRecord;

#[test]
fn a_sweep_writes_ordered_records_a_table_against_the_baseline_and_a_plot() {
    let out = std::env::temp_dir().join(format!("disagg-sweep-{}", std::process::id()));
    let status = Command::new(env!("CARGO_BIN_EXE_disagg"))
        .args(["sweep", "--random-model", "tiny", "--prompt-tokens", "160", "--max-new-tokens", "4"])
        .args(["--kv", "dense", "--kv", "hack:bits=2,pi=64", "--link-gbps", "10", "--out"])
        .arg(&out)
        .status()
        .expect("disagg runs");
    assert!(status.success());

    let records: Vec<RequestRecord> =
        serde_json::from_str(&std::fs::read_to_string(out.join("e2e.json")).unwrap()).unwrap();
    let schemes: Vec<&str> = records.iter().map(|r| r.scheme.as_str()).collect();
    assert_eq!(schemes, ["dense", "hack:bits=2,pi=64"]);
    for r in &records {
        assert_eq!((r.link_gbps, r.prompt_tokens, r.new_tokens), (Some(10.0), 160, 4));
        let times = [r.first_layer_ms, r.last_layer_ms, r.logits_ms, r.ttft_ms, r.jct_ms];
        assert!(times[0] > 0.0 && times.windows(2).all(|w| w[0] <= w[1]), "{r:?}");
    }
    // 2-bit codes (and a 64-token f32 value tail) put a quarter of f32 K/V's bytes on the wire, or less.
    assert!(records[1].wire_bytes < records[0].wire_bytes / 4, "{records:?}");

    let table = std::fs::read_to_string(out.join("e2e.md")).unwrap();
    let rows: Vec<&str> = table.lines().skip(2).collect();
    assert_eq!(rows.len(), 2, "{table}");
    assert!(rows[0].starts_with("| dense | 10 | 160 | 1 |") && rows[0].ends_with("| +0.0 % |"), "{table}");
    assert!(rows[1].starts_with("| hack:bits=2,pi=64 | 10 | 160 | 1 |") && rows[1].ends_with(" % |"), "{table}");
    assert!(std::fs::read_to_string(out.join("jct-vs-link.svg")).unwrap().contains("<svg"));
    std::fs::remove_dir_all(&out).unwrap();
}
