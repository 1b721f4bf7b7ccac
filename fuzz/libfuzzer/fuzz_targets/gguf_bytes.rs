//! libFuzzer target `gguf_bytes`: [`kvcompress_fuzz::gguf::gguf_bytes`] on every input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    kvcompress_fuzz::gguf::gguf_bytes(data);
});
