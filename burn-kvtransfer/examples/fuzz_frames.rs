//! Stable-Rust fuzz driver: feeds mutated inputs to every decoder of peer input
//! (`burn_kvtransfer::fuzzing::decode_any`) and reports what they reached. Any property
//! violation panics with the input's index and seed.
//!
//! `cargo run --release -p burn-kvtransfer --example fuzz_frames -- [iterations] [seed]`

use std::time::Instant;

use burn_kvtransfer::fuzzing::{decode_any, Mutator};

fn main() {
    let mut args = std::env::args().skip(1);
    let iterations: u64 = args.next().map_or(1_000_000, |a| a.parse().expect("iterations: an integer"));
    let seed: u64 = args.next().map_or(0x5EED, |a| a.parse().expect("seed: an integer"));
    let mut mutator = Mutator::new(seed);
    let (mut frames, mut messages, mut states, mut bytes) = (0u64, 0u64, 0u64, 0u64);
    let started = Instant::now();
    for _ in 0..iterations {
        let input = mutator.next_input();
        bytes += input.len() as u64;
        let outcome = decode_any(&input);
        frames += outcome.frames as u64;
        messages += outcome.messages as u64;
        states += u64::from(outcome.state);
    }
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "{iterations} inputs ({:.1} MB) in {seconds:.2} s ({:.0}/s), seed {seed}: {frames} frames decoded, \
         {messages} messages parsed, {states} layer states parsed; no property violated",
        bytes as f64 / 1e6,
        iterations as f64 / seconds
    );
}
