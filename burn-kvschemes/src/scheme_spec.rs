//! The spelling of a KV cache scheme (`--kv` on the command line): `dense` (f32 keys and values;
//! `dense:storage=f16` stores them in half precision, the baseline an fp16 model's transfer
//! sends), `hack:bits=2,pi=64,round=stochastic,seed=0` (any subset of the keys; see
//! [`HackConfig`]'s text form; the presets `hack2`, `hack3`, `hack4`) or
//! `pq:codebooks=books.safetensors,window=64` (codebooks from `calibrate`; `window` defaults to
//! 64), `zack:rotations=rot.safetensors,rate=0.5`, or ZACK followed by HACK quantization of the
//! reduced dimensions, `zack:…+hack:bits=2,pi=64` (the ranks then default to multiples that
//! HACK's key partitions split; paths may not contain `+`), or ZACK followed by product
//! quantization of the reduced dimensions, `zack:…+pq:codebooks=reduced.safetensors,window=64`
//! (codebooks from `calibrate --scheme zack-pq` for the same rotations and ranks; the ranks then
//! default to multiples of their `sub_dim`).
//!
//! A [`SchemeSpec`] is only the parsed description, printed back by its `Display`;
//! [`SchemeSpec::resolve`](crate::SchemeSpec::resolve) turns it into an
//! [`AnyScheme`](crate::AnyScheme) against the loaded model.

use std::{fmt, path::PathBuf, str::FromStr};

use burn_hack_attn::HackConfig;
use burn_kvcompress::model::ModelConfig;

use crate::ZackSpec;

/// `pq:` parameters: the codebook file and the recent window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PqSpec {
    /// Codebook file written by `calibrate` (required).
    pub codebooks: PathBuf,
    /// Recent slots kept in f32 (default [`PqSpec::DEFAULT_WINDOW`]).
    pub window: usize,
}

impl PqSpec {
    /// The recent window when `window` is not given.
    pub const DEFAULT_WINDOW: usize = 64;
}

impl FromStr for PqSpec {
    type Err = String;

    /// `codebooks=PATH[,window=N]`, in any order (a path may not contain `,`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (mut codebooks, mut window) = (None, Self::DEFAULT_WINDOW);
        for pair in s.split(',').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').ok_or_else(|| format!("`{pair}` is not key=value"))?;
            match key {
                "codebooks" if value.is_empty() => return Err("`codebooks` needs a path".into()),
                "codebooks" => codebooks = Some(PathBuf::from(value)),
                "window" => window = value.parse().map_err(|_| format!("window `{value}` is not a number"))?,
                other => return Err(format!("unknown pq key `{other}` (codebooks, window)")),
            }
        }
        let codebooks = codebooks.ok_or("pq needs `codebooks=PATH` (a file written by `calibrate`)")?;
        Ok(Self { codebooks, window })
    }
}

/// A KV cache scheme chosen on the command line (parsed, not yet checked against a model).
#[derive(Debug, Clone, PartialEq)]
pub enum SchemeSpec {
    /// Uncompressed K/V.
    Dense,
    /// Uncompressed K/V stored in f16.
    HalfDense,
    /// HACK: 2- or 4-bit K/V codes, attention on the codes.
    Hack(HackConfig),
    /// MILLION: product-quantized K/V with trained codebooks, lookup-table attention.
    Pq(PqSpec),
    /// ZACK: K/V reduced along the head dimension by calibrated rotations, adaptive ranks.
    Zack(ZackSpec),
    /// ZACK followed by HACK quantization of the reduced keys and values.
    ZackHack(ZackSpec, HackConfig),
    /// ZACK followed by product quantization of the reduced keys and values.
    ZackPq(ZackSpec, PqSpec),
}

impl FromStr for SchemeSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some((first, second)) = s.split_once('+') {
            return match (first.parse()?, second.parse()?) {
                (Self::Zack(zack), Self::Hack(hack)) => Ok(Self::ZackHack(zack, hack)),
                (Self::Zack(zack), Self::Pq(pq)) => Ok(Self::ZackPq(zack, pq)),
                _ => Err(format!("`{s}`: the compositions supported are `zack:…+hack:…` and `zack:…+pq:…`")),
            };
        }
        if let Some(preset) = HackConfig::preset(s) {
            return Ok(Self::Hack(preset));
        }
        let (name, params) = s.split_once(':').unwrap_or((s, ""));
        match name {
            "dense" => match params {
                "" | "storage=f32" => Ok(Self::Dense),
                "storage=f16" => Ok(Self::HalfDense),
                other => Err(format!("`dense` takes only `storage=f32` or `storage=f16` (got `{other}`)")),
            },
            "hack" => params.parse().map(Self::Hack).map_err(|e| e.to_string()),
            "pq" => params.parse().map(Self::Pq),
            "zack" => params.parse().map(Self::Zack),
            other => {
                Err(format!("unknown KV scheme `{other}` (available: dense, hack, hack2, hack3, hack4, pq, zack)"))
            }
        }
    }
}

impl SchemeSpec {
    /// Mean bits per cached element at a context of `context` tokens for `config`'s model, every
    /// piece of metadata and every float slot amortized, where the scheme's format gives it in
    /// closed form (dense and HACK); None for the others (their tables give the bits measured at
    /// the end of a window).
    pub fn mean_bits_per_element(&self, config: &ModelConfig, context: usize) -> Option<f64> {
        match self {
            Self::Dense => Some(32.0),
            Self::HalfDense => Some(16.0),
            Self::Hack(hack) => Some(burn_hack_attn::cache::mean_bits_per_element(hack, config.head_dim, context)),
            Self::Pq(_) | Self::Zack(_) | Self::ZackHack(..) | Self::ZackPq(..) => None,
        }
    }
}

impl fmt::Display for PqSpec {
    /// `codebooks=PATH,window=N`, what [`FromStr`] reads.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "codebooks={},window={}", self.codebooks.display(), self.window)
    }
}

impl fmt::Display for SchemeSpec {
    /// The spelling [`FromStr`] reads back to this value: `dense`, `dense:storage=f16`, a HACK
    /// configuration's long form (a preset prints as what it names), `pq:…`, `zack:…` and the
    /// compositions `zack:…+hack:…`, `zack:…+pq:…`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Dense => f.write_str("dense"),
            Self::HalfDense => f.write_str("dense:storage=f16"),
            Self::Hack(hack) => write!(f, "{hack}"),
            Self::Pq(pq) => write!(f, "pq:{pq}"),
            Self::Zack(zack) => write!(f, "zack:{zack}"),
            Self::ZackHack(zack, hack) => write!(f, "zack:{zack}+{hack}"),
            Self::ZackPq(zack, pq) => write!(f, "zack:{zack}+pq:{pq}"),
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_dense_hack_and_rejects_unknown() {
        assert_eq!("dense".parse::<SchemeSpec>(), Ok(SchemeSpec::Dense));
        assert_eq!("dense:storage=f32".parse::<SchemeSpec>(), Ok(SchemeSpec::Dense));
        assert_eq!("dense:storage=f16".parse::<SchemeSpec>(), Ok(SchemeSpec::HalfDense));
        assert!("dense:bits=2".parse::<SchemeSpec>().is_err());
        assert!("dense:storage=bf16".parse::<SchemeSpec>().unwrap_err().contains("storage=f16"));
        assert!("zip".parse::<SchemeSpec>().unwrap_err().contains("unknown KV scheme"));
        let hack = "hack:bits=4,pi=32,round=nearest".parse::<SchemeSpec>().unwrap();
        assert_eq!(hack, SchemeSpec::Hack("bits=4,pi=32,round=nearest".parse().unwrap()));
        assert!("hack:bits=3".parse::<SchemeSpec>().unwrap_err().contains("bit width"));
        let composed = "zack:rotations=r.safetensors,rate=0.25+hack:bits=2,pi=32".parse::<SchemeSpec>().unwrap();
        let zack = "rotations=r.safetensors,rate=0.25".parse().unwrap();
        assert_eq!(composed, SchemeSpec::ZackHack(zack, "bits=2,pi=32".parse().unwrap()));
        assert!("hack:bits=2+zack:rotations=r".parse::<SchemeSpec>().unwrap_err().contains("zack:…+hack:…"));
        let composed = "zack:rotations=r,rate=0.25+pq:codebooks=b,window=8".parse::<SchemeSpec>().unwrap();
        let pq = PqSpec { codebooks: PathBuf::from("b"), window: 8 };
        assert_eq!(composed, SchemeSpec::ZackPq("rotations=r,rate=0.25".parse().unwrap(), pq));
        assert!("zack:rotations=r+pq:window=8".parse::<SchemeSpec>().unwrap_err().contains("codebooks=PATH"));
        assert!("zack:rotations=r+hack:bits=5".parse::<SchemeSpec>().unwrap_err().contains("bit width"));
    }

    #[test]
    fn parses_pq_and_rejects_bad_parameters() {
        let pq = |s: &str| s.parse::<SchemeSpec>();
        let arg = |path: &str, window| SchemeSpec::Pq(PqSpec { codebooks: PathBuf::from(path), window });
        assert_eq!(pq("pq:codebooks=/tmp/b.safetensors,window=16"), Ok(arg("/tmp/b.safetensors", 16)));
        assert_eq!(pq("pq:window=0,codebooks=b.safetensors"), Ok(arg("b.safetensors", 0)));
        assert_eq!(pq("pq:codebooks=b.safetensors"), Ok(arg("b.safetensors", 64)));
        assert!(pq("pq").unwrap_err().contains("codebooks=PATH"));
        assert!(pq("pq:window=8").unwrap_err().contains("codebooks=PATH"));
        assert!(pq("pq:codebooks=").unwrap_err().contains("needs a path"));
        assert!(pq("pq:codebooks=b,window=x").unwrap_err().contains("not a number"));
        assert!(pq("pq:codebooks=b,window=-1").unwrap_err().contains("not a number"));
        assert!(pq("pq:codebooks=b,m=32").unwrap_err().contains("unknown pq key `m`"));
        assert!(pq("pq:codebooks").unwrap_err().contains("not key=value"));
    }

    #[test]
    fn prints_what_it_parses() {
        let spellings = [
            "dense",
            "dense:storage=f16",
            "hack:bits=2,pi=64,round=stochastic,seed=0",
            "hack:kbits=4,vbits=2,pi=128,round=nearest,axes=channel,rot=hadamard,sinks=4,window=64,clip=mse",
            "pq:codebooks=books.safetensors,window=16",
            "zack:rotations=rot.safetensors,rate=0.25",
            "zack:rotations=r,eps=0.05,min_rank=4,multiple=8,storage=f16",
            "zack:rotations=r,rate=0.5+hack:bits=2,pi=32,round=stochastic,seed=0",
            "zack:rotations=r,rate=0.5+pq:codebooks=reduced.safetensors,window=64",
        ];
        for spelling in spellings {
            let spec: SchemeSpec = spelling.parse().unwrap();
            assert_eq!(spec.to_string(), spelling, "prints as parsed");
        }
        // Presets and shorter spellings print in the long form, which reads back to the same value.
        for spelling in ["hack2", "hack3", "hack4", "hack:bits=2,pi=64", "pq:codebooks=b", "zack:rotations=r"] {
            let spec: SchemeSpec = spelling.parse().unwrap();
            assert_eq!(spec.to_string().parse::<SchemeSpec>(), Ok(spec.clone()), "{spelling} as {spec}");
        }
        assert_eq!("hack2".parse::<SchemeSpec>().unwrap().to_string(), burn_hack_attn::PRESETS[0].spelling);
    }
}
