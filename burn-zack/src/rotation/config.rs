//! How calibration builds the matrices whose SVD gives the rotations: block weighting and
//! centering, and their text form `weighting=equal-energy,center=values`.

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

/// Which activations are centered (their calibration mean subtracted) before the SVD.
///
/// Centering the value samples ([`ValueSamples`]) is exact to compensate: folding sets the
/// dropped coordinates of every attention output to the samples' mean through the output bias. Centering keys would be harmless if every key shared one mean (softmax ignores a
/// shift common to all of a query's scores), but post-RoPE keys do not: the expected key at
/// position `t` is the pre-RoPE mean rotated by `t`, so the pooled mean is no common shift, and
/// on SmolLM2 centering keys doubles the perplexity increase (see `results/zack-*.md`). It is
/// kept as an option for the comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Centering {
    /// Raw second moments (the paper).
    None,
    /// Value samples centered; queries and keys raw.
    #[default]
    Values,
    /// Keys and value samples centered; queries raw.
    KeysAndValues,
}

impl fmt::Display for Centering {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::None => "none",
            Self::Values => "values",
            Self::KeysAndValues => "keys-values",
        })
    }
}

impl FromStr for Centering {
    type Err = ZackError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "none" => Ok(Self::None),
            "values" => Ok(Self::Values),
            "keys-values" => Ok(Self::KeysAndValues),
            other => Err(ZackError::Config(format!("center `{other}` is not `none`, `values` or `keys-values`"))),
        }
    }
}

/// Which samples stand for the values in the value/output pair's stacked matrix.
///
/// Truncating value coordinates perturbs the attention output `o = Σ_t p_t v_t`, not the values
/// themselves, and the two distributions differ: many heads put most of their weight on a few
/// tokens (attention sinks), whose values are far from the average value. The attention outputs
/// are what the rotation should keep, and their mean is the constant that best replaces the
/// dropped coordinates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ValueSamples {
    /// The cached values (the paper).
    Values,
    /// The attention outputs of the KV head's query heads.
    #[default]
    Outputs,
}

impl fmt::Display for ValueSamples {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Values => "values",
            Self::Outputs => "outputs",
        })
    }
}

impl FromStr for ValueSamples {
    type Err = ZackError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "values" => Ok(Self::Values),
            "outputs" => Ok(Self::Outputs),
            other => Err(ZackError::Config(format!("samples `{other}` are not `values` or `outputs`"))),
        }
    }
}

/// How rotations are calibrated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RotationConfig {
    /// Block weighting of `[Q; K]` and `[V; W_Oᵀ]`.
    pub weighting: BlockWeighting,
    /// Which activations are centered.
    pub centering: Centering,
    /// What stands for `V` in `[V; W_Oᵀ]`.
    pub value_samples: ValueSamples,
}

impl fmt::Display for RotationConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "weighting={},center={},samples={}", self.weighting, self.centering, self.value_samples)
    }
}

impl FromStr for RotationConfig {
    type Err = ZackError;

    /// `weighting=...,center=...,samples=...`, each key optional (defaults otherwise).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut config = Self::default();
        for pair in s.split(',').filter(|p| !p.is_empty()) {
            let (key, value) =
                pair.split_once('=').ok_or_else(|| ZackError::Config(format!("`{pair}` is not key=value")))?;
            match key {
                "weighting" => config.weighting = value.parse()?,
                "center" => config.centering = value.parse()?,
                "samples" => config.value_samples = value.parse()?,
                other => {
                    return Err(ZackError::Config(format!(
                        "unknown rotation key `{other}` (weighting, center, samples)"
                    )))
                }
            }
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_form_round_trips_and_rejects_unknown_keys() {
        for text in [
            "weighting=concatenate,center=none,samples=values",
            "weighting=equal-energy,center=keys-values,samples=outputs",
        ] {
            assert_eq!(text.parse::<RotationConfig>().unwrap().to_string(), text);
        }
        assert_eq!("".parse::<RotationConfig>().unwrap(), RotationConfig::default());
        assert!("center=all".parse::<RotationConfig>().is_err());
        assert!("m=3".parse::<RotationConfig>().is_err());
    }
}
