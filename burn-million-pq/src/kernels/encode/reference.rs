//! Encoding on the host with [`nearest_centroid`]: the reference the encode kernel is tested
//! against bit for bit, and the implementation on non-Cube backends.

use burn::tensor::{backend::Backend, ElementConversion, Int, Tensor, TensorData};

use crate::{codebook::nearest_centroid, PqConfig};

/// Encodes `x` (`[batch, kv_heads, n, head_dim]` row-major, `shape`) with `books`
/// (`[groups, subspaces, centroids, sub_dim]` row-major, `groups` 1 or `kv_heads`) into packed
/// words `[batch, kv_heads, n, words_per_vector]`: code `i` of a vector sits in word
/// `i / codes_per_word` at bit `nbits * (i % codes_per_word)`.
pub fn encode_host(x: &[f32], shape: [usize; 4], books: &[f32], groups: usize, config: &PqConfig) -> Vec<i32> {
    let [batch, kv_heads, n, d] = shape;
    let (m, ds, k) = (config.subspaces, config.sub_dim(d), config.centroids());
    let (per_word, words) = (config.codes_per_word(), config.words_per_vector());
    let mut out = vec![0u32; batch * kv_heads * n * words];
    for (row, vector) in x.chunks_exact(d).enumerate() {
        let head = (row / n) % kv_heads;
        let group = if groups == 1 { 0 } else { head };
        for i in 0..m {
            let book = &books[(group * m + i) * k * ds..(group * m + i + 1) * k * ds];
            let code = nearest_centroid(&vector[i * ds..(i + 1) * ds], book);
            out[row * words + i / per_word] |= code << (config.nbits as usize * (i % per_word));
        }
    }
    out.into_iter().map(|w| w as i32).collect()
}

/// [`encode_host`] on tensors: `x: [batch, kv_heads, n, head_dim]`, `books: [groups, subspaces,
/// centroids, sub_dim]`; returns `[batch, kv_heads, n, words_per_vector]` on `x`'s device.
pub fn encode_reference<B: Backend>(x: Tensor<B, 4>, books: &Tensor<B, 4>, config: &PqConfig) -> Tensor<B, 4, Int> {
    let shape = x.dims();
    let device = x.device();
    let groups = books.dims()[0];
    let values: Vec<f32> = x.into_data().convert::<f32>().into_vec().expect("f32 data");
    let books: Vec<f32> = books.to_data().convert::<f32>().into_vec().expect("f32 data");
    let words = encode_host(&values, shape, &books, groups, config);
    let [b, h, n, _] = shape;
    Tensor::from_data(TensorData::new(words, [b, h, n, config.words_per_vector()]), &device)
}

/// Unpacks `words: [batch, kv_heads, n, words_per_vector]` into codes `[batch, kv_heads, n,
/// subspaces]` with tensor ops.
pub fn unpack_codes<B: Backend>(words: Tensor<B, 4, Int>, config: &PqConfig) -> Tensor<B, 4, Int> {
    let [b, h, n, w] = words.dims();
    let per_word = config.codes_per_word();
    let shifts: Vec<i32> = (0..per_word).map(|i| (i * config.nbits as usize) as i32).collect();
    let shifts = Tensor::<B, 1, Int>::from_data(TensorData::new(shifts, [per_word]), &words.device())
        .reshape([1, 1, 1, 1, per_word])
        .expand([b, h, n, w, per_word]);
    let mask = (1i32 << config.nbits) - 1;
    words
        .reshape([b, h, n, w, 1])
        .expand([b, h, n, w, per_word])
        .bitwise_right_shift(shifts)
        .bitwise_and_scalar(mask.elem())
        .reshape([b, h, n, w * per_word])
        .narrow(3, 0, config.subspaces)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CodebookScope;
    use burn_kvcompress::backend::NdArray;

    #[test]
    fn packs_low_bits_first_and_unpacks_back() {
        // 3 subspaces of 1 channel, 4-bit codes, centroids at 0..16: code = rounded value.
        let config = PqConfig { subspaces: 3, nbits: 4, scope: CodebookScope::Layer };
        let books: Vec<f32> = (0..3).flat_map(|_| (0..16).map(|c| c as f32)).collect();
        let x = [1.2, 15.0, 7.4, 0.0, 3.6, 9.0];
        let words = encode_host(&x, [1, 2, 1, 3], &books, 1, &config);
        assert_eq!(words, vec![0x7F1, 0x940]);
        let device = Default::default();
        let tensor = Tensor::<NdArray, 4, Int>::from_data(TensorData::new(words, [1, 2, 1, 1]), &device);
        let codes = unpack_codes(tensor, &config).into_data().convert::<i32>().into_vec::<i32>().unwrap();
        assert_eq!(codes, vec![1, 15, 7, 0, 4, 9]);
    }

    #[test]
    fn eight_bit_codes_fill_the_sign_bit_and_still_unpack() {
        let config = PqConfig { subspaces: 4, nbits: 8, scope: CodebookScope::Layer };
        let books: Vec<f32> = (0..4).flat_map(|_| (0..256).map(|c| c as f32)).collect();
        let words = encode_host(&[255.0, 1.0, 128.0, 200.0], [1, 1, 1, 4], &books, 1, &config);
        assert_eq!(words[0] as u32, 0xC880_01FF);
        let device = Default::default();
        let tensor = Tensor::<NdArray, 4, Int>::from_data(TensorData::new(words, [1, 1, 1, 1]), &device);
        let codes = unpack_codes(tensor, &config).into_data().convert::<i32>().into_vec::<i32>().unwrap();
        assert_eq!(codes, vec![255, 1, 128, 200]);
    }
}
