//! The real model end to end (skipped when SmolLM2 is not downloaded): a prefill server running
//! SmolLM2-135M with each scheme (dense, HACK, PQ), a decode side pulling over the in-process
//! transport; the received KV equals a local prefill's byte for byte and the tokens equal a
//! single-process run with the same scheme.

use crate::model_run::{disaggregated_run_matches_single_process, hack_scheme, pq_scheme, Transfer};
use burn_kvcompress::cache::DenseScheme;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dense_disaggregated_matches_the_single_process_run() {
    disaggregated_run_matches_single_process(|_| DenseScheme, Transfer::Pull).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hack_disaggregated_matches_the_single_process_run() {
    disaggregated_run_matches_single_process(|_| hack_scheme(), Transfer::Pull).await;
}

/// PQ with random codebooks for SmolLM2's geometry: the text is poor, but transfer must still
/// reproduce the single-process run exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pq_disaggregated_matches_the_single_process_run() {
    disaggregated_run_matches_single_process(pq_scheme, Transfer::Pull).await;
}
