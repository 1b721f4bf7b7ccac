//! ZACK composed with a quantizer of the reduced dimensions: the rotations shorten each KV head's
//! keys and values, then a second scheme quantizes what is left.
//!
//! - [`ZackHackScheme`]: the reduced keys and values quantized as HACK quantizes a cache (2 or 4
//!   bits, partitions of Π, fp16 min/scale, cached code sums, values in closed blocks of Π slots
//!   with an f32 tail). Attention runs ZACK's attention on the dequantized operands: the products
//!   are not homomorphic (queries and probabilities stay f32), so its error is the quantization
//!   error of K/V alone.
//! - [`ZackPqScheme`]: the reduced keys and values product-quantized with [`ReducedCodebooks`]
//!   (per head, subspaces of `sub_dim` of its own coordinates; trained by
//!   [`train_reduced_codebooks`]), the newest `window` slots in f32. Attention runs ZACK's
//!   attention on the vectors rebuilt from the centroids (not MILLION's lookup tables), so its
//!   error is the PQ reconstruction error of K/V alone.

mod error;
mod hack_cache;
mod hack_scheme;
mod hack_state;
mod pq_books;
mod pq_books_file;
mod pq_cache;
mod pq_scheme;
mod pq_state;
mod pq_train;

pub use error::ComposeError;
pub use hack_cache::ZackHackCache;
pub use hack_scheme::ZackHackScheme;
pub use pq_books::{ReducedCodebooks, ReducedPqConfig};
pub use pq_cache::ZackPqCache;
pub use pq_scheme::ZackPqScheme;
pub use pq_train::{train_reduced_codebooks, ReducedSamples};
