//! Continuous batching: requests arriving at a rate are pulled while the running batch decodes,
//! join it as their states are imported (within the KV budget) and leave it when they have their
//! tokens.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use burn::tensor::backend::Backend;
use burn_kvcompress::{
    cache::{RaggedBatch, TransferableCache, TransferableScheme},
    generation::Admission,
    model::Logits,
};
use burn_kvtransfer::decode::{Importing, ReceivedStates};

use super::fetching::fetch_arrivals;
use super::{host_logits, Decoding, Fetched, Fetcher, JobContext};
use crate::{measurements::Row, RunArgs};

/// Runs `requests`, request `i` arriving `arrivals[i]` after the first: a thread pulls their
/// layer states into host memory in arrival order (each submitted once it has arrived and fewer
/// than the policy's `in_flight` before it are still outstanding; [`fetch_arrivals`]) while this
/// one imports and decodes those that are in. Up to `max_batch`
/// decode together (continuous batching): a request joins the running batch when its states are
/// in and there is room, in arrival order, and leaves when it has its tokens; each step decodes
/// every request of the batch, each at its own length ([`RaggedBatch`]). With 1, one at a time
/// in arrival order. All the device's work stays on this thread: with the caches imported on the
/// pulling thread (a stream of its own under CubeCL), a request decoded while the next one was
/// imported decoded other tokens in 3 runs of 21 on an H200.
pub(super) fn run_at_rate<B: Backend, S>(
    cx: &JobContext<B, S>,
    requests: &[(String, Vec<u32>)],
    arrivals: &[Duration],
    policy: &BatchPolicy,
) -> anyhow::Result<Vec<Row>>
where
    S: TransferableScheme<B>,
    S::Cache: TransferableCache<B>,
{
    let puller = &cx.fetcher.puller;
    std::thread::scope(|scope| {
        let (sender, receiver) = mpsc::channel();
        let start = Instant::now();
        let in_flight = policy.in_flight;
        scope.spawn(move || fetch_arrivals(*puller, requests, arrivals, start, in_flight, sender));
        let Fetcher { scheme, device, .. } = cx.fetcher;
        let mut batch = RaggedBatch::new(cx.model.config().num_layers);
        // Requests whose states are in, waiting for admission in arrival order, each with the
        // bytes it holds once admitted.
        let mut admission: Admission<(Fetched<ReceivedStates>, usize)> =
            Admission::new(policy.kv_budget.unwrap_or(usize::MAX));
        // The next request to join, admitted, its layers being imported.
        let mut joining: Option<Joining<S::Cache>> = None;
        // The running requests in the batch's row order, with their arrival indices.
        let mut running: Vec<(usize, Decoding)> = Vec::new();
        let mut rows: Vec<Option<Row>> = requests.iter().map(|_| None).collect();
        let (mut received, mut joined) = (0, 0);
        loop {
            // Take every request whose states are in; with nothing else to do, wait for one.
            while received < requests.len() {
                let idle = running.is_empty() && admission.waiting().next().is_none() && joining.is_none();
                let fetched = match idle {
                    true => receiver.recv().context("the fetching thread stopped")?,
                    false => match receiver.try_recv() {
                        Ok(fetched) => fetched,
                        Err(mpsc::TryRecvError::Empty) => break,
                        Err(mpsc::TryRecvError::Disconnected) => bail!("the fetching thread stopped"),
                    },
                }?;
                let bytes = final_cache_bytes(&fetched.received, fetched.prompt_tokens, cx.options.max_new_tokens);
                let id = received as u64;
                admission.arrive(id, bytes, (fetched, bytes)).context("the KV budget (--kv-budget-gb)")?;
                received += 1;
            }
            // The next admitted request, in arrival order, starts importing while the batch has
            // room.
            if joining.is_none() && running.len() < policy.max_batch {
                if let Some((fetched, bytes)) = admission.admit_next() {
                    let fetched = fetched.map(ReceivedStates::importing);
                    joining = Some(Joining { fetched, bytes, began: Instant::now() });
                }
            }
            // Some of its layers before the next step (all of them when no step would wait), and
            // it joins once all are in.
            if let Some(next) = &mut joining {
                let budget = if running.is_empty() { usize::MAX } else { policy.import_per_step };
                next.import(budget, scheme, device)?;
                if next.fetched.received.is_done() {
                    let Joining { fetched, bytes, began } = joining.take().expect("a request joining");
                    let (mut decoding, caches) = cx.start(fetched.try_map(Importing::finish)?, began);
                    decoding.row.reserved_bytes = Some(bytes);
                    batch.join(caches)?;
                    running.push((joined, decoding));
                    joined += 1;
                }
            }
            for row in (0..running.len()).rev() {
                if running[row].1.finished(&cx.options) {
                    batch.leave(row)?;
                    let (index, decoding) = running.remove(row);
                    admission.release(index as u64)?;
                    rows[index] = Some(decoding.finish(start));
                }
            }
            if running.is_empty() {
                match joined == requests.len() {
                    true => break,
                    false => continue,
                }
            }
            let tokens: Vec<Vec<u32>> = running.iter().map(|(_, d)| vec![d.last_token()]).collect();
            let logits = host_logits(cx.model.forward(&tokens, batch.caches(), Logits::Last)?)?;
            let (vocab, batch_size) = (logits.len() / running.len(), running.len());
            for ((_, decoding), row_logits) in running.iter_mut().zip(logits.chunks(vocab)) {
                decoding.push(row_logits);
                decoding.row.peak_batch = decoding.row.peak_batch.max(batch_size);
            }
        }
        Ok(rows.into_iter().map(|row| row.expect("every request decoded")).collect())
    })
}

/// The batching settings of `run`.
pub(super) fn batch_policy(run: &RunArgs) -> BatchPolicy {
    BatchPolicy {
        max_batch: run.max_batch.into(),
        kv_budget: run.kv_budget_bytes(),
        import_per_step: run.import_bytes_per_step(),
        in_flight: run.concurrency.into(),
    }
}

/// How the worker batches requests arriving at a rate.
pub(super) struct BatchPolicy {
    /// The most requests decoded together.
    pub(super) max_batch: usize,
    /// The KV memory budget, bytes (None: unbounded).
    kv_budget: Option<usize>,
    /// The most bytes of a joining request's states imported between two steps of the running
    /// batch (at least one layer a step).
    import_per_step: usize,
    /// The most requests outstanding at the prefill servers at once.
    pub(super) in_flight: usize,
}

/// A request joining the batch: its states being imported a few layers between steps (each
/// import holds up the running requests' next step by its upload), the bytes it holds of the KV
/// budget, and when its import began.
struct Joining<C> {
    fetched: Fetched<Importing<C>>,
    bytes: usize,
    began: Instant,
}

impl<C> Joining<C> {
    /// Imports its next layers: one, then more while their states' bytes stay within `budget`.
    fn import<B, S>(&mut self, budget: usize, scheme: &S, device: &B::Device) -> anyhow::Result<()>
    where
        B: Backend,
        S: TransferableScheme<B, Cache = C>,
        S::Cache: TransferableCache<B>,
    {
        let importing = &mut self.fetched.received;
        let mut imported = importing.import_next::<B, S>(scheme, device)?;
        while importing.next_layer_bytes().is_some_and(|next| imported + next <= budget) {
            imported += importing.import_next::<B, S>(scheme, device)?;
        }
        Ok(())
    }
}

/// The bytes a request's caches will hold once it has its tokens, for the KV budget: its
/// received states' bytes (the scheme's format at the prompt's length) scaled from
/// `prompt_tokens` to `prompt_tokens + new_tokens` slots. Exact for dense; an upper bound for the
/// formats whose float windows stay the same size. The buffers' spare room (up to 256 slots of a
/// dense cache) is not counted.
fn final_cache_bytes(states: &ReceivedStates, prompt_tokens: usize, new_tokens: usize) -> usize {
    let bytes = states.bytes();
    (bytes * (prompt_tokens + new_tokens)).div_ceil(prompt_tokens.max(1))
}
