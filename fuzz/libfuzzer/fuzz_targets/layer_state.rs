//! libFuzzer target `layer_state`: [`kvcompress_fuzz::layer_state::layer_state`] on every input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    kvcompress_fuzz::layer_state::layer_state(data);
});
