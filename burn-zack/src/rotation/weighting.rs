//! How the two blocks of a stacked sample matrix are weighted before the SVD.

use std::{fmt, str::FromStr};

use serde::{Deserialize, Serialize};

use crate::ZackError;

/// Weighting of the blocks `[A; B]` whose right singular vectors give a pair's rotation
/// (`[Q; K]` for the query/key pair, `[V; W_Oᵀ]` for the value/output pair).
///
/// The paper stacks the blocks as they are. Queries and keys differ in scale, and the `hidden`
/// rows of `W_Oᵀ` are on another scale from thousands of value vectors, so one block can decide
/// the rotation alone (spec §4.3, marked ambiguous). The default scales each block to unit
/// energy (squared Frobenius norm) so both shape it equally.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BlockWeighting {
    /// `[A; B]` as they are (the paper's construction).
    Concatenate,
    /// `[A / ‖A‖_F; B / ‖B‖_F]`: each block contributes the same energy.
    #[default]
    EqualEnergy,
}

impl BlockWeighting {
    /// The factor that multiplies a block's Gram matrix, given the block's energy `‖A‖_F²`
    /// (the Gram's trace). A block with no energy contributes nothing.
    pub fn gram_factor(self, energy: f64) -> f64 {
        match self {
            Self::Concatenate => 1.0,
            Self::EqualEnergy if energy > 0.0 => 1.0 / energy,
            Self::EqualEnergy => 0.0,
        }
    }
}

impl fmt::Display for BlockWeighting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Concatenate => "concatenate",
            Self::EqualEnergy => "equal-energy",
        })
    }
}

impl FromStr for BlockWeighting {
    type Err = ZackError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "concatenate" => Ok(Self::Concatenate),
            "equal-energy" => Ok(Self::EqualEnergy),
            other => Err(ZackError::Config(format!("weighting `{other}` is not `concatenate` or `equal-energy`"))),
        }
    }
}
