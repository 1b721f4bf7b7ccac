//! Entry points of the fuzz targets: one function per reader of untrusted bytes, each taking
//! arbitrary bytes and asserting what must hold of them: no panic, and input that is accepted
//! reads back as what was written where an encoder exists. Resource bounds are checked by the
//! readers themselves (a declared size the input does not pay for is refused before anything is
//! allocated); a target that allocated from such a size would run out of memory under libFuzzer's
//! `-rss_limit_mb`.
//!
//! - `libfuzzer/` wraps each entry point in a cargo-fuzz target of the same name (nightly);
//! - `tests/replay.rs` runs each over its committed seed corpus and seeded mutations of it on
//!   stable Rust, which is what CI runs;
//! - `examples/write_corpora.rs` writes each target's seed corpus ([`Target::seeds`]).

pub mod artifacts;
pub mod gguf;
pub mod gguf_tables;
mod gguf_writer;
pub mod hf_model;
pub mod layer_state;
pub mod scheme_spec;
mod schemes;
mod seeds;

/// A fuzz target: its name (the cargo-fuzz target's and its corpus folder's) and entry point.
#[derive(Debug, Clone, Copy)]
pub struct Target {
    /// The target's name.
    pub name: &'static str,
    /// Runs one input and says whether it was accepted all the way (a file read and its model
    /// built, a state imported, a spelling parsed); panics when a property breaks. Every seed is
    /// accepted, so that mutations start from the deepest code.
    pub run: fn(&[u8]) -> bool,
    /// The seed corpus: a few small valid inputs the mutations start from.
    pub seeds: fn() -> Vec<Vec<u8>>,
}

/// Every target, in the order the README's table lists them.
pub const TARGETS: [Target; 7] = [
    Target { name: "gguf_bytes", run: gguf::gguf_bytes, seeds: seeds::gguf_files },
    Target { name: "gguf_tables", run: gguf_tables::gguf_tables, seeds: seeds::table_inputs },
    Target { name: "hf_model", run: hf_model::hf_model, seeds: seeds::hf_models },
    Target { name: "artifacts", run: artifacts::artifacts, seeds: seeds::artifact_files },
    Target { name: "layer_state", run: layer_state::layer_state, seeds: seeds::layer_states },
    Target { name: "scheme_spec", run: scheme_spec::scheme_spec, seeds: seeds::spellings },
    Target { name: "frame_decoder", run: frame_decoder, seeds: burn_kvtransfer::fuzzing::seed_corpus },
];

/// Every decoder of a transfer peer's bytes (frames, messages, layer states), with their round
/// trips: `burn_kvtransfer::fuzzing::decode_any`. Accepted: a frame or a state decoded.
pub fn frame_decoder(data: &[u8]) -> bool {
    let outcome = burn_kvtransfer::fuzzing::decode_any(data);
    outcome.frames > 0 || outcome.state
}
