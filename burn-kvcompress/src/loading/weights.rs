//! Where a model's weights come from, independent of the file format.

use crate::error::LoadError;

/// Side of the square tiles [`HostTensor::transposed`] moves at once.
const TRANSPOSE_TILE: usize = 64;

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

    /// The transpose of a 2-D tensor (`[rows, cols]` to `[cols, rows]`), in tiles of
    /// `TRANSPOSE_TILE`² values (so that reads and writes stay within a few cache lines), the
    /// output's rows shared out over the machine's cores. (Element by element on one core, a
    /// 14336 × 4096 projection took 0.58 s: Llama-3-8B's weights would take about 80 s.)
    pub fn transposed(&self) -> Self {
        let (rows, cols) = (self.shape[0], self.shape[1]);
        let mut values = vec![0.0; rows * cols];
        fill_chunks_in_parallel(&mut values, TRANSPOSE_TILE * rows.max(1), |band, out| {
            // Output rows `c0 ..` (input columns), all input rows, tile by tile.
            let c0 = band * TRANSPOSE_TILE;
            let band_cols = out.len() / rows.max(1);
            for r0 in (0..rows).step_by(TRANSPOSE_TILE) {
                for c in 0..band_cols {
                    for r in r0..(r0 + TRANSPOSE_TILE).min(rows) {
                        out[c * rows + r] = self.values[r * cols + c0 + c];
                    }
                }
            }
        });
        Self { values, shape: vec![cols, rows] }
    }
}

/// Fills `values` chunk by chunk (`chunk` values each, the last shorter) on the machine's cores:
/// `fill(i, chunk)` writes chunk `i`; chunks are dealt out to the threads in turn.
pub(crate) fn fill_chunks_in_parallel(values: &mut [f32], chunk: usize, fill: impl Fn(usize, &mut [f32]) + Sync) {
    let chunks: Vec<(usize, &mut [f32])> = values.chunks_mut(chunk).enumerate().collect();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(chunks.len()).max(1);
    let mut shares: Vec<Vec<(usize, &mut [f32])>> = (0..threads).map(|_| Vec::new()).collect();
    for (i, values) in chunks {
        shares[i % threads].push((i, values));
    }
    let fill = &fill;
    std::thread::scope(|scope| {
        for share in shares {
            scope.spawn(move || share.into_iter().for_each(|(i, values)| fill(i, values)));
        }
    });
}

/// A source of weights under their Hugging Face names (`model.layers.0.self_attn.q_proj.weight`),
/// in Hugging Face layout (`[out, in]`, W_Q/W_K rows in "rotate half" order).
pub trait WeightSource {
    /// The weight called `name`; [`LoadError::MissingWeight`] if the file does not have it.
    fn get(&self, name: &str) -> Result<HostTensor, LoadError>;

    /// Whether the file has a weight called `name`.
    fn contains(&self, name: &str) -> bool;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transposes_equal_the_element_by_element_one() {
        for (rows, cols) in [(1, 1), (1, 7), (7, 1), (64, 64), (65, 63), (130, 257), (3, 1000)] {
            let values: Vec<f32> = (0..rows * cols).map(|i| i as f32).collect();
            let t = HostTensor { values: values.clone(), shape: vec![rows, cols] }.transposed();
            assert_eq!(t.shape, [cols, rows]);
            for r in 0..rows {
                for c in 0..cols {
                    assert_eq!(t.values[c * rows + r], values[r * cols + c], "{rows}x{cols} at ({r}, {c})");
                }
            }
        }
    }
}
