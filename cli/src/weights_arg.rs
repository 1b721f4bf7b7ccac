//! `--weights f32|f16|bf16`: the float type a program holds the model's weights in.

use burn::tensor::FloatDType;
use clap::ValueEnum;

/// The weights' float type on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum WeightsArg {
    /// As loaded, f32 (every backend).
    F32,
    /// IEEE half: half the bytes a decode step reads, tensor-core products (wgpu, cuda).
    F16,
    /// bfloat16 (cuda).
    Bf16,
}

impl WeightsArg {
    /// Burn's float type.
    pub fn dtype(self) -> FloatDType {
        match self {
            Self::F32 => FloatDType::F32,
            Self::F16 => FloatDType::F16,
            Self::Bf16 => FloatDType::BF16,
        }
    }

    /// The name on the command line.
    pub fn name(self) -> String {
        self.to_possible_value().map(|v| v.get_name().to_string()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_choice_round_trips_through_its_name() {
        for arg in WeightsArg::value_variants() {
            assert_eq!(WeightsArg::from_str(&arg.name(), false), Ok(*arg));
        }
        assert_eq!(WeightsArg::Bf16.dtype(), FloatDType::BF16);
    }
}
