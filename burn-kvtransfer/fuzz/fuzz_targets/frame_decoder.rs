//! libFuzzer target: every decoder of peer input on arbitrary bytes.
//!
//! `cd burn-kvtransfer/fuzz && cargo +nightly fuzz run frame_decoder`
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    burn_kvtransfer::fuzzing::decode_any(data);
});
