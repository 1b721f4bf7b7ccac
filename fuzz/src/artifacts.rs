//! Calibration artifacts: MILLION's codebooks, ZACK's rotations, HACK's learned rotations and
//! the reduced codebooks of ZACK × PQ, each a tagged safetensors file.

use burn_hack_attn::rotation::RotationFile;
use burn_kvschemes::compose::ReducedCodebooks;
use burn_million_pq::codebook::Codebooks;
use burn_zack::{rotation::Rotations, RankRule, Ranks};

/// The artifact formats, in the order of the input's first byte (modulo their count).
pub const FORMATS: [&str; 4] = ["pq-codebooks", "zack-rotations", "hack-rotations", "zack-pq-codebooks"];

/// Parses the bytes after the first as the format the first byte names. Accepted rotations
/// must also give ranks at a compression rate without panicking (the search sorts their
/// singular values, which a hostile file may make NaN). Accepted: the file parsed.
pub fn artifacts(data: &[u8]) -> bool {
    let Some((&format, bytes)) = data.split_first() else {
        return false;
    };
    match format as usize % FORMATS.len() {
        0 => Codebooks::from_bytes(bytes).is_ok(),
        1 => Rotations::from_bytes(bytes).is_ok_and(|rotations| {
            let _ = Ranks::for_compression_rate(&rotations, 0.5, RankRule::default());
            true
        }),
        2 => RotationFile::from_bytes(bytes).is_ok(),
        _ => ReducedCodebooks::from_bytes(bytes).is_ok(),
    }
}
