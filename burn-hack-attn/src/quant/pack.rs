//! Bit-packing of codes: `8 / bits` codes per byte, the first code in the lowest bits
//! (at 2 bits: code `i` sits at bits `2 * (i % 4)` of byte `i / 4`).

/// Packs codes of `bits` bits each (`bits` in {1, 2, 4, 8}; every code `< 2^bits`).
pub fn pack_codes(codes: &[u8], bits: u8) -> Vec<u8> {
    assert!(matches!(bits, 1 | 2 | 4 | 8), "unsupported packing width {bits}");
    let per_byte = 8 / bits as usize;
    let mut packed = vec![0u8; codes.len().div_ceil(per_byte)];
    for (i, &code) in codes.iter().enumerate() {
        debug_assert!((code as u32) < (1 << bits));
        packed[i / per_byte] |= code << (bits as usize * (i % per_byte));
    }
    packed
}

/// Unpacks `count` codes of `bits` bits each from `packed`.
pub fn unpack_codes(packed: &[u8], bits: u8, count: usize) -> Vec<u8> {
    assert!(matches!(bits, 1 | 2 | 4 | 8), "unsupported packing width {bits}");
    let per_byte = 8 / bits as usize;
    let mask = ((1u16 << bits) - 1) as u8;
    (0..count).map(|i| (packed[i / per_byte] >> (bits as usize * (i % per_byte))) & mask).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_low_bits_first() {
        assert_eq!(pack_codes(&[1, 2, 3, 0, 3], 2), vec![0b00_11_10_01, 0b11]);
        assert_eq!(pack_codes(&[0xA, 0x5, 0xF], 4), vec![0x5A, 0x0F]);
    }

    #[test]
    fn round_trips_at_every_width_and_length() {
        for bits in [1u8, 2, 4, 8] {
            for len in [0, 1, 3, 4, 5, 63, 64, 65] {
                let codes: Vec<u8> = (0..len).map(|i| ((i * 7 + 3) % (1 << bits)) as u8).collect();
                let packed = pack_codes(&codes, bits);
                assert_eq!(packed.len(), (len * bits as usize).div_ceil(8));
                assert_eq!(unpack_codes(&packed, bits, len), codes);
            }
        }
    }
}
