//! The `zack:` parameters of a scheme's spelling: `zack:rotations=FILE,rate=0.5` (or `eps=0.05` instead of
//! `rate`), with optional `min_rank=N` and `multiple=N` ([`RankRule`]) and `storage=f16`
//! ([`ReducedStorage`]).

use std::{fmt, path::PathBuf, str::FromStr, sync::Arc};

use anyhow::Context;
use burn_kvcompress::{fingerprint::ModelFingerprint, model::ModelConfig};
use burn_zack::{
    cache::{ReducedStorage, ZackScheme},
    rotation::Rotations,
    RankRule, Ranks,
};

/// How the per-head ranks are chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RankTarget {
    /// The overall compression rate (fraction of cached elements removed); ε is searched.
    Rate(f64),
    /// The singular-value removal rate ε itself (Eq. 6).
    Epsilon(f64),
}

/// `zack:` parameters: the rotation file and how ranks are chosen.
#[derive(Debug, Clone, PartialEq)]
pub struct ZackSpec {
    /// Rotation file written by `calibrate --scheme zack` (required).
    pub rotations: PathBuf,
    /// Rate or ε (default: rate [`ZackSpec::DEFAULT_RATE`]).
    pub target: RankTarget,
    /// Minimum rank and rounding.
    pub rule: RankRule,
    /// Element type of the cached reduced keys and values (default f32).
    pub storage: ReducedStorage,
}

impl ZackSpec {
    /// The compression rate when neither `rate` nor `eps` is given.
    pub const DEFAULT_RATE: f64 = 0.5;

    /// Loads the rotations, checks them against the model, and picks the ranks.
    pub fn resolve(&self, config: &ModelConfig, fingerprint: ModelFingerprint) -> anyhow::Result<ZackScheme> {
        let path = &self.rotations;
        let rotations = Rotations::load(path).with_context(|| format!("loading ZACK rotations {}", path.display()))?;
        rotations.check_model(fingerprint, config).with_context(|| {
            format!(
                "the ZACK rotations {} (calibrated on: {}) do not fit this model",
                path.display(),
                rotations.calibration
            )
        })?;
        let ranks = match self.target {
            RankTarget::Rate(rate) => Ranks::for_compression_rate(&rotations, rate, self.rule)?.0,
            RankTarget::Epsilon(epsilon) => Ranks::from_removal_rate(&rotations, epsilon, self.rule)?,
        };
        Ok(ZackScheme::new(Arc::new(rotations), ranks)?.with_storage(self.storage))
    }
}

impl fmt::Display for ZackSpec {
    /// `rotations=PATH,rate=R` (or `eps=E`), then the rule and the storage where they differ
    /// from their defaults: what [`FromStr`] reads.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rotations={}", self.rotations.display())?;
        match self.target {
            RankTarget::Rate(rate) => write!(f, ",rate={rate}")?,
            RankTarget::Epsilon(epsilon) => write!(f, ",eps={epsilon}")?,
        }
        let default = RankRule::default();
        if self.rule.min_rank != default.min_rank {
            write!(f, ",min_rank={}", self.rule.min_rank)?;
        }
        if self.rule.multiple != default.multiple {
            write!(f, ",multiple={}", self.rule.multiple)?;
        }
        if self.storage != ReducedStorage::default() {
            write!(f, ",storage={}", self.storage)?;
        }
        Ok(())
    }
}

fn number<T: FromStr>(key: &str, value: &str) -> Result<T, String> {
    value.parse().map_err(|_| format!("{key} `{value}` is not a number"))
}

impl FromStr for ZackSpec {
    type Err = String;

    /// `rotations=PATH[,rate=R|eps=E][,min_rank=N][,multiple=N][,storage=f32|f16]`, in any order.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (mut rotations, mut target, mut rule) = (None, None, RankRule::default());
        let mut storage = ReducedStorage::default();
        for pair in s.split(',').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').ok_or_else(|| format!("`{pair}` is not key=value"))?;
            let set_target = |target: &mut Option<RankTarget>, new: RankTarget| match target.replace(new) {
                Some(_) => Err("give one of `rate` and `eps`".to_string()),
                None => Ok(()),
            };
            match key {
                "rotations" if value.is_empty() => return Err("`rotations` needs a path".into()),
                "rotations" => rotations = Some(PathBuf::from(value)),
                "rate" => set_target(&mut target, RankTarget::Rate(number(key, value)?))?,
                "eps" => set_target(&mut target, RankTarget::Epsilon(number(key, value)?))?,
                "min_rank" => rule.min_rank = number(key, value)?,
                "multiple" => rule.multiple = number(key, value)?,
                "storage" => storage = value.parse()?,
                other => {
                    return Err(format!(
                        "unknown zack key `{other}` (rotations, rate, eps, min_rank, multiple, storage)"
                    ))
                }
            }
        }
        let rotations = rotations.ok_or("zack needs `rotations=PATH` (a file written by `calibrate --scheme zack`)")?;
        Ok(Self { rotations, target: target.unwrap_or(RankTarget::Rate(Self::DEFAULT_RATE)), rule, storage })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rates_epsilons_and_rules_and_rejects_bad_parameters() {
        let parse = |s: &str| s.parse::<ZackSpec>();
        let arg = parse("rotations=r.safetensors").unwrap();
        assert_eq!(
            (arg.rotations, arg.target, arg.rule),
            (PathBuf::from("r.safetensors"), RankTarget::Rate(0.5), RankRule::default())
        );
        let arg = parse("eps=0.05,rotations=r,min_rank=4,multiple=8,storage=f16").unwrap();
        assert_eq!((arg.target, arg.rule), (RankTarget::Epsilon(0.05), RankRule { min_rank: 4, multiple: 8 }));
        assert_eq!((arg.storage, parse("rotations=r").unwrap().storage), (ReducedStorage::F16, ReducedStorage::F32));
        assert!(parse("rotations=r,storage=f8").unwrap_err().contains("unknown storage"));
        assert_eq!(parse("rotations=r,rate=0.25").unwrap().target, RankTarget::Rate(0.25));
        assert!(parse("rate=0.25").unwrap_err().contains("rotations=PATH"));
        assert!(parse("rotations=r,rate=0.2,eps=0.1").unwrap_err().contains("one of"));
        assert!(parse("rotations=r,rate=x").unwrap_err().contains("not a number"));
        assert!(parse("rotations=r,m=3").unwrap_err().contains("unknown zack key"));
        assert!(parse("rotations=").unwrap_err().contains("needs a path"));
        assert!(matches!("zack:rotations=r".parse::<crate::SchemeSpec>(), Ok(crate::SchemeSpec::Zack(_))));
    }
}
