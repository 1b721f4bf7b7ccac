//! Storage cost of HACK's compressed K/V, metadata included (spec §5 table).

/// Bytes of one cached code sum: a partition's sum is at most `Π (2^bits - 1)`, stored in u8 when
/// that fits and u16 otherwise (the paper's INT16 at 2 bits and Π = 128).
pub fn sum_bytes(bits: u8, partition: usize) -> usize {
    match partition * ((1usize << bits) - 1) <= u8::MAX as usize {
        true => 1,
        false => 2,
    }
}

/// Bytes per token per KV head of the quantized cache (the float V tail excluded): packed K and V
/// codes, fp16 (min, scale) and code sums per partition; V's per-channel metadata is amortized
/// over the Π tokens of a block.
///
/// `head_dim = 128, bits = 2`: 104 B at Π = 32, 84 B at Π = 64, 76 B at Π = 128 (spec §5).
pub fn bytes_per_token(head_dim: usize, bits: u8, partition: usize) -> f64 {
    let codes = (head_dim * bits as usize).div_ceil(8) as f64;
    let per_partition = (4 + sum_bytes(bits, partition)) as f64;
    let key_parts = head_dim.div_ceil(partition) as f64;
    let keys = codes + key_parts * per_partition;
    let values = codes + head_dim as f64 * per_partition / partition as f64;
    keys + values
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_spec_table() {
        assert_eq!(bytes_per_token(128, 2, 32), 104.0);
        assert_eq!(bytes_per_token(128, 2, 64), 84.0);
        assert_eq!(bytes_per_token(128, 2, 128), 76.0);
        assert_eq!((sum_bytes(2, 64), sum_bytes(2, 128), sum_bytes(4, 32)), (1, 2, 2));
    }
}
