//! [`PqShape`]: a quantizer's shapes as the kernels compile them.

use crate::PqConfig;

/// A quantizer's shapes for heads of `head_dim` channels, fixed at compile time (one compiled
/// kernel per model geometry and configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PqShape {
    /// Channels per head.
    pub head_dim: u32,
    /// Subspaces per vector.
    pub subspaces: u32,
    /// Channels per subspace.
    pub sub_dim: u32,
    /// Centroids per subspace.
    pub centroids: u32,
    /// Bits per code.
    pub nbits: u32,
    /// Packed words per vector.
    pub words: u32,
}

impl PqShape {
    /// The shapes of `config` for heads of `head_dim` channels.
    pub fn of(config: &PqConfig, head_dim: usize) -> Self {
        Self {
            head_dim: head_dim as u32,
            subspaces: config.subspaces as u32,
            sub_dim: config.sub_dim(head_dim) as u32,
            centroids: config.centroids() as u32,
            nbits: config.nbits as u32,
            words: config.words_per_vector() as u32,
        }
    }
}
