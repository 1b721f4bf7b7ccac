//! libFuzzer target `scheme_spec`: [`kvcompress_fuzz::scheme_spec::scheme_spec`] on every input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    kvcompress_fuzz::scheme_spec::scheme_spec(data);
});
