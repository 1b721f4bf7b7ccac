//! The fused decode kernel on wgpu (lavapipe in CI) or CUDA against attention over
//! host-reconstructed K/V: within the bound derived for the tables the device's kernel runs on
//! (f16 on CUDA's tensor-core kernel, f32 elsewhere).
#![cfg(any(feature = "wgpu", feature = "cuda"))]

use crate::common::{
    case::{cases, config, run, Case, Tables},
    Gpu,
};
use burn_million_pq::CodebookScope;

/// The tables decode attention runs on: CUDA's tensor-core kernel holds its lookup table and
/// value codebooks in f16 (where the shapes allow; elsewhere the f32 kernel runs, within the
/// tighter bound).
#[cfg(feature = "cuda")]
const TABLES: Tables = Tables::F16;
#[cfg(not(feature = "cuda"))]
const TABLES: Tables = Tables::F32;

#[test]
fn decode_kernel_matches_reconstructed_kv_within_the_derived_bound() {
    use CodebookScope::{Layer, LayerHead};
    let mut all: Vec<Case> = cases().into_iter().filter(|c| c.q_len == 1).collect();
    all.extend([
        // Four coded splits, padding and a sliding window in the batch.
        Case {
            config: config(32, 8, Layer),
            head_dim: 64,
            kv_heads: 3,
            group: 3,
            batch: 2,
            window: 16,
            appends: &[1000, 1, 1],
            q_len: 1,
            key_start: vec![0, 300],
            sliding: Some(700),
        },
        // A recent window longer than a split (two recent splits), per-head codebooks.
        Case {
            config: config(16, 6, LayerHead),
            head_dim: 32,
            kv_heads: 2,
            group: 2,
            batch: 1,
            window: 300,
            appends: &[400, 1],
            q_len: 1,
            key_start: vec![0],
            sliding: None,
        },
        // The benchmark's geometry: head dim 128, 64 subspaces of 8 bits, GQA 4.
        Case {
            config: config(64, 8, Layer),
            head_dim: 128,
            kv_heads: 2,
            group: 4,
            batch: 1,
            window: 0,
            appends: &[513, 1],
            q_len: 1,
            key_start: vec![0],
            sliding: None,
        },
        // The benchmark's geometry over several cubes and warps, with padding, a sliding window
        // and a recent window that a warp's split straddles.
        Case {
            config: config(64, 8, Layer),
            head_dim: 128,
            kv_heads: 2,
            group: 4,
            batch: 2,
            window: 64,
            appends: &[3000, 1, 1],
            q_len: 1,
            key_start: vec![0, 700],
            sliding: Some(2000),
        },
        // 4-bit codes of 4-channel subspaces (two words per centroid), per-head codebooks.
        Case {
            config: config(32, 4, LayerHead),
            head_dim: 128,
            kv_heads: 2,
            group: 2,
            batch: 1,
            window: 16,
            appends: &[900, 1],
            q_len: 1,
            key_start: vec![0],
            sliding: None,
        },
        // Splits of 2048 slots (eight per unit), padding and a sliding window.
        Case {
            config: config(8, 4, Layer),
            head_dim: 16,
            kv_heads: 8,
            group: 1,
            batch: 4,
            window: 0,
            appends: &[9000, 1],
            q_len: 1,
            key_start: vec![0, 17, 0, 4000],
            sliding: Some(5000),
        },
        // GQA 8 with 8-bit codes: table blocks of 2 subspaces, value blocks of 8 in 32 parts.
        Case {
            config: config(32, 8, LayerHead),
            head_dim: 64,
            kv_heads: 2,
            group: 8,
            batch: 1,
            window: 8,
            appends: &[700, 1],
            q_len: 1,
            key_start: vec![0],
            sliding: None,
        },
        // GQA 6: three planes of the lookup table, entries padded to four words (zeros).
        Case {
            config: config(32, 8, Layer),
            head_dim: 64,
            kv_heads: 1,
            group: 6,
            batch: 1,
            window: 4,
            appends: &[600, 1],
            q_len: 1,
            key_start: vec![0],
            sliding: None,
        },
        // 12-bit codes for GQA 2: a subspace's table does not fit a block, the reference runs.
        Case {
            config: config(8, 12, Layer),
            head_dim: 16,
            kv_heads: 1,
            group: 2,
            batch: 1,
            window: 0,
            appends: &[300, 1],
            q_len: 1,
            key_start: vec![0],
            sliding: None,
        },
        // One slot only.
        Case {
            config: config(4, 4, Layer),
            head_dim: 8,
            kv_heads: 1,
            group: 1,
            batch: 1,
            window: 0,
            appends: &[1],
            q_len: 1,
            key_start: vec![0],
            sliding: None,
        },
    ]);
    for (i, case) in all.iter().enumerate() {
        let (diff, bound, _) = run::<Gpu>(case, 1000 + i as u64, TABLES);
        assert!(diff <= bound, "case {i}: {diff} > {bound}");
    }
}
