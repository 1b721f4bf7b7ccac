//! libFuzzer target `frame_decoder`: [`kvcompress_fuzz::frame_decoder`] on every input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    kvcompress_fuzz::frame_decoder(data);
});
