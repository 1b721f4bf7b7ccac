//! Storage cost of HACK's compressed K/V, metadata included (spec §5 table).

use super::channel_bytes;
use crate::{kernels::key_group, Axes, HackConfig};

/// Bytes of one partition's metadata: its fp16 minimum and scale, one 32-bit word
/// ([`GroupParams::word`](crate::quant::GroupParams::word)).
pub const PARAMS_BYTES: usize = 4;

/// Bytes of one cached code sum: a partition's sum is at most `Π (2^bits - 1)`, stored in u8 when
/// that fits and u16 otherwise (the paper's INT16 at 2 bits and Π = 128).
pub fn sum_bytes(bits: u8, partition: usize) -> usize {
    match partition * ((1usize << bits) - 1) <= u8::MAX as usize {
        true => 1,
        false => 2,
    }
}

/// Whether keys of `head_dim` channels split into HACK's key partitions: a nonzero multiple of 16
/// that is below Π or a multiple of it.
pub fn key_partitions_fit(head_dim: usize, partition: usize) -> bool {
    head_dim > 0 && head_dim.is_multiple_of(16) && head_dim.is_multiple_of(key_group(head_dim, partition))
}

/// Bytes of one slot's key per KV head: packed codes plus, per channel group, fp16 (min, scale)
/// and the code sum.
pub fn key_bytes_per_slot(head_dim: usize, bits: u8, partition: usize) -> usize {
    let group = key_group(head_dim, partition);
    (head_dim * bits as usize).div_ceil(8) + head_dim / group * (PARAMS_BYTES + sum_bytes(bits, group))
}

/// Bytes of one closed V block (Π slots) per KV head: packed codes plus, per channel, fp16
/// (min, scale) and the code sum.
pub fn value_block_bytes(head_dim: usize, bits: u8, partition: usize) -> usize {
    head_dim * ((partition * bits as usize).div_ceil(8) + PARAMS_BYTES + sum_bytes(bits, partition))
}

/// Bytes per token per KV head of the quantized cache (the float V tail excluded): the key's
/// bytes plus a V block's bytes amortized over its Π tokens.
///
/// `head_dim = 128, bits = 2`: 104 B at Π = 32, 84 B at Π = 64, 76 B at Π = 128 (spec §5).
pub fn bytes_per_token(head_dim: usize, bits: u8, partition: usize) -> f64 {
    key_bytes_per_slot(head_dim, bits, partition) as f64
        + value_block_bytes(head_dim, bits, partition) as f64 / partition as f64
}

/// Bits per cached K/V element, all metadata included (tail excluded).
pub fn bits_per_element(head_dim: usize, bits: u8, partition: usize) -> f64 {
    bytes_per_token(head_dim, bits, partition) * 8.0 / (2 * head_dim) as f64
}

/// Mean bits per cached K/V element of `config` at a context of `context` slots and head
/// dimension `head_dim`: codes, all metadata, and the slots held in float amortized over the
/// context. Float slots are the sinks and the window (channel axes) plus, on average, half a block
/// that is still open (`(Π − 1) / 2` slots: keys and values in f16 on the channel axes, values in
/// f32 on the paper's).
pub fn mean_bits_per_element(config: &HackConfig, head_dim: usize, context: usize) -> f64 {
    let (d, pi, l) = (head_dim, config.partition, context as f64);
    let open = (pi as f64 - 1.0) / 2.0;
    let bytes = match config.axes {
        Axes::Paper => {
            let bits = config.key_bits;
            let float = open.min(l);
            l * key_bytes_per_slot(d, bits, pi) as f64
                + (l - float) / pi as f64 * value_block_bytes(d, bits, pi) as f64
                + float * (d * 4) as f64
        }
        Axes::Channel => {
            let float = ((config.sinks + config.window) as f64 + open).min(l);
            let block = channel_bytes(config, d, 0, 1) as f64;
            float * channel_bytes(config, d, 1, 0) as f64 + (l - float) / pi as f64 * block
        }
    };
    bytes * 8.0 / (l * (2 * d) as f64)
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
        // SmolLM2's 64-channel heads at Π = 128: one 64-channel key group, whose sum fits a byte.
        assert_eq!(key_bytes_per_slot(64, 2, 128), 16 + 5);
        assert_eq!(value_block_bytes(64, 2, 128), 64 * (32 + 4 + 2));
        assert!((bits_per_element(128, 2, 64) - 84.0 * 8.0 / 256.0).abs() < 1e-12);
    }

    #[test]
    fn mean_cost_counts_codes_metadata_and_float_slots() {
        let config = |s: &str| s.parse::<HackConfig>().unwrap();
        // Channel axes, 2 bits, Π = 64 at d = 64: codes 2 + key metadata 32/64 per key element and
        // one word per 64-channel value group per slot (0.5): 2.5 bits; float slots
        // 4 + 64 + 31.5 at 16 bits.
        let hack2 = config("bits=2,pi=64,round=nearest,axes=channel,sinks=4,window=64");
        let float = 4.0 + 64.0 + 31.5;
        let expected = (float * 16.0 + (8192.0 - float) * 2.5) / 8192.0;
        assert!((mean_bits_per_element(&hack2, 64, 8192) - expected).abs() < 1e-9);
        // A context of float slots only costs 16 bits.
        assert!((mean_bits_per_element(&hack2, 64, 50) - 16.0).abs() < 1e-9);
        // The paper's axes: the per-slot cost plus half a block of f32 values.
        let paper = config("bits=2,pi=64");
        let l = 8192.0;
        let bytes = l * 21.0 + (l - 31.5) / 64.0 * value_block_bytes(64, 2, 64) as f64 + 31.5 * 256.0;
        assert!((mean_bits_per_element(&paper, 64, 8192) - bytes * 8.0 / (l * 128.0)).abs() < 1e-9);
    }
}
