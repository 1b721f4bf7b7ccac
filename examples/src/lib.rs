//! Shared plumbing of the example command-line programs: backend selection, the `--kv` scheme
//! syntax, and llama.cpp's reference numbers.

pub mod backend_choice;
pub mod bench;
pub mod reference;
pub mod scheme_arg;
