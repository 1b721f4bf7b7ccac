//! [`ReducedStorage`]: the element type the ZACK cache keeps its reduced keys and values in.

use std::{fmt, str::FromStr};

use burn::tensor::{DType, FloatDType};
use serde::{Deserialize, Serialize};

/// Element type of the cached reduced keys and values.
///
/// `F16` halves the cache, the state a transfer sends and what decode attention reads. Each
/// stored element is rounded to nearest f16: a relative error of at most `2^-11` (`u_h`) for
/// values within f16's normal range (`|x| ≥ 6.1e-5`; smaller values lose at most `2^-25`
/// absolute). A score `s = Σ_j q̃_j k̃_j` then moves by at most `δ = u_h Σ_j |q̃_j k̃_j|` (plus
/// `2^-25 Σ_j |q̃_j|`), which moves the softmax weights by a factor within `e^(±2δ)`; the output
/// moves by at most `(e^(2δ) − 1 + u_h) · max|ṽ|` where attention computes in f32 (tested in
/// `tests/integration/storage_gpu.rs`). Where decode runs on tensor cores (CUDA, see
/// [`mma_geometry`](crate::kernels::attention::mma_geometry)), the kernel also rounds `q̃` and the
/// softmax numerators to f16: `δ = 2 u_h Σ_j |q̃_j k̃_j|` and `(e^(2δ) − 1 + 2 u_h) · max|ṽ|`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum ReducedStorage {
    /// 32-bit floats, exact.
    #[default]
    F32,
    /// IEEE half precision: half the bytes (CubeCL backends only; ndarray has no f16 tensors).
    F16,
}

impl ReducedStorage {
    /// Bytes per cached element.
    pub fn bytes(self) -> usize {
        DType::from(self.dtype()).size()
    }

    /// The tensor dtype the cache holds.
    pub fn dtype(self) -> FloatDType {
        match self {
            Self::F32 => FloatDType::F32,
            Self::F16 => FloatDType::F16,
        }
    }
}

impl fmt::Display for ReducedStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::F32 => "f32",
            Self::F16 => "f16",
        })
    }
}

impl FromStr for ReducedStorage {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "f32" => Ok(Self::F32),
            "f16" => Ok(Self::F16),
            other => Err(format!("unknown storage `{other}` (f32, f16)")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_elements_have_their_sizes() {
        for (storage, bytes) in [(ReducedStorage::F32, 4), (ReducedStorage::F16, 2)] {
            assert_eq!(storage.to_string().parse::<ReducedStorage>(), Ok(storage));
            assert_eq!(storage.bytes(), bytes);
        }
        assert!("bf16".parse::<ReducedStorage>().is_err());
    }
}
