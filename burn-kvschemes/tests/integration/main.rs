//! burn-kvschemes' integration tests: the documented `--kv` spellings, every scheme in a ragged
//! batch, and the compositions of ZACK with HACK and with PQ.
//!
//! One test binary per crate, the files of `tests/` its modules (as in the other crates).

/// The ZACK tests' helpers (tiny Llama, seeded data, calibrated rotations), shared as a file
/// rather than copied: the compositions are tested on the same data as ZACK alone.
#[path = "../../../burn-zack/tests/integration/common.rs"]
mod common;

mod compose_hack;
mod compose_pq;
mod documented_spellings;
mod ragged_batch;
