//! CRC-32 arithmetic without reading the bytes again. CRC-32 is linear: the checksum of `a ‖ b`
//! is `shift(crc(a), |b|) ⊕ crc(b)`, where `shift` appends `|b|` zero bytes in O(log |b|). So a
//! layer's checksum follows from its blocks' checksums, and a block's data checksum follows from
//! its frame's checksum and that of the frame's small header.

use crc32fast::Hasher;

/// The CRC-32 of `a ‖ b` from `crc(a)`, `crc(b)` and `b`'s length.
pub fn crc_concat(crc_a: u32, crc_b: u32, len_b: usize) -> u32 {
    let mut joined = Hasher::new_with_initial(crc_a);
    joined.combine(&Hasher::new_with_initial_len(crc_b, len_b as u64));
    joined.finalize()
}

/// The CRC-32 of `b` from `crc(a ‖ b)`, `crc(a)` and `b`'s length.
pub fn crc_suffix(crc_ab: u32, crc_a: u32, len_b: usize) -> u32 {
    crc_ab ^ crc_concat(crc_a, 0, len_b)
}

/// The CRC-32 of `data`, its 1 MiB chunks hashed on the rayon pool's threads (one thread hashes
/// about 15 GB/s, below the links a received layer may come over).
pub fn crc_par(data: &[u8]) -> u32 {
    use rayon::prelude::*;
    const CHUNK: usize = 1 << 20;
    let crcs: Vec<u32> = data.par_chunks(CHUNK).map(crc32fast::hash).collect();
    data.chunks(CHUNK).zip(crcs).fold(0, |crc, (chunk, chunk_crc)| crc_concat(crc, chunk_crc, chunk.len()))
}
