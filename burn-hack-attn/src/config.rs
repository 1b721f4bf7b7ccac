//! The HACK configuration.

use std::{fmt, str::FromStr};

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
    /// The textual form (`bits=2,pi=64,round=stochastic,seed=0`) could not be parsed.
    #[error("cannot parse HACK parameters: {0}")]
    Syntax(String),
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

impl Default for HackConfig {
    /// The paper's configuration: 2 bits, Π = 64, stochastic rounding (seed 0).
    fn default() -> Self {
        Self { bits: 2, partition: 64, rounding: Rounding::Stochastic { seed: 0 } }
    }
}

impl fmt::Display for HackConfig {
    /// `hack:bits=2,pi=64,round=stochastic,seed=0` or `hack:bits=4,pi=32,round=nearest`: the
    /// scheme's name, and the form [`FromStr`] parses after the `hack:` prefix.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "hack:bits={},pi={}", self.bits, self.partition)?;
        match self.rounding {
            Rounding::Nearest => write!(f, ",round=nearest"),
            Rounding::Stochastic { seed } => write!(f, ",round=stochastic,seed={seed}"),
        }
    }
}

impl FromStr for HackConfig {
    type Err = HackConfigError;

    /// Parses `key=value` pairs separated by commas, with or without the `hack:` prefix: `bits`
    /// (2 or 4), `pi` (Π), `round` (`stochastic`/`sr` or `nearest`/`rtn`), `seed` (stochastic
    /// only). Missing keys take the [`Default`] values.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut config = Self::default();
        let mut seed = None;
        let mut stochastic = true;
        let body = s.strip_prefix("hack:").unwrap_or(s);
        for pair in body.split(',').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').ok_or_else(|| HackConfigError::Syntax(format!("`{pair}`")))?;
            let number = |v: &str| v.parse::<u64>().map_err(|_| HackConfigError::Syntax(format!("`{key}={v}`")));
            match key {
                "bits" => {
                    config.bits = u8::try_from(number(value)?).map_err(|_| HackConfigError::Syntax(pair.into()))?
                }
                "pi" => config.partition = number(value)? as usize,
                "seed" => seed = Some(number(value)?),
                "round" => {
                    stochastic = match value {
                        "stochastic" | "sr" => true,
                        "nearest" | "rtn" => false,
                        other => return Err(HackConfigError::Syntax(format!("unknown rounding `{other}`"))),
                    }
                }
                other => return Err(HackConfigError::Syntax(format!("unknown key `{other}` (bits, pi, round, seed)"))),
            }
        }
        config.rounding = match (stochastic, seed) {
            (true, seed) => Rounding::Stochastic { seed: seed.unwrap_or(0) },
            (false, None) => Rounding::Nearest,
            (false, Some(_)) => return Err(HackConfigError::Syntax("`seed` needs round=stochastic".into())),
        };
        config.validate()?;
        Ok(config)
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

    #[test]
    fn text_form_round_trips() {
        for c in [HackConfig::default(), HackConfig::new(4, 32, Rounding::Nearest).unwrap()] {
            assert_eq!(c.to_string().parse::<HackConfig>().unwrap(), c);
        }
        assert_eq!("bits=2,pi=128,round=rtn".parse::<HackConfig>().unwrap().partition, 128);
        assert_eq!("hack:".parse::<HackConfig>().unwrap(), HackConfig::default());
        assert!(matches!("bits=3".parse::<HackConfig>(), Err(HackConfigError::Bits(3))));
        assert!(matches!("pi=sixty".parse::<HackConfig>(), Err(HackConfigError::Syntax(_))));
        assert!(matches!("round=nearest,seed=1".parse::<HackConfig>(), Err(HackConfigError::Syntax(_))));
        assert!(matches!("colour=red".parse::<HackConfig>(), Err(HackConfigError::Syntax(_))));
    }
}
