//! The HACK configuration: its fields, its text form (`--kv hack:…`) and the presets.

use std::{fmt, path::PathBuf, str::FromStr};

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

/// Along which axes keys and values share their quantization parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Axes {
    /// The paper's: each key quantized on its own, in groups of Π channels; values per channel
    /// over blocks of Π tokens, the newest `< Π` values in float until their block fills. The
    /// worst of the four 2-bit layouts KIVI compares (outlier key channels take each group's
    /// range); kept for comparison.
    Paper,
    /// KIVI's: keys per channel over blocks of Π tokens (an outlier channel gets its own range),
    /// values per token in groups of `min(Π, head_dim)` channels. A block is quantized once all
    /// its tokens are older than the recent window; until then its keys and values stay in
    /// float. The block's key scales are folded into the query before its 8-bit quantization,
    /// and each token's value scales into the attention weights, so both products stay integer
    /// products on the codes.
    Channel,
}

/// The orthogonal rotation applied per KV head to queries and keys after RoPE (exact for `q kᵀ`)
/// and to values through the weights (`W_V R`, `Rᵀ W_O`). It spreads outlier channels over all
/// channels before quantization.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RotationSpec {
    /// No rotation.
    None,
    /// A Walsh–Hadamard transform with random signs drawn from `seed` per layer, KV head and
    /// tensor (the head dimension must be a power of two).
    Hadamard {
        /// Seed of the signs.
        seed: u64,
    },
    /// Rotations learned by `finetune --scheme hack`, read from a safetensors file tagged with
    /// the model's hash.
    Learned {
        /// The file.
        path: PathBuf,
    },
}

/// Configuration of HACK quantization. Serializes to JSON; its text form is the `--kv hack:…`
/// spelling, and `hack2`/`hack3`/`hack4` name the [presets](HackConfig::preset).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HackConfig {
    /// Bits per key code: 2 or 4.
    pub key_bits: u8,
    /// Bits per value code: 2 or 4.
    pub value_bits: u8,
    /// Partition size Π: tokens per block (and channels per group, up to the head dimension). A
    /// multiple of 16.
    pub partition: usize,
    /// Rounding of K/V codes. Q and P (8 bits) always round to nearest.
    pub rounding: Rounding,
    /// Quantization axes.
    pub axes: Axes,
    /// Rotation of queries, keys and values.
    pub rotation: RotationSpec,
    /// The first slots kept in float, keys and values (attention sinks); [`Axes::Channel`] only.
    pub sinks: usize,
    /// The newest slots kept in float, keys and values; [`Axes::Channel`] only. A block is
    /// quantized once all its tokens are older than these.
    pub window: usize,
    /// Clip each partition's range to the one that reconstructs it best (from
    /// [`CLIP_RATIOS`](crate::quant::CLIP_RATIOS) of its min/max range) instead of using its
    /// min/max.
    pub clip: bool,
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
    /// A setting that the chosen axes do not have.
    #[error("{0}")]
    Combination(String),
    /// The textual form (`bits=2,pi=64,round=stochastic,seed=0`) could not be parsed.
    #[error("cannot parse HACK parameters: {0}")]
    Syntax(String),
}

/// A named configuration: `hack2`, `hack3` or `hack4`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preset {
    /// The name users write (`--kv hack2`).
    pub name: &'static str,
    /// What it stands for, in the long form.
    pub spelling: &'static str,
}

/// The presets: the most accurate format found at about 2.6, 3.6 and 4.5 bits per element on the
/// decode-perplexity grid of `cargo xtask eval --hack-grid` (SmolLM2 on two texts, no
/// calibration; `docs/hack.md` gives their accuracy). `hack2` takes Π = 128: on the grid it is
/// closer to dense in KL than Π = 64 on both texts (0.053 / 0.076 against 0.055 / 0.079) at 2.59
/// bits per element against 2.66, and its blocks halve the decode kernel's per-slot query and
/// weight quantization. `hack3` keeps keys at 4 bits and values at 2: keys carry the outlier
/// channels, and the grid's K4V2 row is 5× closer to dense in KL than its K2V4 row at the same
/// cost.
pub const PRESETS: [Preset; 3] = [
    Preset {
        name: "hack2",
        spelling: "hack:bits=2,pi=128,round=nearest,axes=channel,rot=hadamard,sinks=4,window=64,clip=mse",
    },
    Preset {
        name: "hack3",
        spelling: "hack:kbits=4,vbits=2,pi=128,round=nearest,axes=channel,rot=hadamard,sinks=4,window=64,clip=mse",
    },
    Preset { name: "hack4", spelling: "hack:bits=4,pi=128,round=nearest,axes=channel,rot=hadamard,sinks=4" },
];

impl HackConfig {
    /// A configuration on the paper's axes without rotation, validated (the form every HACK
    /// spelling had before the axes were a setting).
    pub fn new(bits: u8, partition: usize, rounding: Rounding) -> Result<Self, HackConfigError> {
        let config = Self { key_bits: bits, value_bits: bits, partition, rounding, ..Self::default() };
        config.validate()?;
        Ok(config)
    }

    /// The preset called `name` (`hack2`, `hack3`, `hack4`).
    pub fn preset(name: &str) -> Option<Self> {
        PRESETS.iter().find(|p| p.name == name).map(|p| p.spelling.parse().expect("presets parse"))
    }

    /// Checks bits, Π, and that the float side paths and split bit widths come with the channel
    /// axes.
    pub fn validate(&self) -> Result<(), HackConfigError> {
        for bits in [self.key_bits, self.value_bits] {
            if !matches!(bits, 2 | 4) {
                return Err(HackConfigError::Bits(bits));
            }
        }
        if self.partition == 0 || !self.partition.is_multiple_of(16) {
            return Err(HackConfigError::Partition(self.partition));
        }
        if self.axes == Axes::Paper {
            if self.key_bits != self.value_bits {
                return Err(HackConfigError::Combination("separate key and value bit widths need axes=channel".into()));
            }
            if self.sinks > 0 || self.window > 0 {
                return Err(HackConfigError::Combination("sinks and window need axes=channel".into()));
            }
        }
        Ok(())
    }

    /// The one bit width of keys and values, where they agree.
    pub fn bits(&self) -> Option<u8> {
        (self.key_bits == self.value_bits).then_some(self.key_bits)
    }
}

impl Default for HackConfig {
    /// The paper's configuration: 2 bits, Π = 64, stochastic rounding (seed 0), the paper's axes,
    /// no rotation, no float side paths.
    fn default() -> Self {
        Self {
            key_bits: 2,
            value_bits: 2,
            partition: 64,
            rounding: Rounding::Stochastic { seed: 0 },
            axes: Axes::Paper,
            rotation: RotationSpec::None,
            sinks: 0,
            window: 0,
            clip: false,
        }
    }
}

impl fmt::Display for HackConfig {
    /// The long form that [`FromStr`] reads, e.g. `hack:bits=2,pi=64,round=stochastic,seed=0`
    /// (settings at their defaults beyond these four are left out, so the paper's configurations
    /// print as they always did) or
    /// `hack:kbits=4,vbits=2,pi=64,round=nearest,axes=channel,rot=hadamard,sinks=4,window=64`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.bits() {
            Some(bits) => write!(f, "hack:bits={bits}")?,
            None => write!(f, "hack:kbits={},vbits={}", self.key_bits, self.value_bits)?,
        }
        write!(f, ",pi={}", self.partition)?;
        match self.rounding {
            Rounding::Nearest => write!(f, ",round=nearest")?,
            Rounding::Stochastic { seed } => write!(f, ",round=stochastic,seed={seed}")?,
        }
        if self.axes == Axes::Channel {
            write!(f, ",axes=channel")?;
        }
        match &self.rotation {
            RotationSpec::None => {}
            RotationSpec::Hadamard { seed: 0 } => write!(f, ",rot=hadamard")?,
            RotationSpec::Hadamard { seed } => write!(f, ",rot=hadamard:{seed}")?,
            RotationSpec::Learned { path } => write!(f, ",rotations={}", path.display())?,
        }
        if self.sinks > 0 {
            write!(f, ",sinks={}", self.sinks)?;
        }
        if self.window > 0 {
            write!(f, ",window={}", self.window)?;
        }
        if self.clip {
            write!(f, ",clip=mse")?;
        }
        Ok(())
    }
}

impl FromStr for HackConfig {
    type Err = HackConfigError;

    /// A preset name (`hack2`, `hack3`, `hack4`), or `key=value` pairs separated by commas, with or without
    /// the `hack:` prefix: `bits` (2 or 4, keys and values), `kbits`/`vbits` (each alone), `pi`
    /// (Π), `round` (`stochastic`/`sr` or `nearest`/`rtn`), `seed` (stochastic only), `axes`
    /// (`paper` or `channel`), `rot` (`none`, `hadamard` or `hadamard:SEED`), `rotations` (a
    /// file of learned rotations; no `,` in the path), `sinks` and `window` (slots), `clip`
    /// (`mse` or `none`). Missing keys
    /// take the [`Default`] values, so the paper's spellings (`hack:bits=2,pi=64`) mean what they
    /// always meant.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(preset) = Self::preset(s) {
            return Ok(preset);
        }
        let mut config = Self::default();
        let mut seed = None;
        let mut stochastic = true;
        let body = s.strip_prefix("hack:").unwrap_or(s);
        for pair in body.split(',').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').ok_or_else(|| HackConfigError::Syntax(format!("`{pair}`")))?;
            let number = |v: &str| v.parse::<u64>().map_err(|_| HackConfigError::Syntax(format!("`{key}={v}`")));
            let bits = |v: &str| u8::try_from(number(v)?).map_err(|_| HackConfigError::Syntax(pair.into()));
            match key {
                "bits" => (config.key_bits, config.value_bits) = (bits(value)?, bits(value)?),
                "kbits" => config.key_bits = bits(value)?,
                "vbits" => config.value_bits = bits(value)?,
                "pi" => config.partition = number(value)? as usize,
                "seed" => seed = Some(number(value)?),
                "round" => {
                    stochastic = match value {
                        "stochastic" | "sr" => true,
                        "nearest" | "rtn" => false,
                        other => return Err(HackConfigError::Syntax(format!("unknown rounding `{other}`"))),
                    }
                }
                "axes" => {
                    config.axes = match value {
                        "paper" => Axes::Paper,
                        "channel" => Axes::Channel,
                        other => return Err(HackConfigError::Syntax(format!("unknown axes `{other}` (paper, channel)"))),
                    }
                }
                "rot" => {
                    config.rotation = match value.split_once(':') {
                        None if value == "none" => RotationSpec::None,
                        None if value == "hadamard" => RotationSpec::Hadamard { seed: 0 },
                        Some(("hadamard", seed)) => RotationSpec::Hadamard { seed: number(seed)? },
                        _ => {
                            return Err(HackConfigError::Syntax(format!(
                                "unknown rotation `{value}` (none, hadamard, hadamard:SEED; learned: rotations=PATH)"
                            )))
                        }
                    }
                }
                "rotations" if value.is_empty() => return Err(HackConfigError::Syntax("`rotations` needs a path".into())),
                "rotations" => config.rotation = RotationSpec::Learned { path: PathBuf::from(value) },
                "sinks" => config.sinks = number(value)? as usize,
                "window" => config.window = number(value)? as usize,
                "clip" => {
                    config.clip = match value {
                        "mse" => true,
                        "none" => false,
                        other => return Err(HackConfigError::Syntax(format!("unknown clipping `{other}` (mse, none)"))),
                    }
                }
                other => {
                    return Err(HackConfigError::Syntax(format!(
                        "unknown key `{other}` (bits, kbits, vbits, pi, round, seed, axes, rot, rotations, sinks, window, clip)"
                    )))
                }
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
        let hack2 = HackConfig::preset("hack2").unwrap();
        assert_eq!(serde_json::from_str::<HackConfig>(&serde_json::to_string(&hack2).unwrap()).unwrap(), hack2);
    }

    #[test]
    fn text_form_round_trips() {
        let long = "hack:kbits=4,vbits=2,pi=32,round=nearest,axes=channel,rot=hadamard:9,sinks=4,window=16,clip=mse";
        let learned = "hack:bits=2,pi=64,round=nearest,axes=channel,rotations=rot.safetensors,window=64";
        let spelled = [long, learned].map(|s| s.parse::<HackConfig>().unwrap());
        let presets = PRESETS.map(|p| HackConfig::preset(p.name).unwrap());
        for c in [HackConfig::default(), HackConfig::new(4, 32, Rounding::Nearest).unwrap()]
            .iter()
            .chain(&spelled)
            .chain(&presets)
        {
            assert_eq!(c.to_string().parse::<HackConfig>().unwrap(), *c, "{c}");
        }
        assert_eq!(spelled[0].to_string(), long);
        assert_eq!(spelled[1].to_string(), learned);
        assert_eq!("bits=2,pi=128,round=rtn".parse::<HackConfig>().unwrap().partition, 128);
        assert_eq!("hack:".parse::<HackConfig>().unwrap(), HackConfig::default());
        assert!(matches!("bits=3".parse::<HackConfig>(), Err(HackConfigError::Bits(3))));
        assert!(matches!("kbits=8".parse::<HackConfig>(), Err(HackConfigError::Bits(8))));
        assert!(matches!("pi=sixty".parse::<HackConfig>(), Err(HackConfigError::Syntax(_))));
        assert!(matches!("round=nearest,seed=1".parse::<HackConfig>(), Err(HackConfigError::Syntax(_))));
        assert!(matches!("colour=red".parse::<HackConfig>(), Err(HackConfigError::Syntax(_))));
        assert!(matches!("axes=diagonal".parse::<HackConfig>(), Err(HackConfigError::Syntax(_))));
        assert!(matches!("rot=givens".parse::<HackConfig>(), Err(HackConfigError::Syntax(_))));
        assert!(matches!("rotations=".parse::<HackConfig>(), Err(HackConfigError::Syntax(_))));
    }

    #[test]
    fn the_papers_spellings_keep_their_meaning() {
        // Every spelling the paper's configurations had: the paper's axes, no rotation, no float
        // side paths, one bit width; printed back as before.
        for old in ["hack:bits=2,pi=64,round=stochastic,seed=0", "hack:bits=4,pi=32,round=nearest"] {
            let c: HackConfig = old.parse().unwrap();
            assert_eq!((c.axes, &c.rotation, c.sinks, c.window), (Axes::Paper, &RotationSpec::None, 0, 0));
            assert_eq!(c.to_string(), old);
        }
        assert_eq!("hack:bits=2,pi=64".parse::<HackConfig>().unwrap(), HackConfig::default());
    }

    #[test]
    fn side_paths_and_split_widths_need_the_channel_axes() {
        for s in ["kbits=4,vbits=2", "sinks=4", "window=64"] {
            assert!(matches!(s.parse::<HackConfig>(), Err(HackConfigError::Combination(_))), "{s}");
            assert!(format!("{s},axes=channel").parse::<HackConfig>().is_ok(), "{s}");
        }
    }
}
