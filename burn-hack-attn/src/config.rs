//! The HACK configuration.

use serde::{Deserialize, Serialize};

/// How a real value between two code levels is rounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Rounding {
    /// To the nearest level (ties away from zero, as `f32::round`).
    Nearest,
    /// Stochastic rounding (the paper's choice for K/V): up with probability equal to the
    /// fractional part, so the expected code equals the real value. Seeded, deterministic.
    Stochastic {
        /// Seed of the random generator.
        seed: u64,
    },
}

/// Configuration of HACK quantization. Serializes to JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HackConfig {
    /// Bits per K/V code: 2 (the paper) or 4.
    pub bits: u8,
    /// Partition size Π: elements sharing one (min, scale) pair. A multiple of 16.
    pub partition: usize,
    /// Rounding of K/V codes. Q and P (8 bits) always round to nearest (the paper does not say;
    /// at 8 bits the choice barely matters and nearest is deterministic).
    pub rounding: Rounding,
}

/// An unsupported HACK configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HackConfigError {
    /// K/V codes must be 2 or 4 bits.
    #[error("unsupported K/V bit width {0} (supported: 2, 4)")]
    Bits(u8),
    /// Π must be a positive multiple of 16.
    #[error("partition size {0} is not a positive multiple of 16")]
    Partition(usize),
}

impl HackConfig {
    /// A configuration, validated.
    pub fn new(bits: u8, partition: usize, rounding: Rounding) -> Result<Self, HackConfigError> {
        let config = Self { bits, partition, rounding };
        config.validate()?;
        Ok(config)
    }

    /// Checks bits and Π.
    pub fn validate(&self) -> Result<(), HackConfigError> {
        if !matches!(self.bits, 2 | 4) {
            return Err(HackConfigError::Bits(self.bits));
        }
        if self.partition == 0 || !self.partition.is_multiple_of(16) {
            return Err(HackConfigError::Partition(self.partition));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates_and_round_trips_through_json() {
        let c = HackConfig::new(2, 64, Rounding::Stochastic { seed: 7 }).unwrap();
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(serde_json::from_str::<HackConfig>(&json).unwrap(), c);
        assert_eq!(HackConfig::new(3, 64, Rounding::Nearest), Err(HackConfigError::Bits(3)));
        assert_eq!(HackConfig::new(2, 40, Rounding::Nearest), Err(HackConfigError::Partition(40)));
        assert_eq!(HackConfig::new(2, 0, Rounding::Nearest), Err(HackConfigError::Partition(0)));
    }
}
