//! A short run of the fuzz driver in CI: mutated inputs reach every parser and break no
//! round-trip property (`examples/fuzz_frames.rs` runs a million; the workspace's `fuzz/` has the
//! cargo-fuzz target).

use burn_kvtransfer::fuzzing::{decode_any, Mutator};

#[test]
fn mutated_inputs_reach_every_parser_and_break_no_property() {
    let mut mutator = Mutator::new(42);
    let (mut frames, mut messages, mut states) = (0, 0, 0);
    for _ in 0..200_000 {
        let outcome = decode_any(&mutator.next_input());
        frames += outcome.frames;
        messages += outcome.messages;
        states += usize::from(outcome.state);
    }
    assert!(frames > 1000 && messages > 1000 && states > 100, "{frames} frames, {messages} messages, {states} states");
}
