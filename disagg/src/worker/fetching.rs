//! Fetching requests that arrive at a rate: each submitted to the prefill servers once it has
//! arrived, up to a number of them outstanding at once, and handed to the decoding thread in
//! arrival order.

use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use anyhow::Context;
use burn_kvtransfer::decode::{fetch_states, ReceivedStates};
use futures_util::stream::{self, StreamExt};

use super::{Fetched, Puller};

/// Fetches the layer states of `requests`, request `i` arriving at `start + arrivals[i]`, and
/// sends each to `sender` in arrival order. At most `in_flight` requests are outstanding at once
/// (arrived or waiting to, and not yet sent on), so with 1 a request is submitted only once the
/// one before it is in; with more, they stream from the servers together, and a slow request
/// holds back the sending of those after it, not their transfers. Stops after sending the first
/// failure, or when the decoding side hangs up.
///
/// Each request's wire bytes are the pool's bytes while it was outstanding: its own with one in
/// flight, overlapping its neighbours' with more.
pub(super) fn fetch_arrivals(
    puller: Puller,
    requests: &[(String, Vec<u32>)],
    arrivals: &[Duration],
    start: Instant,
    in_flight: usize,
    sender: Sender<anyhow::Result<Fetched<ReceivedStates>>>,
) {
    let fetches = requests.iter().zip(arrivals).map(|((_, tokens), &offset)| async move {
        let arrived = start + offset;
        tokio::time::sleep_until(arrived.into()).await;
        let pool = puller.pool;
        let start = puller.start_fetch();
        let received = fetch_states(pool, tokens, pool.len()).await;
        let received = received.with_context(|| puller.failed_fetch(tokens))?;
        Ok(puller.fetched(start, received, tokens, arrived))
    });
    puller.rt.block_on(async {
        let mut fetched = stream::iter(fetches).buffered(in_flight.max(1));
        while let Some(one) = fetched.next().await {
            let failed = one.is_err();
            // The decoding side hung up (it failed): stop fetching.
            if sender.send(one).is_err() || failed {
                break;
            }
        }
    });
}
