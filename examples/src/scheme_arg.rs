//! The `--kv` syntax: `dense` (more schemes join as their crates land, e.g. `hack:bits=2,pi=64`).

use std::str::FromStr;

/// A KV cache scheme chosen on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemeArg {
    /// Uncompressed K/V.
    Dense,
}

impl FromStr for SchemeArg {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (name, params) = s.split_once(':').unwrap_or((s, ""));
        match name {
            "dense" if params.is_empty() => Ok(Self::Dense),
            "dense" => Err(format!("`dense` takes no parameters (got `{params}`)")),
            other => Err(format!("unknown KV scheme `{other}` (available: dense)")),
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
        }
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_dense_and_rejects_unknown() {
        assert_eq!("dense".parse::<SchemeArg>(), Ok(SchemeArg::Dense));
        assert!("dense:bits=2".parse::<SchemeArg>().is_err());
        assert!("zip".parse::<SchemeArg>().unwrap_err().contains("unknown KV scheme"));
    }
}
