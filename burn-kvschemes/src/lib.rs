//! KV cache schemes as values, for programs that take a scheme as text (a command line's `--kv`,
//! a config file) and run generic code with it:
//!
//! - [`SchemeSpec`]: the spelling, parsed (`FromStr`) and printed back (`Display`): `dense`,
//!   `dense:storage=f16`, `hack:…` and the presets `hack2`/`hack3`/`hack4`, `pq:…`, `zack:…` and
//!   the compositions `zack:…+hack:…`, `zack:…+pq:…` ([`scheme_spec`] gives the grammar).
//! - [`SchemeSpec::resolve`]: the [`AnyScheme`] for a model, its calibration files (codebooks,
//!   rotations) loaded and checked against the model file; [`AnyScheme::prepare`] folds what a
//!   scheme folds into the weights.
//! - [`compose`]: ZACK followed by a quantizer of its reduced dimensions (HACK's codes or product
//!   quantization), the schemes behind `zack:…+hack:…` and `zack:…+pq:…`; here rather than in a
//!   scheme crate, so that each scheme crate depends on the core alone.
//! - [`with_scheme!`]: calls a function generic over
//!   [`KvScheme`](burn_kvcompress::cache::KvScheme) with the concrete scheme.
//!
//! ```
//! use burn_kvschemes::SchemeSpec;
//!
//! let spec: SchemeSpec = "hack:bits=2,pi=64".parse().unwrap();
//! assert_eq!(spec.to_string().parse::<SchemeSpec>(), Ok(spec));
//! ```

mod any_scheme;
pub mod compose;
pub mod scheme_spec;
mod zack_spec;

pub use any_scheme::AnyScheme;
pub use scheme_spec::{PqSpec, SchemeSpec};
pub use zack_spec::{RankTarget, ZackSpec};
