//! Raw bytes as a GGUF file: the header parser, the dequantizer of every tensor it accepts, the
//! model configuration, the model built from the file's weights, and the tokenizer its metadata
//! describes.

use burn_kvcompress::{
    backend::NdArray,
    gguf::GgufFile,
    loading::{build_model, gguf_model_config, GgufWeights},
    tokenizer::Tokenizer,
};

/// Tensors of more elements than this are not dequantized: it keeps one execution fast (the
/// reader has already checked that the tensor's bytes lie in the file, so a larger one is paid
/// for by the input).
const MAX_DEQUANTIZED: u64 = 1 << 16;

/// Opens `data` as a GGUF file; if it opens, reads every tensor (each must have exactly the bytes
/// and elements its info declares), the model configuration and, where it reads, the model
/// (which checks every weight's shape against it, then allocates what it implies: the RoPE
/// tables), and the tokenizer, which must encode and decode a short text without panicking.
/// Accepted: the model and the tokenizer built.
pub fn gguf_bytes(data: &[u8]) -> bool {
    let Ok(file) = GgufFile::from_bytes(data.to_vec()) else {
        return false;
    };
    for info in file.tensor_infos() {
        let bytes = file.tensor_data(&info.name).expect("a listed tensor's bytes lie in the file");
        assert_eq!(bytes.len() as u64, info.byte_size(), "tensor {:?}", info.name);
        if info.n_elements() > MAX_DEQUANTIZED {
            continue;
        }
        if let Ok((values, shape)) = file.tensor_f32(&info.name) {
            assert_eq!(values.len() as u64, info.n_elements(), "tensor {:?}", info.name);
            assert_eq!(shape.iter().product::<usize>(), values.len(), "tensor {:?}", info.name);
        }
    }
    let model = gguf_model_config(&file).is_ok_and(|config| {
        build_model::<NdArray, _>(config.clone(), &GgufWeights::new(&file, &config), &Default::default()).is_ok()
    });
    let tokenizer = Tokenizer::from_gguf(&file).is_ok_and(|tokenizer| {
        if let Ok(ids) = tokenizer.encode("Hello, <s> wörld 12345!", true) {
            let _ = tokenizer.decode(&ids);
        }
        true
    });
    model && tokenizer
}
