//! libFuzzer target `hf_model`: [`kvcompress_fuzz::hf_model::hf_model`] on every input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    kvcompress_fuzz::hf_model::hf_model(data);
});
