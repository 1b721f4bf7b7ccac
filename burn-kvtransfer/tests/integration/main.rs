//! burn-kvtransfer's integration tests: frames, blocks, messages, the pull protocol, faults, rate
//! limiting and the real model end to end.
//!
//! One test binary per crate, the files of `tests/` its modules: every binary links Burn and
//! instantiates its generic code again, so one binary instead of one per file builds much faster.

mod common;

mod blocks;
mod buffers;
mod faults;
mod frame_codec;
mod fuzz_smoke;
mod landing;
mod messages;
mod model_run;
mod placed_reads;
mod protocol;
mod publishing;
mod rate;
mod smollm2;
