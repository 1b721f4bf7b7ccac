//! # burn-zack
//!
//! ZACK: the KV cache compressed along the head dimension. Per layer and KV head, calibration
//! finds an orthogonal rotation for the query/key pair and one for the value/output pair (SVD of
//! stacked activations); most energy then sits in the leading coordinates, and each head keeps
//! as many as one global removal rate ε allows (adaptive ranks).
//!
//! - [`rotation`]: Gram accumulation over calibration text ([`rotation::GramAccumulator`]),
//!   [`rotation::calibrate_rotations`], rotations as safetensors tagged with the model.
//! - [`Ranks`]: ranks from ε (Eq. 6) or from a target compression rate;
//!   [`search_removal_rate`]: the largest ε within a quality budget (e.g. held-out perplexity).
//! - [`fold_value_rotations`]: the value/output rotations folded into `W_V` and `W_O`.
//! - [`cache::ZackScheme`]: the `KvScheme`; keys are rotated and truncated after RoPE (RoPE
//!   prevents folding them), attention runs on the reduced, per-head dimensions.
//! - Composed with a quantizer of the reduced dimensions (HACK, PQ): `burn_kvschemes::compose`,
//!   built on [`cache::reduce_keys`], [`cache::reduce_values`] and [`cache::HeadLayout`].
//! - [`finetune`]: the rotations refined from the SVD by autodiff at chosen ranks, kept
//!   orthogonal (Riemannian Adam, QR retraction).
//! - [`kernels`]: the [`ZackBackend`](kernels::ZackBackend) trait with the tensor-op reference
//!   and the CubeCL kernels (wgpu, cuda): load-balanced decode (portable, `wmma`, TMA) and prefill.
//!
//! ```no_run
//! # use std::{path::Path, sync::Arc};
//! # use burn_kvcompress::{backend::NdArray, loading::load_model};
//! # use burn_zack::{cache::ZackScheme, rotation::Rotations, RankRule, Ranks};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let loaded = load_model::<NdArray>(Path::new("model.gguf"), &Default::default())?;
//! let rotations = Arc::new(Rotations::load(Path::new("rotations.safetensors"))?);
//! let (ranks, _epsilon) = Ranks::for_compression_rate(&rotations, 0.5, RankRule::default())?;
//! let scheme = ZackScheme::new(rotations, ranks)?;
//! let model = scheme.fold(loaded.model)?; // run this model with caches of `scheme`
//! let caches = model.new_cache(&scheme, 1, &Default::default());
//! # Ok(()) }
//! ```

pub mod cache;
mod error;
mod file_io;
pub mod finetune;
mod fold;
pub mod kernels;
mod layout;
mod linalg;
mod ranks;
pub mod rotation;
mod search;

pub use error::ZackError;
pub use fold::fold_value_rotations;
pub use linalg::{symmetric_eigen, SymmetricEigen};
pub use ranks::{RankRule, Ranks};
pub use search::{search_removal_rate, RateSearch, SearchPoint};
