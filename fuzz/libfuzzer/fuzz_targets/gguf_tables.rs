//! libFuzzer target `gguf_tables`: [`kvcompress_fuzz::gguf_tables::gguf_tables`] on every input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    kvcompress_fuzz::gguf_tables::gguf_tables(data);
});
