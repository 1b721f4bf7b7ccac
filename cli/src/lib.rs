//! Shared plumbing of the command-line programs (package `kvcompress-cli`): backend selection, llama.cpp's reference
//! numbers, benchmark helpers, disaggregated runs' records and plots.

pub mod backend_choice;
pub mod bench;
pub mod e2e_report;
pub mod memory;
pub mod plot;
pub mod random_model;
pub mod reference;
pub mod report;
pub mod tradeoff;
pub mod transfer_args;
pub mod weights_arg;
