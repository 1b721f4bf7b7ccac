//! Tensor descriptors from the GGUF header.

use super::error::GgufError;
use super::ggml_type::GgmlType;

/// Most dimensions a ggml tensor can have (`GGML_MAX_DIMS`).
pub const MAX_DIMS: usize = 4;

/// One tensor's entry in the GGUF header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// Tensor name, e.g. `blk.0.attn_q.weight`.
    pub name: String,
    /// Dimensions in GGUF/ggml `ne` order: `dims[0]` is the fastest-varying (innermost) one.
    pub dims: Vec<u64>,
    /// Element type.
    pub ggml_type: GgmlType,
    /// Offset of the tensor's bytes from the start of the data section.
    pub offset: u64,
}

impl TensorInfo {
    /// Number of elements (product of `dims`; 1 for a zero-dimensional tensor).
    ///
    /// Infos returned by [`GgufFile`](super::GgufFile) were checked when the file was opened, so
    /// this cannot overflow for them.
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }

    /// Row-major shape, outermost dimension first (the reverse of `dims`): a weight stored with
    /// `ne = [in, out]` has shape `[out, in]`.
    pub fn shape(&self) -> Vec<usize> {
        self.dims.iter().rev().map(|&d| d as usize).collect()
    }

    /// Bytes the tensor's data takes in the file.
    pub fn byte_size(&self) -> u64 {
        self.ggml_type.byte_size(self.n_elements()).unwrap_or(u64::MAX)
    }

    /// Checks the element count and byte size computations for overflow (the product of the
    /// nonzero dimensions must fit in an `i64`), and that the first dimension is a whole number of
    /// blocks; returns the byte size.
    pub(crate) fn checked_byte_size(&self) -> Result<u64, GgufError> {
        let overflow = || GgufError::SizeOverflow { what: format!("size of tensor {:?}", self.name) };
        // The product of the nonzero dimensions must fit: a zero dimension makes the tensor empty,
        // but a product taken in another order (or a loop over the other dimensions) would still
        // overflow or run for 2^64 steps.
        let mut nonzero: u64 = 1;
        for &d in self.dims.iter().filter(|&&d| d != 0) {
            nonzero = nonzero.checked_mul(d).ok_or_else(overflow)?;
        }
        if nonzero > i64::MAX as u64 || usize::try_from(nonzero).is_err() {
            return Err(overflow());
        }
        let n = self.n_elements();
        let block = self.ggml_type.block_size() as u64;
        let ne0 = self.dims.first().copied().unwrap_or(1);
        if !ne0.is_multiple_of(block) {
            return Err(GgufError::ShapeMismatch {
                what: format!("tensor {:?}: ne[0] must be a multiple of the {} block size", self.name, self.ggml_type),
                expected: block,
                found: ne0,
            });
        }
        self.ggml_type.byte_size(n).ok_or_else(overflow)
    }
}
