//! Where a model's weights come from, independent of the file format.

use crate::error::LoadError;

/// A weight on the host: row-major f32 values and the shape, outermost first.
#[derive(Debug, Clone, PartialEq)]
pub struct HostTensor {
    /// The values, row-major.
    pub values: Vec<f32>,
    /// The shape, outermost first (`[out, in]` for a projection).
    pub shape: Vec<usize>,
}

impl HostTensor {
    /// Checks the shape, naming the weight in the error.
    pub fn expect_shape(self, name: &str, expected: &[usize]) -> Result<Self, LoadError> {
        if self.shape != expected {
            return Err(LoadError::WeightShape {
                name: name.to_string(),
                expected: expected.to_vec(),
                found: self.shape,
            });
        }
        Ok(self)
    }

    /// The transpose of a 2-D tensor (`[rows, cols]` to `[cols, rows]`).
    pub fn transposed(&self) -> Self {
        let (rows, cols) = (self.shape[0], self.shape[1]);
        let mut values = vec![0.0; rows * cols];
        for r in 0..rows {
            for c in 0..cols {
                values[c * rows + r] = self.values[r * cols + c];
            }
        }
        Self { values, shape: vec![cols, rows] }
    }
}

/// A source of weights under their Hugging Face names (`model.layers.0.self_attn.q_proj.weight`),
/// in Hugging Face layout (`[out, in]`, W_Q/W_K rows in "rotate half" order).
pub trait WeightSource {
    /// The weight called `name`; [`LoadError::MissingWeight`] if the file does not have it.
    fn get(&self, name: &str) -> Result<HostTensor, LoadError>;

    /// Whether the file has a weight called `name`.
    fn contains(&self, name: &str) -> bool;
}
