//! The `--kv` syntax: `dense`, or `hack:bits=2,pi=64,round=stochastic,seed=0` (any subset of the
//! keys; see [`HackConfig`]'s text form). More schemes join as their crates land.

use std::str::FromStr;

use burn_hack_attn::HackConfig;

/// A KV cache scheme chosen on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemeArg {
    /// Uncompressed K/V.
    Dense,
    /// HACK: 2- or 4-bit K/V codes, attention on the codes.
    Hack(HackConfig),
}

impl FromStr for SchemeArg {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (name, params) = s.split_once(':').unwrap_or((s, ""));
        match name {
            "dense" if params.is_empty() => Ok(Self::Dense),
            "dense" => Err(format!("`dense` takes no parameters (got `{params}`)")),
            "hack" => params.parse().map(Self::Hack).map_err(|e| e.to_string()),
            other => Err(format!("unknown KV scheme `{other}` (available: dense, hack)")),
        }
    }
}

/// Calls `$run($scheme_value, ...)` with the concrete scheme the argument names; `$run` is a
/// path, so it may carry generic arguments: `with_scheme!(arg, run::<B, _>, (x, y))`.
#[macro_export]
macro_rules! with_scheme {
    ($arg:expr, $run:path, ( $($a:expr),* )) => {{
        use $crate::scheme_arg::SchemeArg;
        match $arg {
            SchemeArg::Dense => $run(burn_kvcompress::cache::DenseScheme, $($a),*),
            SchemeArg::Hack(config) => $run(config, $($a),*),
        }
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_dense_hack_and_rejects_unknown() {
        assert_eq!("dense".parse::<SchemeArg>(), Ok(SchemeArg::Dense));
        assert!("dense:bits=2".parse::<SchemeArg>().is_err());
        assert!("zip".parse::<SchemeArg>().unwrap_err().contains("unknown KV scheme"));
        let hack = "hack:bits=4,pi=32,round=nearest".parse::<SchemeArg>().unwrap();
        assert_eq!(hack, SchemeArg::Hack("bits=4,pi=32,round=nearest".parse().unwrap()));
        assert!("hack:bits=3".parse::<SchemeArg>().unwrap_err().contains("bit width"));
    }
}
