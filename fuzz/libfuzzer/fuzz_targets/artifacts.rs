//! libFuzzer target `artifacts`: [`kvcompress_fuzz::artifacts::artifacts`] on every input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    kvcompress_fuzz::artifacts::artifacts(data);
});
